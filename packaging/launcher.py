"""The frozen app's entry point: the desktop app, or the command line.

    quickdraft                      the desktop app (app.gui.app:run), e.g. quickdraft --data-dir DIR
    quickdraft --cli generate ...   the command line (app.cli:main), from the same executable
    quickdraft-cli generate ...     the command line, from the console executable of the bundle

On Windows the desktop executable has no console, so use quickdraft-cli.exe there for the CLI.
"""

from __future__ import annotations

import os
import sys
from pathlib import PureWindowsPath

CLI_FLAG = "--cli"
CLI_EXECUTABLES = ("quickdraft-cli",)


def wants_cli(executable: str, argv: list[str]) -> bool:
    """True when started as quickdraft-cli or with --cli as the first argument."""
    name = PureWindowsPath(executable).stem.lower()  # splits on both / and \\
    return name in CLI_EXECUTABLES or (bool(argv) and argv[0] == CLI_FLAG)


def cli_arguments(argv: list[str]) -> list[str]:
    return argv[1:] if argv and argv[0] == CLI_FLAG else argv


def ensure_std_streams() -> None:
    """A windowed executable (Windows, macOS .app) has no stdout/stderr; give prints somewhere to go."""
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w", encoding="utf-8"))


def main() -> int:
    ensure_std_streams()
    argv = sys.argv[1:]
    if wants_cli(sys.executable, argv):
        from app.cli import main as cli_main

        return cli_main(cli_arguments(argv))
    from app.gui.app import run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
