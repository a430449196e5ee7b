"""How many threads a context decodes with, learned while it answers.

A user's machine is rarely idle. llama.cpp's CPU threads meet at a barrier after every operation of
a decode and spin there, so one thread that lost its core to another program (a browser, a build)
holds up all the others: on two cores with one kept busy, two threads decode up to ten times slower
than one. On a quiet machine two are much faster than one. No fixed count is right, and the machine
changes while the app runs, so the count is learned like a step's cost is:

- each generation-sized decode (up to ``MAX_TIMED_TOKENS`` tokens) is timed and kept by thread
  count and batch size: only decodes of the same size are compared;
- now and then, a neighbour of the current count (one fewer, one more) decodes a few batches; it
  takes over when its times beat the current count's by ``WIN_MARGIN`` (median of ratios);
- a probe that loses is abandoned at its first clearly slower decode, and the next probe waits
  twice as long (up to ``MAX_INTERVAL`` decodes), so a steady machine pays well under 1%; a decode
  on trial with more threads is stopped once it takes ``GIVE_UP_RATIO`` times the current count's (``deadline``;
  app/core/llama/deadline.py), because on a machine whose cores are all busy a decode with more
  threads can take seconds where one thread takes 40 ms;
- the starting count comes from one-token decodes timed when the context is made (``start_from``),
  so that not even the first prompt is read with a count the machine cannot give;
- when the current count's own times move (the machine got busier or quieter), a probe comes at
  once and the waiting starts over.

A thread count the user gave is never changed (``ThreadTuner.fixed``).
"""

from __future__ import annotations

import math
import os
from collections import deque
from dataclasses import dataclass
from statistics import median

MAX_TIMED_TOKENS = 16     # larger decodes (a prompt) are not generation steps: not compared
HISTORY = 9               # decode times kept per (threads, batch size)
PROBE_DECODES = 3         # decodes a neighbour gets to show it is faster
WIN_MARGIN = 0.06         # a neighbour must be this much faster (median ratio below 0.94) to take over
GIVE_UP_RATIO = 1.4       # one probe decode this much slower ends the probe at once
FIRST_PROBE = 2           # decodes before the first probe: a slow start under load costs little
MIN_INTERVAL = 32         # decodes between probes after every change
MAX_INTERVAL = 1024
DRIFT_RATIO = 1.35        # the current count's times moved this much (smoothed): probe now
DRIFT_WEIGHT = 0.25       # weight of the newest decode in the smoothed drift


