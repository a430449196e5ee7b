"""Which recommended pairs (catalog.py) to offer this machine, and in what order: by the speed its
main model can be expected to write at here (speed.py) as well as by memory (memory.py). A pair too
large for the memory or too slow to use is not offered; the quick ones come first, then those that
fit comfortably, then the largest (the best answers among equals)."""

from __future__ import annotations

from dataclasses import dataclass

from app.models.catalog import GB, CatalogPair
from app.models.memory import Fit, MachineMemory, judge_fit
from app.models.speed import Speed, active_fraction, expected_speed

FIT_ORDER = {"fits": 0, "unknown": 1, "tight": 2}     # "too large" pairs are not offered
SPEED_ORDER = {"quick": 0, "unknown": 1, "usable": 2}   # "too slow" pairs are not offered


@dataclass(frozen=True)
class Recommendation:
    pair: CatalogPair
    fit: Fit
    speed: Speed | None    # None: this machine's cores are unknown

    @property
    def speed_verdict(self) -> str:
        return self.speed.verdict if self.speed is not None else "unknown"


def pair_speed(pair: CatalogPair, machine: MachineMemory) -> Speed | None:
    """How fast the pair's main model writes here before drafting (a draft model adds its own reads,
    and speeds the pair up by what it gets accepted)."""
    free = machine.vram_free if machine.vram_free is not None else machine.vram_total
    return expected_speed(int(pair.main.size_gb * GB), machine.cpu_cores, machine.gpu_offload, free,
                          active_fraction(pair.main.params))


def recommend(catalog: list[CatalogPair], machine: MachineMemory) -> list[Recommendation]:
    judged = [Recommendation(pair, judge_fit(pair.expected_memory, machine), pair_speed(pair, machine))
              for pair in catalog]
    offered = [r for r in judged if r.fit.verdict in FIT_ORDER and r.speed_verdict in SPEED_ORDER]
    return sorted(offered, key=lambda r: (SPEED_ORDER[r.speed_verdict], FIT_ORDER[r.fit.verdict],
                                          -r.pair.expected_memory))
