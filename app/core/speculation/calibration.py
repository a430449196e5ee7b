"""Measuring the main model's batch times and the draft model's step on purpose (``quickdraft
calibrate``), where the cost model (costmodel.py) otherwise learns them from the rounds as they run."""

from __future__ import annotations

import statistics
import time
from typing import Callable, Sequence

import numpy as np

from app.core.lm import Session
from app.core.speculation.costmodel import CostModel, CostProfile

CALIBRATION_TEXT = (
    "The quick brown fox jumps over the lazy dog while the programmer writes a function that merges "
    "sorted lists, checks its edge cases, and explains each step in plain words for the reader. "
)


def calibrate(main: Session, draft: Session | None, key: dict, n_max: int, filler: Sequence[int],
              repeats: int = 3, context_tokens: int = 256,
              progress: Callable[[str], None] | None = None,
              draft_filler: Sequence[int] | None = None) -> CostProfile:
    """Measure the main model's batch times for n = 1..n_max (``calibrated_sizes``, the others read
    off them) and the draft's step time at a realistic context position. Sizes are measured
    round-robin, ``repeats`` times, and each keeps its median, so a burst of load elsewhere on the
    machine does not land on one size only.
    ``draft_filler``: the draft's own tokens for the filler (another vocabulary's ids differ; default
    ``filler``). Leaves both caches empty."""
    started = time.perf_counter()
    prefix = _repeat(filler, min(context_tokens, main.n_ctx - n_max - 1))
    sizes = calibrated_sizes(n_max)
    batches = [_repeat(filler[::-1], n) for n in sizes]
    measured = round_robin_medians(main, prefix, batches, repeats, progress, "main model")
    main_times = np.interp(range(1, n_max + 1), sizes, measured).tolist()
    draft_time = 0.0
    if draft is not None:
        draft_filler = list(draft_filler) if draft_filler is not None else list(filler)
        draft_prefix = _repeat(draft_filler, min(context_tokens, draft.n_ctx - 2))
        draft_time = round_robin_medians(draft, draft_prefix, [draft_filler[:1] or [0]], repeats + 2, progress,
                                         "draft model")[0]
    for session in (main, draft):
        if session is not None:
            session.truncate(0)
    return CostProfile(key=key, main_batch_s=main_times, draft_step_s=draft_time,
                       context_position=len(prefix), measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                       seconds=time.perf_counter() - started, notes={"raw_main_batch_s": main_times},
                       measured=None if len(sizes) == n_max else sizes)


CALIBRATED_UP_TO = 17   # every size up to a default chain's batch (16 drafted + 1); beyond, a few


def calibrated_sizes(n_max: int) -> list[int]:
    """The batch sizes calibrate times: every one up to CALIBRATED_UP_TO, then half of n_max, n_max and
    the multiples of CostModel.TILE (a long copy's batches, and the sizes the loop pads a batch to where they
    cost less: ``CostProfile.cheapest_batch``; the sizes between are interpolated and learned as copies
    verify them), so that calibrating for 64-token copies does not take four times as long."""
    every = set(range(1, min(n_max, CALIBRATED_UP_TO) + 1))
    tiles = range(CostModel.TILE, n_max + 1, CostModel.TILE)   # llama.cpp's CPU kernels take these cheapest
    beyond = {n_max // 2 + 1, n_max, *tiles} if n_max > CALIBRATED_UP_TO else set()
    return sorted(every | beyond)


def _repeat(tokens: Sequence[int], n: int) -> list[int]:
    tokens = list(tokens) or [0]
    return (tokens * (n // len(tokens) + 1))[:n]


def round_robin_medians(session: Session, prefix: list[int], batches: list[list[int]], repeats: int,
                         progress: Callable[[str], None] | None, label: str) -> list[float]:
    session.truncate(0)
    session.eval(prefix)
    session.eval(batches[0], all_logits=True)  # warm up
    session.truncate(len(prefix))
    times: list[list[float]] = [[] for _ in batches]
    for rep in range(repeats):
        for i, batch in enumerate(batches):
            t0 = time.perf_counter()
            session.eval(batch, all_logits=True)
            times[i].append(time.perf_counter() - t0)
            session.truncate(len(prefix))
        if progress:
            progress(f"{label}: pass {rep + 1} of {repeats}")
    return [statistics.median(t) for t in times]

