"""The cost model learns the machine while the policy answers: simulated machines, simulated clocks.

A SimulatedMachine says what a batch costs; TimedSession advances a simulated clock by that cost on
every decode, and the loop reads that clock instead of the real one. No real models, no timings."""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, SamplingParams, SpeculationParams
from app.core.speculation import loop as speculative
from app.core.speculation.acceptance import LOOKUP, MODEL, LookupMatch
from app.core.speculation.costmodel import CostModel, CostProfile, ProfileStore
from app.core.speculation.drafters import Draft, DraftModelDrafter, PromptLookupDrafter
from app.core.speculation.events import Round, Summary
from app.core.speculation.loop import SpeculativeGeneration
from app.core.speculation.policy import AutoPolicy
from app.core.speculation.policy_base import Decision
from tests.core.speculation.reference_model import ReferenceModel, ReferenceSession

STEP = 0.040
N_MAX = 17
AUTO = SpeculationParams(draft_max=N_MAX - 1, policy="auto")
ROUNDS_TO_FOLLOW = 10  # the CostModel docstring's bound for a change by a factor of 2, with noise


class SimulatedMachine:
    """Seconds for a main-model batch of n after ctx cached positions: a step, ``per_token`` of a
    step more for each token after the first, ``slope`` (relative) more per 1,000 positions; all
    times ``speed``, which a test changes."""

    def __init__(self, per_token: float = 0.5, slope: float = 0.0, draft_step: float = 0.3 * STEP):
        self.per_token, self.slope, self.draft_step, self.speed = per_token, slope, draft_step, 1.0

    def main(self, n: int, ctx: int) -> float:
        return self.speed * STEP * (1 + self.per_token * (n - 1)) * (1 + self.slope * ctx / 1000)

    def draft(self, n: int, ctx: int) -> float:
        return self.speed * self.draft_step * n


class Clock:
    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class TimedSession(ReferenceSession):
    def __init__(self, model, clock: Clock, cost):
        super().__init__(model)
        self.clock, self.cost = clock, cost

    def eval(self, tokens, all_logits=False):
        self.clock.now += self.cost(len(tokens), len(self.cached))
        return super().eval(tokens, all_logits)


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(speculative, "time", types.SimpleNamespace(perf_counter=clock.perf_counter, monotonic=clock.perf_counter))
    return clock


def within(estimate: float, truth: float, tolerance: float = 0.10) -> bool:
    return abs(estimate / truth - 1) <= tolerance


def feed(costs: CostModel, machine: SimulatedMachine, sizes, ctx: int, rounds: int, noise: float = 0.05,
         seed: int = 0) -> None:
    """``rounds`` verify batches, sizes in turn, each timed with a few percent of noise."""
    rng = np.random.default_rng(seed)
    for r in range(rounds):
        n = sizes[r % len(sizes)]
        costs.observe_main(n, ctx, machine.main(n, ctx) * math.exp(rng.normal(0, noise)))


# -- the cost model alone -----------------------------------------------------------------------------

def test_estimates_follow_a_machine_that_slows_down_mid_answer():
    machine, costs = SimulatedMachine(), CostModel({}, N_MAX)
    sizes = [1, 1, 3, 1, 5, 9, 1, 2]
    feed(costs, machine, sizes, 300, 60)
    assert all(within(costs.main_batch(n, 300), machine.main(n, 300)) for n in (1, 3, 5, 9))
    machine.speed = 2.0   # another program takes a core
    feed(costs, machine, sizes, 300, ROUNDS_TO_FOLLOW, seed=1)
    # every size moves with the machine, those not verified since the change (16) too
    assert all(within(costs.main_batch(n, 300), machine.main(n, 300)) for n in (1, 2, 3, 5, 9, 16))
    machine.speed = 1.0   # and it goes away again
    feed(costs, machine, sizes, 300, ROUNDS_TO_FOLLOW, seed=2)
    assert all(within(costs.main_batch(n, 300), machine.main(n, 300)) for n in (1, 2, 3, 5, 9, 16))


