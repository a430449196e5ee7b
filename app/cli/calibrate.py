"""``quickdraft calibrate``: measure this machine's batch costs for a pair now and print the profile."""

from __future__ import annotations

import sys

from app.core.speculation.calibration import calibrated_sizes
from app.core.speculation.costmodel import CostProfile


def calibrate(engine, n_max: int) -> int:
    """Measure, store and print the pair's cost profile (batches of 1..``n_max``); closes ``engine``."""
    try:
        print(f"calibrating this machine for the auto policy (batches of 1..{n_max})...", file=sys.stderr)
        profile = engine.costs.profile(n_max, recalibrate=True)
    finally:
        engine.close()
    step = profile.main_batch_s[0]
    print(f"cost profile measured in {profile.seconds:.1f} s at context position {profile.context_position}")
    print(f"{'batch':>5}  {'main ms':>8}  {'x one step':>10}")
    for n in calibrated_sizes(profile.n_max):   # the others are read off the sizes around them
        t = profile.main_batch_s[n - 1]
        print(f"{n:>5}  {1000 * t:8.1f}  {t / step:10.2f}" + _estimated(profile, n))
    if profile.draft_step_s:
        print(f"draft model, one token: {1000 * profile.draft_step_s:.1f} ms ({profile.draft_step_s / step:.2f} of a main step)")
    print(f"saved to {engine.costs.store.path_for(profile.key)}")
    return 0


def _estimated(profile: CostProfile, n: int) -> str:
    """A size timed far slower than its tokens one by one is estimated from its neighbours, not learned
    (costmodel._one_time_cost): a burst of load, or a GPU's first launch of that size's kernels."""
    return "" if profile.measured is None or n in profile.measured else "  (timed far slower than one by one: estimated)"
