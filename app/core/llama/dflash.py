"""DFlash block drafting (and DSpark, DFlash with a Markov head): a small drafter that proposes a whole
block of tokens in one pass from the main model's hidden states, as llama.cpp's draft-dflash and
draft-dspark do (common/speculative.cpp, ``common_speculative_impl_draft_dflash``).

The drafter's context (made with ``ctx_other``, the main context, whose token embeddings it borrows)
holds, at each position the main model has decoded, the main model's hidden states entering the
drafter's target layers: a batch of those rows (embeddings, not tokens) is fused by the drafter's
``fc`` and written into its keys and values ("injected"). A draft is one more batch of tokens: the
newest token (the anchor, not yet decoded by the main model) at its own position, then the mask token
at each position after it. The drafter's attention is not causal inside the block (unless its file
says so), so every row sees the whole block and the injected context, and the rows after the anchor
give the logits of the tokens to come, all at once. DSpark drafts "anchor first": the anchor's own
row already predicts the next token, so a block of the same size gives one token more.

The block's own keys and values are removed right after it is read: the context keeps injected rows
only, for the tokens the main model has decoded and kept (``cached``), and follows rollbacks by
dropping the rows past the kept prefix.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Sequence

import numpy as np

from app.core.errors import DecodeError, IncompatibleDraftError
from app.core.gguf.info import read_gguf_info
from app.core.llama.eagle3 import checked_target_layers, metadata, open_on_features, target_layers
from app.core.llama.library import lib
from app.core.llama.mtp import _DraftContext, _function, check_symbols
from app.core.lm import common_prefix_length

DFLASH_ARCHITECTURE = "dflash"
DEFAULT_BLOCK_SIZE = 16    # llama.cpp's, for a file that does not say


class DFlashHead(_DraftContext):
    """A DFlash or DSpark drafter kept in step with the main session. ``block`` proposes
    ``max_block`` tokens' logits at once; ``cached`` are the tokens whose states are injected."""

    def __init__(self, session, drafter_model):
        check_symbols()
        info = read_gguf_info(drafter_model.path)
        if info.hidden_state_drafter == "DFlash2":
            raise IncompatibleDraftError(f"{drafter_model.name} is a DFlash2 drafter: its selector lattice is read "
                                         f"by llama.cpp's own driver, which Quickdraft does not run.")
        layers = target_layers(drafter_model)
        if not layers:
            raise IncompatibleDraftError(f"{drafter_model.name} is not a DFlash drafter: it reads none of the "
                                         f"main model's layers.")
        width = int(lib().llama_model_n_embd(drafter_model._model))   # DFlash drafts at its main model's width
        checked_target_layers(session, drafter_model, layers, width)
        self.mask = int(lib().llama_vocab_mask(lib().llama_model_get_vocab(drafter_model._model)))
        if self.mask < 0:
            raise IncompatibleDraftError(f"{drafter_model.name} has no mask token (tokenizer.ggml.mask_token_id): "
                                         f"a DFlash drafter fills its block with it.")
        open_on_features(functools.partial(super().__init__, session, drafter_model), session, layers)
        self._memory = lib().llama_get_memory(self._ctx)
        self.n_ubatch = int(lib().llama_n_ubatch(self._ctx))
        block_size = int(metadata(drafter_model, f"{DFLASH_ARCHITECTURE}.block_size") or DEFAULT_BLOCK_SIZE)
        dspark = info.hidden_state_drafter == "DSpark"
        self.has_confidence = dspark and any(name == "conf_proj.weight" for name, _ in info.tensor_bytes)
        # the first block row that predicts a token: the anchor's own (DSpark's anchor-first layout), or the next
        self.first_row = 0 if dspark and metadata(drafter_model, f"{DFLASH_ARCHITECTURE}.sample_from_anchor") != "false" \
            else 1
        self.max_block = block_size - self.first_row
        causal = metadata(drafter_model, f"{DFLASH_ARCHITECTURE}.attention.causal") == "true"
        lib().llama_set_causal_attn(self._ctx, causal)
        self.cached: list[int] = []

    def can_follow(self, context: Sequence[int]) -> bool:
        """Whether the main model's states cover every token of ``context`` but its newest."""
        return len(context) >= 2 and len(context) - 1 <= self.hidden.valid

    def start(self, context: Sequence[int]) -> None:
        """Inject the states of the tokens of ``context`` (but its newest) that the drafter lacks."""
        keep = common_prefix_length(self.cached, context[:-1])
        self._remove_from(keep)
        end = len(context) - 1
        for chunk in range(keep, end, self.n_ubatch):
            self._inject(chunk, min(chunk + self.n_ubatch, end))
        self.cached = list(context[:-1])

    def block(self, context: Sequence[int], n: int) -> tuple[np.ndarray, np.ndarray | None]:
        """The logits of the ``n`` (at most ``max_block``) tokens after ``context``, rows in order, from
        one pass over the anchor and the masks after it; and DSpark's confidence per token (its chance
        of being accepted, from its confidence head), None for a drafter without one."""
        self.start(context)
        anchor = len(context) - 1
        logits, confidence = self._decode_block(context[-1], anchor, n + self.first_row)
        self._remove_from(anchor)   # the block's keys and values: the next block has its own
        return logits[self.first_row:], None if confidence is None else confidence[self.first_row:]

    def _inject(self, start: int, end: int) -> None:
        llama_cpp = lib()
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        rows = np.ascontiguousarray(self.hidden.rows(start, end), dtype=np.float32)
        for i, row in enumerate(rows):
            embd = llama_cpp.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, len(row))
            idx = llama_cpp.llama_batch_ext_add_embd(batch, 0, embd)
            if idx < 0 or not llama_cpp.llama_batch_ext_set_pos(batch, idx, _position(start + i)):
                raise DecodeError("llama.cpp refused a row of the DFlash drafter's injection batch.")
        self._follow_threads()
        rc = llama_cpp.llama_process(self._ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
        if rc != 0:
            self._failed()
            raise DecodeError(f"llama.cpp failed to inject {len(rows)} positions into the DFlash drafter (code {rc}).")

    def _decode_block(self, anchor_token: int, position: int, n_tokens: int) -> np.ndarray:
        llama_cpp = lib()
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        indices = []
        for i in range(n_tokens):
            idx = llama_cpp.llama_batch_ext_add_token(batch, 0, anchor_token if i == 0 else self.mask)
            if idx < 0 or not llama_cpp.llama_batch_ext_set_pos(batch, idx, _position(position + i)) \
                    or not llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True):
                raise DecodeError(f"llama.cpp refused a token of the DFlash block (position {position + i}).")
            indices.append(idx)
        self._follow_threads()
        rc = llama_cpp.llama_process(self._ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
        if rc != 0:
            self._failed()
            raise DecodeError(f"llama.cpp failed to decode a DFlash block of {n_tokens} tokens (code {rc}).")
        return self._block_logits(indices), self._confidence(indices) if self.has_confidence else None

    def _block_logits(self, indices: list[int]) -> np.ndarray:
        """The block's rows, copied out of the context (its next decode overwrites them) in one go where
        llama.cpp keeps them one after another, as it does for a batch whose every token is an output: a
        16 x 128k block is 8 MB, and stacking row views then copying the stack moved it twice (2 ms of
        the host's 4 in a round here; on the H100 our DFlash round was 2.6 ms behind llama.cpp's)."""
        llama_cpp = lib()
        first = llama_cpp.llama_get_logits_ith(self._ctx, indices[0])
        last = llama_cpp.llama_get_logits_ith(self._ctx, indices[-1])
        row_bytes = self.n_vocab * ctypes.sizeof(ctypes.c_float)
        if ctypes.addressof(last.contents) - ctypes.addressof(first.contents) == (len(indices) - 1) * row_bytes:
            return np.ctypeslib.as_array(first, shape=(len(indices), self.n_vocab)).copy()
        return np.stack([np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self._ctx, idx), shape=(self.n_vocab,))
                         for idx in indices])

    def _confidence(self, indices: list[int]) -> np.ndarray:
        """DSpark's confidence head: llama.cpp repeats each row's sigmoid across its nextn row."""
        rows = []
        for idx in indices:
            row = _function("llama_get_embeddings_nextn_ith")(self._ctx, idx)
            if not row:
                raise DecodeError("llama.cpp gave no confidence for the DSpark block's row.")
            rows.append(float(row[0]))
        return np.array(rows, dtype=np.float32)

    def _remove_from(self, position: int) -> None:
        """Drop what the context holds from ``position`` on."""
        if not lib().llama_memory_seq_rm(self._memory, 0, position, -1):
            raise DecodeError(f"llama.cpp could not remove positions {position}.. of the DFlash context.")
        del self.cached[position:]

    def _failed(self) -> None:
        self.cached = []
        lib().llama_memory_seq_rm(self._memory, 0, -1, -1)

    def forget(self) -> None:
        self._remove_from(0)


def _position(p: int):
    """A row's position as llama.cpp's batch takes it (M-RoPE drafters read the first three)."""
    return (lib().llama_pos * 4)(p, p, p, 0)