def test_a_growing_context_is_part_of_the_model():
    """Within one answer a context slope and a machine slowing down look alike; answers that start
    at a short context again tell them apart, so after two of them a fresh answer's first rounds
    are predicted right, and so is a context never seen yet."""
    machine, costs = SimulatedMachine(slope=0.12), CostModel({}, N_MAX)
    rng = np.random.default_rng(3)
    first_round_errors = []
    for answer in range(4):
        first_round_errors.append(costs.main_batch(1, 200) / machine.main(1, 200) - 1)
        for i in range(120):   # the context grows from 200 to 4,000 tokens
            ctx, n = 200 + 32 * i, [1, 3, 1, 6][i % 4]
            costs.observe_main(n, ctx, machine.main(n, ctx) * math.exp(rng.normal(0, 0.05)))
            assert i < ROUNDS_TO_FOLLOW or within(costs.main_batch(n, ctx), machine.main(n, ctx))
    assert abs(first_round_errors[0]) > 0.1                 # the prior's slope was wrong
    assert all(abs(e) < 0.1 for e in first_round_errors[2:])
    assert costs.context_slope == pytest.approx(math.log(1 + 0.12 * 3.8) / 3.8, rel=0.25)
    assert within(costs.main_batch(4, 8000), machine.main(4, 8000), 0.15)


def test_a_size_never_verified_is_predicted_from_its_neighbours():
    machine, costs = SimulatedMachine(per_token=0.05), CostModel({}, N_MAX)   # a GPU: batches nearly free
    feed(costs, machine, [1, 2, 4, 6, 8], 100, 40)
    assert not costs.known(7) and within(costs.main_batch(7, 100), machine.main(7, 100), 0.15)
    prior_guess = STEP * (1 + 0.5 * 15)   # the prior's CPU-like shape, at this machine's step
    assert costs.main_batch(16, 100) < 0.5 * prior_guess   # the measured sizes pulled it down


def test_the_learned_profile_is_stored_and_starts_the_next_model_warm(tmp_path):
    machine, costs = SimulatedMachine(slope=0.1), CostModel({"pair": 1}, N_MAX)
    feed(costs, machine, [1, 2, 5, 9, 16], 1000, 60)
    costs.observe_draft(1, machine.draft(1, 0))
    store = ProfileStore(tmp_path)
    store.save(costs.profile())
    warm = CostModel.from_profile(store.load({"pair": 1}))
    assert warm.warm and not warm.learning and warm.known(9) and warm.draft_step_s == pytest.approx(0.3 * STEP)
    assert not warm.known(12)   # never verified: stored as an estimate, probed as one after the restart
    assert warm.rounds == 60 and warm.context_slope == pytest.approx(costs.context_slope)
    assert all(within(warm.main_batch(n, 1000), machine.main(n, 1000), 0.05) for n in (1, 5, 9, 16))


def test_a_profile_from_before_context_was_learned_still_loads(tmp_path):
    store = ProfileStore(tmp_path)
    old = {"key": {"k": 1}, "main_batch_s": [0.04, 0.06], "draft_step_s": 0.01, "lookup_step_s": 5e-5,
           "context_position": 256, "measured_at": "", "seconds": 20.0, "notes": {}}
    store.path_for({"k": 1}).write_text(__import__("json").dumps(old))
    loaded = store.load({"k": 1})
    assert loaded.context_log_slope is None and loaded.learned_rounds == 0
    assert CostModel.from_profile(loaded).main_batch(1, 256) == pytest.approx(0.04)


# -- the policy, learning as it answers -----------------------------------------------------------

REPEATING = ReferenceModel(n_vocab=6, seed=4, sharpness=4.0)   # small vocabulary: repeats, so lookup matches


def run_lookup(policy: AutoPolicy, machine: SimulatedMachine, clock: Clock, max_tokens: int, on_round=None):
    main = TimedSession(REPEATING, clock, machine.main)
    gen = SpeculativeGeneration(main, REPEATING, PromptLookupDrafter(), policy, SamplingParams(max_tokens=max_tokens))
    events = []
    for event in gen.run([0, 1, 2, 3, 0, 1, 2, 3]):
        events.append(event)
        if isinstance(event, Round) and on_round:
            on_round(event, main)
    return events, main


