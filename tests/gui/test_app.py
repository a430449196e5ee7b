"""Starting the app: the command line and the layering rule."""

from __future__ import annotations

import os
from pathlib import Path

from app.gui.app import apply_args
from app.paths import DATA_DIR_ENV, app_paths

GUI_DIR = Path(__file__).resolve().parents[2] / "app" / "gui"


def test_data_dir_flag_sets_the_paths_root(monkeypatch, tmp_path):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    apply_args(["--data-dir", str(tmp_path / "qd")])
    assert app_paths().conversations_db == tmp_path / "qd" / "data" / "conversations.sqlite3"


def test_no_flag_leaves_the_environment_alone(monkeypatch):
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    apply_args([])
    assert DATA_DIR_ENV not in os.environ


def test_the_gui_never_imports_llama_cpp():
    offenders = [p.name for p in GUI_DIR.rglob("*.py") if "llama_cpp" in p.read_text(encoding="utf-8")]
    assert offenders == []
