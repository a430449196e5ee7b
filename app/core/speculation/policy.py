"""How many tokens to draft next, by what this machine's batches cost: the auto policy (the default),
and ``make_policy``, which builds the policy a SpeculationParams names (policy_base.py holds the
protocol every policy follows, and the fixed and p-min policies).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Hashable, Sequence

from app.core.params import PolicyName, SpeculationParams
from app.core.speculation.acceptance import (BLOCKS, COPIERS, DRAFT_MODELS, HEADS, MODEL, SUFFIX,
                                              AcceptanceModel, LookupMatch, Score, SuffixMatch)
from app.core.speculation.costmodel import SUFFIX_STEP_S, CostModel, CostProfile
from app.core.speculation.draft import Draft
from app.core.speculation.policy_base import Decision, DraftPolicy, FixedPolicy, below_p_min
from app.core.speculation.policy_costs import CostReadings
from app.core.speculation.policy_reach import AnswerReach
from app.core.speculation.policy_standings import DrafterStandings


class AutoPolicy:
    """Draft as many tokens as maximise the expected speed on this machine.

    The expected speed of a round that drafts L tokens is
        (1 + a1 + a1*a2 + ... + a1*...*aL) / (draft time + T_main(L + 1)),
    where ai is the chance that token i is accepted given the ones before it were, and T_main(n)
    is the time of a main-model batch of n tokens. A token is kept while some longer draft could
    still beat the best length so far, assuming the next tokens come with the same score (a real
    machine's batch costs jump, so the look-ahead reaches the longest allowed draft); the draft is
    then cut to the best length, which may be 0: the main model decodes alone.

    A draft model is asked only where it can pay: not when even an always-right draft loses on this
    machine, not while the main model's recent confidence (read off the verified rows for free) is
    below the acceptance at which drafting breaks even (a small draft agrees with the main model
    about as often as the main model is sure), not once it is so far behind that reading the skipped
    tokens costs more than its best round saves, and not while its standing says it sits out
    (policy_standings.py). Without a measured draft step it is never asked (the engine times one
    after the first answer that could have used it). A draft model of another vocabulary (CROSS) is
    weighed as a draft model, its acceptance learned apart.

    The costs are the cost model's estimates at the current context, corrected by every round's
    times (policy_costs.py); a batch size never measured is verified only as a bounded probe
    (``_may_verify``). Why each rule is there, with the measurements: docs/architecture.md, section 4.
    """

    CONFIDENCE_DECAY = 0.7  # the main model's recent confidence: each new token weighs 30%
    PROBE_LOSS = 0.5     # main steps a round verifying a never-measured batch size may be expected to lose
    HEAD_PRIOR_STEPS = 0.25  # a head's drafted token (MTP, EAGLE-3) in main steps until it is timed
    BLOCK_PRIOR_STEPS = 0.5  # a block (DFlash: a few layers over 16 rows) in main steps until it is timed
    REDERIVE = 0.02      # what follows from the costs is worked out again when an estimate moves 2%
    CHEAP_MISS_STEPS = 0.5   # lookup, alone, sits out only once its recent rounds lost half a main step
    # Where a model's drafting pays from half its tokens right (a GPU: break-even 0.3 on the H100's 7B
    # costs, 0.21 on its 14B's), its balance down by up to a main step sits nothing out. One small miss
    # made it sit out 1, 2, 4 ... rounds, and in the default chain lookup had taken the rounds that would
    # have paid for it: neither drafted in 9 of 13 rounds of a replayed chat answer. Forgiven there,
    # lookup+model's replayed medians rose 1.75x -> 1.77x (H100 7B) and 1.86x -> 1.96x (EPYC traces,
    # 14B), none fell. On a CPU (break-even 0.53-0.93) forgiving cost the quiet profile's slowest edit
    # 2%, so misses sit out as before; a model that keeps losing still sits out, then is parked.
    MODEL_FORGIVEN_STEPS = 1.0
    CHEAP_MODEL_BREAK_EVEN = 0.5
    MODEL_RATE_DECAY = 0.95  # the draft model's recent acceptance: each judged token weighs 5% (~20 tokens)
    MODEL_RATE_SEEN = 4      # tokens judged before that rate may take a round from a copier

    def __init__(self, params: SpeculationParams, costs: "CostModel | CostProfile",
                 acceptance: AcceptanceModel | None = None, pads: bool = False):
        self.params = params
        self.readings = CostReadings(costs, pads)
        self.standings = DrafterStandings()
        self.acceptance = acceptance or AcceptanceModel()
        self.max_len = max(0, min(params.draft_max, self.costs.n_max - 1))   # a chain's (draft model, head, block)
        self.copy_len = max(0, min(params.copy_max, self.costs.n_max - 1))   # a copy's (lookup, the suffix index)
        self.answer_reach = AnswerReach(self.copy_len, self.max_len)   # what this answer's drafts held
        self._reach = self.max_len             # the longest draft this round may make
        self._chain: list[float] = []          # this round's acceptance chances
        self._chain_cost: list[float] = []     # and the cost of drafting each token
        self._model_in_play = False            # a draft model drafter asked may_draft
        self._round_source: str | None = None
        self._standing: Hashable = None        # the key this round's result settles (copier_standing)
        self._behind = 0                       # tokens the draft model read before this round's draft
        self._more = 0                         # draft-model steps after the first, this round
        self._verified = 0                     # the size this round's verify batch was decoded as (padded)
        self._main_confidence: float | None = None  # unknown until the first round is verified
        self._model_rate = 0.0                 # the draft model's recent acceptance, per judged token
        self._model_seen = 0                   # its tokens judged so far
        self._derived_from: CostProfile | None = None
        self._derived: _ModelTerms | None = None
        self._model_terms: _ModelTerms | None = None

    # -- the costs ----------------------------------------------------------------------------------

    @property
    def costs(self) -> CostModel:
        return self.readings.costs

    @property
    def learning(self) -> bool:
        return self.readings.learning

    @property
    def cost_rounds_observed(self) -> int:
        return self.readings.cost_rounds_observed

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
        bounded = self.readings.bounded
        if self._derived_from is not None and _within(self._derived_from, bounded, self.REDERIVE):
            return self._derived
        draft = bounded.draft_step_s
        best_if_right = self._best_length([1.0] * self.max_len, draft, bounded)
        can_pay = best_if_right > 0
        self._derived_from, self._derived = bounded, _ModelTerms(
            can_pay=can_pay,
            break_even=self._break_even_acceptance(draft, bounded) if can_pay else 2.0,
            best_gain_s=self._round_gain(best_if_right, draft, bounded),
            catch_up_s=draft * self.readings.catch_up_ratio())
        return self._derived

    def _may_verify(self, length: int, chances: Sequence[float]) -> bool:
        """Whether a draft of ``length`` tokens may be verified. A batch size never measured is a
        probe, allowed when the round is expected to lose at most PROBE_LOSS main steps against the
        main model alone even at the most the batch can cost: what a smaller size measured costs
        plus one step per extra token, the least of those (llama.cpp could decode the batch in
        those pieces; see ``CostModel.profile``). Each size is probed until it is measured once, so
        probing costs at most (n_max - 1) * PROBE_LOSS main steps in expectation over a profile's
        life (a stored profile keeps the sizes it measured)."""
        n = length + 1
        if n == 1 or self.costs.known(n):
            return True
        step, worst = self.readings.bounded.main_batch(1), self.readings.bounded.main_batch(n)
        return worst - expected_tokens(chances[:length])[-1] * step <= self.PROBE_LOSS * step

    # -- the speed of a draft ---------------------------------------------------------------------

    def _batch_costs(self, source: str) -> CostProfile:
        """The batch costs a draft from ``source`` is weighed with. A lookup draft costs nothing to
        make, so only its verification is at stake, and ``_may_verify`` bounds what verifying a size
        never measured can lose: such a size is weighed at the least it can cost, so that it is tried
        once where it could pay (read off its neighbours, the jumps of a real machine's batch costs
        trap the policy in short drafts). A draft model's tokens cost steps whether verified or not:
        it drafts on the estimates."""
        return self.readings.hopeful if source in COPIERS else self.readings.profile

    def token_cost(self, source: str) -> float:
        """Seconds to draft one token (the steps do not depend on the context: no profile is read); a
        block's tokens cost nothing one by one: the block is one pass (``_block_s``), paid before them."""
        if source in BLOCKS:
            return 0.0
        if source in HEADS:
            return self._head_step()
        if source == SUFFIX:
            return SUFFIX_STEP_S
        return (self.costs.draft_step_s or 0.0) if source in DRAFT_MODELS else self.costs.lookup_step_s

    def _head_step(self) -> float:
        """A head's token (MTP, EAGLE-3): one layer and an output projection. Until this answer's rounds
        have timed it, assumed to cost HEAD_PRIOR_STEPS of a main step (the output projection dominates
        a small model's step; an MTP head shares the main model's, an EAGLE-3 drafter's is its own and
        often smaller: 0.05 of a Llama 3.1 8B step on a CPU, scripts/gpu/drafter_step.py eagle3)."""
        if self.readings.head_step_s is not None:
            return self.readings.head_step_s
        return self.HEAD_PRIOR_STEPS * self.readings.profile.main_batch(1)

    def _block_s(self) -> float:
        """A block (DFlash): one pass over the anchor and the masks, whatever its length. Until this
        answer's rounds have timed it, BLOCK_PRIOR_STEPS of a main step."""
        if self.readings.block_s is not None:
            return self.readings.block_s
        return self.BLOCK_PRIOR_STEPS * self.readings.profile.main_batch(1)

    def _sunk(self, source: str, costs: Sequence[float]) -> float:
        """Drafting time spent whatever is verified: the tokens' own costs, and a block's one pass."""
        return sum(costs) + (self._block_s() if source in BLOCKS else 0.0)

    def _block_can_pay(self) -> bool:
        """Whether a block, even all of it right, beats the main model alone: its one pass is paid
        before any token is verified, so on a machine where verifying costs a step per token it never
        does, and no block is asked for."""
        always = [1.0] * self.max_len
        speeds = self.expected_speeds(always, [0.0] * len(always), self._block_s(), self.readings.profile)
        return max(speeds[1:], default=0.0) > 1.0 / self.readings.profile.main_batch(1)

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
            self.standings.park_model()  # it only falls further behind from here
        if source in DRAFT_MODELS and (self.standings.model_parked or not self._model.can_pay):
            return 0
        # Even always right, a head's token costs more than verifying it saves here: judged on the
        # estimates, prior included. At the most unmeasured sizes can cost (a step per token) no head's
        # draft could ever pay, none would be verified, and no batch size would ever be measured;
        # what verifying an unmeasured size can lose is bounded by ``_may_verify`` instead.
        if source in HEADS and self._best_length([1.0] * self.max_len, self._head_step(), self.readings.profile) == 0:
            return 0
        if source in BLOCKS and not self._block_can_pay():
            return 0
        if self.readings.learns and self.costs.unconfirmed:
            return 0  # the stored profile's first round: a step of the main model alone times it
        if source not in COPIERS and self.standings.sits_out(source):
            return 0   # a copier's standing is its match's: asked at its first token (``step``)
        if source in DRAFT_MODELS and self._main_is_unsure():
            return 0
        self._round_source = self._standing = source
        if source in COPIERS:
            self._reach = self.copy_len   # a copy's is read off its match at its first ``step``
        elif source in DRAFT_MODELS:
            self._reach = self.answer_reach.model(self.readings.profile, self.token_cost(source))
        else:
            self._reach = self.max_len
        return self._reach

    def _main_is_unsure(self) -> bool:
        return self._main_confidence is not None and self._main_confidence < self._model.break_even

    def main_step_s(self, context: int) -> float | None:
        return self.costs.main_batch(1, context) if self.costs.rounds_now or self.costs.known(1) else None

    def wants_main_confidence(self) -> bool:
        # the main model's confidence only decides whether to ask a draft model: with lookup alone,
        # reading it (a softmax over the vocabulary per verified token) would buy nothing
        return self._model_in_play and not self.standings.model_parked and self._model.can_pay

    def step(self, n: int, score: Score, source: str) -> Decision:
        if below_p_min(self.params, score, source):
            return Decision.STOP
        if source in COPIERS and n == 0:
            self._standing = copier_standing(source, score)
            if self.standings.sits_out(self._standing) or self._model_does_better(source, score):
                return Decision.STOP
            self._reach = self.answer_reach.copy(self.readings.profile, score)   # once a copy goes ahead
        a = self.acceptance.chance(source, n, score)
        self._chain.append(a)
        self._chain_cost.append(self.token_cost(source))
        sunk = self._sunk(source, self._chain_cost)  # this token's logits are paid for
        speeds = self.expected_speeds(self._chain, self._chain_cost, sunk, self._batch_costs(source))
        best_now, with_token = max(speeds[:n + 1]), speeds[n + 1]
        future = self._optimistic_future(n, score, source)
        if with_token <= best_now and future <= best_now:
            return Decision.STOP
        if n + 1 >= self._reach or future <= max(best_now, with_token):
            return Decision.LAST
        self._more += 1
        return Decision.MORE

    def _model_does_better(self, source: str, score: Score) -> bool:
        """Whether the draft model, drafting this round instead, is expected to be faster than the
        copy: the copy at its best (its first token's chance, then every next one's, for as long as it
        pays) against the model's recent acceptance at its drafting cost. A copy costs nothing to
        draft, but where a batch of 17 costs two steps (the H100: scripts/gpu/data/h100-2026-11-27.md)
        a short copy took the rounds of a model that drafts 8 right: lookup going first cut the real
        pair's replayed median from 1.79x (model alone) to 1.68x on a 7B's costs."""
        if self._model_seen < self.MODEL_RATE_SEEN or not self.wants_main_confidence():
            return False
        first, later = self.acceptance.chance(source, 0, score), self.acceptance.chance(source, 1, score)
        copy = [first] + [later] * (self.max_len - 1)
        copy_speed = max(self.expected_speeds(copy, [0.0] * len(copy), 0.0, self._batch_costs(source)))
        rate = self._model_rate / (1.0 - self.MODEL_RATE_DECAY ** self._model_seen)   # the average's start, unbiased
        model = [rate] * self.max_len
        cost = self.token_cost(MODEL)
        return max(self.expected_speeds(model, [cost] * len(model), None, self.readings.profile)) > copy_speed

    def _optimistic_future(self, n: int, score: Score, source: str) -> float:
        """The best speed reachable by drafting more tokens, assuming they come with the same score
        (for lookup: a copy that goes on)."""
        expected, run = expected_tokens(self._chain)[-1], math.prod(self._chain)
        spent = self._sunk(source, self._chain_cost)
        later = self.acceptance.chance(source, n + 1, score)  # every later token falls in one bucket
        cost, batches, best = self.token_cost(source), self._batch_costs(source), 0.0
        for m in range(n + 1, self._reach):   # a draft of m + 1 tokens: a batch of m + 2
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
        speeds = self.expected_speeds(chances, costs, self._sunk(draft.sources[0], costs),
                                      self._batch_costs(draft.sources[0]))
        allowed = [k for k in range(len(chances) + 1) if self._may_verify(k, chances)]
        return max(allowed, key=speeds.__getitem__)

    def verify_size(self, n: int, most: int) -> int:
        self._verified = self.readings.verify_size(n, most)
        return self._verified

    def observe_undrafted(self, source: str, score: Score, right: bool, n: int = 0) -> None:
        self.acceptance.update(source, n, score, right)

    def observe(self, draft: "Draft", accepted: int, draft_s: float | None = None,
                main_confidence: Sequence[float] = (), verify_s: float | None = None,
                context: int | None = None) -> None:
        if verify_s is not None and self.readings.learns:
            batch = max(len(draft) + 1, self._verified)
            self.readings.learn(batch, verify_s, context or 0, draft_s, self._round_source, self._behind, self._more)
            self._model_terms = None   # worked out again from the new readings when next needed
        for p in main_confidence:
            previous = p if self._main_confidence is None else self._main_confidence
            self._main_confidence = self.CONFIDENCE_DECAY * previous + (1.0 - self.CONFIDENCE_DECAY) * p
        if draft.sources:
            self.answer_reach.observe(draft.sources[0], accepted)
        for i in range(min(accepted + 1, len(draft))):  # tokens after the first rejection say nothing
            self.acceptance.update(draft.sources[i], i, draft.scores[i], i < accepted)
            if draft.sources[i] in DRAFT_MODELS:
                self._model_rate = self.MODEL_RATE_DECAY * self._model_rate + (1 - self.MODEL_RATE_DECAY) * (i < accepted)
                self._model_seen += 1
        if self._round_source is not None:
            spent = sum(self._chain_cost) if draft_s is None else draft_s
            self._learn_whether_drafting_pays(self._round_source, len(draft), accepted, spent)
        self._round_source = self._standing = None
        self._verified = 0

    def _learn_whether_drafting_pays(self, source: str, verified: int, accepted: int, spent: float) -> None:
        """Settle the drafter's standing with what its round saved against the main model alone, which
        would have taken one step per token. ``spent`` is the drafting time, measured when the loop
        measures it: a draft model's catch-up on skipped tokens and the step that found its next
        token not worth drafting cost time even when the draft is cut to nothing."""
        if verified == 0 and source in COPIERS:
            return  # a copier proposed nothing: it cost nothing
        step = self.readings.profile.main_batch(1)
        saved = (accepted + 1) * step - (spent + self.readings.profile.main_batch(verified + 1))
        if source not in COPIERS:
            cheap = self._model.break_even <= self.CHEAP_MODEL_BREAK_EVEN
            self.standings.settle(source, saved, step, forgiven=self.MODEL_FORGIVEN_STEPS if cheap else 0.0)
            return
        # Lookup's misses cost only their verification: where no draft model could take its rounds,
        # sitting out over a few cheap misses gains nothing and loses the copies that follow them.
        # Where one could, a losing bucket sits out and gives the model its rounds (on a machine
        # where misses were cheap, forgiving lookup there cut the default's median 1.90x -> 1.76x).
        forgiven = 0.0 if self.wants_main_confidence() else self.CHEAP_MISS_STEPS
        self.standings.settle(self._standing, saved, step, forgiven)


def copier_standing(source: str, score: LookupMatch | SuffixMatch) -> tuple:
    """The standing a copier's draft (lookup, the suffix index) is kept under: its first token's
    acceptance bucket (the kind of match: where it was found or how often it held, how long it is), so
    that losing short matches do not sit out long copies."""
    return AcceptanceModel.bucket(source, 0, score)



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
                acceptance: AcceptanceModel | None = None, pads: bool = False) -> DraftPolicy:
    """``pads``: the loop pads verify batches (``SpeculativeGeneration``: a main model of attention
    layers only, its batches not merged with other slots')."""
    if params.policy in (PolicyName.FIXED, PolicyName.PMIN):
        return FixedPolicy(params)
    return AutoPolicy(params, profile if profile is not None else CostModel({}, params.batch_max), acceptance, pads)