def test_the_policy_follows_a_machine_whose_speed_changes_mid_answer(clock):
    SWITCH = 30   # the round at which the machine becomes twice as slow
    machine = SimulatedMachine(per_token=0.1)
    policy = AutoPolicy(AUTO, CostModel({}, N_MAX))
    late, step = [], []

    def check(event: Round, main):
        if event.index == SWITCH:
            machine.speed = 2.0
        if event.index >= SWITCH + ROUNDS_TO_FOLLOW:   # the size it verifies, and a step of the main model alone
            ctx = len(main.cached)
            late.append(policy.costs.main_batch(event.drafted + 1, ctx) / machine.main(event.drafted + 1, ctx))
            step.append(policy.costs.main_batch(1, ctx) / machine.main(1, ctx))
        learning.append(policy.learning)

    learning = []
    # lookup chains through the repeating text, ~12 tokens a round: 1,000 tokens run past round 70
    events, _ = run_lookup(policy, machine, clock, 1000, check)
    assert len(late) > 20 and all(within(r, 1.0) for r in late)
    # A step alone is never timed after the switch here (lookup chains every round), so it follows through
    # the machine's speed only; the size verified is 16, a multiple of CostModel.TILE with a shape of its
    # own, which keeps a part of the change: the step reads 0.90 of the truth (0.92 without that shape)
    assert all(within(r, 1.0, tolerance=0.12) for r in step)
    assert policy.cost_rounds_observed == sum(isinstance(e, Round) for e in events)
    assert learning[0] and not learning[SWITCH - 1] and learning[SWITCH + 1]   # cold, learned; the change noticed
    assert not learning[SWITCH + 2 * ROUNDS_TO_FOLLOW]


def test_a_warm_start_from_a_wrong_profile_is_corrected(clock):
    """Stored on a machine where batches were free (and everything half as fast), run where a batch
    costs a step per token and lookup's guesses are mostly wrong (sampled text): drafting does not
    pay here. The first rounds find the profile stale and learning starts over; kept, the stale
    profile makes the policy four times slower than the main model alone."""
    free = CostProfile(key={}, main_batch_s=[2 * STEP] * N_MAX)
    truth = SimulatedMachine(per_token=1.0)
    model = ReferenceModel(n_vocab=6, seed=4, sharpness=1.5)
    speeds = {}
    for name, costs in (("learning", CostModel.from_profile(free)), ("stale", free)):
        main = TimedSession(model, clock, truth.main)
        policy = AutoPolicy(AUTO, costs)
        gen = SpeculativeGeneration(main, model, PromptLookupDrafter(), policy,
                                    SamplingParams(temperature=1.0, seed=3, max_tokens=400))
        rounds = [e for e in gen.run([0, 1, 2, 3, 0, 1, 2, 3]) if isinstance(e, Round)]
        assert name == "stale" or policy.costs.stale                       # twice as fast: not this machine
        late = rounds[-1].generated_tokens - rounds[39].generated_tokens
        speeds[name] = late / (rounds[-1].at_s - rounds[39].at_s) * STEP   # 1.0: the main model alone
    assert speeds["learning"] > 0.9 and speeds["stale"] < 0.5
    ctx = len(main.cached)
    learned = CostModel.from_profile(free)
    feed(learned, truth, [1, 1, 2, 4], ctx, 40)
    assert learned.stale and all(within(learned.main_batch(n, ctx), truth.main(n, ctx)) for n in (1, 2, 4))


BUSY_PROFILE = CostProfile(  # stored while another program took one of two cores (as measured on one)
    key={}, main_batch_s=[2.5 * STEP * (1 + 0.25 * (n - 1)) for n in range(1, N_MAX + 1)], draft_step_s=0.6 * STEP)


