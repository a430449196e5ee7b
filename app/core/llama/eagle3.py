"""EAGLE-3 drafting: a one-layer drafter that reads the main model's hidden states entering three of its
layers (low, middle, high), as llama.cpp's draft-eagle3 does (common/speculative.cpp).

Two graphs run on the drafter's own context (created with ``ctx_other``, the main context, whose
token embeddings the drafter borrows when it has none of its own):

- the encoder (``llama_process`` ENCODE) fuses the three states at a position P into ``g[P]``;
- the decoder (DECODE) takes at its position P the pair (token at P + 1, ``g[P]``): each token goes in
  one position *before* its own, beside what the main model made of the token before it. Its output
  row at P gives the logits for the token at P + 2 and its own pre-norm state, which stands in for
  ``g`` when the next drafted token goes in at P + 1.

So after a context of n tokens (the newest, at n - 1, not yet decoded by the main model), the drafter
holds the pairs of tokens 1 .. n - 2 at positions 0 .. n - 3 and drafts by feeding (token n - 1,
``g[n - 2]``) at n - 2: llama.cpp's "deferred boundary" is this last pair, which waits for the token the
main model picks next. Drafted pairs are never kept: the next round removes them and feeds the
accepted tokens with the main model's states. The staging functions are bound in ``mtp``.
"""

from __future__ import annotations

import ctypes
import functools
from typing import Callable, Sequence

import numpy as np

from app.core.errors import DecodeError, IncompatibleDraftError, ModelLoadError
from app.core.gguf.pair_check import final_state_problem
from app.core.llama.library import lib
from app.core.llama.mtp import ChainingHead, HiddenStates, _function, check_symbols
from app.core.lm import common_prefix_length

EAGLE3_ARCHITECTURE = "eagle3"


def target_layers(model) -> list[int]:
    """The main model's layers whose incoming hidden states a drafter reads (llama.cpp's reading of
    ``*.target_layers``); empty for a model that reads none."""
    count = _function("llama_model_target_layer_ids_n")(model._model)
    ids = _function("llama_model_target_layer_ids")(model._model)
    return [int(ids[i]) for i in range(count)] if ids else []


def metadata(model, key: str) -> str | None:
    """A GGUF metadata value of a loaded model, as text (None when the file has no such key)."""
    buf = ctypes.create_string_buffer(256)
    n = lib().llama_model_meta_val_str(model._model, key.encode(), buf, len(buf))
    return buf.value.decode() if n >= 0 else None


class TargetFeatures(HiddenStates):
    """The main model's hidden states entering each target layer, for every position it decoded, side
    by side in the drafter's order: what the EAGLE-3 encoder reads. A target layer equal to the main
    model's layer count means its final hidden state (llama.cpp's "nextn" output)."""

    def __init__(self, session, layers: Sequence[int]):
        self.layers = list(layers)
        self.n_layer = int(lib().llama_model_n_layer(session.model._model))
        self.width = int(lib().llama_model_n_embd(session.model._model))
        super().__init__(session, n_embd=len(self.layers) * self.width)

    def _switch(self, on: bool) -> None:
        ctx = self.session.raw_context
        for layer in self.layers:
            if layer < self.n_layer:
                _function("llama_set_embeddings_layer_inp")(ctx, layer, on)
            else:
                _function("llama_set_embeddings_nextn")(ctx, on, False)

    def _read(self, n: int) -> np.ndarray:
        ctx, parts = self.session.raw_context, []
        for layer in self.layers:
            data = _function("llama_get_embeddings_layer_inp")(ctx, layer) if layer < self.n_layer \
                else _function("llama_get_embeddings_nextn")(ctx)
            if not data:
                raise DecodeError(f"llama.cpp gave no hidden states of the main model's layer {layer}.")
            parts.append(np.ctypeslib.as_array(data, shape=(n, self.width)))
        return np.concatenate(parts, axis=1)


def open_on_features(init: Callable[..., None], session, layers: Sequence[int]) -> None:
    """Make a drafting context with ``init`` fed the main model's states at ``layers`` (EAGLE-3, DFlash:
    made with ``ctx_other``, not of MTP type), unhooking them again if llama.cpp refuses the context."""
    features = TargetFeatures(session, layers)
    try:
        init(shares_memory=True, mtp_type=False, hidden=features)
    except ModelLoadError:
        features.close()
        raise


