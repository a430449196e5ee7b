"""Conversations and their messages in SQLite.

A message keeps its text, the generation's numbers (a JSON object) and its pieces as runs of
(text, origin) so token colouring still works after a restart. A thinking model's answer keeps its
reasoning apart from its text (``reasoning``); a conversation keeps whether its model thinks
(``thinking``, for a template with a switch).
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    title TEXT NOT NULL,
    system_prompt TEXT NOT NULL DEFAULT '',
    created REAL NOT NULL,
    updated REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
    role TEXT NOT NULL,
    content TEXT NOT NULL,
    stats TEXT NOT NULL DEFAULT '{}',
    pieces TEXT NOT NULL DEFAULT '[]',
    created REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_by_conversation ON messages(conversation_id, id);
"""
# columns added after the first release: a database made before gets them when opened
ADDED_COLUMNS = (("conversations", "thinking", "INTEGER NOT NULL DEFAULT 1"),
                 ("messages", "reasoning", "TEXT"))

Run = tuple[str, str]  # (text, origin value: "draft" or "main")


@dataclass(frozen=True)
class Conversation:
    id: int
    title: str
    system_prompt: str
    created: float
    updated: float
    thinking: bool = True           # the model thinks before answering (where its template can switch)


@dataclass(frozen=True)
class StoredMessage:
    id: int
    conversation_id: int
    role: str
    content: str
    stats: dict[str, Any] = field(default_factory=dict)
    pieces: tuple[Run, ...] = ()
    reasoning: str | None = None    # a thinking model's reasoning, shown folded; None: none


MEMORY = ":memory:"


