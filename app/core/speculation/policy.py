"""How many tokens to draft next, by what this machine's batches cost: the auto policy (the default),
and ``make_policy``, which builds the policy a SpeculationParams names (policy_base.py holds the
protocol every policy follows, and the fixed and p-min policies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from app.core.params import PolicyName, SpeculationParams
from app.core.speculation.acceptance import CROSS, DRAFT_MODELS, LOOKUP, MODEL, MTP, AcceptanceModel, Score
from app.core.speculation.costmodel import CostModel, CostProfile
from app.core.speculation.draft import Draft
from app.core.speculation.policy_base import Decision, DraftPolicy, FixedPolicy, below_p_min


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
    pay. For the same reason it stops once it is so far behind that reading the skipped tokens
    would cost more than its best round can save. It probes again with the next answer, whose
    prompt it reads in the prompt phase.

    The draft model is not even asked while the main model's recent confidence (its top probability
    for the last few tokens it chose, which costs nothing to read off the verified rows) is below the
    acceptance at which drafting breaks even on this machine: a small draft model agrees with the
    main one about as often as the main one is sure (on the benchmark prompts the two rates differ by
    0.00-0.05 per answer), so a round asked where the main model hesitates pays for the draft
    model's catch-up and step to learn what the main model's doubt already said.

    The costs are a CostModel's estimates at the current context, which every round's measured times
    correct (``observe`` with ``verify_s``): the policy starts from a stored profile, or from a prior
    that cannot lose. Given a CostProfile instead, the costs are fixed (a replay, a test). A draft model
    of another vocabulary (CROSS) is weighed as a draft model: its step, learned from its rounds' times,
    includes turning its tokens into text and the main model's tokens; its acceptance is learned apart. Without a measured draft step the draft model is never asked (the engine
    times one step after the first answer that could have used it). A batch size never measured is
    verified only as a bounded probe: see ``_may_verify``.
    """

    MAX_BACKOFF = 64
    BALANCE_DECAY = 0.8  # the balance follows the last few rounds: the text changes as it goes
    PARK_STEPS = 2.0
    CONFIDENCE_DECAY = 0.7  # the main model's recent confidence: each new token weighs 30%
    PROBE_LOSS = 0.5     # main steps a round verifying a never-measured batch size may be expected to lose
    MTP_PRIOR_STEPS = 0.25  # an MTP token's cost in main steps until it is timed
    REDERIVE = 0.02      # what follows from the costs is worked out again when an estimate moves 2%

    def __init__(self, params: SpeculationParams, costs: "CostModel | CostProfile",
                 acceptance: AcceptanceModel | None = None):
        self.params = params
        self.learns = isinstance(costs, CostModel)
        self.costs = costs if self.learns else CostModel.from_profile(costs)
        self.acceptance = acceptance or AcceptanceModel()
        self.max_len = max(0, min(params.draft_max, self.costs.n_max - 1))
        self._chain: list[float] = []          # this round's acceptance chances
        self._chain_cost: list[float] = []     # and the cost of drafting each token
        self._backoff = dict.fromkeys((MODEL, CROSS, LOOKUP, MTP), 0)  # rounds a drafter sits out after losing
        self._wait = dict.fromkeys((MODEL, CROSS, LOOKUP, MTP), 0)
        self._balance = dict.fromkeys((MODEL, CROSS, LOOKUP, MTP), 0.0)  # seconds saved by its recent rounds
        self._mtp_step_s: float | None = None  # one MTP token, learned from this answer's MTP rounds
        self._model_parked = False
        self._model_in_play = False            # a draft model drafter asked may_draft
        self._round_source: str | None = None
        self._behind = 0                       # tokens the draft model read before this round's draft
        self._more = 0                         # draft-model steps after the first, this round
        self._main_confidence: float | None = None  # unknown until the first round is verified
        self._context = 0
        self._derived_from: CostProfile | None = None
        self._derived: _ModelTerms | None = None
        self.cost_rounds_observed = 0                # rounds whose times the cost model learned from
        self._refresh()

    # -- the costs ----------------------------------------------------------------------------------

    @property
    def learning(self) -> bool:
        return self.learns and self.costs.learning

    def _refresh(self) -> None:
        """Forget what was read off the cost model at the last context: its three readings
        (``profile``, ``bounded``, ``hopeful``) and what follows for the draft model are worked out
        again when first needed. A lookup draft that stops at its first token reads one (``hopeful``);
        a round where lookup finds nothing and no draft model is in play reads none. Reading all
        three after every round took 0.1 ms on a 2-core CPU (right after a decode, the caches hold
        the model's weights, not this code): a third of a percent of a 27 ms step."""
        self._read: dict[str, CostProfile] = {}
        self._model_terms: _ModelTerms | None = None

    def _reading(self, unmeasured: str) -> CostProfile:
        profile = self._read.get(unmeasured)
        if profile is None:
            profile = self._read[unmeasured] = self.costs.profile(self._context, unmeasured=unmeasured)
        return profile

    @property
    def profile(self) -> CostProfile:
        """The cost model's estimates at the current context."""
        return self._reading("estimate")

    @property
    def bounded(self) -> CostProfile:
        """The estimates, with a size never measured at the most it can cost (see ``_may_verify``)."""
        return self._reading("most")

    @property
    def hopeful(self) -> CostProfile:
        """The estimates, with a size never measured at the least it can cost (see ``_batch_costs``)."""
        return self._reading("least")

    @property
    def _model(self) -> "_ModelTerms":
        """What the costs say of the draft model: whether it can pay at all, its break-even acceptance;
        that takes a bisection, so it is worked out again only when an estimate has moved."""
        if self._model_terms is None:
            self._model_terms = self._model_terms_now()
        return self._model_terms

    def _model_terms_now(self) -> "_ModelTerms":
        if not self.costs.draft_step_s:
            return _ModelTerms(can_pay=False, break_even=2.0, best_gain_s=0.0, catch_up_s=0.0)
        # Whether the draft model may be asked is decided on the most the batches can cost: a cold
        # start does not feed it the prompt (a third of the prompt phase again) on the prior's word.
        bounded = self.bounded
        if self._derived_from is not None and _within(self._derived_from, bounded, self.REDERIVE):
            return self._derived
        draft = bounded.draft_step_s
        best_if_right = self._best_length([1.0] * self.max_len, draft, bounded)
        can_pay = best_if_right > 0
        self._derived_from, self._derived = bounded, _ModelTerms(
            can_pay=can_pay,
            break_even=self._break_even_acceptance(draft, bounded) if can_pay else 2.0,
            best_gain_s=self._round_gain(best_if_right, draft, bounded),
            # the draft model reads skipped tokens in one batch: assume it batches as well as the main one
            catch_up_s=draft * self._catch_up_ratio())
        return self._derived

    def _catch_up_ratio(self) -> float:
        """What reading one skipped token costs the draft model, in its steps."""
        return self.profile.main_batch(self.profile.n_max) / self.profile.n_max / self.profile.main_batch(1)

    def _may_verify(self, length: int, chances: Sequence[float]) -> bool:
        """Whether a draft of ``length`` tokens may be verified. A batch size never measured is a
        probe, allowed when the round is expected to lose at most PROBE_LOSS main steps against the
        main model alone even at the most the batch can cost: what a smaller size measured costs
        plus one step per extra token, the least of those (llama.cpp could decode the batch in
        those pieces; see ``CostModel.profile``). Each
        size is probed until it is measured once, so probing costs at most (n_max - 1) * PROBE_LOSS
        main steps in expectation over a profile's life (a stored profile keeps the sizes it
        measured). Which allowed size a lookup draft is cut to weighs the unmeasured ones at the
        least they can cost (``_batch_costs``), so each is tried where it could pay."""
        n = length + 1
        if n == 1 or self.costs.known(n):
            return True
        step, worst = self.bounded.main_batch(1), self.bounded.main_batch(n)
        return worst - expected_tokens(chances[:length])[-1] * step <= self.PROBE_LOSS * step

    # -- the speed of a draft ---------------------------------------------------------------------

    def _batch_costs(self, source: str) -> CostProfile:
        """The batch costs a draft from ``source`` is weighed with. A lookup draft costs nothing to
        make, so only its verification is at stake, and ``_may_verify`` bounds what verifying a size
        never measured can lose: such a size is weighed at the least it can cost, so that it is tried
        once where it could pay. Read off its neighbours instead, the jumps of a real machine's
        batches trap the policy in short drafts: measured at 1-5 tokens where 4 -> 5 cost 0.8 of a
        step, a batch of 17 was put at 16 steps where it cost 7, and an edit answer copying the
        prompt ran at 0.68x of the same policy told the right costs. A draft model's tokens cost
        steps whether verified or not: it drafts on the estimates."""
        return self.hopeful if source == LOOKUP else self.profile

    def token_cost(self, source: str) -> float:
        """Seconds to draft one token (the steps do not depend on the context: no profile is read)."""
        if source == MTP:
            return self._mtp_step()
        return (self.costs.draft_step_s or 0.0) if source in DRAFT_MODELS else self.costs.lookup_step_s

    def _mtp_step(self) -> float:
        """An MTP token: one layer and the output projection. Until this answer's MTP rounds have
        timed it, assumed to cost MTP_PRIOR_STEPS of a main step (the output projection dominates a
        small model's step, and the head shares the main model's)."""
        if self._mtp_step_s is not None:
            return self._mtp_step_s
        return self.MTP_PRIOR_STEPS * self.profile.main_batch(1)

    @staticmethod
    def expected_speeds(chances: Sequence[float], costs: Sequence[float], sunk: float | None,
                        batches: CostProfile) -> list[float]:
        """[k]: the expected tokens per second of a round that verifies the first k of these drafted
        tokens (k = 0 .. all of them), each with its acceptance chance (given the ones before it were
        accepted) and drafting cost. ``sunk``: drafting time already spent whatever k (None: each
        k's own); ``batches``: what the main model's batches cost."""
        speeds, spent = [], 0.0
        for k, expected in enumerate(expected_tokens(chances)):
            if k:
                spent += costs[k - 1]
            speeds.append(expected / ((spent if sunk is None else sunk) + batches.main_batch(k + 1)))
        return speeds

    def _break_even_acceptance(self, cost: float, profile: CostProfile) -> float:
        """The lowest acceptance chance at which drafting tokens of this cost pays (they pay at 1)."""
        low, high = 0, 100  # percent: drafting does not pay at low, pays at high (it grows with it)
        while high - low > 1:
            middle = (low + high) // 2
            pays = self._best_length([middle / 100] * self.max_len, cost, profile)
            low, high = (low, middle) if pays else (middle, high)
        return high / 100

    def _round_gain(self, length: int, cost: float, profile: CostProfile) -> float:
        """Seconds a round of ``length`` drafted tokens, every one right, saves against the main model alone."""
        return (length + 1) * profile.main_batch(1) - length * cost - profile.main_batch(length + 1)

    def _best_length(self, chances: list[float], cost: float, profile: CostProfile) -> int:
        speeds = self.expected_speeds(chances, [cost] * len(chances), None, profile)
        return max(range(len(speeds)), key=speeds.__getitem__)

    # -- the policy protocol ----------------------------------------------------------------------

    def may_draft(self, source: str) -> bool:
        if source in DRAFT_MODELS:
            self._model_in_play = True
        return self.max_len > 0 and (source not in DRAFT_MODELS or self._model.can_pay)

    def draft_length(self, source: str, behind: int = 0) -> int:
        self._chain, self._chain_cost = [], []
        self._behind, self._more = behind, 0
        if source in DRAFT_MODELS and behind * self._model.catch_up_s > self._model.best_gain_s:
            self._model_parked = True  # it only falls further behind from here
        if source in DRAFT_MODELS and (self._model_parked or not self._model.can_pay):
            return 0
        # Even always right, an MTP token costs more than verifying it saves here: judged on the
        # estimates, prior included. At the most unmeasured sizes can cost (a step per token) no MTP
        # draft could ever pay, none would be verified, and no batch size would ever be measured;
        # what verifying an unmeasured size can lose is bounded by ``_may_verify`` instead.
        if source == MTP and self._best_length([1.0] * self.max_len, self._mtp_step(), self.profile) == 0:
            return 0
        if self.learns and self.costs.unconfirmed:
            return 0  # the stored profile's first round: a step of the main model alone times it
        if self._wait[source] > 0:
            self._wait[source] -= 1
            return 0
        if source in DRAFT_MODELS and self._main_is_unsure():
            return 0
        self._round_source = source
        return self.max_len

    def _main_is_unsure(self) -> bool:
        return self._main_confidence is not None and self._main_confidence < self._model.break_even

    def main_step_s(self, context: int) -> float | None:
        return self.costs.main_batch(1, context) if self.costs.rounds_now or self.costs.known(1) else None

    def wants_main_confidence(self) -> bool:
        # the main model's confidence only decides whether to ask a draft model: with lookup alone,
        # reading it (a softmax over the vocabulary per verified token) would buy nothing
        return self._model_in_play and not self._model_parked and self._model.can_pay

    def step(self, n: int, score: Score, source: str) -> Decision:
        if below_p_min(self.params, score, source):
            return Decision.STOP
        a = self.acceptance.chance(source, n, score)
        self._chain.append(a)
        self._chain_cost.append(self.token_cost(source))
        sunk = sum(self._chain_cost)  # this token's logits are paid for
        speeds = self.expected_speeds(self._chain, self._chain_cost, sunk, self._batch_costs(source))
        best_now, with_token = max(speeds[:n + 1]), speeds[n + 1]
        future = self._optimistic_future(n, score, source)
        if with_token <= best_now and future <= best_now:
            return Decision.STOP
        if n + 1 >= self.max_len or future <= max(best_now, with_token):
            return Decision.LAST
        self._more += 1
        return Decision.MORE

    def _optimistic_future(self, n: int, score: Score, source: str) -> float:
        """The best speed reachable by drafting more tokens, assuming they come with the same score
        (for lookup: a copy that goes on)."""
        expected, run, spent = expected_tokens(self._chain)[-1], math.prod(self._chain), sum(self._chain_cost)
        later = self.acceptance.chance(source, n + 1, score)  # every later token falls in one bucket
        cost, batches, best = self.token_cost(source), self._batch_costs(source), 0.0
        for m in range(n + 1, self.max_len):   # a draft of m + 1 tokens: a batch of m + 2
            run *= later
            expected += run
            spent += cost
            best = max(best, expected / (spent + batches.main_batch(m + 2)))
        return best

    def cut(self, draft: "Draft") -> int:
        if not draft.tokens:
            return 0
        chances = [self.acceptance.chance(s, i, x) for i, (s, x) in enumerate(zip(draft.sources, draft.scores))]
        costs = [self.token_cost(s) for s in draft.sources]
        speeds = self.expected_speeds(chances, costs, sum(costs), self._batch_costs(draft.sources[0]))
        allowed = [k for k in range(len(chances) + 1) if self._may_verify(k, chances)]
        return max(allowed, key=speeds.__getitem__)

    def observe(self, draft: "Draft", accepted: int, draft_s: float | None = None,
                main_confidence: Sequence[float] = (), verify_s: float | None = None,
                context: int | None = None) -> None:
        if verify_s is not None and self.learns:
            self._learn_costs(len(draft) + 1, verify_s, context or 0, draft_s)
        for p in main_confidence:
            previous = p if self._main_confidence is None else self._main_confidence
            self._main_confidence = self.CONFIDENCE_DECAY * previous + (1.0 - self.CONFIDENCE_DECAY) * p
        for i in range(min(accepted + 1, len(draft))):  # tokens after the first rejection say nothing
            self.acceptance.update(draft.sources[i], i, draft.scores[i], i < accepted)
        if self._round_source is not None:
            spent = sum(self._chain_cost) if draft_s is None else draft_s
            self._learn_whether_drafting_pays(self._round_source, len(draft), accepted, spent)
        self._round_source = None

    def _learn_costs(self, batch: int, verify_s: float, context: int, draft_s: float | None) -> None:
        """Teach the cost model this round's times: the verify batch, and the draft model's work when
        it drafted (its catch-up on skipped tokens, then a step per token after the first)."""
        self.costs.observe_main(batch, context, verify_s)
        self.cost_rounds_observed += 1
        if self._round_source in DRAFT_MODELS and draft_s is not None:
            steps = 1 + max(0, self._behind - 1) * self._catch_up_ratio() + self._more
            self.costs.observe_draft(steps, draft_s)
        if self._round_source == MTP and draft_s is not None:  # the head's catch-up and its steps
            per_token = draft_s / (1 + self._more)
            previous = per_token if self._mtp_step_s is None else self._mtp_step_s
            self._mtp_step_s = self.BALANCE_DECAY * previous + (1 - self.BALANCE_DECAY) * per_token
        self._context = context + batch
        self._refresh()

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
        if source in DRAFT_MODELS and self._balance[source] < -self.PARK_STEPS * step:
            self._model_parked = True
        if self._balance[source] >= 0:
            self._backoff[source] = 0
            return
        if saved < 0:
            self._backoff[source] = min(self.MAX_BACKOFF, max(1, self._backoff[source] * 2))
        self._wait[source] = max(1, self._backoff[source])


