"""Sizes for people, file sizes, and the free-space check every copy or download does first."""

from __future__ import annotations

import shutil
from pathlib import Path

from app.core.errors import QuickdraftError

DISK_MARGIN_BYTES = 64 * 1024 * 1024


class NotEnoughSpaceError(QuickdraftError):
    """The disk cannot hold a download or a copy."""


def format_bytes(n: float) -> str:
    """1234567 -> '1.2 MB' (decimal units, like file managers and Hugging Face)."""
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def format_params(n: int) -> str:
    """A parameter count: 1_540_000_000 -> '1.5B', 2_100_000 -> '2.1M'."""
    return f"{n / 1e9:.1f}B" if n >= 1e9 else f"{n / 1e6:.1f}M" if n >= 1e6 else f"{n / 1e3:.0f}K"


def file_size(path: Path) -> int:
    """The size of ``path``; 0 when it is missing or cannot be read."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def format_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def check_disk_space(directory: Path, needed: int) -> None:
    """Refuse to write ``needed`` bytes under ``directory`` if they would not fit (with a margin)."""
    probe = Path(directory)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    free = shutil.disk_usage(probe).free
    if needed + DISK_MARGIN_BYTES > free:
        raise NotEnoughSpaceError(
            f"Not enough disk space: {format_bytes(needed)} is needed (plus {format_bytes(DISK_MARGIN_BYTES)} "
            f"to spare) but only {format_bytes(free)} is free on {probe}. Free some space or choose another "
            f"models folder."
        )
