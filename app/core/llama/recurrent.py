"""Saved recurrent states: how a hybrid or recurrent model's cache is taken back past what llama.cpp's own
snapshots reach.

A recurrent state folds every token in and cannot be unwound token by token. LlamaSession keeps two
saved states (llama.cpp's partial state: the recurrent part only, small beside the keys and values):
the one before the latest batch or run of single tokens ("latest"), and the one right after the latest
prompt ("prompt"), where the next chat turn's prompt picks up. Taking the cache back to n tokens puts
back the latest state saved at or before n; the kept tokens after it are then decoded again.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from app.core.errors import DecodeError
from app.core.llama.library import lib

LATEST, PROMPT = "latest", "prompt"


@dataclass
class SavedState:
    """A recurrent state saved when the cache held ``n_tokens`` tokens (``size`` bytes of ``data``)."""

    n_tokens: int
    data: ctypes.Array
    size: int


class SavedStates:
    """The two saved states of one llama.cpp sequence (0), each slot's buffer reused."""

    def __init__(self, ctx, model_name: str):
        self._ctx = ctx
        self._model_name = model_name
        self._slots: dict[str, SavedState | None] = {LATEST: None, PROMPT: None}

    def save(self, slot: str, n_tokens: int) -> None:
        """Save the recurrent state as it is now, with the cache holding ``n_tokens`` tokens."""
        llama_cpp = lib()
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        size = int(llama_cpp.llama_state_seq_get_size_ext(self._ctx, 0, flags))
        state = self._slots[slot]
        if state is None or len(state.data) < size:
            state = SavedState(0, (ctypes.c_uint8 * size)(), 0)
        self._slots[slot] = None
        written = int(llama_cpp.llama_state_seq_get_data_ext(self._ctx, state.data, size, 0, flags))
        if written != size:
            raise DecodeError(f"llama.cpp could not save {self._model_name}'s recurrent state "
                              f"({written} of {size} bytes).")
        state.n_tokens, state.size = n_tokens, size
        self._slots[slot] = state

    def latest_within(self, n_tokens: int) -> SavedState | None:
        """The latest state saved with at most ``n_tokens`` tokens cached."""
        within = [s for s in self._slots.values() if s is not None and s.n_tokens <= n_tokens]
        return max(within, key=lambda s: s.n_tokens, default=None)

    def put_back(self, state: SavedState) -> bool:
        """Put ``state``'s recurrent state back (the keys and values after it are the caller's to drop)."""
        llama_cpp = lib()
        flags = llama_cpp.LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY
        return bool(llama_cpp.llama_state_seq_set_data_ext(self._ctx, state.data, state.size, 0, flags))

    def forget_after(self, n_tokens: int) -> None:
        """Drop the states of tokens no longer cached."""
        for slot, state in self._slots.items():
            if state is not None and state.n_tokens > n_tokens:
                self._slots[slot] = None

    def clear(self) -> None:
        self._slots = dict.fromkeys(self._slots)
