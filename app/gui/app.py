"""Start the desktop app: ``python main.py [--data-dir DIR]``."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.paths import DATA_DIR_ENV


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="quickdraft-gui", description="Quickdraft desktop chat")
    parser.add_argument("--data-dir", help="keep settings, conversations and models under this folder")
    parser.add_argument("--models", action="store_true",
                        help="open only the model manager; the pair chosen there is what the chat opens with")
    return parser.parse_args(argv)


def apply_args(argv: list[str]) -> argparse.Namespace:
    """Parse the command line and set what must be set before anything reads paths."""
    args = parse_args(argv)
    if args.data_dir:
        os.environ[DATA_DIR_ENV] = str(Path(args.data_dir).expanduser().resolve())
    return args


def run(argv: list[str] | None = None) -> int:
    args = apply_args(sys.argv[1:] if argv is None else argv)
    # imported here so the data dir is decided before any module looks at paths
    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.gui.main_window import MainWindow
    from app.gui.smoke import maybe_start_smoke
    from app.gui.widgets.theme import STYLE_SHEET
    from app.paths import app_paths, resources_dir

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("Quickdraft")
    app.setDesktopFileName("quickdraft")
    app.setWindowIcon(QIcon(str(resources_dir() / "icons" / "quickdraft.svg")))
    app.setStyle("Fusion")
    app.setStyleSheet(STYLE_SHEET)
    if args.models:
        window = open_model_manager_alone(app_paths())
    else:
        window = MainWindow(app_paths())
        window.show()
        maybe_start_smoke(window)
    code = app.exec()
    if argv is None:
        sys.exit(code)
    return code


def open_model_manager_alone(paths, **dialog_options):
    """The model manager as the only window: a pair chosen there is saved as the chat window's
    models, so the next start of the chat opens with it."""
    from dataclasses import replace

    from app.gui.models.manager import ModelManagerDialog
    from app.storage.settings import SettingsStore

    dialog = ModelManagerDialog(paths, **dialog_options)
    store = SettingsStore(paths.settings_file)

    def remember_pair(main: str, draft: str) -> None:
        settings = store.load()
        store.save(replace(settings, main_model=main, draft_model=draft or "").with_recent_main(main))

    dialog.pair_chosen.connect(remember_pair)
    dialog.show()
    return dialog
