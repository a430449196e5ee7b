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