def test_a_profile_stored_under_load_is_dropped_by_the_first_rounds_that_contradict_it():
    """Under load every batch was 2.5 times slower and, the threads waiting on the busy core, a batch
    of 17 cost 5 steps; quiet, a step is faster and a batch of 17 costs 9. The first rounds' batches
    show the profile is stale: the model starts over from the prior and those rounds, drops the
    stored sizes and draft step, and says it is learning."""
    quiet = SimulatedMachine(per_token=0.5)
    costs = CostModel.from_profile(BUSY_PROFILE)
    assert costs.warm and costs.known(17) and not costs.learning
    for _ in range(CostModel.STALE_ROUNDS):
        assert costs.unconfirmed and not costs.stale
        costs.observe_main(1, 300, quiet.main(1, 300))
    assert costs.stale and not costs.warm and costs.learning and not costs.unconfirmed
    assert not costs.known(17) and costs.known(1) and costs.draft_step_s is None
    assert within(costs.main_batch(1, 300), quiet.main(1, 300))


def test_one_slow_first_decode_does_not_make_a_profile_stale():
    """The first decode after loading can take three times as long (buffers, kernels): the median of
    the first rounds judges the profile, so the right one stays."""
    machine = SimulatedMachine(per_token=0.5)
    costs = CostModel({}, N_MAX, [machine.main(n, 0) for n in range(1, N_MAX + 1)], draft_step_s=0.3 * STEP)
    costs.observe_main(1, 100, 3 * machine.main(1, 100))
    feed(costs, machine, [1], 100, CostModel.STALE_ROUNDS - 1)
    assert not costs.stale and costs.warm and costs.known(17) and not costs.unconfirmed


def test_a_profile_a_little_off_is_kept_and_corrected():
    """A machine 20% slower than its profile (a laptop on battery) is the same machine: the profile stays."""
    machine = SimulatedMachine(per_token=0.5)
    machine.speed = 1.2
    batches = [STEP * (1 + 0.5 * (n - 1)) for n in range(1, N_MAX + 1)]
    costs = CostModel({}, N_MAX, batches, context_position=300, draft_step_s=0.3 * STEP)
    feed(costs, machine, [1, 3, 1, 5], 300, 10)
    assert not costs.stale and costs.warm and costs.known(17) and costs.draft_step_s == pytest.approx(0.3 * STEP)
    assert all(within(costs.main_batch(n, 300), machine.main(n, 300)) for n in (1, 3, 5, 17))


def test_the_first_rounds_from_a_stored_profile_verify_no_draft():
    """A stored profile is unconfirmed until the first rounds have been timed: they are steps of the
    main model alone, so a stale profile is found before it sends a draft; then drafting goes on."""
    machine = SimulatedMachine(per_token=0.1)
    costs = CostModel({}, N_MAX, [machine.main(n, 0) for n in range(1, N_MAX + 1)], draft_step_s=0.2 * STEP)
    policy = AutoPolicy(AUTO, costs)
    assert policy.may_draft(MODEL)                                   # the draft model reads the prompt
    for _ in range(CostModel.STALE_ROUNDS):
        assert costs.unconfirmed and policy.draft_length(LOOKUP) == 0 and policy.draft_length(MODEL) == 0
        policy.observe(Draft(), 0, draft_s=0.0, verify_s=machine.main(1, 100), context=100)
    assert not costs.unconfirmed and not costs.stale
    assert policy.draft_length(LOOKUP) == N_MAX - 1 and policy.draft_length(MODEL) == N_MAX - 1


