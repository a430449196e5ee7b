"""How many tokens to draft next.

A drafter asks the policy, token by token, whether to go on (``step``); after drafting the policy may
cut the draft (``cut``); after verification it learns what was accepted (``observe``).
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Protocol

from .params import SpeculationParams

if TYPE_CHECKING:
    from .costmodel import CostProfile
    from .drafters import Draft

MODEL = "model"
LOOKUP = "lookup"


class Decision(Enum):
    STOP = "stop"   # drop this token and stop drafting
    LAST = "last"   # keep this token, then stop (saves the draft step that would follow it)
    MORE = "more"   # keep this token and draft another


class DraftPolicy(Protocol):
    def may_draft(self, source: str) -> bool:
        """Whether a drafter of kind ``source`` may ever be asked (so it should read the prompt)."""
    def draft_length(self, source: str) -> int:
        """The most tokens a drafter of kind ``source`` may draft this round (0: do not draft)."""

    def step(self, n: int, score: float, source: str) -> Decision:
        """Token ``n`` (0-based) of this round's draft has ``score``: the draft model's top
        probability, or the length of the prompt-lookup match."""

    def cut(self, draft: "Draft") -> int:
        """How many of the drafted tokens to send for verification."""

    def observe(self, draft: "Draft", accepted: int, draft_s: float | None = None) -> None:
        """Verification accepted the first ``accepted`` tokens of ``draft``; drafting took
        ``draft_s`` seconds (None: not measured)."""


class FixedPolicy:
    """Always draft ``draft_max`` tokens (llama.cpp's --draft-max)."""

    def __init__(self, params: SpeculationParams):
        self.params = params

    def may_draft(self, source: str) -> bool:
        return self.params.draft_max > 0

    def draft_length(self, source: str) -> int:
        return self.params.draft_max

    def step(self, n: int, score: float, source: str) -> Decision:
        return Decision.MORE if n + 1 < self.params.draft_max else Decision.LAST

    def cut(self, draft: "Draft") -> int:
        return len(draft)

    def observe(self, draft: "Draft", accepted: int, draft_s: float | None = None) -> None:
        pass


class ConfidencePolicy(FixedPolicy):
    """Up to ``draft_max`` tokens, stopping where the draft model's top probability falls below
    ``p_min`` (llama.cpp's --draft-p-min)."""

    def step(self, n: int, score: float, source: str) -> Decision:
        if source == MODEL and score < self.params.p_min:
            return Decision.STOP
        return super().step(n, score, source)


class AcceptanceModel:
    """The chance that a drafted token is accepted, learned online.

    Draft-model tokens are bucketed by the draft's own top probability, which is the prior: a draft
    that is over-confident here is corrected by what verification actually accepts. Prompt-lookup
    tokens are bucketed by the length of the match they continue (a long match means the answer is
    copying a passage verbatim), the first token of a draft apart from the ones that follow an
    accepted one (a copy that has started tends to go on). Counts decay, so the model follows the
    conversation as the text changes; the engine keeps one model across a conversation's messages.
    """

    PRIOR_WEIGHT = 6.0
    DECAY = 0.995
    OPTIMISM = 0.5  # standard deviations: an untried bucket gets some benefit of the doubt
    # match-length buckets and the prior chance of the first copied token, then of the next ones
    LOOKUP_BUCKETS = (1, 2, 3, 4, 6, 9, 13)
    LOOKUP_PRIOR = {1: 0.2, 2: 0.35, 3: 0.45, 4: 0.55, 6: 0.65, 9: 0.75, 13: 0.8}
    LOOKUP_NEXT_PRIOR = {1: 0.6, 2: 0.7, 3: 0.75, 4: 0.8, 6: 0.85, 9: 0.9, 13: 0.9}

    def __init__(self) -> None:
        self._counts: dict[tuple, list[float]] = {}

    @staticmethod
    def bucket(source: str, n: int, score: float) -> tuple:
        if source == LOOKUP:
            length = max(b for b in AcceptanceModel.LOOKUP_BUCKETS if b <= max(1, int(score)))
            return (LOOKUP, "next" if n > 0 else "first", length)
        return (MODEL, min(9, int(score * 10)))

    def prior(self, key: tuple) -> float:
        if key[0] == LOOKUP:
            return (self.LOOKUP_NEXT_PRIOR if key[1] == "next" else self.LOOKUP_PRIOR)[key[2]]
        return (key[1] + 0.5) / 10

    def chance(self, source: str, n: int, score: float) -> float:
        """An optimistic estimate: the posterior mean plus half a standard deviation, so a bucket is
        tried until the evidence says it does not pay (exploring costs little: a round)."""
        key = self.bucket(source, n, score)
        accepted, tried = self._counts.get(key, (0.0, 0.0))
        weight = tried + self.PRIOR_WEIGHT
        mean = (accepted + self.PRIOR_WEIGHT * self.prior(key)) / weight
        return min(1.0, mean + self.OPTIMISM * (mean * (1.0 - mean) / weight) ** 0.5)

    def update(self, source: str, n: int, score: float, accepted: bool) -> None:
        counts = self._counts.setdefault(self.bucket(source, n, score), [0.0, 0.0])
        counts[0] = counts[0] * self.DECAY + accepted
        counts[1] = counts[1] * self.DECAY + 1.0


class AutoPolicy:
    """Draft as many tokens as maximise the expected speed on this machine.

    The expected speed of a round that drafts L tokens is
        (1 + a1 + a1*a2 + ... + a1*...*aL) / (draft time + T_main(L + 1)),
    where ai is the chance that token i is accepted given the ones before it were, and T_main(n)
    is the measured time of a main-model batch of n tokens. Each drafted token is kept while some
    longer draft could still beat the best length so far (looking ahead to the longest allowed
    draft, assuming the next tokens come with the same score: the profile can be jumpy, e.g. a
    batch of 16 may cost what a batch of 9 does when llama.cpp switches kernels); the draft is then
    cut to the best length, which may be 0: the main model decodes alone.

    A draft model that cannot pay on this machine even when always right is never asked. Each
    drafter keeps a balance of the time its recent rounds saved (or lost) against the main model
    alone; while it is negative the drafter sits out 1, 2, 4, ... 64 rounds between probes. A draft
    model whose balance falls below PARK_STEPS main steps stops for the rest of this answer: every
    probe first has to feed it the tokens it skipped (on a 2-core CPU that catch-up alone costs a
    tenth of a main step per token, whenever it probes), so probing again within the answer cannot
    pay. It probes again with the next answer, whose prompt it reads in the prompt phase.
    """

    MAX_BACKOFF = 64
    BALANCE_DECAY = 0.8  # the balance follows the last few rounds: the text changes as it goes
    PARK_STEPS = 2.0

    def __init__(self, params: SpeculationParams, profile: "CostProfile",
                 acceptance: AcceptanceModel | None = None):
        self.params = params
        self.profile = profile
        self.acceptance = acceptance or AcceptanceModel()
        self.max_len = max(0, min(params.draft_max, profile.n_max - 1))
        self._chain: list[float] = []          # this round's acceptance chances
        self._chain_cost: list[float] = []     # and the cost of drafting each token
        self._backoff = {MODEL: 0, LOOKUP: 0}  # rounds a drafter sits out after a losing round
        self._wait = {MODEL: 0, LOOKUP: 0}
        self._balance = {MODEL: 0.0, LOOKUP: 0.0}  # seconds saved by a drafter's recent rounds
        self._model_parked = False
        self._round_source: str | None = None
        self._model_can_pay = profile.draft_step_s > 0 and self._best_length([1.0] * self.max_len,
                                                                             profile.draft_step_s) > 0

    # -- the speed of a draft ---------------------------------------------------------------------

    def token_cost(self, source: str) -> float:
        return self.profile.draft_step_s if source == MODEL else self.profile.lookup_step_s

    def expected_speed(self, chances: list[float], costs: list[float], length: int,
                       sunk: float | None = None) -> float:
        """Expected tokens per second of a round that verifies the first ``length`` tokens.
        ``sunk``: drafting time already spent whatever the length (defaults to the length's own)."""
        expected, run = 1.0, 1.0
        for a in chances[:length]:
            run *= a
            expected += run
        draft_time = sum(costs[:length]) if sunk is None else sunk
        return expected / (draft_time + self.profile.main_batch(length + 1))

    def _best_length(self, chances: list[float], cost: float) -> int:
        costs = [cost] * len(chances)
        speeds = [self.expected_speed(chances, costs, n) for n in range(len(chances) + 1)]
        return max(range(len(speeds)), key=speeds.__getitem__)

    # -- the policy protocol ----------------------------------------------------------------------

    def may_draft(self, source: str) -> bool:
        return self.max_len > 0 and (source != MODEL or self._model_can_pay)

    def draft_length(self, source: str) -> int:
        self._chain, self._chain_cost = [], []
        if source == MODEL and (self._model_parked or not self._model_can_pay):
            return 0
        if self._wait[source] > 0:
            self._wait[source] -= 1
            return 0
        self._round_source = source
        return self.max_len

    def step(self, n: int, score: float, source: str) -> Decision:
        a = self.acceptance.chance(source, n, score)
        self._chain.append(a)
        self._chain_cost.append(self.token_cost(source))
        sunk = sum(self._chain_cost)  # this token's logits are paid for
        best_now = max(self.expected_speed(self._chain, self._chain_cost, k, sunk) for k in range(n + 1))
        with_token = self.expected_speed(self._chain, self._chain_cost, n + 1, sunk)
        future = self._optimistic_future(n, score, source)
        if with_token <= best_now and future <= best_now:
            return Decision.STOP
        if n + 1 >= self.max_len or future <= max(best_now, with_token):
            return Decision.LAST
        return Decision.MORE

    def _optimistic_future(self, n: int, score: float, source: str) -> float:
        """The best speed reachable by drafting more tokens, assuming they come with the same score
        (for lookup: a copy that goes on)."""
        best = 0.0
        chances, costs = list(self._chain), list(self._chain_cost)
        for m in range(n + 1, self.max_len):
            chances.append(self.acceptance.chance(source, m, score))
            costs.append(self.token_cost(source))
            best = max(best, self.expected_speed(chances, costs, len(chances)))
        return best

    def cut(self, draft: "Draft") -> int:
        if not draft.tokens:
            return 0
        chances = [self.acceptance.chance(s, i, x) for i, (s, x) in enumerate(zip(draft.sources, draft.scores))]
        costs = [self.token_cost(s) for s in draft.sources]
        sunk = sum(costs)
        return max(range(len(chances) + 1), key=lambda k: self.expected_speed(chances, costs, k, sunk))

    def observe(self, draft: "Draft", accepted: int, draft_s: float | None = None) -> None:
        for i in range(min(accepted + 1, len(draft))):  # tokens after the first rejection say nothing
            self.acceptance.update(draft.sources[i], i, draft.scores[i], i < accepted)
        if self._round_source is not None:
            spent = sum(self._chain_cost) if draft_s is None else draft_s
            self._learn_whether_drafting_pays(self._round_source, len(draft), accepted, spent)
        self._round_source = None

    def _learn_whether_drafting_pays(self, source: str, verified: int, accepted: int, spent: float) -> None:
        """Keep the drafter's balance: what its round saved against the main model alone, which
        would have taken one step per token. ``spent`` is the drafting time, measured when the loop
        measures it: a draft model's catch-up on skipped tokens and the step that found its next
        token not worth drafting cost time even when the draft is cut to nothing.

        A negative balance puts the drafter out for a while: the wait doubles after each losing
        round (up to MAX_BACKOFF) and stays after a paying one; a balance back above zero ends it.
        A single lucky round must not reset it, or a draft model that mostly loses (chat text on a
        CPU) keeps probing every other round, and every probe costs a draft step."""
        if verified == 0 and source == LOOKUP:
            return  # lookup proposed nothing: it cost nothing
        step = self.profile.main_batch(1)
        saved = (accepted + 1) * step - (spent + self.profile.main_batch(verified + 1))
        self._balance[source] = self._balance[source] * self.BALANCE_DECAY + saved
        if source == MODEL and self._balance[source] < -self.PARK_STEPS * step:
            self._model_parked = True
        if self._balance[source] >= 0:
            self._backoff[source] = 0
            return
        if saved < 0:
            self._backoff[source] = min(self.MAX_BACKOFF, max(1, self._backoff[source] * 2))
        self._wait[source] = max(1, self._backoff[source])


def make_policy(params: SpeculationParams, profile: "CostProfile | None" = None,
                acceptance: AcceptanceModel | None = None) -> DraftPolicy:
    if params.policy == "fixed":
        return FixedPolicy(params) if params.p_min <= 0 else ConfidencePolicy(params)
    if params.policy == "pmin":
        return ConfidencePolicy(params)
    if params.policy == "auto":
        if profile is None:
            raise ValueError("the auto policy needs a cost profile (calibrate first)")
        return AutoPolicy(params, profile, acceptance)
    raise ValueError(f"unknown draft policy {params.policy!r} (choose auto, fixed or pmin)")