def expected_tokens(chances: Sequence[float]) -> list[float]:
    """[k]: the tokens a round that verifies the first k drafted tokens is expected to yield (the
    accepted ones and the main model's own), each drafted token accepted with its chance given the
    ones before it were."""
    expected, run = [1.0], 1.0
    for a in chances:
        run *= a
        expected.append(expected[-1] + run)
    return expected


@dataclass(frozen=True)
class _ModelTerms:
    can_pay: bool        # some draft length pays when every drafted token is right
    break_even: float    # the least acceptance at which drafting pays (2.0: never)
    best_gain_s: float   # what the best round, every token right, saves against the main model alone
    catch_up_s: float    # what reading one skipped token costs the draft model


def _within(a: CostProfile, b: CostProfile, tolerance: float) -> bool:
    """Whether every time in ``b`` is within ``tolerance`` (relative) of ``a``'s."""
    pairs = [*zip(a.main_batch_s, b.main_batch_s), (a.draft_step_s, b.draft_step_s)]
    return all(abs(y - x) <= tolerance * x if x > 0 else y == x for x, y in pairs)


def make_policy(params: SpeculationParams, profile: "CostModel | CostProfile | None" = None,
                acceptance: AcceptanceModel | None = None) -> DraftPolicy:
    if params.policy in (PolicyName.FIXED, PolicyName.PMIN):
        return FixedPolicy(params)
    return AutoPolicy(params, profile if profile is not None else CostModel({}, params.draft_max + 1), acceptance)