def test_a_stale_profile_loses_no_more_than_its_first_rounds_and_a_cold_starts_probes(clock):
    """The busy machine's profile on the quiet one, where drafting does not pay (a batch costs a step
    per token, sampled text): the whole answer takes at most the main model alone's time plus the
    rounds before the profile was found stale and the cold start's probe bound."""
    truth = SimulatedMachine(per_token=1.0)
    model = ReferenceModel(n_vocab=6, seed=4, sharpness=1.5)
    policy = AutoPolicy(AUTO, CostModel.from_profile(BUSY_PROFILE))
    main = TimedSession(model, clock, truth.main)
    gen = SpeculativeGeneration(main, model, PromptLookupDrafter(), policy,
                                SamplingParams(temperature=1.0, seed=3, max_tokens=300))
    events = list(gen.run([0, 1, 2, 3, 0, 1, 2, 3]))
    rounds, summary = [e for e in events if isinstance(e, Round)], events[-1]
    lost_before = sum(r.drafted - r.accepted for r in rounds[:CostModel.STALE_ROUNDS]) * STEP
    alone = (summary.generated_tokens - 1) * truth.main(1, 0)   # after the prompt phase's first token
    assert summary.generation_s <= alone + lost_before + (N_MAX - 1) * AutoPolicy.PROBE_LOSS * STEP + 1e-9
    assert policy.costs.stale


def test_a_cold_start_cannot_lose_more_than_its_probes(clock):
    """No profile, a machine where drafting never pays: the speculative answer takes at most the
    main model alone's time plus the probes' bound ((n_max - 1) * PROBE_LOSS main steps)."""
    truth = SimulatedMachine(per_token=1.0)
    events, _ = run_lookup(AutoPolicy(AUTO, CostModel({}, N_MAX)), truth, clock, 300)
    summary = events[-1]
    # after the prompt phase's first token, one step per token (the context costs nothing: 0 slope)
    alone = (summary.generated_tokens - 1) * truth.main(1, 0)
    assert summary.generation_s <= alone + (N_MAX - 1) * AutoPolicy.PROBE_LOSS * STEP + 1e-9


def test_a_cold_start_probes_sizes_it_has_not_measured_within_a_bound():
    policy = AutoPolicy(AUTO, CostModel({}, N_MAX))
    copying = LookupMatch(16, in_prompt=True)
    draft = Draft(list(range(16)), [None] * 16, [LOOKUP] * 16, [copying] * 16)
    first = policy.cut(draft)
    chances = [policy.acceptance.chance(LOOKUP, i, copying) for i in range(16)]
    # priced at one step per extra token, a probe of L tokens is expected to lose sum(1 - a1*...*ai) steps
    expected_loss = [sum(1 - math.prod(chances[:i + 1]) for i in range(length)) for length in range(17)]
    assert 1 <= first < 16
    assert expected_loss[first] <= AutoPolicy.PROBE_LOSS < expected_loss[first + 1]
    # the machine turns out to batch for free (a GPU): measured sizes open the way to longer drafts
    for n in range(1, 6):
        policy.observe(Draft(list(range(n - 1)), [None] * (n - 1), [LOOKUP] * (n - 1), [copying] * (n - 1)),
                       n - 1, draft_s=0.0, verify_s=STEP, context=100)
    assert policy.cut(draft) == 16


class JumpyMachine(SimulatedMachine):
    """Batch costs as a 2-core EPYC's llama.cpp measured them (quickdraft calibrate, in steps): a
    batch of 5 costs 0.8 of a step more than one of 4, batches of 11 to 16 cost the same, 17 more."""

    STEPS = [1.0, 1.81, 2.45, 2.95, 3.73, 4.28, 4.79, 4.99, 5.59, 5.93, 6.01, 6.01, 6.01, 6.01, 6.01, 6.01, 7.22]

    def main(self, n: int, ctx: int) -> float:
        return self.speed * STEP * self.STEPS[n - 1]


def test_a_jump_between_small_batches_does_not_trap_lookup_in_short_drafts():
    """A cold start that has measured batches of 1 to 5 only (the answers before drafted little) on
    a machine whose batch of 5 costs 0.8 of a step more than one of 4: read off those sizes, a batch
    of 17 would cost 16 steps and long copies would never pay. Weighed at the least they can cost,
    the sizes never measured are tried, and an answer copying the prompt goes as fast as with the
    right costs (which verify 15 copied tokens at a time: 16 tokens for 6 steps)."""
    machine = JumpyMachine()
    cold = CostModel({}, N_MAX)
    feed(cold, machine, [1, 2, 3, 4, 5], 100, 30, noise=0.0)
    known = CostModel({}, N_MAX, [machine.main(n, 0) for n in range(1, N_MAX + 1)])
    speeds, verified = {}, {}
    for name, costs in (("cold", cold), ("known", known)):
        policy = AutoPolicy(AUTO, costs)
        rounds = [copy_round(policy, machine) for _ in range(60)]
        verified[name] = {tokens for tokens, _ in rounds}
        speeds[name] = sum(t for t, _ in rounds[30:]) / sum(s for _, s in rounds[30:]) * STEP  # 1.0: main alone
    assert max(verified["cold"]) > 5
    assert speeds["known"] > 2.5 and speeds["cold"] > 0.97 * speeds["known"], speeds


