"""A cost model of the user's machine: how long the main model takes to decode a batch of n tokens
and the draft model one token, measured once per (models, GPU layers, threads) and stored."""

from __future__ import annotations

import hashlib
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from .lm import Session

LOOKUP_STEP_S = 5e-5  # a prompt-lookup draft token: a dictionary probe in Python
CALIBRATION_TEXT = (
    "The quick brown fox jumps over the lazy dog while the programmer writes a function that merges "
    "sorted lists, checks its edge cases, and explains each step in plain words for the reader. "
)


@dataclass
class CostProfile:
    key: dict
    main_batch_s: list[float]          # [i] = seconds to decode a batch of i + 1 tokens
    draft_step_s: float = 0.0          # one draft-model token; 0 without a draft model
    lookup_step_s: float = LOOKUP_STEP_S
    context_position: int = 0
    measured_at: str = ""
    seconds: float = 0.0               # how long the calibration took
    notes: dict = field(default_factory=dict)

    @property
    def n_max(self) -> int:
        return len(self.main_batch_s)

    def main_batch(self, n: int) -> float:
        """Seconds for a main-model batch of ``n`` tokens (linear beyond what was measured)."""
        if n <= len(self.main_batch_s):
            return self.main_batch_s[n - 1]
        last = self.main_batch_s[-1]
        return last + (n - len(self.main_batch_s)) * (last / len(self.main_batch_s))

    def verify_ratios(self) -> list[float]:
        return [t / self.main_batch_s[0] for t in self.main_batch_s]


def model_identity(path: str) -> dict:
    p = Path(path)
    stat = p.stat()
    return {"path": str(p.resolve()), "size": stat.st_size, "mtime": int(stat.st_mtime)}


def profile_key(main_path: str, main_gpu_layers: int, main_threads: int,
                draft_path: str | None, draft_gpu_layers: int, draft_threads: int, n_max: int) -> dict:
    """What a profile depends on: change any of it and the profile is measured again."""
    import llama_cpp

    key = {"main": model_identity(main_path), "main_gpu_layers": main_gpu_layers, "main_threads": main_threads,
           "n_max": n_max, "llama_cpp": llama_cpp.__version__}
    if draft_path:
        key.update(draft=model_identity(draft_path), draft_gpu_layers=draft_gpu_layers, draft_threads=draft_threads)
    return key


class ProfileStore:
    """Profiles as JSON files under the cache dir, one per key."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def path_for(self, key: dict) -> Path:
        digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
        return self.directory / f"profile-{digest}.json"

    def load(self, key: dict) -> CostProfile | None:
        path = self.path_for(key)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            profile = CostProfile(**data)
        except (OSError, ValueError, TypeError):
            return None
        return profile if profile.key == key else None

    def save(self, profile: CostProfile) -> Path:
        path = self.path_for(profile.key)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(profile), indent=2), encoding="utf-8")
        tmp.replace(path)
        return path


def calibrate(main: Session, draft: Session | None, key: dict, n_max: int, filler: Sequence[int],
              repeats: int = 3, context_tokens: int = 256,
              progress: Callable[[str], None] | None = None) -> CostProfile:
    """Measure the main model's batch times for n = 1..n_max and the draft's step time at a
    realistic context position. Sizes are measured round-robin, ``repeats`` times, and each keeps
    its median, so a burst of load elsewhere on the machine does not land on one size only.
    Leaves both caches empty."""
    started = time.perf_counter()
    prefix = _repeat(filler, min(context_tokens, main.n_ctx - n_max - 1))
    batches = [_repeat(filler[::-1], n) for n in range(1, n_max + 1)]
    main_times = round_robin_medians(main, prefix, batches, repeats, progress, "main model")
    draft_time = 0.0
    if draft is not None:
        draft_prefix = _repeat(filler, min(context_tokens, draft.n_ctx - 2))
        draft_time = round_robin_medians(draft, draft_prefix, [filler[:1]], repeats + 2, progress, "draft model")[0]
    for session in (main, draft):
        if session is not None:
            session.truncate(0)
    return CostProfile(key=key, main_batch_s=_monotone(main_times), draft_step_s=draft_time,
                       context_position=len(prefix), measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                       seconds=time.perf_counter() - started, notes={"raw_main_batch_s": main_times})


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


def _monotone(times: list[float]) -> list[float]:
    """A bigger batch never costs less than a smaller one: a size measured slow by a burst of
    load is lowered to what a bigger batch took."""
    out = list(times)
    for i in range(len(out) - 2, -1, -1):
        out[i] = min(out[i], out[i + 1])
    return out