def machine_threads() -> int:
    """The most threads worth trying: every logical CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


@dataclass
class _Probe:
    count: int
    decodes_left: int                  # the trial ends after these, compared or not
    ratios: list[float]
    samples: list[tuple[int, float]]   # (batch size, seconds) of each decode on trial


class ThreadTuner:
    """The thread count for a context's next decode, from the times of its past decodes."""

    def __init__(self, start: int, most: int | None = None, fixed: bool = False):
        self.most = max(1, most or machine_threads())
        self.current = min(max(1, start), self.most) if not fixed else max(1, start)
        self.fixed = fixed
        self.changes = 0                  # times the count changed
        self.probes = 0                   # probes started
        self._times: dict[tuple[int, int], deque[float]] = {}
        self._probe: _Probe | None = None
        self._interval = MIN_INTERVAL
        self._until_probe = FIRST_PROBE
        self._drift = 0.0                 # smoothed log ratio of the current count's times to their median
        self._next_neighbour = -1         # try fewer threads first: the count that pays under load

    def next_count(self) -> int:
        """Threads for the next decode: the current count, or a neighbour while it is being tried."""
        return self._probe.count if self._probe else self.current

    def start_from(self, one_thread_s: float, current_s: float | None) -> None:
        """The counts' one-token times at start: one thread's, and the starting count's (None: it was
        stopped past its deadline). The faster one becomes the count."""
        if self.fixed:
            return
        self._history(1, 1).append(one_thread_s)
        if current_s is not None:
            self._history(self.current, 1).append(current_s)
        if current_s is None or one_thread_s < current_s * (1 - WIN_MARGIN):
            self.current = 1
        self._until_probe = MIN_INTERVAL   # both counts were just compared

    def deadline(self, n_tokens: int) -> float | None:
        """Seconds after which the next decode should be stopped: a decode on trial with more threads
        that takes ``GIVE_UP_RATIO`` times the current count's has lost (None: no limit). Only more
        threads can take many times longer (a thread waiting for a core holds every barrier); stopping
        a trial of fewer threads would cost its time and a decode again for nothing."""
        if not self._probe or self._probe.count < self.current:
            return None   # fewer threads than now are slower by a bounded factor: let the decode finish
        baseline = self._times.get((self.current, n_tokens))
        if baseline:
            return GIVE_UP_RATIO * median(baseline)
        # no time for this size: another size's, scaled as if each token cost a step (at most that)
        known = sorted((n, median(times)) for (threads, n), times in self._times.items()
                       if threads == self.current and times)
        return GIVE_UP_RATIO * known[0][1] * max(1.0, n_tokens / known[0][0]) if known else None

    def stopped(self) -> None:
        """The decode on trial was stopped at its deadline: the count on trial lost."""
        if self._probe:
            self._end_probe(won=False)

    def observe(self, n_tokens: int, threads: int, seconds: float) -> None:
        """A decode of ``n_tokens`` tokens took ``seconds`` with ``threads`` threads."""
        if self.fixed or not 1 <= n_tokens <= MAX_TIMED_TOKENS or seconds <= 0:
            return
        if self._probe and threads == self._probe.count:
            self._observe_probe(n_tokens, seconds)
        elif threads == self.current:
            self._observe_current(n_tokens, seconds)

    # --- the current count ------------------------------------------------------------------------

    def _observe_current(self, n_tokens: int, seconds: float) -> None:
        history = self._history(self.current, n_tokens)
        if len(history) >= 3:
            ratio = seconds / median(history)
            self._drift += DRIFT_WEIGHT * (math.log(ratio) - self._drift)
        history.append(seconds)
        if abs(self._drift) > math.log(DRIFT_RATIO):
            self._interval = MIN_INTERVAL   # the machine changed: find out now, and keep looking often
            self._until_probe = 0
            self._drift = 0.0
        self._until_probe -= 1
        if self._until_probe <= 0:
            self._start_probe()

    def _start_probe(self) -> None:
        for step in (self._next_neighbour, -self._next_neighbour):
            count = self.current + step
            if 1 <= count <= self.most:
                self._next_neighbour = -step    # alternate sides next time
                self._probe = _Probe(count, 3 * PROBE_DECODES, [], [])
                self.probes += 1
                return
        self._until_probe = MAX_INTERVAL          # a single thread is all there is

    # --- a neighbour on trial ---------------------------------------------------------------------

    def _observe_probe(self, n_tokens: int, seconds: float) -> None:
        probe = self._probe
        baseline = self._times.get((self.current, n_tokens))
        probe.samples.append((n_tokens, seconds))
        probe.decodes_left -= 1
        if baseline:
            ratio = seconds / median(baseline)
            probe.ratios.append(ratio)
            if ratio > GIVE_UP_RATIO:
                return self._end_probe(won=False)
        if len(probe.ratios) >= PROBE_DECODES:
            self._end_probe(won=median(probe.ratios) < 1 - WIN_MARGIN)
        elif probe.decodes_left <= 0:   # too few decodes of sizes the current count has times for
            self._end_probe(won=None)

    def _end_probe(self, won: bool | None) -> None:
        """``won`` None: nothing could be compared; the next probe comes after the same wait."""
        if won:   # the winner's times from before are stale: its trial starts its history
            self.current = self._probe.count
            for (threads, _), history in self._times.items():
                if threads == self.current:
                    history.clear()
            for n_tokens, seconds in self._probe.samples:
                self._history(self.current, n_tokens).append(seconds)
            self.changes += 1
            self._interval = MIN_INTERVAL
        elif won is False:
            self._interval = min(self._interval * 2, MAX_INTERVAL)
        self._probe = None
        self._until_probe = self._interval
        self._drift = 0.0

    def _history(self, threads: int, n_tokens: int) -> deque[float]:
        return self._times.setdefault((threads, n_tokens), deque(maxlen=HISTORY))