def test_a_size_timed_slow_by_a_burst_of_load_does_not_stop_the_probes_above_it():
    """Under a busy core single steps took 40 or 180 ms by turns; a batch of 4 timed in a slow spell
    read 3.9 steps. Bounded by that size plus a step per token, no bigger batch could ever be tried
    and an edit answer under load drafted nothing (it drafts 85 tokens quietly); bounded by the
    cheapest way to decode it in pieces (here: a batch of 3 and single steps), a copy is probed above it."""
    costs = CostModel({}, N_MAX)
    for n, steps in ((1, 1.0), (2, 1.8), (3, 2.5), (4, 3.9)):
        for _ in range(3):
            costs.observe_main(n, 100, steps * STEP)
    policy = AutoPolicy(AUTO, costs)
    copying = LookupMatch(16, in_prompt=True)
    chances = [policy.acceptance.chance(LOOKUP, i, copying) for i in range(16)]
    bounded = policy.readings.bounded
    assert bounded.main_batch(5) < bounded.main_batch(4) + 0.9 * bounded.main_batch(1)
    assert policy._may_verify(4, chances)


def test_a_batch_far_slower_than_its_tokens_one_by_one_is_not_learned():
    """A batch costs about its tokens decoded one by one at the most: a time far above that paid something
    once (a GPU's first launch of a batch size's kernels, a burst of load). Learned, the first batch of
    2 at six steps made every draft look dear and lookup drafted nothing more, however long the copies
    it found; not learned, the size is probed again, learned at its steady cost, and the copies go on.
    A stored profile's size above the bound is a probe again too. On a GPU, where a first launch is
    paid once per batch size, a size's first decode is not learned at all: a first batch of 7 that
    cost 6 steps is under 7, and learned it made every longer draft look dearer still."""
    machine = SimulatedMachine(per_token=0.05)
    costs = CostModel({"device": "CUDA0"}, N_MAX)
    feed(costs, machine, [1], 100, 3, noise=0.0)
    policy = AutoPolicy(AUTO, costs)
    launched = {1}
    verified = [copy_round(policy, machine, launched=launched)[0] for _ in range(12)]
    assert costs.one_time_costs > 1 and min(verified[-4:]) > 8, verified
    big = max(n for n in range(1, N_MAX + 1) if costs.known(n))
    assert big > 8 and within(costs.main_batch(big, 100), machine.main(big, 100))
    stored = CostModel({}, N_MAX, [STEP, 6 * STEP, 1.2 * STEP], measured=[1, 2, 3])
    assert (stored.known(1), stored.known(2), stored.known(3)) == (True, False, True)


def test_a_batch_a_little_dearer_than_its_tokens_one_by_one_is_its_steady_cost():
    """A verify batch needs every row's logits, and on one thread of a CPU that can cost more than its
    tokens one by one (a batch of 9 at 9.2 steps on this project's CPU): such times are the size's
    steady cost and are learned. Refused, only a size's fast rounds were learned and it read cheaper
    than it is; and a stored profile's such size came back unmeasured at the next start."""
    machine = SimulatedMachine(per_token=1.05)   # a batch of 9: 9.4 steps
    costs = CostModel({}, N_MAX)
    feed(costs, machine, [1, 9], 300, 80, noise=0.02)
    assert costs.one_time_costs == 0 and costs.known(9)
    assert within(costs.main_batch(9, 300), machine.main(9, 300), 0.03)
    stored = CostModel({}, N_MAX, [STEP, 2.1 * STEP, 3.2 * STEP], measured=[1, 2, 3])
    assert stored.known(2) and stored.known(3)


