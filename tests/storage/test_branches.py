"""Branches and versions in the conversation store: edits, regenerated answers, deletions, a restart
(a new store on the same file) and a database from before branches."""

from __future__ import annotations

import sqlite3

from app.paths import app_paths
from app.storage.branches import Node, active_path, subtree
from app.storage.conversations import ConversationStore


def open_store(tmp_path) -> ConversationStore:
    return ConversationStore(app_paths(tmp_path).conversations_db)


def shown(store: ConversationStore, conversation_id: int) -> list[tuple[str, int, int]]:
    return [(m.content, m.version, m.versions) for m in store.messages(conversation_id)]


def test_regenerated_answers_are_versions_each_with_its_own_stats_and_survive_a_restart(tmp_path):
    store = open_store(tmp_path)
    conv = store.create()
    question = store.add_message(conv.id, "user", "hi")
    first = store.add_message(conv.id, "assistant", "hello", {"generated_tokens": 1})
    second = store.add_message(conv.id, "assistant", "hey there", {"generated_tokens": 2},
                               parent_id=question.id)
    assert shown(store, conv.id) == [("hi", 1, 1), ("hey there", 2, 2)]
    assert store.switch_version(second.id, -1).id == first.id
    assert store.switch_version(first.id, -1) is None   # nothing before the first version
    store.close()

    again = open_store(tmp_path)
    assert shown(again, conv.id) == [("hi", 1, 1), ("hello", 1, 2)]
    assert again.messages(conv.id)[1].stats == {"generated_tokens": 1}
    assert again.switch_version(first.id, +1).stats == {"generated_tokens": 2}
    assert shown(again, conv.id)[1] == ("hey there", 2, 2)


def test_an_edited_question_is_a_branch_and_each_branch_keeps_its_own_continuation(tmp_path):
    store = open_store(tmp_path)
    conv = store.create()
    q1 = store.add_message(conv.id, "user", "one")
    store.add_message(conv.id, "assistant", "a1")
    q2 = store.add_message(conv.id, "user", "two")
    store.add_message(conv.id, "assistant", "a2")
    store.add_message(conv.id, "user", "three")
    edited = store.add_message(conv.id, "user", "TWO", parent_id=q2.parent_id)   # the edit, then its answer
    store.add_message(conv.id, "assistant", "A2")
    assert shown(store, conv.id) == [("one", 1, 1), ("a1", 1, 1), ("TWO", 2, 2), ("A2", 1, 1)]
    store.close()

    again = open_store(tmp_path)
    assert shown(again, conv.id)[2:] == [("TWO", 2, 2), ("A2", 1, 1)]
    again.switch_version(edited.id, -1)   # back to the first branch, where it went on
    assert [m.content for m in again.messages(conv.id)] == ["one", "a1", "two", "a2", "three"]
    assert again.messages(conv.id)[0].id == q1.id and again.messages(conv.id)[0].parent_id is None


def test_deleting_a_message_takes_what_follows_it_and_shows_the_version_before(tmp_path):
    store = open_store(tmp_path)
    conv = store.create()
    question = store.add_message(conv.id, "user", "hi")
    first = store.add_message(conv.id, "assistant", "v1")
    second = store.add_message(conv.id, "assistant", "v2", parent_id=question.id)
    follow_up = store.add_message(conv.id, "user", "more")
    store.add_message(conv.id, "assistant", "even more")
    gone = store.delete_message(second.id)
    assert set(gone) == {second.id, follow_up.id, follow_up.id + 1}
    assert shown(store, conv.id) == [("hi", 1, 1), ("v1", 1, 1)]
    assert store.messages(conv.id)[1].id == first.id
    assert store.delete_message(second.id) == []
    store.delete_message(question.id)
    assert store.messages(conv.id) == [] and store.message(first.id) is None


def test_a_database_from_before_branches_opens_with_its_messages_in_order(tmp_path):
    path = app_paths(tmp_path).conversations_db
    path.parent.mkdir(parents=True, exist_ok=True)
    old = sqlite3.connect(str(path))   # the schema of the release before branches (with reasoning)
    old.executescript("""
        CREATE TABLE conversations (id INTEGER PRIMARY KEY AUTOINCREMENT, title TEXT NOT NULL,
            system_prompt TEXT NOT NULL DEFAULT '', created REAL NOT NULL, updated REAL NOT NULL,
            thinking INTEGER NOT NULL DEFAULT 1);
        CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT,
            conversation_id INTEGER NOT NULL REFERENCES conversations(id) ON DELETE CASCADE,
            role TEXT NOT NULL, content TEXT NOT NULL, stats TEXT NOT NULL DEFAULT '{}',
            pieces TEXT NOT NULL DEFAULT '[]', created REAL NOT NULL, reasoning TEXT);
        INSERT INTO conversations VALUES (1, 'Old', '', 0, 0, 1), (2, 'Other', '', 0, 0, 1);
        INSERT INTO messages (conversation_id, role, content, stats, created) VALUES
            (1, 'user', 'q1', '{}', 0), (2, 'user', 'elsewhere', '{}', 0),
            (1, 'assistant', 'a1', '{"generated_tokens": 5}', 0), (1, 'user', 'q2', '{}', 0);
    """)
    old.commit()
    old.close()

    store = ConversationStore(path)
    assert shown(store, 1) == [("q1", 1, 1), ("a1", 1, 1), ("q2", 1, 1)]
    assert [m.content for m in store.messages(2)] == ["elsewhere"]
    assert store.messages(1)[1].stats == {"generated_tokens": 5}
    answer = store.add_message(1, "assistant", "a2")   # the migrated path goes on
    assert answer.parent_id == store.messages(1)[2].id
    store.close()
    assert [m.content for m in ConversationStore(path).messages(1)] == ["q1", "a1", "q2", "a2"]


def test_the_path_takes_the_newest_version_where_none_is_marked_and_stops_at_a_cycle():
    nodes = [Node(1, None, False), Node(2, None, False), Node(3, 2, True), Node(4, 5, True), Node(5, 4, True)]
    assert [(n.id, v, of) for n, v, of in active_path(nodes)] == [(2, 2, 2), (3, 1, 1)]
    assert subtree(nodes, 4) == [4, 5]