class ConversationStore:
    """Raises sqlite3.DatabaseError (or OSError) when the file is not a sound database; see
    app.storage.opening for what the app does then."""

    def __init__(self, path: str | Path, db: sqlite3.Connection | None = None):
        self.path = Path(path)
        if db is None and str(path) != MEMORY:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = db or sqlite3.connect(str(path))
        try:
            self._prepare()
        except BaseException:
            self._db.close()
            raise

    @classmethod
    def in_memory_copy(cls, path: Path) -> "ConversationStore":
        """A store in memory holding what ``path`` holds, read without writing a byte there (its
        folder may be read-only); empty when ``path`` cannot be read either."""
        memory = sqlite3.connect(MEMORY)
        for options in ("mode=ro", "immutable=1"):  # immutable: no -shm needed next to the file
            try:
                source = sqlite3.connect(f"{path.absolute().as_uri()}?{options}", uri=True)
                try:
                    source.backup(memory)
                    return cls(MEMORY, memory)
                finally:
                    source.close()
            except (sqlite3.DatabaseError, OSError, ValueError):
                memory.close()
                memory = sqlite3.connect(MEMORY)
        return cls(MEMORY, memory)

    def _prepare(self) -> None:
        self._db.execute("PRAGMA foreign_keys = ON")
        # WAL with NORMAL sync: commits do not wait for fsync (the GUI thread writes here), and a
        # crash can lose at most the last commits, never corrupt the database.
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        problems = [row[0] for row in self._db.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            raise sqlite3.DatabaseError("; ".join(problems))
        self._db.executescript(SCHEMA)
        for table, column, kind in ADDED_COLUMNS:
            if column not in {row[1] for row in self._db.execute(f"PRAGMA table_info({table})")}:
                with self._db:
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")

    def close(self) -> None:
        self._db.close()

    # --- conversations -------------------------------------------------------------------------

    def create(self, title: str = "New chat", system_prompt: str = "") -> Conversation:
        now = time.time()
        with self._db:
            cur = self._db.execute(
                "INSERT INTO conversations (title, system_prompt, created, updated) VALUES (?, ?, ?, ?)",
                (title, system_prompt, now, now))
        return self.get(cur.lastrowid)

    def get(self, conversation_id: int) -> Conversation | None:
        row = self._db.execute(f"SELECT {_CONVERSATION} FROM conversations WHERE id = ?",
                               (conversation_id,)).fetchone()
        return _conversation(row) if row else None

    def conversations(self, search: str = "") -> list[Conversation]:
        """Newest first; ``search`` matches titles, case-insensitively."""
        pattern = "%" + search.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        rows = self._db.execute(
            f"SELECT {_CONVERSATION} FROM conversations "
            "WHERE title LIKE ? ESCAPE '\\' ORDER BY updated DESC, id DESC", (pattern,)).fetchall()
        return [_conversation(r) for r in rows]

    def rename(self, conversation_id: int, title: str) -> None:
        self._update_conversation(conversation_id, "title", title)

    def set_system_prompt(self, conversation_id: int, prompt: str) -> None:
        self._update_conversation(conversation_id, "system_prompt", prompt)

    def set_thinking(self, conversation_id: int, on: bool) -> None:
        with self._db:
            self._db.execute("UPDATE conversations SET thinking = ? WHERE id = ?", (int(on), conversation_id))

    def delete(self, conversation_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM conversations WHERE id = ?", (conversation_id,))

    def _update_conversation(self, conversation_id: int, column: str, value: str) -> None:
        with self._db:
            self._db.execute(f"UPDATE conversations SET {column} = ?, updated = ? WHERE id = ?",
                             (value, time.time(), conversation_id))

    # --- messages ------------------------------------------------------------------------------

    def messages(self, conversation_id: int) -> list[StoredMessage]:
        rows = self._db.execute(
            f"SELECT {_MESSAGE} FROM messages WHERE conversation_id = ? ORDER BY id", (conversation_id,)).fetchall()
        return [_message(r) for r in rows]

    def add_message(self, conversation_id: int, role: str, content: str, stats: dict | None = None,
                    pieces: list[Run] | tuple[Run, ...] = (), reasoning: str | None = None) -> StoredMessage:
        with self._db:
            cur = self._db.execute(
                "INSERT INTO messages (conversation_id, role, content, stats, pieces, reasoning, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (conversation_id, role, content, json.dumps(stats or {}), json.dumps(list(pieces)), reasoning,
                 time.time()))
            self._touch(conversation_id)
        return self.message(cur.lastrowid)

    def message(self, message_id: int) -> StoredMessage | None:
        row = self._db.execute(f"SELECT {_MESSAGE} FROM messages WHERE id = ?", (message_id,)).fetchone()
        return _message(row) if row else None

    def update_message(self, message_id: int, content: str, stats: dict | None = None,
                       pieces: list[Run] | tuple[Run, ...] | None = None, reasoning: str | None = None) -> None:
        """``reasoning``: None keeps what is stored (a compare changes only the stats)."""
        sets, values = ["content = ?"], [content]
        if reasoning is not None:
            sets.append("reasoning = ?")
            values.append(reasoning or None)
        if stats is not None:
            sets.append("stats = ?")
            values.append(json.dumps(stats))
        if pieces is not None:
            sets.append("pieces = ?")
            values.append(json.dumps(list(pieces)))
        with self._db:
            self._db.execute(f"UPDATE messages SET {', '.join(sets)} WHERE id = ?", (*values, message_id))

    def delete_message(self, message_id: int) -> None:
        with self._db:
            self._db.execute("DELETE FROM messages WHERE id = ?", (message_id,))

    def _touch(self, conversation_id: int) -> None:
        self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))


_CONVERSATION = "id, title, system_prompt, created, updated, thinking"
_MESSAGE = "id, conversation_id, role, content, stats, pieces, reasoning"


def _conversation(row: tuple) -> Conversation:
    *fields, thinking = row
    return Conversation(*fields, thinking=bool(thinking))


def _message(row: tuple) -> StoredMessage:
    mid, cid, role, content, stats, pieces, reasoning = row
    return StoredMessage(mid, cid, role, content, json.loads(stats or "{}"),
                         tuple((str(t), str(o)) for t, o in json.loads(pieces or "[]")), reasoning or None)