class Eagle3Head(ChainingHead):
    """An EAGLE-3 drafter kept in step with the main session; ``cached`` is the context whose tokens
    1, 2, ... sit as pairs at positions 0, 1, ...."""

    def __init__(self, session, drafter_model):
        check_symbols()
        layers = _checked_layers(session, drafter_model)
        open_on_features(functools.partial(super().__init__, session, drafter_model), session, layers)
        self.n_ubatch = int(lib().llama_n_ubatch(self._ctx))

    def can_follow(self, context: Sequence[int]) -> bool:
        """Whether the main model's states cover the pairs ``start`` feeds for ``context`` (up to n - 2)."""
        return len(context) >= 2 and len(context) - 1 <= self.hidden.valid

    def start(self, context: Sequence[int]) -> np.ndarray:
        n = len(context)
        keep = common_prefix_length(self.cached, context[:-1])
        first = max(keep, 1)                 # the first token to feed: its pair sits at first - 1
        self._remove_from(first - 1)         # also the last round's boundary pair and drafted pairs
        g = self._encode(first - 1, n - 1)
        rows = [(context[k], k - 1, g[k - first]) for k in range(first, n)]
        # llama.cpp's EAGLE-3 decoder computes every row's logits and hidden state but the caller reads
        # the first n_outputs rows: in a batch of several rows the last one's output is the first row's.
        # So the pairs before the boundary go in without outputs, and the boundary pair alone (as
        # llama.cpp's own driver feeds them: process() without outputs, draft() one row).
        for chunk in range(0, len(rows) - 1, self.n_batch):
            self._process(rows[chunk:min(chunk + self.n_batch, len(rows) - 1)], output_last=False)
        self._process(rows[-1:], output_last=True)
        self.cached = list(context)
        self._pos = n - 1
        return self._logits()

    def _encode(self, start: int, end: int) -> np.ndarray:
        """``g`` for positions start .. end - 1: the encoder over the main model's states there."""
        rows = self.hidden.rows(start, end)
        return np.concatenate([self._encode_chunk(rows[i:i + self.n_ubatch])
                               for i in range(0, len(rows), self.n_ubatch)]) if len(rows) else rows

    def _encode_chunk(self, rows: np.ndarray) -> np.ndarray:
        llama_cpp = lib()
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        # the encoder reads no positions; they follow the decoder's memory, as llama.cpp's own caller's do
        pos = int(llama_cpp.llama_memory_seq_pos_max(self._memory, 0)) + 1
        for i, row in enumerate(rows):
            embd = llama_cpp.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, len(row))
            idx = llama_cpp.llama_batch_ext_add_embd(batch, 0, embd)
            if idx < 0 or not llama_cpp.llama_batch_ext_set_pos(batch, idx, (llama_cpp.llama_pos * 4)(pos + i, 0, 0, 0)) \
                    or not llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True):
                raise DecodeError("llama.cpp refused a row of the EAGLE-3 encoder's batch.")
        self._follow_threads()
        rc = llama_cpp.llama_process(self._ctx, llama_cpp.LLAMA_PROCESS_TYPE_ENCODE, batch)
        if rc != 0:
            raise DecodeError(f"llama.cpp failed to encode {len(rows)} positions for EAGLE-3 (code {rc}).")
        g = _function("llama_get_embeddings_nextn")(self._ctx)
        if not g:
            raise DecodeError("llama.cpp's EAGLE-3 encoder gave no output.")
        return np.ctypeslib.as_array(g, shape=(len(rows), self.n_embd_own)).copy()

    def _remove_from(self, position: int) -> None:
        """Drop the pairs from ``position`` on (those of the tokens after it)."""
        if not lib().llama_memory_seq_rm(self._memory, 0, position, -1):
            raise DecodeError(f"llama.cpp could not remove positions {position}.. of the EAGLE-3 context.")
        del self.cached[position + 1:]

    def forget(self) -> None:
        self._remove_from(0)
        self.cached = []


def _checked_layers(session, drafter_model) -> list[int]:
    """The drafter's target layers, once it is known to be an EAGLE-3 drafter made for this main model."""
    layers = target_layers(drafter_model)
    if len(layers) != 3:
        raise IncompatibleDraftError(f"{drafter_model.name} is not an EAGLE-3 drafter: it reads {len(layers)} "
                                     f"of the main model's layers, not three.")
    width = metadata(drafter_model, f"{EAGLE3_ARCHITECTURE}.target_hidden_size")
    return checked_target_layers(session, drafter_model, layers, int(width) if width is not None else None)


def checked_target_layers(session, drafter_model, layers: list[int], width: int | None) -> list[int]:
    """``layers``, once the drafter that reads them (hidden states ``width`` wide) is known to be made for
    this main model: its layers exist (the final state only where llama.cpp's graph gives it), its width
    and vocabulary are the main model's. IncompatibleDraftError says which differ."""
    main = session.model
    main_layers = int(lib().llama_model_n_layer(main._model))
    main_width = int(lib().llama_model_n_embd(main._model))
    architecture = metadata(main, "general.architecture") or "unknown"
    reasons = []
    if max(layers) > main_layers:
        reasons.append(f"it reads layer {max(layers)}, {main.name} has {main_layers}")
    elif problem := final_state_problem(max(layers), main_layers, architecture):
        reasons.append(problem)
    if width != main_width:
        reasons.append(f"it reads hidden states {width} wide, {main.name}'s are {main_width}")
    if drafter_model.n_vocab != session.n_vocab:
        reasons.append(f"its vocabulary has {drafter_model.n_vocab:,} tokens, {main.name}'s {session.n_vocab:,}")
    if reasons:
        raise IncompatibleDraftError(f"{drafter_model.name} was made for another main model: {'; '.join(reasons)}.")
    return layers
