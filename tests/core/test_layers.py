"""app/core is the engine: it never imports Qt."""

import re
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parents[2] / "app" / "core"
QT = re.compile(r"^\s*(from|import)\s+(PySide6|shiboken6|qasync|PyQt\d)", re.M)


def test_core_sources_do_not_import_qt():
    offenders = [p.name for p in CORE.glob("*.py") if QT.search(p.read_text(encoding="utf-8"))]
    assert offenders == []


def test_importing_the_engine_loads_no_qt():
    code = ("import sys, app.core.engine, app.core.speculative, app.cli, app.bench; "
            "print([m for m in sys.modules if m.split('.')[0] in ('PySide6', 'shiboken6', 'qasync')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=CORE.parents[1]).stdout
    assert out.strip() == "[]"
