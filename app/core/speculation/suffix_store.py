"""The suffix index on disk: per main model, an append-only log of token documents, crash-safe and
bounded in size (the index over them: suffix_index.py).

One folder per main model (``<root>/<key>/``, the key from the model file's name):

- ``tokens.log``: records, each a header (magic, token count, CRC-32 of the tokens) and the tokens as
  little-endian int32. A record is written with one ``write`` and fsynced. Reading stops at the first
  short or damaged record and cuts the file there: a kill -9 in the middle of a write loses that
  record only, and the log is writable again at once.
- ``meta.json``: the vocabulary fingerprint of the model that wrote it (app/core/gguf/fingerprint.py),
  written whole (a temporary file, fsync, ``os.replace``). A model of another vocabulary is refused
  (``VocabularyMismatchError``) and never reads the tokens: its ids would mean other texts.

The log is bounded by ``limit_bytes``: when it passes the limit it is compacted, the newest records
that fit in COMPACT_TO of the limit rewritten to a temporary file, fsynced and put in its place (the
oldest go first). A crash during compaction leaves the old log or the new one, never a mix.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from app.core.errors import QuickdraftError

MAGIC = b"QDS1"
HEADER = struct.Struct("<4sII")   # magic, tokens in the record, CRC-32 of the record's token bytes
LOG_NAME, META_NAME = "tokens.log", "meta.json"
COMPACT_TO = 0.75   # a compaction keeps the newest records that fit in this share of the limit
MAX_RECORD_TOKENS = 1 << 26   # a header claiming more is damage, not a document
META_VERSION = 1


class VocabularyMismatchError(QuickdraftError):
    """The index was written by a model of another vocabulary: its token ids mean other texts."""


@dataclass(frozen=True)
class IndexStatus:
    """What one model's index holds on disk (``quickdraft suffix-index status``)."""

    key: str
    model: str          # the model that wrote it, as its meta file names it
    documents: int
    tokens: int
    bytes: int
    problem: str = ""   # why it cannot be read ("" when it can)


def index_key(model_path: str | os.PathLike[str]) -> str:
    """The folder name of a main model's index: its file name without ``.gguf``, in safe characters
    (an index follows the model file by name; its meta file says which vocabulary it holds)."""
    stem = Path(model_path).name
    stem = stem[:-5] if stem.lower().endswith(".gguf") else stem
    return re.sub(r"[^A-Za-z0-9._-]+", "_", stem).strip("._") or "model"


