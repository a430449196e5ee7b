"""Keeping a damaged file aside so that nothing the user had is ever deleted by a fresh start."""

from __future__ import annotations

import time
from pathlib import Path


def keep_aside(path: Path, companions: tuple[str, ...] = ()) -> Path | None:
    """Rename ``path`` (a file or a directory) to ``<name>.corrupt-<time>`` next to it, with its
    companion files (suffixes such as "-wal") renamed alike. None when it cannot be moved (a
    read-only folder): the caller then leaves it where it is and must not write over it."""
    target = _free_name(path)
    try:
        path.replace(target)
    except OSError:
        return None
    for suffix in companions:
        companion = path.with_name(path.name + suffix)
        try:
            if companion.exists():
                companion.replace(target.with_name(target.name + suffix))
        except OSError:
            pass  # the main file is safe aside; a stray journal is what SQLite would drop anyway
    return target


def is_writable_dir(folder: Path) -> bool:
    """Whether a file can be created in ``folder`` (by trying: permission bits lie to root and on
    read-only mounts)."""
    probe = folder / f".quickdraft-write-test-{time.monotonic_ns()}"
    try:
        probe.touch(exist_ok=False)
        probe.unlink()
    except OSError:
        return False
    return True


def _free_name(path: Path) -> Path:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = path.with_name(f"{path.name}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.corrupt-{stamp}-{n}")
    return target
