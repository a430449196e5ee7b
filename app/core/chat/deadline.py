"""A time limit for pure-Python work in any thread (a GUI worker included), without a process.

``with Deadline(2.0): ...`` raises DeadlineExceeded in the thread that entered it once two seconds
have passed, at the next Python instruction it runs. A timer thread delivers the exception with
CPython's PyThreadState_SetAsyncExc; a lock makes sure it can only land inside the ``with`` block:
leaving the block withdraws an exception that was sent but has not landed yet.

It cannot interrupt one long call into C (a huge string repeat, a regex): bound those separately.
"""

from __future__ import annotations

import ctypes
import threading


class DeadlineExceeded(Exception):
    """The time limit of a Deadline block ran out."""


def _send(thread_id: int, exc_type: type[BaseException] | None) -> None:
    exc = ctypes.py_object(exc_type) if exc_type is not None else None
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), exc)


class Deadline:
    def __init__(self, seconds: float):
        self.seconds = seconds
        self._lock = threading.Lock()
        self._inside = False
        self._sent = False
        self._thread_id = 0
        self._timer: threading.Timer | None = None

    def __enter__(self) -> "Deadline":
        self._thread_id = threading.get_ident()
        self._inside = True
        self._timer = threading.Timer(self.seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._timer.cancel()
        with self._lock:
            self._inside = False
            if self._sent:
                _send(self._thread_id, None)   # withdraw it if it has not landed yet
        return False

    def _expire(self) -> None:
        with self._lock:
            if self._inside:
                self._sent = True
                _send(self._thread_id, DeadlineExceeded)
