"""Conversations and their messages in SQLite.

A message keeps its text, the generation's numbers (a JSON object) and its pieces as runs of
(text, origin) so token colouring still works after a restart. A thinking model's answer keeps its
reasoning apart from its text (``reasoning``); a conversation keeps whether its model thinks
(``thinking``, for a template with a switch).

A conversation is a tree (branches.py): each message names the one it follows (``parent_id``), and
of the messages following the same one (its versions: an edited question, a regenerated answer)
one is ``active``. What the conversation shows and sends is the path of active messages from its
first; the other versions stay, to flip back to. A database from before branches is migrated when
opened: each message follows the one before it, all active.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from app.storage.branches import Node, active_path, subtree

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
                 ("messages", "reasoning", "TEXT"),
                 ("messages", "parent_id", "INTEGER"),
                 ("messages", "active", "INTEGER NOT NULL DEFAULT 1"))
# a database from before branches: each message follows the one before it in its conversation
LINK_MESSAGES = """UPDATE messages SET parent_id = (SELECT MAX(earlier.id) FROM messages AS earlier
    WHERE earlier.conversation_id = messages.conversation_id AND earlier.id < messages.id)"""
LEAF = -1   # add_message's default parent: the last message of the path shown

Run = tuple[str, str]  # (text, origin value: "draft", "suffix" or "main")


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
    parent_id: int | None = None    # the message it follows; None: the conversation's first
    version: int = 1                # its place among the versions following the same message (from 1)
    versions: int = 1               # how many versions follow that message


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
                with self._db:   # the column and what it starts as in one transaction
                    self._db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
                    if column == "parent_id":
                        self._db.execute(LINK_MESSAGES)

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
        """The conversation as shown: the path of active versions from its first message."""
        rows = self._rows(conversation_id)
        by_id = {r[0]: r for r in rows}
        return [_message(by_id[node.id], version, versions)
                for node, version, versions in active_path([_node(r) for r in rows])]

    def add_message(self, conversation_id: int, role: str, content: str, stats: dict | None = None,
                    pieces: list[Run] | tuple[Run, ...] = (), reasoning: str | None = None,
                    parent_id: int | None = LEAF) -> StoredMessage:
        """A message after ``parent_id`` (by default the path's last; None: a first message), made the
        active version there: following the same message as others, it starts a branch."""
        if parent_id == LEAF:
            path = self.messages(conversation_id)
            parent_id = path[-1].id if path else None
        with self._db:
            cur = self._db.execute(
                "INSERT INTO messages (conversation_id, role, content, stats, pieces, reasoning, parent_id, active,"
                " created) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
                (conversation_id, role, content, json.dumps(stats or {}), json.dumps(list(pieces)), reasoning,
                 parent_id, time.time()))
            self._activate(conversation_id, parent_id, cur.lastrowid)
            self._touch(conversation_id)
        return self.message(cur.lastrowid)

    def message(self, message_id: int) -> StoredMessage | None:
        row = self._db.execute(f"SELECT {_MESSAGE} FROM messages WHERE id = ?", (message_id,)).fetchone()
        if row is None:
            return None
        siblings = self._siblings(row[1], row[7])
        return _message(row, siblings.index(message_id) + 1, len(siblings))

    def switch_version(self, message_id: int, step: int) -> StoredMessage | None:
        """Make the version ``step`` places from ``message_id`` (-1: the one before) the active one;
        the path then goes on as that version's branch last went. None when there is none there."""
        row = self._db.execute("SELECT conversation_id, parent_id FROM messages WHERE id = ?",
                               (message_id,)).fetchone()
        if row is None:
            return None
        siblings = self._siblings(*row)
        place = siblings.index(message_id) + step
        if not 0 <= place < len(siblings):
            return None
        with self._db:
            self._activate(row[0], row[1], siblings[place])
        return self.message(siblings[place])

    def delete_message(self, message_id: int) -> list[int]:
        """Delete a message and what follows it on every branch (answers to a deleted question mean
        nothing without it); when it was the active version, the version before it (else after it)
        becomes active. Returns the ids deleted."""
        row = self._db.execute("SELECT conversation_id, parent_id, active FROM messages WHERE id = ?",
                               (message_id,)).fetchone()
        if row is None:
            return []
        conversation_id, parent_id, active = row
        siblings = self._siblings(conversation_id, parent_id)
        gone = subtree([_node(r) for r in self._rows(conversation_id)], message_id)
        with self._db:
            self._db.executemany("DELETE FROM messages WHERE id = ?", [(i,) for i in gone])
            rest = [i for i in siblings if i != message_id]
            if active and rest:
                before = [i for i in rest if i < message_id]
                self._activate(conversation_id, parent_id, before[-1] if before else rest[0])
            self._touch(conversation_id)
        return gone

    def _rows(self, conversation_id: int) -> list[tuple]:
        return self._db.execute(f"SELECT {_MESSAGE} FROM messages WHERE conversation_id = ? ORDER BY id",
                                (conversation_id,)).fetchall()

    def _siblings(self, conversation_id: int, parent_id: int | None) -> list[int]:
        """The versions following ``parent_id``, oldest first."""
        return [r[0] for r in self._db.execute(
            "SELECT id FROM messages WHERE conversation_id = ? AND parent_id IS ? ORDER BY id",
            (conversation_id, parent_id))]

    def _activate(self, conversation_id: int, parent_id: int | None, message_id: int) -> None:
        self._db.execute("UPDATE messages SET active = (id = ?) WHERE conversation_id = ? AND parent_id IS ?",
                         (message_id, conversation_id, parent_id))

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

    def _touch(self, conversation_id: int) -> None:
        self._db.execute("UPDATE conversations SET updated = ? WHERE id = ?", (time.time(), conversation_id))


_CONVERSATION = "id, title, system_prompt, created, updated, thinking"
_MESSAGE = "id, conversation_id, role, content, stats, pieces, reasoning, parent_id, active"


def _conversation(row: tuple) -> Conversation:
    *fields, thinking = row
    return Conversation(*fields, thinking=bool(thinking))


def _node(row: tuple) -> Node:
    return Node(row[0], row[7], bool(row[8]))


def _message(row: tuple, version: int = 1, versions: int = 1) -> StoredMessage:
    mid, cid, role, content, stats, pieces, reasoning, parent_id, _active = row
    return StoredMessage(mid, cid, role, content, json.loads(stats or "{}"),
                         tuple((str(t), str(o)) for t, o in json.loads(pieces or "[]")), reasoning or None,
                         parent_id, version, versions)
