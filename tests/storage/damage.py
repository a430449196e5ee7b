"""Damaged conversation databases and settings files, as a crash, a bad disk or a person makes them."""

from __future__ import annotations

import os
import random
from pathlib import Path

from app.storage.conversations import ConversationStore

DATABASE_DAMAGE = ("truncated", "random-bytes", "bad-pages", "directory")
PAGE = 4096

# settings.json contents and what the window must then show
SETTINGS_DAMAGE = {
    "invalid-utf8": (b'{"temperature": 0.5, "default_system_prompt": "caf\xe9"}', "damaged"),
    "not-json": (b"{ not json", "damaged"),
    "deeply-nested": (b"[" * 100_000 + b"]" * 100_000, "damaged"),
    "int-above-2^31": (b'{"seed": 4294967296, "threads": 99999999999999999999}', "seed = 4294967296"),
    "draft-max-negative": (b'{"draft_max": -1}', "draft_max = -1"),
    "p-min-5": (b'{"p_min": 5}', "p_min = 5"),
    "nan-temperature": (b'{"temperature": NaN}', "temperature = NaN"),
    "lone-surrogate": (b'{"default_system_prompt": "\\ud800"}', "default_system_prompt"),
}


def write_conversations(path: Path, conversations: int = 3, messages: int = 40) -> None:
    """A sound database of several pages."""
    store = ConversationStore(path)
    for c in range(conversations):
        conv = store.create(f"Chat {c}", "Be brief.")
        for m in range(messages):
            store.add_message(conv.id, "user" if m % 2 == 0 else "assistant", f"message {m} " + "text " * 40)
    store.close()  # the last connection's close checkpoints the WAL into the file


def damage_database(path: Path, kind: str) -> None:
    """Replace a sound database at ``path`` with a damaged one of ``kind`` (DATABASE_DAMAGE)."""
    rng = random.Random(kind)
    if kind == "directory":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir()
        (path / "something").write_text("not a database")
        return
    write_conversations(path)
    data = bytearray(path.read_bytes())
    assert len(data) > 6 * PAGE, "the database spans several pages"
    if kind == "truncated":
        data = data[:1500]
    elif kind == "random-bytes":
        data = bytearray(rng.randbytes(len(data)))
    elif kind == "bad-pages":  # the header is intact, some b-tree pages are garbage
        for page in (1, 3, 4):
            data[page * PAGE:(page + 1) * PAGE] = rng.randbytes(PAGE)
    else:
        raise ValueError(kind)
    path.write_bytes(bytes(data))
    for suffix in ("-wal", "-shm"):
        if os.path.exists(f"{path}{suffix}"):
            os.remove(f"{path}{suffix}")
