"""llama.cpp itself, started once per process: its backend modules loaded before it looks for them,
its log kept quiet (warnings and errors are kept for the messages that explain a failure), and the
info lines of a model's load collected (they say where its layers went)."""

from __future__ import annotations

import ctypes
import os
import threading
from collections import deque
from contextlib import contextmanager
from typing import Iterator

from app.core.llama import backends

_init_lock = threading.Lock()
_backend_load: "backends.BackendLoad | None" = None  # once llama.cpp is initialised
_recent_errors: deque[str] = deque(maxlen=20)


def lib():
    """The llama_cpp module (imported when first needed: importing it loads libllama)."""
    import llama_cpp

    return llama_cpp


def version() -> str:
    """llama-cpp-python's version: a cost profile measured under another is measured again."""
    return lib().__version__


# --- logging: llama.cpp prints every tensor while loading; keep warnings and errors only ------------

_GGML_LOG_LEVEL_INFO = 2
_GGML_LOG_LEVEL_WARN = 3
_GGML_LOG_LEVEL_ERROR = 4
_GGML_LOG_LEVEL_CONT = 5
_last_level = [0]
_load_log: list[str] | None = None  # while a model loads: its info lines, which say where its layers went


def _log(level: int, text: bytes | None, _user_data) -> None:
    if level == _GGML_LOG_LEVEL_CONT:
        level = _last_level[0]
    _last_level[0] = level
    if _load_log is not None and level == _GGML_LOG_LEVEL_INFO and text:
        _load_log.append(text.decode("utf-8", "replace"))
    if level < _GGML_LOG_LEVEL_WARN or not text:
        return
    message = text.decode("utf-8", "replace").rstrip()
    if message:
        _recent_errors.append(message)
        if os.environ.get("QUICKDRAFT_LLAMA_LOG"):
            print(message, flush=True)


_log_callback = None  # kept alive: llama.cpp holds a raw pointer to it


def ensure_backend() -> "backends.BackendLoad":
    """Initialise llama.cpp once per process: quiet its logging, load this install's backend modules
    (before llama.cpp would look for them itself, only beside the executable and in the working
    folder) and say what loaded."""
    global _backend_load, _log_callback
    with _init_lock:
        if _backend_load is not None:
            return _backend_load
        llama_cpp = lib()
        _log_callback = llama_cpp.llama_log_callback(_log)
        llama_cpp.llama_log_set(_log_callback, ctypes.c_void_p(0))
        load = backends.load_backends()
        llama_cpp.llama_backend_init()
        _backend_load = load
        return load


def take_errors() -> str:
    """The errors llama.cpp logged since the last call (for a failure's message), forgetting them."""
    return " ".join(m for m in take_messages() if "error" in m.lower() or "failed" in m.lower())


def take_messages() -> list[str]:
    """Every warning and error llama.cpp logged since the last call, forgetting them."""
    messages = list(_recent_errors)
    _recent_errors.clear()
    return messages


@contextmanager
def load_log() -> Iterator[list[str]]:
    """Collect llama.cpp's info lines while the block runs (a model's load)."""
    global _load_log
    _load_log = lines = []
    try:
        yield lines
    finally:
        _load_log = None
