"""llama-server's slot actions: ``POST /slots/{id}?action=save|restore|erase``. Save writes the slot's
cache (its tokens, keys and values) to a file of the folder ``--slot-save-path`` names, in llama.cpp's
own format, so llama-server restores what Quickdraft saved and the other way round; restore makes a
file the slot's cache (a following request with that slot and ``cache_prompt`` reads only its new
tokens); erase empties the slot's cache. The engine's part is app/core/slot_files.py.

As llama-server: without --slot-save-path every action is a 501; a file is named by a plain name,
checked as llama-server's ``fs_validate_filename`` checks it (no folders, no ``..``: nothing outside
the folder is reached); a slot that is not there is a 400; a slot that is answering is acted on once
its answer ends (the action waits in the queue, as llama-server defers it).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

from starlette.requests import Request

from app.core.errors import SlotFileError
from app.core.params import DrafterKind
from app.server.bodies import body_bytes, json_body
from app.server.errors import ApiError
from app.server.slots import HEADS

MAX_NAME_BYTES = 255   # the longest file name common file systems take
# characters no file name may hold (llama.cpp's list): Windows' reserved ones, the path separators,
# and look-alikes of the separators and the dot
FORBIDDEN = set(':*?"<>|/\\') | {"\uff0e", "\u2215", "\u2216", "\ufffd", "\ufeff"}


class SlotFileEngine(Protocol):
    """A slot's engine that saves, restores and erases its cache (the local Engine)."""

    def save_slot(self, path: Path) -> tuple[int, int]: ...

    def restore_slot(self, path: Path) -> tuple[int, int]: ...

    def erase_slot(self) -> int: ...


@dataclass(frozen=True)
class SlotAction:
    """What a request asks of slot ``slot``: ``run`` on that slot's engine, its answer's body."""

    slot: int
    run: Callable[[SlotFileEngine], dict]


async def slot_action(request: Request, save_path: str | None, drafting: DrafterKind) -> SlotAction:
    """The action a ``POST /slots/{id}`` request asks for, checked in llama-server's order: its errors."""
    if save_path is None:
        raise ApiError(501, "This server does not support slots action. Start it with `--slot-save-path`",
                       type="not_supported_error")
    slot = _slot_index(request.path_params["id_slot"])
    action = request.query_params.get("action", "")
    if action == "erase":
        return SlotAction(slot, lambda engine: {"id_slot": slot, "n_erased": engine.erase_slot()})
    if action not in ("save", "restore"):
        raise ApiError(400, f"Invalid action: '?action=' must be save, restore or erase; got '{action}'.")
    filename = _filename(await asyncio.to_thread(json_body, await body_bytes(request)))
    path = Path(save_path) / filename
    if action == "save":
        return SlotAction(slot, lambda engine: _save(engine, slot, filename, path))
    if drafting in HEADS:
        raise ApiError(501, f"Unable to restore slot: this server drafts with {drafting.label}, which reads the main "
                            f"model's hidden state at every position; a slot file holds none.",
                       type="not_supported_error")
    return SlotAction(slot, lambda engine: _restore(engine, slot, filename, path))


def _slot_index(text: str) -> int:
    """The slot's number in the path (llama-server: the same 400 as a slot that is not there)."""
    try:
        slot = int(text)
    except ValueError:
        slot = -1
    if slot < 0:
        raise ApiError(400, f"Invalid slot ID: '{text}' is not a slot's number (0, 1, ...).")
    return slot


def _filename(body) -> str:
    """The body's ``filename``, checked."""
    name = body.get("filename") if isinstance(body, dict) else None
    if not isinstance(name, str):
        raise ApiError(400, "Invalid filename: the body must be a JSON object whose 'filename' names the file in "
                            "the slot save path.", param="filename")
    problem = filename_problem(name)
    if problem:
        raise ApiError(400, f"Invalid filename: {problem}.", param="filename")
    return name


def filename_problem(name: str) -> str:
    """Why ``name`` is no plain file name in the slot save folder ("" when it is one), as llama.cpp's
    fs_validate_filename rules: a name that could reach another folder, or that a file system would
    store under another name, is refused."""
    if not name:
        return "it is empty"
    if len(name.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
        return f"it is over {MAX_NAME_BYTES} bytes long"
    bad = next((c for c in name if c in FORBIDDEN or _control(c) or "\ud800" <= c <= "\udfff"), None)
    if bad is not None:
        return f"{name!r} holds {bad!r}: a file name has no path separators, control characters or :*?\"<>|"
    if name[0] == " " or name[-1] in " .":
        return f"{name!r} starts with a space or ends with a space or a dot"
    if ".." in name:
        return f"{name!r} holds '..'"
    return ""


def _control(c: str) -> bool:
    return c <= "\x1f" or "\x7f" <= c <= "\x9f"


def _save(engine: SlotFileEngine, slot: int, filename: str, path: Path) -> dict:
    start = time.perf_counter()
    try:
        saved, written = engine.save_slot(path)
    except SlotFileError as exc:
        raise ApiError(500, f"Unable to save slot: {filename}: {exc}.", type="server_error") from None
    return {"id_slot": slot, "filename": filename, "n_saved": saved, "n_written": written,
            "timings": {"save_ms": (time.perf_counter() - start) * 1000}}


def _restore(engine: SlotFileEngine, slot: int, filename: str, path: Path) -> dict:
    start = time.perf_counter()
    try:
        restored, read = engine.restore_slot(path)
    except SlotFileError as exc:
        raise ApiError(400, f"Unable to restore slot: {filename}: {exc}.") from None
    return {"id_slot": slot, "filename": filename, "n_restored": restored, "n_read": read,
            "timings": {"restore_ms": (time.perf_counter() - start) * 1000}}