FIRST_LAUNCH = 5 * STEP   # a batch size's first decode on a GPU also loads its kernels


def copy_round(policy: AutoPolicy, machine: SimulatedMachine, context: int = 100,
               launched: set[int] | None = None) -> tuple[int, float]:
    """A round of prompt lookup copying the user's text, every drafted token right: (tokens, seconds).
    ``launched``: the batch sizes decoded before; a size's first decode takes FIRST_LAUNCH more."""
    copying, draft = LookupMatch(16, in_prompt=True), Draft()
    if policy.draft_length(LOOKUP) > 0:
        for i in range(N_MAX - 1):
            decision = policy.step(i, copying, LOOKUP)
            if decision is Decision.STOP:
                break
            draft.add(i, None, LOOKUP, copying)
            if decision is Decision.LAST:
                break
        draft = draft.cut(policy.cut(draft))
    seconds = machine.main(len(draft) + 1, context)
    if launched is not None and len(draft) + 1 not in launched:
        launched.add(len(draft) + 1)
        seconds += FIRST_LAUNCH
    policy.observe(draft, len(draft), draft_s=0.0, verify_s=seconds, context=context)
    return len(draft) + 1, seconds


def test_the_draft_model_waits_until_its_cost_is_known(clock):
    machine = SimulatedMachine(per_token=0.1)
    main = TimedSession(REPEATING, clock, machine.main)
    draft_session = TimedSession(REPEATING, clock, machine.draft)   # the same model: it would be right
    policy = AutoPolicy(AUTO, CostModel({}, N_MAX))
    assert not policy.may_draft(MODEL) and policy.draft_length(MODEL) == 0
    gen = SpeculativeGeneration(main, REPEATING, DraftModelDrafter(draft_session), policy, SamplingParams(max_tokens=60))
    summary = list(gen.run([0, 1, 2, 3]))[-1]
    assert isinstance(summary, Summary) and summary.drafted == 0
    assert draft_session.batches == []                      # never even read the prompt
    costs = policy.costs
    costs.observe_draft(1, machine.draft(1, 0))              # one step timed (the engine does it)
    assert not AutoPolicy(AUTO, costs).may_draft(MODEL)      # nor on the prior's word that batches are cheap
    feed(costs, machine, [1, 2, 3, 4, 5], 100, 10)           # batches measured (lookup's probes do it)
    fresh = AutoPolicy(AUTO, costs)
    assert fresh.may_draft(MODEL) and fresh.draft_length(MODEL) > 0


def test_the_draft_step_is_learned_from_the_rounds_it_drafts(clock):
    machine = SimulatedMachine(per_token=0.1, draft_step=0.2 * STEP)
    batches = [machine.main(n, 0) for n in range(1, N_MAX + 1)]
    costs = CostModel({}, N_MAX, batches, draft_step_s=0.05 * STEP)   # the draft timed when the machine was idle
    main = TimedSession(REPEATING, clock, machine.main)
    # the draft model reads skipped tokens in one batch, which it batches as well as the main model
    draft_session = TimedSession(REPEATING, clock, lambda n, ctx: machine.draft_step * machine.main(n, 0) / STEP)
    gen = SpeculativeGeneration(main, REPEATING, DraftModelDrafter(draft_session), AutoPolicy(AUTO, costs),
                                SamplingParams(max_tokens=200))
    summary = list(gen.run([0, 1, 2, 3]))[-1]
    assert summary.drafted > 20
    assert within(costs.draft_step_s, machine.draft_step, 0.15)


# -- the engine -------------------------------------------------------------------------------------

