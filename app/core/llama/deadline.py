"""A llama.cpp decode stopped once it runs past a deadline.

Trying another thread count can cost far more than the decode it replaces: on a machine whose cores
are all busy, a decode with two threads waits at each of its hundreds of barriers for a thread that
has no core, and takes seconds where one thread takes 40 ms. llama.cpp's CPU backend asks an abort
callback after every graph node; armed only for the decodes on trial (the check calls into Python),
it stops such a decode soon after its deadline. llama_decode then answers 2 and drops what the batch
put in the cache; the caller puts its cache back in order and decodes the batch again.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from typing import Iterator

from app.core.llama.library import lib

ABORTED = 2   # llama_decode's answer for a decode the abort callback stopped


class DecodeDeadline:
    """``limit(seconds)`` around a llama_decode on ``ctx`` stops it past ``seconds`` (CPU backend)."""

    def __init__(self, ctx):
        llama_cpp = lib()
        self._ctx = ctx
        self._at = math.inf
        self._callback = llama_cpp.ggml_abort_callback(self._past)   # kept alive as long as the context
        self._none = llama_cpp.ggml_abort_callback()                 # a null callback: nothing asked

    def _past(self, _data) -> bool:
        return time.perf_counter() > self._at

    @contextmanager
    def limit(self, seconds: float | None) -> Iterator[None]:
        if seconds is None:
            yield
            return
        llama_cpp = lib()
        self._at = time.perf_counter() + seconds
        llama_cpp.llama_set_abort_callback(self._ctx, self._callback, None)
        try:
            yield
        finally:
            llama_cpp.llama_set_abort_callback(self._ctx, self._none, None)
            self._at = math.inf
