"""The bench's estimates of a speedup from repeated runs."""

from __future__ import annotations

import pytest

from app.cli.bench import BenchReport, PromptResult, format_table, paired_speedup


def test_a_burst_that_slows_one_run_does_not_move_the_paired_estimate():
    base = [30.0, 30.0, 24.0, 30.0]    # the third main-alone run was slowed by other programs
    spec = [33.0, 33.0, 33.0, 33.0]
    assert paired_speedup(base, spec) == pytest.approx(1.1)


def test_a_long_burst_slows_both_runs_of_a_pair_and_cancels_out():
    base = [30.0, 25.0, 25.0, 30.0]    # load for a while: both runs of pairs 2 and 3 are slower
    spec = [30.0, 25.0, 25.0, 30.0]
    assert paired_speedup(base, spec) == pytest.approx(1.0)


def test_one_run_gives_no_paired_estimate():
    assert paired_speedup([30.0], [33.0]) is None


def _result(prompt_id: str, base_runs: list[float], spec_runs: list[float]) -> PromptResult:
    base, spec = max(base_runs), max(spec_runs)
    return PromptResult(prompt_id, 10, base, spec, spec / base, 0.5, 1.0, 2.0, 10, 5, 10, 5, 1.0, 1.0, 30.0,
                        64, 64, True, base_runs_tps=base_runs, spec_runs_tps=spec_runs,
                        paired_speedup=paired_speedup(base_runs, spec_runs))


def test_the_table_shows_the_paired_column_only_with_repeats():
    single = BenchReport({}, [_result("p0", [30.0], [33.0])])
    assert "paired" not in format_table(single)
    repeated = BenchReport({}, [_result("p0", [30.0, 24.0], [33.0, 33.0]), _result("p1", [30.0, 30.0], [27.0, 30.0])])
    table = format_table(repeated)
    assert "paired" in table.splitlines()[0]
    assert "0.95x" in table.splitlines()[-1]   # p1's pairs: 0.9 and 1.0


def test_the_table_sets_each_answers_estimated_speedup_beside_the_measured_one():
    from dataclasses import replace

    without = BenchReport({}, [_result("p0", [30.0], [33.0])])
    assert "est." not in format_table(without)
    report = BenchReport({}, [replace(_result("p0", [30.0], [33.0]), estimated_speedup=1.21),    # measured 1.10
                              replace(_result("p1", [30.0], [60.0]), estimated_speedup=1.8)])    # measured 2.00
    table = format_table(report)
    assert "est." in table.splitlines()[0] and "1.21x" in table and "1.80x" in table
    assert report.results[0].estimate_error == pytest.approx(0.1)
    assert table.splitlines()[-1] == "estimated speedup (each answer's footer) vs measured: median error 10%"
