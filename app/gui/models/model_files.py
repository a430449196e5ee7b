"""What the model bar reads of model files, without widgets: the draft candidates for a main model
checked with the engine's pairing rules, why a file cannot be a main model, the files beside it,
remote servers' URLs."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from app.core.errors import QuickdraftError
from app.core.gguf.info import GGUFInfo, read_gguf_info
from app.core.gguf.pair_check import check_pair
from app.core.params import DrafterKind

MAX_SCANNED_FILES = 200
REMOTE_SCHEMES = ("http://", "https://")
UNREADABLE = (QuickdraftError, OSError)   # what reading a damaged or inaccessible GGUF can raise


@dataclass(frozen=True)
class DraftOption:
    path: str
    label: str
    enabled: bool
    reason: str = ""      # why it is disabled, or a warning when it is enabled
    other_vocabulary: bool = False


def draft_options(main_path: str, candidates: list[str]) -> list[DraftOption]:
    """Every candidate draft for ``main_path``, checked with the engine's own compatibility rules: those of
    its own vocabulary first, then those of another (they draft through text, the slower kind), each
    group in the order of ``candidates`` (recently used first)."""
    try:
        main = read_gguf_info(main_path)
    except UNREADABLE:
        return []
    options = []
    for path in candidates:
        if os.path.realpath(path) == os.path.realpath(main_path):  # Path.resolve raises on a symlink loop
            continue
        options.append(_option(main, path))
    return sorted(options, key=lambda option: option.other_vocabulary)


def _option(main: GGUFInfo, path: str) -> DraftOption:
    name = Path(path).name
    try:
        draft = read_gguf_info(path)
    except UNREADABLE as exc:
        return DraftOption(path, f"{name} (unreadable)", False, _reason(exc))
    pair = check_pair(main, draft)
    if not pair.compatible:
        return DraftOption(path, f"{name} (incompatible)", False, "; ".join(pair.reasons))
    label = f"{name} (different vocabulary)" if pair.other_vocabulary else name
    return DraftOption(path, label, True, "; ".join(pair.warnings), pair.other_vocabulary)


def is_remote(choice: str) -> bool:
    """Whether a main-model choice is a server's URL rather than a file."""
    return choice.startswith(REMOTE_SCHEMES)


def remote_label(url: str) -> str:
    return f"{urlsplit(url).netloc or url} (server)"


def unreadable_reason(path: str) -> str:
    """Why ``path`` cannot be read as a GGUF model; "" when it can."""
    try:
        read_gguf_info(path)
    except UNREADABLE as exc:
        return _reason(exc)
    return ""


def not_a_main_reason(path: str) -> str:
    """Why ``path`` cannot be the main model (unreadable, or a drafter file that only drafts); "" when it can."""
    try:
        info = read_gguf_info(path)
    except UNREADABLE as exc:
        return _reason(exc)
    if info.is_mtp_drafter:
        return "an MTP drafter: it only drafts; choose it as the draft of the model it was made for"
    if info.is_drafter_file:
        return (f"a drafter ({info.hidden_state_drafter}): it only drafts; choose it as the draft of the model it "
                f"was made for")
    return ""


def _reason(exc: Exception) -> str:
    return str(exc) or type(exc).__name__


def unique(paths: list[str]) -> list[str]:
    """``paths`` in order, each once (the same file spelt two ways counts once)."""
    seen: dict[str, None] = {}
    for path in paths:
        seen.setdefault(str(Path(path)), None)
    return list(seen)


def gguf_files_beside(path: str) -> list[str]:
    """The GGUF files in the folder of ``path`` (not below it: that may be a huge folder such as
    Downloads), the likeliest drafts for a main model opened from there."""
    folder = Path(path).parent
    if not folder.is_dir():
        return []
    return sorted(str(p) for p in folder.glob("*.gguf"))[:MAX_SCANNED_FILES]


def drafter_file_kind(path: str) -> DrafterKind | None:
    """How ``path`` drafts when it is a drafter file (MTP, EAGLE-3, DFlash); None for a model, or unreadable."""
    try:
        return read_gguf_info(path).drafts_as
    except UNREADABLE:
        return None


def mtp_layers(path: str) -> int:
    try:
        return read_gguf_info(path).mtp_layers
    except QuickdraftError:
        return 0