def read_log(path: Path) -> tuple[list[np.ndarray], int]:
    """(the documents of every complete record, the bytes they take) of the log at ``path``; reading
    stops at the first short or damaged record."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return [], 0
    docs, at = [], 0
    while at + HEADER.size <= len(data):
        magic, count, crc = HEADER.unpack_from(data, at)
        end = at + HEADER.size + 4 * count
        if magic != MAGIC or count > MAX_RECORD_TOKENS or end > len(data):
            break
        payload = data[at + HEADER.size:end]
        if zlib.crc32(payload) != crc:
            break
        docs.append(np.frombuffer(payload, dtype="<i4").astype(np.int32))
        at = end
    return docs, at


def record(tokens: Sequence[int]) -> bytes:
    """One log record: header and tokens."""
    payload = np.asarray(tokens, dtype="<i4").tobytes()
    return HEADER.pack(MAGIC, len(payload) // 4, zlib.crc32(payload)) + payload


def write_atomically(path: Path, data: bytes) -> None:
    """Write ``path`` whole or not at all: a temporary file, fsynced, then renamed over it."""
    temp = path.with_name(path.name + ".tmp")
    with open(temp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, path)
    _sync_dir(path.parent)


def _sync_dir(folder: Path) -> None:
    """Make a rename in ``folder`` durable (not possible on Windows, where it needs no fsync)."""
    if os.name == "nt":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class SuffixStore:
    """One main model's log of token documents in ``folder``, at most ``limit_bytes`` after each append."""

    def __init__(self, folder: str | os.PathLike[str], fingerprint: str, model_name: str, limit_bytes: int):
        if limit_bytes <= HEADER.size:
            raise ValueError(f"the suffix index's size limit must be more than {HEADER.size} bytes")
        self.folder = Path(folder)
        self.fingerprint = fingerprint
        self.model_name = model_name
        self.limit_bytes = limit_bytes
        self.log_path = self.folder / LOG_NAME
        self.size = 0   # bytes of complete records in the log

    def open(self) -> list[np.ndarray]:
        """Read the log (cut at its first damaged record), compacted if it is over the limit; a new
        folder and meta file where there is none. Raises VocabularyMismatchError for another
        vocabulary's index, OSError where the folder cannot be read or written."""
        self.folder.mkdir(parents=True, exist_ok=True)
        self._check_meta()
        docs, good = read_log(self.log_path)
        if self.log_path.exists() and self.log_path.stat().st_size != good:
            with open(self.log_path, "r+b") as log:   # a torn or damaged tail: cut it off
                log.truncate(good)
                os.fsync(log.fileno())
        self.size = good
        if self.size > self.limit_bytes:
            docs = self.compact(docs)
        return docs

    def _check_meta(self) -> None:
        meta_path = self.folder / META_NAME
        try:
            meta = json.loads(meta_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            meta = None
        except (OSError, ValueError):
            meta = {}   # unreadable: whose tokens the log holds is unknown, so it is refused below
        if meta is None:
            write_atomically(meta_path, json.dumps({"version": META_VERSION, "fingerprint": self.fingerprint,
                                                    "model": self.model_name}).encode())
            self.log_path.unlink(missing_ok=True)   # tokens without a meta file: nobody knows whose
            return
        if meta.get("fingerprint") != self.fingerprint:
            raise VocabularyMismatchError(
                f"The suffix index in {self.folder} was written by {meta.get('model') or 'an unknown model'} "
                f"with another vocabulary; {self.model_name} does not read it. `quickdraft suffix-index clear` "
                f"(or Settings' Clear) starts a new one.")

    def append(self, tokens: Sequence[int], docs: list[np.ndarray] | None = None) -> list[np.ndarray] | None:
        """Append one document, durably. When the log then passes the limit it is compacted and the
        documents kept are returned (``docs``: every document the log holds, the new one last; read
        from the log when not given); None when nothing was dropped."""
        data = record(tokens)
        with open(self.log_path, "ab") as log:
            log.write(data)
            log.flush()
            os.fsync(log.fileno())
        self.size += len(data)
        if self.size <= self.limit_bytes:
            return None
        return self.compact(docs if docs is not None else read_log(self.log_path)[0])

    def compact(self, docs: list[np.ndarray]) -> list[np.ndarray]:
        """Keep the newest documents that fit in COMPACT_TO of the limit (the oldest go first)."""
        budget, kept, size = int(self.limit_bytes * COMPACT_TO), [], 0
        for doc in reversed(docs):
            need = HEADER.size + 4 * len(doc)
            if size + need > budget:
                break
            kept.append(doc)
            size += need
        kept.reverse()
        write_atomically(self.log_path, b"".join(record(doc) for doc in kept))
        self.size = size
        return kept


def list_indexes(root: str | os.PathLike[str], fingerprint: str | None = None) -> list[IndexStatus]:
    """Every model's index under ``root``; with ``fingerprint``, one of another vocabulary says so."""
    root = Path(root)
    if not root.is_dir():
        return []
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        try:
            meta = json.loads((folder / META_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            meta = {}
        docs, size = read_log(folder / LOG_NAME)
        problem = "" if meta.get("fingerprint") else "no readable meta file: refused"
        if not problem and fingerprint is not None and meta["fingerprint"] != fingerprint:
            problem = "another vocabulary than the model named: refused"
        out.append(IndexStatus(folder.name, meta.get("model", "?"), len(docs), sum(len(d) for d in docs), size,
                               problem))
    return out


def clear_indexes(root: str | os.PathLike[str], key: str | None = None) -> int:
    """Delete one model's index (``key``) or every index under ``root``; the number deleted."""
    root = Path(root)
    folders = [root / key] if key is not None else (list(root.iterdir()) if root.is_dir() else [])
    removed = 0
    for folder in folders:
        if folder.is_dir():
            shutil.rmtree(folder)
            removed += 1
    return removed
