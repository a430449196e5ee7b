"""The one place that decides where Quickdraft keeps its files.

Everything lives under one root so tests and smoke runs never touch the real home:
``QUICKDRAFT_DATA_DIR`` (or the ``--data-dir`` flag, which sets it) puts config, data, cache and
models under that folder; otherwise platformdirs' per-user directories are used.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

import platformdirs

APP_NAME = "Quickdraft"
DATA_DIR_ENV = "QUICKDRAFT_DATA_DIR"


@dataclass(frozen=True)
class AppPaths:
    config_dir: Path
    data_dir: Path
    cache_dir: Path
    models_dir: Path

    @property
    def settings_file(self) -> Path:
        return self.config_dir / "settings.json"

    @property
    def conversations_db(self) -> Path:
        return self.data_dir / "conversations.sqlite3"

    @property
    def profiles_dir(self) -> Path:
        return self.cache_dir / "profiles"

    @property
    def states_dir(self) -> Path:
        """Cache states kept between conversations (app/core/llama/state_cache.py)."""
        return self.cache_dir / "states"

    @property
    def suffix_index_dir(self) -> Path:
        """The suffix index of past documents, a folder per main model (app/core/speculation/suffix_store.py)."""
        return self.data_dir / "suffix-index"

    def ensure(self) -> "AppPaths":
        for d in (self.config_dir, self.data_dir, self.cache_dir, self.models_dir):
            d.mkdir(parents=True, exist_ok=True)
        return self


def app_paths(root: str | os.PathLike[str] | None = None) -> AppPaths:
    """Paths under ``root`` if given, else under $QUICKDRAFT_DATA_DIR, else platformdirs'."""
    root = root or os.environ.get(DATA_DIR_ENV) or None
    if root:
        base = Path(root).expanduser().resolve()
        return AppPaths(base / "config", base / "data", base / "cache", base / "models")
    data = Path(platformdirs.user_data_dir(APP_NAME, appauthor=False))
    return AppPaths(
        config_dir=Path(platformdirs.user_config_dir(APP_NAME, appauthor=False)),
        data_dir=data,
        cache_dir=Path(platformdirs.user_cache_dir(APP_NAME, appauthor=False)),
        models_dir=data / "models",
    )


def resources_dir() -> Path:
    """resources/ in the source tree, or inside a frozen (PyInstaller) app."""
    return Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parents[1])) / "resources"
