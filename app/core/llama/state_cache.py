"""Cache states kept on disk, so that a conversation read before resumes without reading its history
again: switching between conversations (the window's list, or a server's interleaved clients) would
otherwise decode each one's whole history anew, 70 s for 2,000 tokens on a loaded 2-core machine.

When a prompt shares less with the session's cache than the cache holds (another conversation), the
cache's state (llama.cpp's ``llama_state_seq_get_data``: keys, values and any recurrent state of the
sequence) is saved under the tokens it holds, and the saved state sharing the longest prefix with the
prompt is put back, so that only the rest is read. Saved states are per model file and context (the
folder's name hashes both: another model or context size never reads them), bounded by the bytes the
user allows, the least recently used going first. A state llama.cpp refuses to put back is deleted
and the prompt read as usual; nothing is trusted that llama.cpp did not confirm.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from app.core.llama.binding import ATTENTION
from app.core.llama.library import lib
from app.core.lm import common_prefix_length

MIN_TOKENS = 256   # a shorter history is read again in about the time its state takes to load


@dataclass
class _Entry:
    name: str
    n_tokens: int
    size: int      # bytes of state
    used: float    # time.time() of its last save or load


class StateCache:
    """The saved states of one model file at one context size, in ``folder``, at most ``max_bytes``."""

    def __init__(self, folder: str | Path, identity: dict, max_bytes: int):
        key = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
        self.folder = Path(folder) / key
        self.max_bytes = max_bytes
        self._entries: dict[str, _Entry] = self._read_index()
        self._token_lists: dict[str, list[int]] = {}   # each entry's tokens, read from disk once

    # --- the rule --------------------------------------------------------------------------------

    def switch(self, session, prompt: Sequence[int]) -> int:
        """Before ``session`` reads ``prompt``: when the prompt would drop much of the cache (another
        conversation; a turn's own end does not count), save the cache; then put back the saved state that shares the most with the prompt, when that beats the
        cache. Returns the prompt tokens the cache then holds."""
        cached = session.cached
        shared = common_prefix_length(cached, prompt)
        if len(cached) - shared >= MIN_TOKENS:   # the prompt would drop much of the cache: keep it
            self.save(session)
        if len(prompt) - 1 - shared < MIN_TOKENS:   # the cache already holds all but a little of it
            return shared
        best, best_shared = self._best_for(prompt, session.memory != ATTENTION)
        if best is not None and best_shared >= max(shared + MIN_TOKENS, MIN_TOKENS):
            if self._load(session, best):
                session.truncate(best_shared)
                return best_shared
        return shared

    def save(self, session) -> None:
        """Save the session's cache under its tokens, unless short or already saved."""
        tokens = list(session.cached)
        if len(tokens) < MIN_TOKENS or self.max_bytes <= 0 or self._holds(tokens):
            return
        data = _state_of(session)
        if data is None or len(data) > self.max_bytes:
            return
        name = hashlib.sha256(np.asarray(tokens, dtype=np.int32).tobytes()).hexdigest()[:20]
        self.folder.mkdir(parents=True, exist_ok=True)
        _write_atomic(self.folder / f"{name}.tokens", np.asarray(tokens, dtype=np.int32).tobytes())
        _write_atomic(self.folder / f"{name}.state", data)
        self._entries[name] = _Entry(name, len(tokens), len(data), time.time())
        self._token_lists[name] = tokens
        self._evict()
        self._write_index()

    def clear(self) -> None:
        for entry in list(self._entries.values()):
            self._delete(entry)
        self._write_index()

    @property
    def bytes_used(self) -> int:
        return sum(e.size for e in self._entries.values())

    # --- finding, loading, evicting --------------------------------------------------------------

    def _best_for(self, prompt: Sequence[int], whole_only: bool) -> tuple[_Entry | None, int]:
        """The entry sharing the longest prefix with ``prompt`` (but its last token: its logits must be
        computed). A recurrent state cannot be cut short, so for one only entries wholly in the prompt."""
        best, best_shared = None, 0
        for entry in self._entries.values():
            tokens = self._tokens(entry)
            if tokens is None:
                continue
            shared = min(common_prefix_length(tokens, prompt), len(prompt) - 1)
            if whole_only and shared < len(tokens):
                continue
            if shared > best_shared:
                best, best_shared = entry, shared
        return best, best_shared

    def _holds(self, tokens: list[int]) -> bool:
        return any(e.n_tokens == len(tokens) and self._tokens(e) == tokens for e in self._entries.values())

    def _tokens(self, entry: _Entry) -> list[int] | None:
        if entry.name not in self._token_lists:
            try:
                data = (self.folder / f"{entry.name}.tokens").read_bytes()
            except OSError:
                return None
            self._token_lists[entry.name] = np.frombuffer(data, dtype=np.int32).tolist()
        return self._token_lists[entry.name]

    def _load(self, session, entry: _Entry) -> bool:
        try:
            data = (self.folder / f"{entry.name}.state").read_bytes()
        except OSError:
            data = b""
        tokens = self._tokens(entry)
        if len(data) != entry.size or tokens is None or not session.load_state(lambda: tokens if _put_state(session, data) else None):
            self._delete(entry)   # llama.cpp refused it (another build's format, a damaged file)
            self._write_index()
            return False
        entry.used = time.time()
        self._write_index()
        return True

    def _evict(self) -> None:
        for entry in sorted(self._entries.values(), key=lambda e: e.used):
            if self.bytes_used <= self.max_bytes:
                break
            self._delete(entry)

    def _delete(self, entry: _Entry) -> None:
        for suffix in (".tokens", ".state"):
            (self.folder / f"{entry.name}{suffix}").unlink(missing_ok=True)
        self._entries.pop(entry.name, None)
        self._token_lists.pop(entry.name, None)

    def _read_index(self) -> dict[str, _Entry]:
        try:
            raw = json.loads((self.folder / "index.json").read_text(encoding="utf-8"))
            entries = {e["name"]: _Entry(**e) for e in raw}
        except (OSError, ValueError, TypeError, KeyError):
            return {}
        return {n: e for n, e in entries.items() if (self.folder / f"{n}.state").is_file()}

    def _write_index(self) -> None:
        if self.folder.is_dir():
            _write_atomic(self.folder / "index.json", json.dumps([asdict(e) for e in self._entries.values()]).encode())


def _state_of(session) -> bytes | None:
    """The sequence's whole state as llama.cpp gives it; None when it gives less than it said."""
    llama_cpp = lib()
    size = int(llama_cpp.llama_state_seq_get_size(session.raw_context, session.seq))
    buf = (ctypes.c_uint8 * size)()
    written = int(llama_cpp.llama_state_seq_get_data(session.raw_context, buf, size, session.seq))
    return bytes(buf) if written == size and size > 0 else None


def _put_state(session, data: bytes) -> bool:
    """Whether llama.cpp read all of ``data`` back into the session's sequence."""
    buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
    return int(lib().llama_state_seq_set_data(session.raw_context, buf, len(data), session.seq)) == len(data)


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)   # a crash mid-write never leaves half a file
