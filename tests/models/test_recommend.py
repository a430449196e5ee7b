"""Recommended pairs ranked by the speed to expect as well as by memory (issue 41, fault 6): on two
cores without a GPU a 12B model fits 16 GB but writes about a token a second; it must not come first,
and 27B pairs must not be offered there as "tight"."""

from __future__ import annotations

import pytest

from app.models.catalog import load_catalog
from app.models.memory import MachineMemory
from app.models.recommend import recommend
from app.models.speed import SLOW_TPS, active_fraction, expected_speed

GB = 10**9
TWO_CORES = MachineMemory(16 * GB, 12 * GB, False, None, None, cpu_cores=2)
WORKSTATION = MachineMemory(64 * GB, 60 * GB, True, 24 * GB, 23 * GB, "a 24 GB GPU", cpu_cores=8)


def params(pair) -> float:
    return float(pair.main.params.rstrip("B").split("B-")[0].lstrip("E"))


def test_two_cores_without_a_gpu_are_offered_only_pairs_they_can_run_at_a_usable_speed():
    offered = recommend(load_catalog(), TWO_CORES)
    assert offered, "something is offered"
    assert params(offered[0].pair) < 12
    assert not [r for r in offered if "27B" in r.pair.main.params or "31B" in r.pair.main.params]
    assert all(r.speed.tokens_per_s >= SLOW_TPS for r in offered)
    assert "tokens/s here before drafting" in offered[0].speed.describe()


def test_a_gpu_that_holds_a_27b_model_puts_it_first():
    offered = recommend(load_catalog(), WORKSTATION)
    assert offered[0].fit.verdict == "fits" and params(offered[0].pair) >= 27
    assert offered[0].speed_verdict == "quick"


def test_quick_pairs_come_before_larger_slow_ones_and_unknown_cores_keep_the_memory_order():
    catalog = load_catalog()
    eight_cores = MachineMemory(32 * GB, 30 * GB, False, None, None, cpu_cores=8)
    verdicts = [r.speed_verdict for r in recommend(catalog, eight_cores)]
    assert verdicts == sorted(verdicts, key=["quick", "usable"].index)
    unknown = recommend(catalog, MachineMemory(16 * GB, 12 * GB, False, None, None))
    assert {r.speed_verdict for r in unknown} == {"unknown"}
    memory = [r.pair.expected_memory for r in unknown if r.fit.verdict == "fits"]
    assert memory == sorted(memory, reverse=True)


def test_the_speed_reads_the_whole_model_on_a_cpu_the_active_experts_of_a_moe_and_adds_gpu_and_cpu_parts():
    cpu = expected_speed(8 * GB, 2)
    assert cpu.tokens_per_s == pytest.approx(1.0)           # 2 cores x 4 GB/s over 8 GB
    assert expected_speed(8 * GB, 64).tokens_per_s == pytest.approx(5.0)   # RAM's 40 GB/s caps many cores
    assert active_fraction("35B-A3B") == pytest.approx(3 / 35) and active_fraction("7.6B") == 1.0
    moe = expected_speed(35 * GB, 2, fraction=active_fraction("35B-A3B"))
    assert moe.tokens_per_s == pytest.approx(8 / 3)
    on_gpu = expected_speed(8 * GB, 2, gpu_offload=True, vram_free=24 * GB)
    half = expected_speed(8 * GB, 2, gpu_offload=True, vram_free=5 * GB)
    assert on_gpu.tokens_per_s > half.tokens_per_s > cpu.tokens_per_s
    assert expected_speed(8 * GB, None) is None
