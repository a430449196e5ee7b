"""Conversations and messages in SQLite."""

from __future__ import annotations

from app.paths import app_paths
from app.storage.conversations import ConversationStore


def open_store(tmp_path) -> ConversationStore:
    return ConversationStore(app_paths(tmp_path).conversations_db)


def test_conversations_and_messages_survive_reopening(tmp_path):
    store = open_store(tmp_path)
    conv = store.create("First", "Be brief.")
    store.add_message(conv.id, "user", "hi")
    answer = store.add_message(conv.id, "assistant", "", {})
    store.update_message(answer.id, "hello", {"generated_tokens": 3}, [("hel", "draft"), ("lo", "main")])
    store.close()

    again = open_store(tmp_path)
    assert [c.title for c in again.conversations()] == ["First"]
    assert again.get(conv.id).system_prompt == "Be brief."
    messages = again.messages(conv.id)
    assert [(m.role, m.content) for m in messages] == [("user", "hi"), ("assistant", "hello")]
    assert messages[1].stats == {"generated_tokens": 3}
    assert messages[1].pieces == (("hel", "draft"), ("lo", "main"))


def test_search_rename_and_order(tmp_path):
    store = open_store(tmp_path)
    a = store.create("Python lists")
    b = store.create("Rust traits")
    store.add_message(a.id, "user", "newer activity")
    assert [c.id for c in store.conversations()] == [a.id, b.id]
    assert [c.title for c in store.conversations("rust")] == ["Rust traits"]
    store.rename(b.id, "100% rust_traits")
    assert [c.title for c in store.conversations("100%")] == ["100% rust_traits"]
    assert store.conversations("_") == [store.get(b.id)]
    assert store.conversations("nothing like this") == []


def test_delete_removes_the_conversation_and_its_messages(tmp_path):
    store = open_store(tmp_path)
    conv = store.create("Doomed")
    message = store.add_message(conv.id, "user", "bye")
    keep = store.create("Kept")
    store.delete(conv.id)
    assert store.get(conv.id) is None and store.message(message.id) is None
    assert [c.id for c in store.conversations()] == [keep.id]


def test_update_without_stats_keeps_them(tmp_path):
    store = open_store(tmp_path)
    conv = store.create()
    m = store.add_message(conv.id, "assistant", "x", {"speedup": 1.5}, [("x", "main")])
    store.update_message(m.id, "y")
    again = store.message(m.id)
    assert again.content == "y" and again.stats == {"speedup": 1.5} and again.pieces == (("x", "main"),)
    store.delete_message(m.id)
    assert store.messages(conv.id) == []


def test_a_thinking_answer_keeps_its_reasoning_apart_and_a_conversation_its_switch(tmp_path):
    store = open_store(tmp_path)
    conv = store.create("Thinking")
    assert conv.thinking is True
    store.set_thinking(conv.id, False)
    answer = store.add_message(conv.id, "assistant", "", reasoning="first thoughts")
    assert answer.reasoning == "first thoughts"
    store.update_message(answer.id, "Hello.", {"thinking_s": 2.5}, reasoning="The user greets me.")
    store.update_message(answer.id, "Hello.", {"speedup": 1.5})   # a compare: the reasoning stays
    plain = store.add_message(conv.id, "assistant", "no thinking")
    store.close()

    again = open_store(tmp_path)
    assert again.get(conv.id).thinking is False and again.conversations()[0].thinking is False
    first, second = again.messages(conv.id)
    assert (first.content, first.reasoning) == ("Hello.", "The user greets me.")
    assert second.id == plain.id and second.reasoning is None


def test_a_database_from_before_reasoning_gets_its_columns(tmp_path):
    import sqlite3

    path = app_paths(tmp_path).conversations_db
    path.parent.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(str(path))
    old.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '', created REAL NOT NULL, updated REAL NOT NULL);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT NOT NULL DEFAULT '{}',
            pieces TEXT NOT NULL DEFAULT '[]', created REAL NOT NULL);
        INSERT INTO conversations VALUES (1, 'Old', '', 0, 0);
        INSERT INTO messages (conversation_id, role, content, created) VALUES (1, 'assistant', 'kept', 0);
    """)
    old.commit()
    old.close()
    store = ConversationStore(path)
    assert store.get(1).thinking is True
    [message] = store.messages(1)
    assert (message.content, message.reasoning) == ("kept", None)
    store.update_message(message.id, "kept", reasoning="added later")
    assert store.message(message.id).reasoning == "added later"
