"""Every consumer runs a generation through run_to_summary: it hands on each event and returns the
Summary, and a stream without one is an error, not a silent None."""

from __future__ import annotations

import pytest

from app.core.errors import QuickdraftError
from app.core.speculation.events import Started, Summary, run_to_summary


def test_run_to_summary_hands_on_every_event_and_returns_the_summary():
    started = Started(3, 0)
    summary = Summary.__new__(Summary)   # only its identity matters here
    seen = []
    assert run_to_summary(iter([started, summary]), seen.append) is summary
    assert seen == [started]
    with pytest.raises(QuickdraftError, match="without a summary"):
        run_to_summary(iter([started]))
