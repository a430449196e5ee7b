"""A cost model of the user's machine: how long the main model takes to decode a batch of n tokens
and the draft model one token. ``CostModel`` learns them from the rounds as they run; a profile
stored per (models, GPU layers, threads) is only where the next start begins, and ``calibrate``
(calibration.py) measures one explicitly (``quickdraft calibrate``)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

LOOKUP_STEP_S = 5e-5  # a prompt-lookup draft token: a dictionary probe in Python
SUFFIX_STEP_S = 3e-4  # a suffix-index draft token: a few binary searches per segment (scripts/suffix_index_size.py)


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
    context_log_slope: float | None = None  # d log(batch time) / d(context in 1,000s); None: not learned
    learned_rounds: int = 0            # rounds the times were learned from (0: measured by calibrate)
    measured: list[int] | None = None  # the batch sizes measured; the others are estimates (None: all)

    @property
    def n_max(self) -> int:
        return len(self.main_batch_s)

    def main_batch(self, n: int) -> float:
        """Seconds for a main-model batch of ``n`` tokens (linear beyond what was measured)."""
        if n <= len(self.main_batch_s):
            return self.main_batch_s[n - 1]
        last = self.main_batch_s[-1]
        return last + (n - len(self.main_batch_s)) * (last / len(self.main_batch_s))

    def cheapest_batch(self, n: int, most: int | None = None) -> int:
        """The batch a verify batch of ``n`` is padded to: ``n``, or a bigger measured size that costs
        less. llama.cpp's CPU matrix kernels work on tiles of tokens, and a batch just past a tile's end
        pays for its tail rows at a worse rate: on one thread of this project's zen4 CPU a batch of 16
        cost 6.9 main steps and one of 15 cost 9.3 (32: 12.3 against 14.0 at 31; 64: 21.2 against 24.3
        at 63; scripts/data/batch-sizes-zen4-1-thread.json). The padding's rows are never read (SpeculativeGeneration._padded). A size never
        measured is not padded to: its estimate is read off its neighbours. ``most``: the biggest size
        the batch may take (the room left in the context)."""
        top = self.n_max if most is None else min(most, self.n_max)
        measured = range(n + 1, top + 1) if self.measured is None else [m for m in self.measured if n < m <= top]
        return min([n, *measured], key=lambda m: (self.main_batch(m), m))

    def padded(self) -> "CostProfile":
        """This profile as a loop that pads its verify batches pays it (``cheapest_batch``): each size
        at the least it or a bigger measured size costs (read from the biggest down)."""
        times, least = list(self.main_batch_s), math.inf
        measured = None if self.measured is None else set(self.measured)
        for n in range(self.n_max, 0, -1):
            own = times[n - 1]
            times[n - 1] = min(own, least)
            if measured is None or n in measured:
                least = min(least, own)
        return dataclasses.replace(self, main_batch_s=times)


def model_identity(path: str) -> dict:
    p = Path(path)
    stat = p.stat()
    return {"path": str(p.resolve()), "size": stat.st_size, "mtime": int(stat.st_mtime)}


def profile_key(main_path: str, main_gpu_layers: int, main_threads: int,
                draft_path: str | None, draft_gpu_layers: int, draft_threads: int, n_max: int,
                device: str = "cpu", llama_cpp_version: str = "") -> dict:
    """What a profile depends on: change any of it and the profile is measured again. The device
    counts where a GPU is used (a profile made on the CPU keeps the key it always had); the version
    of llama-cpp-python comes from app/core/llama (the only package that imports it)."""
    key = {"main": model_identity(main_path), "main_gpu_layers": main_gpu_layers, "main_threads": main_threads,
           "n_max": n_max, "llama_cpp": llama_cpp_version}
    if device != "cpu":
        key["device"] = device
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


class CostModel:
    """What a main-model batch of n tokens and a draft-model token cost on this machine now, learned
    from the rounds as they run: every round's verify batch (its size, its time and the context it
    was decoded at) and its drafting time.

        log T_main(n, context) = m[n] + c * context / 1000

    m[n] is the log time of a batch of n at no context; c is how fast every batch slows as the
    context grows (attention reads every cached position: for a 1.5B model about 5-15% more per
    1,000 tokens). A Kalman filter follows m[1..n_max] and c, each a random walk:

    - the machine's speed moves every batch size together, and fast (another program takes a core, a
      laptop goes on battery, a GPU throttles): Q_SPEED per round, common to all sizes. So timing any
      batch moves the estimate of every size. Each round takes about a third of what it saw, so
      after the machine's speed changes by a factor F the estimates come within 10% of the new truth
      in about ln(ln F / ln 1.1) / ln 1.5 rounds: 5 for F = 2, 10 with 5% round-to-round noise
      (tests/core/speculation/test_costmodel.py holds this);
    - how a batch of 9 compares to a batch of 1 changes slowly (Q_SHAPE per size); sizes close to
      each other are alike (the prior correlates them), and a size never verified is read off the
      measured sizes around it. A multiple of TILE has a shape of its own besides:
      llama.cpp's CPU kernels take it cheapest (16 tokens 6.9 steps here, 15 and 17 9.3 and 8.5), and
      the neighbours' rounds, read through the correlation alone, held a learned 16 at 8.5-8.8 steps after
      a thousand rounds, 32 at 15 (12.3), so the loop padded to them too seldom; with it a fresh data folder
      read 7.0 and 12.7 after twelve answers;
    - the context slope c barely moves (Q_CONTEXT). Within one answer a slope and a machine slowing
      down look alike; a new answer whose context is shorter or longer tells them apart.

    The draft model's step is followed apart (``observe_draft``): unknown (None) until measured.

    Started from a stored profile (``from_profile``) the estimates are where that profile left them
    but loosely held. A profile the first STALE_ROUNDS rounds contradict by more than STALE (a factor
    of 1.5 either way, the median of their times against the stored ones, so that one slow first
    decode does not count) was measured while the machine was busier or quieter than now, and then
    its shape is wrong
    too, not only its level: on a 2-core machine with one core taken, a batch of 17 cost 5 single
    steps against 8.5 quiet (steps 2.6 times as long), so the stale shape sends long drafts that lose
    (scripts/drift_bench.py's stale scenario: 0.82-0.86x on code prompts before). Such a profile is
    dropped (``stale``) and learning starts over from the prior, with the rounds seen so far, as a
    fresh install would; its draft step goes too unless measured since. Until those rounds have been
    timed the profile is ``unconfirmed``, and the policy verifies no draft: steps of the main model
    alone, which cost nothing against it and tell a stale profile before a long draft does.

    Without a profile the prior knows nothing about the machine's speed (the first round sets it)
    and takes the shape of the batch costs from ``prior_shape``: [n - 1] what a batch of n costs in
    single-token steps. The default is a CPU's (a token costs half a step more); the engine passes
    one made from the main model and where it runs (app/core/speculation/batch_prior.py: about one step on a GPU
    for a dense model, more for a mixture of experts, whose batch reads every expert its tokens are
    routed to). The policy never risks much on that guess: it verifies a size never measured only as
    a bounded probe and asks the draft model only on ``profile(unmeasured="most")``.
    """

    R = 0.02              # variance of one round's log time around the model (about 14% noise)
    Q_SPEED = R / 6       # per round, common to all sizes: a steady gain of about a third per round
    Q_SHAPE = 1e-4        # per round and size (1% drift)
    Q_CONTEXT = 1e-6
    PRIOR_STEP_S = 0.05   # a guess at a main step before the first round (any value: the first round sets it)
    PRIOR_LEVEL_SD = 3.0  # a factor of 20 either way
    PRIOR_SHAPE_SD = 0.5  # the prior's shape may be off by a factor of 1.6 (batch_prior.py's guesses: uniform
                          # routing, the per-token arithmetic, a CPU's 0.25-0.85 step per token)
    WARM_LEVEL_SD = 0.7   # a stored profile: the machine's speed may have halved or doubled since
    WARM_SHAPE_SD = 0.15
    SHAPE_LENGTH = 4.0    # sizes this far apart are correlated by 1/e in the prior
    TILE = 16             # the multiples of this are timed after answers (``unmeasured_tile``)
    TILE_SHAPE = 2.0      # and may stand off the sizes around them by this many shape deviations more
    PRIOR_CONTEXT_SLOPE = 0.05
    CONTEXT_SD = 0.05
    CLIP = math.log(2)    # one round moves a sure estimate as if it took at most twice (or half) the time
    DRAFT_GAIN = 0.25     # the draft step's estimate moves this far towards each measurement
    SURPRISE_RATE = 0.3   # how fast the recent surprise (log measured / expected) follows the rounds
    SURPRISE_LEARNING = math.log(1.1)  # learning while the recent rounds are off by more than 10%
    COLD_ROUNDS = 8       # without a stored profile: learning for at least this many rounds
    STALE = math.log(1.5)  # a stored profile this far off its first rounds was measured under other load
    STALE_ROUNDS = 3       # the rounds that may find a stored profile stale
    REFERENCE_CONTEXT = 256  # where a learned profile is stored (where calibrate measures)
    ONE_TIME_FACTOR = 1.5    # a batch this many times dearer than its tokens one by one paid for something else

    def __init__(self, key: dict, n_max: int, main_batch_s: Sequence[float] | None = None,
                 context_position: int = 0, context_slope: float | None = None,
                 draft_step_s: float | None = None, lookup_step_s: float = LOOKUP_STEP_S, learned_rounds: int = 0,
                 measured: Sequence[int] | None = None, prior_shape: Sequence[float] | None = None):
        self.key = key
        self.n_max = n_max
        self.prior_shape = tuple(prior_shape) if prior_shape else None   # None: a CPU's (see _prior_log_times)
        self.lookup_step_s = lookup_step_s
        self.draft_step_s = draft_step_s if draft_step_s else None
        self.warm = main_batch_s is not None and len(main_batch_s) > 0
        self.rounds = learned_rounds          # rounds learned from, over the profile's life
        self.rounds_now = 0                   # rounds learned from since this model was made
        self.surprise = 0.0
        self.stale = False                    # a stored profile the first rounds contradicted was dropped
        self._draft_measured = 0
        # Batches not learned from: any far slower than its tokens one by one, and on a GPU each size's first
        # decode since this model was made, which also loads that size's kernels (CUDA loads each kernel
        # at its first launch); learned, such a time makes the size look dear for good (_one_time_cost)
        self.one_time_costs = 0
        self.on_gpu = key.get("device", "cpu") != "cpu"   # profile_key names a device only for a GPU
        self._decoded: set[int] = set()
        self._first_rounds: list[tuple[int, int, float]] = []  # (n, context, seconds) of the first rounds
        self._times_at: tuple[tuple[int, int], list[float]] | None = None  # the last _times: ((context, rounds), times)
        slope = self.PRIOR_CONTEXT_SLOPE if context_slope is None else context_slope
        level_sd, shape_sd = (self.WARM_LEVEL_SD, self.WARM_SHAPE_SD) if self.warm else \
            (self.PRIOR_LEVEL_SD, self.PRIOR_SHAPE_SD)
        sizes = self._sizes = np.arange(1, n_max + 1)
        self._theta = np.append(self._prior_log_times(sizes, main_batch_s, context_position, slope), slope)
        self._stored = self._theta.copy()   # what the stored profile says, to judge the first rounds by
        distance = np.abs(sizes[:, None] - sizes[None, :])
        cov = np.zeros((n_max + 1, n_max + 1))
        cov[:n_max, :n_max] = level_sd ** 2 + shape_sd ** 2 * np.exp(-distance / self.SHAPE_LENGTH)
        tiles = np.flatnonzero(sizes % self.TILE == 0)
        cov[tiles, tiles] += (self.TILE_SHAPE * shape_sd) ** 2   # a shape of their own besides their neighbours'
        cov[n_max, n_max] = self.CONTEXT_SD ** 2
        self._cov = cov
        self._known = np.zeros(n_max + 1, dtype=bool)   # [n]: a batch of n was measured (index 0 unused)
        if self.warm:  # the sizes the stored profile measured (None: every size it has, as calibrate)
            sizes_stored = range(1, min(n_max, len(main_batch_s)) + 1) if measured is None else measured
            self._known[[n for n in sizes_stored if 1 <= n <= min(n_max, len(main_batch_s))
                         and not _one_time_cost(n, main_batch_s[n - 1], main_batch_s[0])]] = True
        self._noise = np.diag(np.append(np.full(n_max, self.Q_SHAPE), self.Q_CONTEXT))
        self._noise[:n_max, :n_max] += self.Q_SPEED

    @classmethod
    def from_profile(cls, profile: CostProfile, n_max: int | None = None,
                     prior_shape: Sequence[float] | None = None) -> "CostModel":
        """Start from a stored profile; ``prior_shape`` is where learning starts over if the profile
        turns out stale."""
        return cls(profile.key, n_max or profile.n_max, profile.main_batch_s, profile.context_position,
                   profile.context_log_slope, profile.draft_step_s or None, profile.lookup_step_s,
                   profile.learned_rounds, profile.measured, prior_shape)

    def _prior_log_times(self, sizes: np.ndarray, measured: Sequence[float] | None, position: int,
                         slope: float) -> np.ndarray:
        if not measured:
            if self.prior_shape is None:
                return np.log(self.PRIOR_STEP_S * (1.0 + 0.5 * (sizes - 1)))  # a CPU: a token costs half a step more
            shape = CostProfile(key={}, main_batch_s=[r / self.prior_shape[0] for r in self.prior_shape])
            return np.log([self.PRIOR_STEP_S * shape.main_batch(int(n)) for n in sizes])
        times = np.array([CostProfile(key={}, main_batch_s=list(measured)).main_batch(int(n)) for n in sizes])
        return np.log(times) - slope * position / 1000

    # -- reading ------------------------------------------------------------------------------------

    @property
    def context_slope(self) -> float:
        return float(self._theta[-1])

    def main_batch(self, n: int, context: int = 0) -> float:
        """Seconds for a main-model batch of ``n`` tokens after ``context`` cached positions."""
        return self.profile(context).main_batch(n)

    def _times(self, context: int) -> list[float]:
        """Every size's estimate at ``context``. A size never measured is read off the measured ones
        around it: interpolated between two, or beyond the largest continued at the slope of the
        last two (never cheaper). Before two sizes are measured, the prior's shape stands. Kept until
        the next round is learned: the policy reads the estimates three ways after every round."""
        if self._times_at is not None and self._times_at[0] == (context, self.rounds):
            return list(self._times_at[1])
        times = self._estimated_times(context)
        self._times_at = ((context, self.rounds), times)
        return list(times)

    def _estimated_times(self, context: int) -> list[float]:
        times = np.exp(self._theta[:self.n_max] + self.context_slope * context / 1000)
        at = np.flatnonzero(self._known[1:]) + 1   # the measured sizes
        if len(at) < 2 or len(at) == self.n_max:
            return times.tolist()
        sizes = self._sizes
        inside = np.interp(sizes, at, times[at - 1])
        slope = max(0.0, (times[at[-1] - 1] - times[at[-2] - 1]) / (at[-1] - at[-2]))
        beyond = times[at[-1] - 1] + slope * (sizes - at[-1])
        filled = np.where(sizes > at[-1], beyond, inside)
        return np.where(self._known[1:], times, filled).tolist()

    def unmeasured_tile(self) -> int | None:
        """The smallest multiple of TILE never measured (None: every one is), which is timed after an
        answer (pair_costs.py): the rounds time only the sizes the policy drafts, and a verify batch is
        padded only to a measured size (``CostProfile.cheapest_batch``)."""
        return next((n for n in range(self.TILE, self.n_max + 1, self.TILE) if not self._known[n]), None)

    def known(self, n: int) -> bool:
        """Whether a main-model batch of ``n`` was measured (here or in the stored profile)."""
        return n <= self.n_max and bool(self._known[n])

    @property
    def unconfirmed(self) -> bool:
        """A stored profile no round has timed yet: it may be stale (see the class notes)."""
        return self.warm and self.rounds_now < self.STALE_ROUNDS

    @property
    def learning(self) -> bool:
        """Still learning: a cold start's first rounds, or recent rounds off what was expected."""
        return (not self.warm and self.rounds < self.COLD_ROUNDS) or abs(self.surprise) > self.SURPRISE_LEARNING

    def profile(self, context: int = REFERENCE_CONTEXT, unmeasured: str = "estimate") -> CostProfile:
        """The estimates as a profile at ``context``: what the policy decides with, and what is stored.
        ``unmeasured``: what a size never measured costs in it: "estimate", read off the measured sizes
        around it; "most", a smaller size measured plus one step per extra token, the least of those
        (llama.cpp could decode the batch in those pieces: a size timed slow by a burst of load does
        not make every bigger one look dear); "least", what the largest smaller size measured costs
        (a bigger batch never costs less)."""
        times = self._times(context)
        if unmeasured == "most":
            times = self._most(times)
        elif unmeasured == "least":
            times = self._least(times)
        return CostProfile(key=self.key, main_batch_s=times,
                           draft_step_s=self.draft_step_s or 0.0, lookup_step_s=self.lookup_step_s,
                           context_position=context, context_log_slope=self.context_slope,
                           learned_rounds=self.rounds, measured=[n for n in range(1, self.n_max + 1) if self._known[n]])

    def _most(self, times: list[float]) -> list[float]:
        out, step = list(times), times[0]
        cheapest = 0.0   # the least of T(m) - m steps over the sizes m measured so far (m = 1: 0)
        for n in range(2, self.n_max + 1):
            if self._known[n]:
                cheapest = min(cheapest, times[n - 1] - n * step)
            else:
                out[n - 1] = cheapest + n * step
        return out

    def _least(self, times: list[float]) -> list[float]:
        out, measured = list(times), 1
        for n in range(2, self.n_max + 1):
            if self._known[n]:
                measured = n
            else:
                out[n - 1] = times[measured - 1]
        return out

    # -- learning -----------------------------------------------------------------------------------

    def observe_main(self, n: int, context: int, seconds: float) -> None:
        """A main-model batch of ``n`` tokens after ``context`` cached positions took ``seconds``."""
        if not 1 <= n <= self.n_max or not seconds > 0:
            return
        first_here = self.on_gpu and n not in self._decoded
        self._decoded.add(n)
        step = math.exp(float(self._theta[0]) + self.context_slope * context / 1000)   # a batch of 1 here
        if first_here or (n > 1 and self._known[1] and _one_time_cost(n, seconds, step)):
            self.one_time_costs += 1
            return
        size, x = n - 1, context / 1000   # the observation reads m[n] + c * x
        self._cov += self._noise
        covariance = self._cov[:, size] + x * self._cov[:, -1]
        spread = float(covariance[size] + x * covariance[-1]) + self.R
        error = math.log(seconds) - float(self._theta[size] + x * self._theta[-1])
        limit = max(self.CLIP, 3 * math.sqrt(spread))  # an unsure estimate takes the whole surprise
        error = min(limit, max(-limit, error))
        self._theta += covariance * (error / spread)
        self._cov -= np.outer(covariance, covariance) / spread
        self._known[n] = True
        self.surprise += self.SURPRISE_RATE * (error - self.surprise) if self.rounds_now else error - self.surprise
        self.rounds += 1
        self.rounds_now += 1
        if self.warm and self.rounds_now <= self.STALE_ROUNDS:
            self._first_rounds.append((n, context, seconds))
            if self.rounds_now == self.STALE_ROUNDS and abs(self._off_stored()) > self.STALE:
                self._start_over()

    def _off_stored(self) -> float:
        """The median over the first rounds of log(measured / what the stored profile said)."""
        return statistics.median(math.log(seconds) - float(self._stored[n - 1] + context / 1000 * self._stored[-1])
                                 for n, context, seconds in self._first_rounds)

    def _start_over(self) -> None:
        """Drop the stored profile the first rounds contradicted: learn from the prior and those rounds."""
        fresh = CostModel(self.key, self.n_max, draft_step_s=self.draft_step_s if self._draft_measured else None,
                          lookup_step_s=self.lookup_step_s, prior_shape=self.prior_shape)
        fresh._draft_measured = self._draft_measured
        fresh._decoded = self._decoded   # the first rounds' sizes are decoded already: learned again
        for n, context, seconds in self._first_rounds:
            fresh.observe_main(n, context, seconds)
        self.__dict__.update(fresh.__dict__)
        self.stale = True

    def observe_draft(self, steps: float, seconds: float) -> None:
        """The draft model took ``seconds`` for work worth ``steps`` single-token steps."""
        if not steps > 0 or not seconds > 0:
            return
        measured = seconds / steps
        if self.draft_step_s is None:
            self.draft_step_s = measured
        else:
            gain = max(self.DRAFT_GAIN, 1.0 / (1 + self._draft_measured))
            error = min(self.CLIP, max(-self.CLIP, math.log(measured / self.draft_step_s)))
            self.draft_step_s *= math.exp(gain * error)
        self._draft_measured += 1


def _one_time_cost(n: int, seconds: float, step: float) -> bool:
    """Whether a batch of ``n`` took CostModel.ONE_TIME_FACTOR times longer than its tokens would decoding
    one by one: the time paid for something else once, a GPU's first launch of the kernels for that batch
    size (CUDA loads each kernel lazily) or a burst of load. Learned, it made the size look dear for good:
    the policy never verifies a size it finds dear again and probes a bigger one only at a step a token,
    so nothing more was drafted in that run (a first batch of 2 at six steps). Not learned, the size
    stays a probe and is tried again at its steady cost.

    The bound is not one by one itself: a verify batch needs every row's logits, and on one thread of
    this project's CPU the output projection over Qwen's vocabulary makes a batch of 9 cost 9.2 steps.
    Refused over one by one, only a size's fast rounds were learned, so copies of a few tokens looked
    cheaper than they are, and a stored size learned a little over one by one came back unmeasured at the
    next start (the measurements and replays: docs/architecture.md, section 4)."""
    return seconds > CostModel.ONE_TIME_FACTOR * n * step
