"""MTP drafting's engines: a main model's own MTP (nextn) heads, or a separate MTP drafter file (Gemma 4's
"assistant") that shares the main context's memory. Every binding to llama.cpp's staging API is here.

The functions MTP needs to read and set the "nextn" hidden states are declared in llama.cpp's
src/llama-ext.h, which is C++ and WIP: they are exported under their mangled names only, and may
change with any llama.cpp update. They are bound here and nowhere else; ``check_symbols`` (and a
test calling it) says loudly which one went missing.

How the MTP context follows the main model (as common/speculative.cpp's draft-mtp does for Qwen3.5):
the token at position p enters the MTP context with the main model's hidden state at p - 1 (zeros
at 0). To draft after a context of n tokens, the newest token (at n - 1, not yet decoded by the main
model) goes in with the hidden state at n - 2; each drafted token then goes in with the MTP head's
own hidden state for the token before it. Those drafted positions are never kept: the next round
removes them and feeds the accepted tokens again with the main model's hidden states.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Sequence

import numpy as np

from app.core.errors import DecodeError, DrafterUnavailableError, IncompatibleDraftError, ModelLoadError
from app.core.llama.binding import context_params
from app.core.llama.library import lib
from app.core.lm import common_prefix_length


# name: ({ABI: mangled name}, restype, argtypes); restypes/argtypes as ctypes wants them. "itanium" is
# what GCC and Clang export (Linux, macOS: read off this libllama); "msvc" follows MSVC's x64 rules
# (?name@@YA, then the return and argument types: X void, PEAM float *, PEAUllama_context@@ a pointer
# to the struct, _N bool, 1 the second argument's type again, H int) and is confirmed only when a
# Windows build finds it: ``check_symbols`` says which one is missing otherwise.
_STAGING = {
    "llama_set_embeddings_nextn": ({"itanium": "_Z26llama_set_embeddings_nextnP13llama_contextbb",
                                    "msvc": "?llama_set_embeddings_nextn@@YAXPEAUllama_context@@_N1@Z"},
                                   None, (ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool)),
    "llama_get_embeddings_nextn": ({"itanium": "_Z26llama_get_embeddings_nextnP13llama_context",
                                    "msvc": "?llama_get_embeddings_nextn@@YAPEAMPEAUllama_context@@@Z"},
                                   ctypes.POINTER(ctypes.c_float), (ctypes.c_void_p,)),
    "llama_get_embeddings_nextn_ith": ({"itanium": "_Z30llama_get_embeddings_nextn_ithP13llama_contexti",
                                        "msvc": "?llama_get_embeddings_nextn_ith@@YAPEAMPEAUllama_context@@H@Z"},
                                       ctypes.POINTER(ctypes.c_float), (ctypes.c_void_p, ctypes.c_int32)),
    # EAGLE-3 and DFlash read the main model's hidden states entering their target layers (j: unsigned)
    "llama_set_embeddings_layer_inp": ({"itanium": "_Z30llama_set_embeddings_layer_inpP13llama_contextjb",
                                        "msvc": "?llama_set_embeddings_layer_inp@@YAXPEAUllama_context@@I_N@Z"},
                                       None, (ctypes.c_void_p, ctypes.c_uint32, ctypes.c_bool)),
    "llama_get_embeddings_layer_inp": ({"itanium": "_Z30llama_get_embeddings_layer_inpP13llama_contextj",
                                        "msvc": "?llama_get_embeddings_layer_inp@@YAPEAMPEAUllama_context@@I@Z"},
                                       ctypes.POINTER(ctypes.c_float), (ctypes.c_void_p, ctypes.c_uint32)),
    "llama_model_target_layer_ids": ({"itanium": "_Z28llama_model_target_layer_idsPK11llama_model",
                                      "msvc": "?llama_model_target_layer_ids@@YAPEBHPEBUllama_model@@@Z"},
                                     ctypes.POINTER(ctypes.c_int32), (ctypes.c_void_p,)),
    "llama_model_target_layer_ids_n": ({"itanium": "_Z30llama_model_target_layer_ids_nPK11llama_model",
                                        "msvc": "?llama_model_target_layer_ids_n@@YAIPEBUllama_model@@@Z"},
                                       ctypes.c_uint32, (ctypes.c_void_p,)),
}
ABI = "msvc" if sys.platform == "win32" else "itanium"
# the public (C) API MTP drafting also needs, which older llama-cpp-python builds lack
_PUBLIC = ("llama_model_n_layer_nextn", "llama_model_n_embd_out", "LLAMA_CONTEXT_TYPE_MTP", "llama_process",
           "LLAMA_PROCESS_TYPE_DECODE", "llama_batch_ext_init", "llama_batch_ext_add_token",
           "llama_batch_ext_set_pos", "llama_batch_ext_set_embd_token", "llama_batch_ext_set_output_logits",
           "llama_batch_ext_clear", "llama_batch_ext_free", "llama_embd")

_bound: dict[str, object] = {}


def check_symbols() -> None:
    """Raise DrafterUnavailableError naming the first symbol MTP drafting needs that this llama.cpp lacks."""
    llama_cpp = lib()
    for name in _PUBLIC:
        if not hasattr(llama_cpp, name):
            raise DrafterUnavailableError(f"llama-cpp-python has no {name}: MTP drafting needs llama-cpp-python 0.3.36's API.")
    context_fields = dict(llama_cpp.llama_context_params._fields_)
    if "load_mtp" not in dict(llama_cpp.llama_model_params._fields_) or \
            "ctx_type" not in context_fields or "ctx_other" not in context_fields:
        raise DrafterUnavailableError("llama.cpp's model or context parameters have no load_mtp / ctx_type / ctx_other field.")
    for name in _STAGING:
        _function(name)


def availability() -> str:
    """"available", or why MTP drafting is off with this llama.cpp build (for ``info``)."""
    try:
        check_symbols()
    except DrafterUnavailableError as exc:
        return f"unavailable: {exc}"
    return "available"


def _function(name: str):
    """A staging function, bound once; DrafterUnavailableError when libllama no longer exports it."""
    if name not in _bound:
        names, restype, argtypes = _STAGING[name]
        mangled = names[ABI]
        try:
            function = getattr(lib().llama_cpp._lib, mangled)
        except AttributeError:
            raise DrafterUnavailableError(f"this libllama does not export {name} (as {mangled}): llama.cpp's staging "
                                 f"API changed, so MTP drafting is off. Update app/core/llama/mtp.py.") from None
        function.restype, function.argtypes = restype, argtypes
        _bound[name] = function
    return _bound[name]


def n_nextn_layers(raw_model) -> int:
    """MTP (nextn) layers the model file has (counted from its metadata, loaded or not)."""
    return int(lib().llama_model_n_layer_nextn(raw_model))


class HiddenStates:
    """The main model's nextn hidden state for every position it has decoded, kept by position.

    Hooked into the main LlamaSession: each batch it decodes (verify batches, prompt chunks, the
    re-decodes of a rollback) writes its rows. ``valid`` counts the leading positions whose rows
    belong to the tokens now cached (tokens decoded before the hook was set have none)."""

    def __init__(self, session, n_embd: int | None = None):
        self.session = session
        self.n_embd = n_embd or n_embd_out(session.model)
        self._rows = np.zeros((0, self.n_embd), dtype=np.float32)
        self.valid = 0
        self._switch(True)
        session.decode_hooks.append(self._after_decode)

    def _switch(self, on: bool) -> None:
        """Have the main context keep these states for every token it decodes (not only outputs), or stop."""
        _function("llama_set_embeddings_nextn")(self.session.raw_context, on, False)

    def _read(self, n: int) -> np.ndarray:
        """The states of the batch just decoded, ``n`` rows ``n_embd`` wide."""
        data = _function("llama_get_embeddings_nextn")(self.session.raw_context)
        if not data:
            raise DecodeError("llama.cpp gave no MTP hidden states for the main model's batch.")
        return np.ctypeslib.as_array(data, shape=(n, self.n_embd))

    def _after_decode(self, start: int, n: int) -> None:
        rows = self._read(n)
        if start + n > len(self._rows):
            grown = np.zeros((max(start + n, 2 * len(self._rows), 256), self.n_embd), dtype=np.float32)
            grown[:len(self._rows)] = self._rows
            self._rows = grown
        self._rows[start:start + n] = rows
        if start <= self.valid:
            self.valid = start + n

    def rows(self, start: int, end: int) -> np.ndarray:
        """The states at positions ``start`` .. ``end`` - 1, all decoded by the main model."""
        if end > min(self.valid, len(self.session.cached)):
            raise DecodeError(f"the main model's hidden state at position {end - 1} is not known")
        return self._rows[start:end]

    def row(self, position: int) -> np.ndarray:
        """The hidden state at ``position``; zeros before the first."""
        if position < 0:
            return np.zeros(self.n_embd, dtype=np.float32)
        if position >= min(self.valid, len(self.session.cached)):
            raise DecodeError(f"the main model's hidden state at position {position} is not known")
        return self._rows[position]

    def close(self) -> None:
        if self._after_decode in self.session.decode_hooks:
            self.session.decode_hooks.remove(self._after_decode)
        if self.session.raw_context:
            self._switch(False)


class _DraftContext:
    """A llama.cpp context of type MTP that drafts for the main session: fed tokens with hidden states
    (llama.cpp's batch_ext API), it gives the logits of its last row and its own hidden state there.
    ``model`` is the main model itself (its MTP layers) or a separate MTP drafter; ``shares_memory``
    (Gemma 4's assistant) reads the main context's keys and values instead of keeping its own."""

    def __init__(self, session, model, shares_memory: bool = False, mtp_type: bool = True,
                 hidden: HiddenStates | None = None):
        llama_cpp = lib()   # the subclasses checked the symbols first: they read the model with them
        self.session = session
        self.n_vocab = session.n_vocab
        self.n_ctx = session.n_ctx
        cparams = context_params(session.n_ctx, session.n_batch, session.n_threads)
        if mtp_type:
            cparams.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
        if shares_memory:   # ctx_other: the main context (its memory, or for EAGLE-3 its token embeddings)
            cparams.ctx_other = session.raw_context
        ctx = llama_cpp.llama_init_from_model(model._model, cparams)
        if not ctx:
            raise ModelLoadError(f"llama.cpp could not create the drafting context of {model.name}.")
        self._ctx = ctx
        self._threads = session.n_threads
        self.n_batch = int(llama_cpp.llama_n_batch(ctx))
        self._batch = llama_cpp.llama_batch_ext_init(ctx)
        _function("llama_set_embeddings_nextn")(ctx, True, True)  # its own h for the rows it outputs
        self.hidden = hidden if hidden is not None else HiddenStates(session)
        # the width of the drafting context's own h (the MTP head's is the main model's)
        self.n_embd_own = self.hidden.n_embd if hidden is None else int(llama_cpp.llama_model_n_embd(model._model))
        self._last: tuple[int, np.ndarray] | None = None   # (batch index, h) of the last output row

    def _process(self, rows: list[tuple[int, int, np.ndarray]], output_last: bool) -> None:
        """Decode ``rows`` of (token, position, hidden state); keep the last row's logits and h."""
        llama_cpp = lib()
        batch = self._batch
        llama_cpp.llama_batch_ext_clear(batch)
        kept = []   # the rows stay alive until llama.cpp has read them
        idx = -1
        for token, pos, h in rows:
            idx = llama_cpp.llama_batch_ext_add_token(batch, 0, token)
            row = np.ascontiguousarray(h, dtype=np.float32)
            kept.append(row)
            embd = llama_cpp.llama_embd(row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, len(row))
            if idx < 0 or not llama_cpp.llama_batch_ext_set_pos(batch, idx, (llama_cpp.llama_pos * 4)(pos, 0, 0, 0)) \
                    or not llama_cpp.llama_batch_ext_set_embd_token(batch, idx, embd):
                raise DecodeError(f"llama.cpp refused a token of the MTP batch (position {pos}).")
        if output_last and not llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True):
            raise DecodeError("llama.cpp refused the MTP batch's output row.")
        self._follow_threads()
        rc = llama_cpp.llama_process(self._ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch)
        if rc != 0:
            self._last = None
            self._failed()
            raise DecodeError(f"llama.cpp failed to decode an MTP batch of {len(rows)} tokens (code {rc}).")
        if output_last:
            h = _function("llama_get_embeddings_nextn_ith")(self._ctx, idx)
            if not h:
                raise DecodeError("llama.cpp gave no hidden state for the MTP batch's output row.")
            self._last = (idx, np.ctypeslib.as_array(h, shape=(self.n_embd_own,)).copy())

    def _follow_threads(self) -> None:
        """The head decodes with the main session's thread count, as that count is learned."""
        if self.session.n_threads != self._threads:
            self._threads = self.session.n_threads
            lib().llama_set_n_threads(self._ctx, self._threads, self._threads)

    def _failed(self) -> None:
        """What a failed decode leaves behind is dropped."""

    def _logits(self) -> np.ndarray:
        idx, _ = self._last
        return np.ctypeslib.as_array(lib().llama_get_logits_ith(self._ctx, idx), shape=(self.n_vocab,))

    def close(self) -> None:
        llama_cpp = lib()
        if self._ctx:
            self.hidden.close()
            llama_cpp.llama_batch_ext_free(self._batch)
            llama_cpp.llama_free(self._ctx)
            self._ctx = None


class ChainingHead(_DraftContext):
    """A drafting context with a memory of its own, kept in step with the main session: ``start``
    (each kind's own) feeds the accepted tokens it has not seen and returns the logits for the token
    after the context; ``step`` chains one drafted token and returns the next logits."""

    def __init__(self, session, model, **context):
        super().__init__(session, model, **context)
        self._memory = lib().llama_get_memory(self._ctx)
        self.cached: list[int] = []   # tokens fed with the main model's hidden states, by position
        self._pos = 0                 # where the next drafted token goes

    def step(self, token: int) -> np.ndarray:
        """Chain ``token`` (just drafted) with the context's own state for the token before it."""
        _, h = self._last
        self._process([(token, self._pos, h)], output_last=True)
        self._pos += 1
        return self._logits()

    def _failed(self) -> None:
        self.cached = []
        lib().llama_memory_seq_rm(self._memory, 0, -1, -1)


class MTPHead(ChainingHead):
    """An MTP context on a main model loaded with its nextn layers: the token at position p goes in
    with the main model's hidden state at p - 1."""

    def __init__(self, session):
        model = session.model
        check_symbols()
        if not model.params.load_mtp or n_nextn_layers(model._model) == 0:
            raise DrafterUnavailableError(f"{model.name} has no MTP layers loaded: it cannot draft for itself "
                                 f"(choose a model whose GGUF keeps its MTP / nextn layers).")
        super().__init__(session, model)

    def can_follow(self, context: Sequence[int]) -> bool:
        """Whether the main model's hidden states cover what ``start`` needs for ``context``."""
        return len(context) >= 1 and len(context) - 1 <= self.hidden.valid

    def start(self, context: Sequence[int]) -> np.ndarray:
        """Feed the tokens of ``context`` the MTP context lacks (the newest one with the main model's
        state before it); the logits for the token after ``context``."""
        n = len(context)
        keep = common_prefix_length(self.cached, context[:-1])
        self._remove_from(keep)   # also the drafted positions of the last round
        rows = [(context[k], k, self.hidden.row(k - 1)) for k in range(keep, n)]
        for chunk in range(0, len(rows), self.n_batch):
            self._process(rows[chunk:chunk + self.n_batch], output_last=chunk + self.n_batch >= len(rows))
        self.cached = list(context)
        self._pos = n
        return self._logits()

    def _remove_from(self, keep: int) -> None:
        """Drop positions from ``keep`` on (the MTP layer is attention: any suffix goes)."""
        if not lib().llama_memory_seq_rm(self._memory, 0, keep, -1):
            raise DecodeError(f"llama.cpp could not remove positions {keep}.. of the MTP context.")
        del self.cached[keep:]

    def forget(self) -> None:
        self._remove_from(0)


class AssistantHead(_DraftContext):
    """A separate MTP drafter file (Gemma 4's "assistant") drafting for the main session. It keeps no
    memory of its own: its attention reads the main context's keys and values (llama.cpp's
    ``ctx_other``), so there is nothing for it to read ahead or take back. A draft feeds the newest
    token (not yet decoded by the main model) with the main model's hidden state before it, then each
    drafted token with the assistant's own hidden state, all at the newest token's position, as
    llama.cpp's draft-mtp and Gemma 4's reference implementation do for an assistant sharing memory."""

    def __init__(self, session, drafter_model):
        check_symbols()
        drafter_width, main_width = n_embd_out(drafter_model), n_embd_out(session.model)
        if drafter_model.n_vocab != session.n_vocab or drafter_width != main_width:
            raise IncompatibleDraftError(
                f"{drafter_model.name} was made for another main model: it reads hidden states {drafter_width} "
                f"wide and {drafter_model.n_vocab:,} tokens, {session.model.name} has {main_width} and "
                f"{session.n_vocab:,}.")
        super().__init__(session, drafter_model, shares_memory=True)
        self._pos = 0

    def can_follow(self, context: Sequence[int]) -> bool:
        """Whether the main model's cache holds exactly ``context`` but its newest token, with hidden
        states (the assistant attends to that cache)."""
        n, cached = len(context), self.session.cached
        covered = len(cached) == n - 1 and (n == 1 or cached[-1] == context[-2])
        return n >= 1 and covered and n - 1 <= self.hidden.valid

    def start(self, context: Sequence[int]) -> np.ndarray:
        """The logits for the token after ``context``: its newest token with the main model's state before it."""
        self._pos = len(context) - 1
        self._process([(context[-1], self._pos, self.hidden.row(self._pos - 1))], output_last=True)
        return self._logits()

    def step(self, token: int) -> np.ndarray:
        """Chain ``token`` (just drafted) with the assistant's own state, at the same position."""
        _, h = self._last
        self._process([(token, self._pos, h)], output_last=True)
        return self._logits()

    def forget(self) -> None:
        """Nothing to forget: the assistant keeps no memory of its own."""


def n_embd_out(model) -> int:
    """The width of the hidden states a model gives (a main model) or reads (an MTP drafter)."""
    return int(lib().llama_model_n_embd_out(model._model))
