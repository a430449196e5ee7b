"""Opening storage always gives working stores: damaged files are kept aside, unwritable folders
leave the conversations in memory, and each step taken is described."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from app.paths import app_paths
from app.storage import opening
from app.storage.conversations import ConversationStore
from app.storage.opening import open_conversations, open_storage
from app.storage.settings import Settings
from tests.storage.damage import DATABASE_DAMAGE, damage_database, write_conversations


def usable(store: ConversationStore) -> bool:
    conv = store.create("After", "")
    store.add_message(conv.id, "user", "still works")
    return [m.content for m in store.messages(conv.id)] == ["still works"]


@pytest.mark.parametrize("kind", DATABASE_DAMAGE)
def test_a_damaged_database_is_kept_aside_and_a_fresh_one_started(tmp_path, kind):
    path = tmp_path / "data" / "conversations.sqlite3"
    damage_database(path, kind)
    before = path.read_bytes() if path.is_file() else None

    store, problem = open_conversations(path)

    assert "damaged" in problem and "kept as" in problem and "new one was started" in problem
    [kept] = path.parent.glob("conversations.sqlite3.corrupt-*")
    assert kept.name in problem
    if before is not None:
        assert kept.read_bytes() == before, "the damaged file is kept byte for byte"
    else:
        assert (kept / "something").read_text() == "not a database"
    assert store.conversations() == [] and usable(store)
    store.close()
    assert ConversationStore(path).conversations()[0].title == "After", "the fresh database is on disk"


def test_a_sound_database_opens_without_a_problem(tmp_path):
    path = tmp_path / "conversations.sqlite3"
    write_conversations(path)
    store, problem = open_conversations(path)
    assert problem == "" and len(store.conversations()) == 3
    assert not list(tmp_path.glob("*.corrupt-*"))


def test_folders_that_cannot_be_created_leave_everything_in_memory(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("the data dir would have to be inside this file")
    storage = open_storage(app_paths(blocker / "root"))

    assert storage.settings == Settings()
    assert any("could not be created" in p for p in storage.problems)
    assert any("kept in memory only" in p for p in storage.problems)
    assert usable(storage.conversations)


def test_an_unwritable_folder_keeps_showing_the_history_from_memory(tmp_path, monkeypatch):
    """Root ignores permission bits, so the folder's refusal is simulated where SQLite would meet
    it; the next test checks the real thing where the tests do not run as root."""
    path = tmp_path / "conversations.sqlite3"
    write_conversations(path)
    before = path.read_bytes()
    real_init = ConversationStore.__init__

    def refuse_to_write(self, where, db=None):
        if db is None and str(where) == str(path):
            raise sqlite3.OperationalError("attempt to write a readonly database")
        real_init(self, where, db)

    monkeypatch.setattr(ConversationStore, "__init__", refuse_to_write)
    monkeypatch.setattr(opening, "is_writable_dir", lambda folder: False)

    store, problem = open_conversations(path)

    assert "cannot be saved" in problem and "memory only" in problem
    assert [c.title for c in store.conversations()] == ["Chat 2", "Chat 1", "Chat 0"]
    assert usable(store)
    assert path.read_bytes() == before and not list(tmp_path.glob("*.corrupt-*"))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs a user that permission bits stop")
def test_a_read_only_data_dir_on_disk(tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    write_conversations(folder / "conversations.sqlite3")
    folder.chmod(0o555)
    try:
        store, problem = open_conversations(folder / "conversations.sqlite3")
        assert "memory only" in problem and len(store.conversations()) == 3 and usable(store)
    finally:
        folder.chmod(0o755)


def test_keep_aside_never_overwrites_an_earlier_copy(tmp_path):
    from app.storage.files import keep_aside

    kept = []
    for n in range(3):
        path = tmp_path / "settings.json"
        path.write_text(str(n))
        kept.append(keep_aside(path))
    assert sorted(p.read_text() for p in kept) == ["0", "1", "2"] and len(set(kept)) == 3


def test_keep_aside_in_a_folder_that_refuses_gives_none(tmp_path, monkeypatch):
    from app.storage.files import keep_aside

    path = tmp_path / "settings.json"
    path.write_text("{")

    def read_only(self, target):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(Path, "replace", read_only)
    assert keep_aside(path) is None and path.read_text() == "{"
