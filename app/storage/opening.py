"""Opening the app's folders, settings and conversations so that the app always starts.

A damaged database is kept aside and a fresh one started; a folder that cannot be written leaves the
app running with conversations in memory. Each thing done is described in ``problems``, which the
window shows."""

from __future__ import annotations

import logging
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from app.paths import AppPaths
from app.storage.conversations import MEMORY, ConversationStore
from app.storage.files import is_writable_dir, keep_aside
from app.storage.settings import Settings, SettingsStore

log = logging.getLogger(__name__)
SQLITE_COMPANIONS = ("-wal", "-shm", "-journal")


@dataclass
class Storage:
    settings_store: SettingsStore
    settings: Settings
    conversations: ConversationStore
    problems: list[str] = field(default_factory=list)


def open_storage(paths: AppPaths, settings_store: SettingsStore | None = None,
                 conversations: ConversationStore | None = None) -> Storage:
    problems = _ensure_folders(paths)
    settings_store = settings_store or SettingsStore(paths.settings_file)
    settings = settings_store.load()
    if settings_store.problem:
        problems.append(settings_store.problem)
    if conversations is None:
        conversations, problem = open_conversations(paths.conversations_db)
        if problem:
            problems.append(problem)
    return Storage(settings_store, settings, conversations, problems)


def open_conversations(path: Path) -> tuple[ConversationStore, str]:
    """The conversation store at ``path``, and what had to be done to open it ("" when nothing)."""
    try:
        return ConversationStore(path), ""
    except (sqlite3.DatabaseError, OSError) as exc:
        failure = exc
    log.warning("conversations database %s could not be opened: %s", path, failure)
    if not is_writable_dir(path.parent):
        return (ConversationStore.in_memory_copy(path),
                f"Conversations cannot be saved: the folder {path.parent} cannot be written ({failure}). "
                f"This session's conversations are kept in memory only.")
    kept = keep_aside(path, SQLITE_COMPANIONS) if path.exists() or path.is_symlink() else None
    try:
        store = ConversationStore(path)
    except (sqlite3.DatabaseError, OSError) as exc:
        return (ConversationStore(MEMORY),
                f"The conversations database could not be opened ({exc}). "
                f"This session's conversations are kept in memory only.")
    where = f"it was kept as {kept.name}" if kept else "it could not be moved aside"
    return store, f"The conversations database was damaged ({failure}); {where} and a new one was started."


def _ensure_folders(paths: AppPaths) -> list[str]:
    try:
        paths.ensure()
    except OSError as exc:
        return [f"Quickdraft's folders could not be created ({exc}); nothing will be saved this session."]
    return []
