"""How long the window's GUI thread goes without turning its event loop while the tiny model answers
(tests/gui/bench_gui_stall.py, under pytest for its window fixtures): prints the gaps' median, 99th
percentile and worst. A benchmark: the figures depend on the machine and its load.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/gui_stall_bench.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

if __name__ == "__main__":
    sys.exit(pytest.main(["-q", "-s", "-p", "no:cacheprovider", "--rootdir", str(ROOT),
                          str(ROOT / "tests" / "gui" / "bench_gui_stall.py")]))