def test_the_engine_answers_without_calibrating_and_stores_what_it_learned(tmp_path, tiny_models, monkeypatch):
    from app.core import pair_costs
    from app.core.engine import Engine
    from app.core.params import ModelParams

    def no_calibration(*args, **kwargs):
        raise AssertionError("generate must not calibrate")

    monkeypatch.setattr(pair_costs, "calibrate", no_calibration)
    store = ProfileStore(tmp_path)
    params = (ModelParams(str(tiny_models.main), n_ctx=256, n_threads=1),
              ModelParams(str(tiny_models.same), n_ctx=256, n_threads=1))
    engine = Engine.load(*params, profile_store=store)
    try:
        messages = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]
        for drafter in ("model", "lookup", "lookup+model"):
            events = list(engine.generate(GenerationRequest(messages, sampling=SamplingParams(max_tokens=24),
                                          speculation=SpeculationParams(draft_max=4), drafter=DrafterKind(drafter))))
            summary = events[-1]
            assert summary.error is None and summary.cost_rounds_observed == summary.rounds > 0
        n_max = SpeculationParams(draft_max=4).batch_max
        assert n_max == 17 and engine.costs.model(n_max).draft_step_s > 0   # timed with a step, not calibrated
        assert store.load(engine.costs.key(n_max)).learned_rounds >= summary.rounds
    finally:
        engine.close()
    again = Engine.load(*params, profile_store=store)
    try:
        assert again.costs.model(n_max).warm and again.costs.model(n_max).draft_step_s > 0
    finally:
        again.close()


def test_nothing_runs_on_the_draft_model_before_a_cold_starts_first_token(tmp_path, tiny_models, monkeypatch):
    """The draft model's step is timed once the first answer that could use it is out (before, its
    first decode after loading added a tenth to the first token's time on a fast machine), and is
    stored with what was learned."""
    from app.core.engine import Engine
    from app.core.speculation.events import TokenPiece
    from app.core.params import ModelParams

    store = ProfileStore(tmp_path)
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=256, n_threads=1),
                         ModelParams(str(tiny_models.same), n_ctx=256, n_threads=1), profile_store=store)
    try:
        decoded, answered = [], []
        eval_draft = engine.draft.eval
        monkeypatch.setattr(engine.draft, "eval", lambda *a, **k: decoded.append(bool(answered)) or eval_draft(*a, **k))
        messages = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]
        for event in engine.generate(GenerationRequest(messages, sampling=SamplingParams(max_tokens=24),
                                     speculation=SpeculationParams(draft_max=4), drafter=DrafterKind.LOOKUP_MODEL)):
            if isinstance(event, TokenPiece):
                answered.append(event)
        assert decoded and all(after_first_token for after_first_token in decoded)
        n_max = SpeculationParams(draft_max=4).batch_max
        assert engine.costs.model(n_max).draft_step_s > 0
        assert store.load(engine.costs.key(n_max)).draft_step_s > 0
    finally:
        engine.close()


def test_calibrate_times_every_size_of_a_chain_then_a_few_of_a_long_copy(monkeypatch):
    # copies run to 64 tokens: calibrate times batches of 1-17, the multiples of 16 (the sizes a batch is
    # padded to where they cost less), 33 and 65, and reads the others off them, so calibrating for long
    # copies does not take four times as long
    import app.core.speculation.calibration as calibration

    clock = [0.0]

    class Session:   # a batch of n tokens takes 10 ms + 5 ms a token on a clock of its own
        n_ctx = 4096

        def __init__(self):
            self.evaluated: list[int] = []

        def truncate(self, n_keep):
            pass

        def eval(self, tokens, all_logits=False):
            self.evaluated.append(len(tokens))
            clock[0] += 0.010 + 0.005 * len(tokens)

    monkeypatch.setattr(calibration.time, "perf_counter", lambda: clock[0])
    session = Session()
    profile = calibration.calibrate(session, None, {}, 65, list(range(50)))
    assert profile.measured == list(range(1, 18)) + [32, 33, 48, 64, 65]
    assert set(session.evaluated[2:]) == set(profile.measured)   # after the prefix and the warm-up
    assert len(profile.main_batch_s) == 65
    assert profile.main_batch_s == pytest.approx([0.010 + 0.005 * n for n in range(1, 66)])  # read off linearly
    assert calibration.calibrated_sizes(9) == list(range(1, 10))
