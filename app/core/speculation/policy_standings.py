"""Which drafters the auto policy asks: each drafter's standing, kept from what its rounds saved or lost
against the main model alone (policy.py decides lengths and works out the savings)."""

from __future__ import annotations

from collections import defaultdict
from typing import Hashable

from app.core.speculation.acceptance import DRAFT_MODELS


class DrafterStandings:
    """A drafter whose recent rounds lost time sits out a while, and a draft model that lost too much
    stops for the rest of the answer.

    Each drafter keeps a balance of the seconds its recent rounds saved. While it is negative the
    drafter sits out 1, 2, 4 ... MAX_BACKOFF rounds between probes: the wait doubles after each losing
    round and stays after a paying one, so a single lucky round does not send a mostly losing drafter
    back to probing every other round. A draft model below PARK_STEPS main steps is parked: every probe
    would first feed it the tokens it skipped, so probing again within the answer cannot pay. It
    probes again with the next answer, whose prompt it reads in the prompt phase.

    A standing is kept under any key: a drafter's name, or for prompt lookup one key per kind of
    match (policy.py: where it was found and how long it is). Lookup costs nothing to draft, only a
    failed verification costs, so what a 2-token match lost says nothing of a 16-token copy of the
    prompt; one standing for all of lookup sat it out through the long copies of an edit that
    followed a few losing short matches (issue 43: 9 tokens drafted in a 128-token rewrite).

    Losses within ``forgiven`` main steps of balance do not make a drafter sit out: the policy
    forgives them where misses are cheap and sitting out gains nothing (policy.py: lookup with no
    draft model to take its rounds). Where a batch costs about one step, as on a GPU, a wrong draft
    costs a small part of a step, and its short matches, sat out after every small loss, were lost
    with the copies that followed them.
    """

    MAX_BACKOFF = 64
    BALANCE_DECAY = 0.8  # the balance follows the last few rounds: the text changes as it goes
    PARK_STEPS = 2.0

    def __init__(self):
        self._backoff: dict[Hashable, int] = defaultdict(int)  # rounds a drafter sits out after losing
        self._wait: dict[Hashable, int] = defaultdict(int)
        self._balance: dict[Hashable, float] = defaultdict(float)  # seconds saved by its recent rounds
        self.model_parked = False

    def park_model(self) -> None:
        """The draft model stops for the rest of the answer."""
        self.model_parked = True

    def sits_out(self, source: Hashable) -> bool:
        """Whether ``source`` sits out this round (counting the round off its wait)."""
        if self._wait[source] > 0:
            self._wait[source] -= 1
            return True
        return False

    def settle(self, source: Hashable, saved: float, step: float, forgiven: float = 0.0) -> None:
        """A round of ``source`` saved ``saved`` seconds (negative: lost) against the main model alone,
        whose step takes ``step``; a balance down by at most ``forgiven`` steps sits nothing out."""
        self._balance[source] = self._balance[source] * self.BALANCE_DECAY + saved
        if source in DRAFT_MODELS and self._balance[source] < -self.PARK_STEPS * step:
            self.park_model()
        if self._balance[source] >= -forgiven * step:
            self._backoff[source] = 0
            return
        if saved < 0:
            self._backoff[source] = min(self.MAX_BACKOFF, max(1, self._backoff[source] * 2))
        self._wait[source] = max(1, self._backoff[source])
