"""The cost model, the auto draft length and prompt lookup."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.params import SamplingParams, SpeculationParams
from app.core.speculation.acceptance import LOOKUP, MODEL, LookupMatch
from app.core.speculation.costmodel import CostProfile, ProfileStore
from app.core.speculation.drafters import Draft, DraftModelDrafter, LookupThenModelDrafter, PromptLookupDrafter
from app.core.speculation.events import Round
from app.core.speculation.loop import SpeculativeGeneration
from app.core.speculation.policy import AutoPolicy
from app.core.speculation.policy_base import Decision
from tests.core.speculation.reference_model import ReferenceModel, ReferenceSession

STEP = 0.040
AUTO = SpeculationParams(draft_max=8, policy="auto")


def profile(batch_times, draft_step=0.0):
    return CostProfile(key={}, main_batch_s=list(batch_times), draft_step_s=draft_step)


LINEAR = profile([STEP * n for n in range(1, 10)], draft_step=0.5 * STEP)   # a batch costs n steps
FREE = profile([STEP] * 9, draft_step=0.02 * STEP)                          # a batch costs one step
ONE_THREAD = [1, 1.8, 2.47, 3.12, 3.85, 4.85, 5.34, 7.19, 7.94]   # batches in steps, one thread of a CPU: a token 0.8 of a step


def test_no_drafting_when_verification_costs_as_much_as_sequential_steps():
    policy = AutoPolicy(AUTO, LINEAR)
    assert policy.draft_length(MODEL) == 0        # the draft model can never pay here
    assert policy.draft_length(LOOKUP) == 8       # lookup is free to try, but...
    assert policy.step(0, LookupMatch(4), LOOKUP) is Decision.STOP  # ...not even a long match pays


def test_long_drafts_when_verification_is_free():
    policy = AutoPolicy(AUTO, FREE)
    assert policy.draft_length(MODEL) == 8
    decisions = [policy.step(n, 0.95, MODEL) for n in range(8)]
    assert decisions[:7] == [Decision.MORE] * 7 and decisions[7] is Decision.LAST


def test_an_unsure_draft_token_is_cut():
    policy = AutoPolicy(AUTO, profile([STEP * (1 + 0.1 * n) for n in range(9)], draft_step=0.1 * STEP))
    for _ in range(20):  # unsure tokens have been rejected before; sure ones accepted
        policy.acceptance.update(MODEL, 0, 0.01, False)
        policy.acceptance.update(MODEL, 0, 0.95, True)
    policy.draft_length(MODEL)
    assert policy.step(0, 0.95, MODEL) is not Decision.STOP
    assert policy.step(1, 0.01, MODEL) is Decision.STOP
    draft = Draft([5, 6], [None, None], [MODEL, MODEL], [0.95, 0.01])
    assert policy.cut(draft) == 1


def test_acceptance_is_learned_from_what_verification_accepts():
    policy = AutoPolicy(AUTO, FREE)
    before = policy.acceptance.chance(MODEL, 0, 0.95)
    for _ in range(50):  # an over-confident draft: says 95%, is never accepted
        policy.draft_length(MODEL)
        policy.observe(Draft([1], [None], [MODEL], [0.95]), accepted=0)
    after = policy.acceptance.chance(MODEL, 0, 0.95)
    assert before > 0.9
    assert after < 0.2  # the prior keeps it off zero, so it is probed again later


def test_short_lookup_matches_must_earn_their_place():
    policy = AutoPolicy(AUTO, profile([STEP * (1 + 0.5 * (n - 1)) for n in range(1, 10)]))
    assert policy.acceptance.chance(LOOKUP, 0, LookupMatch(1)) < policy.acceptance.chance(LOOKUP, 0, LookupMatch(4))
    policy.draft_length(LOOKUP)
    assert policy.step(0, LookupMatch(1), LOOKUP) is Decision.STOP     # a 1-token match is a poor bet here
    policy.draft_length(LOOKUP)
    assert policy.step(0, LookupMatch(4), LOOKUP) is not Decision.STOP  # a 4-token match is a good one


def test_a_draft_model_that_loses_is_asked_rarely_but_probes_again():
    main = ReferenceModel(n_vocab=12, seed=0)
    drafter = DraftModelDrafter(ReferenceSession(ReferenceModel(n_vocab=12, seed=9)))  # mostly wrong
    pays_if_right = profile([STEP * (1 + 0.2 * (n - 1)) for n in range(1, 10)], draft_step=0.3 * STEP)
    gen = SpeculativeGeneration(ReferenceSession(main), main, drafter, AutoPolicy(AUTO, pays_if_right),
                                SamplingParams(max_tokens=400))
    rounds = [e for e in gen.run([1, 2, 3]) if isinstance(e, Round)]
    drafting = sum(r.drafted > 0 for r in rounds)
    assert 3 <= drafting <= 0.15 * len(rounds)


def _rounds_drafted_when_every_draft_is_rejected(policy, source, score, rounds, draft_s):
    """Run ``rounds`` rounds in which each one-token draft is rejected; count the rounds that drafted."""
    drafted = 0
    for _ in range(rounds):
        if policy.draft_length(source) == 0:
            policy.observe(Draft(), 0)
            continue
        drafted += 1
        policy.step(0, score, source)
        policy.observe(Draft([1], [None], [source], [score]), accepted=0, draft_s=draft_s)
    return drafted


def test_a_draft_model_whose_probes_lose_is_parked_for_the_rest_of_the_answer():
    pays_if_right = profile([STEP * (1 + 0.2 * (n - 1)) for n in range(1, 10)], draft_step=0.3 * STEP)
    acceptance = None
    rounds_drafted = []
    for answer in range(2):
        policy = AutoPolicy(AUTO, pays_if_right, acceptance)
        acceptance = policy.acceptance  # kept across a conversation, as the engine does
        # each probe fed the draft model the skipped tokens (2 steps) and its token was rejected
        rounds_drafted.append(_rounds_drafted_when_every_draft_is_rejected(policy, MODEL, 0.95, 200, 2 * STEP))
    assert all(1 <= n <= 4 for n in rounds_drafted)  # parked within the answer, tried again in the next


def test_a_draft_model_sits_out_while_the_main_model_is_unsure():
    pays_if_right = profile([STEP * (1 + 0.2 * (n - 1)) for n in range(1, 10)], draft_step=0.3 * STEP)
    policy = AutoPolicy(AUTO, pays_if_right)
    assert policy.may_draft(MODEL) and policy.wants_main_confidence()  # as a draft model drafter asks
    assert policy.draft_length(MODEL) > 0                    # nothing known yet: it may try
    policy.observe(Draft(), 0, main_confidence=[0.4, 0.5, 0.3])
    assert [policy.draft_length(MODEL) for _ in range(5)] == [0] * 5
    assert policy.draft_length(LOOKUP) > 0                   # lookup costs nothing: not gated
    policy.observe(Draft(), 0, main_confidence=[0.99] * 8)   # the text became easy
    assert policy.draft_length(MODEL) > 0


def test_a_draft_model_too_far_behind_to_catch_up_is_parked():
    pays_if_right = profile([STEP * (1 + 0.2 * (n - 1)) for n in range(1, 10)], draft_step=0.3 * STEP)
    policy = AutoPolicy(AUTO, pays_if_right)
    assert policy.draft_length(MODEL, behind=2) > 0          # a short catch-up is worth a round
    assert policy.draft_length(MODEL, behind=200) == 0       # reading 200 skipped tokens is not
    assert policy.draft_length(MODEL, behind=0) == 0         # and it only falls further behind
    assert not policy.wants_main_confidence()


def _copy_held(policy, n, match=LookupMatch(16, in_prompt=True)):
    """A round of this answer in which ``n`` copied tokens were drafted and accepted."""
    policy.observe(Draft(list(range(n)), [None] * n, [LOOKUP] * n, [match] * n), n)


def test_a_long_match_in_the_prompt_is_copied_one_in_the_answer_is_not():
    # a CPU where a batch costs nearly one step per token up to 8, then 9..16 cost about the same
    steps = [1, 1.95, 2.7, 3.3, 4.0, 4.7, 5.6, 7.2, 7.9, 8.5, 8.5, 8.5, 8.5, 8.5, 8.5, 8.5, 10.1]
    policy = AutoPolicy(SpeculationParams(draft_max=16, policy="auto"), profile([STEP * s for s in steps]))
    _copy_held(policy, 8)   # this answer's copies have held: a long one may follow (``AnswerReach.copy``)
    copying = LookupMatch(16, in_prompt=True)   # the answer copies the user's code, as an edit does
    repeating = LookupMatch(16, in_prompt=False)  # a phrase the answer said before
    policy.draft_length(LOOKUP)
    assert policy.step(0, repeating, LOOKUP) is Decision.STOP
    policy.draft_length(LOOKUP)
    decisions = []
    while not decisions or decisions[-1] is Decision.MORE:
        decisions.append(policy.step(len(decisions), copying, LOOKUP))
    assert len(decisions) == 15 and decisions[-1] is Decision.LAST


def test_a_copy_reaches_past_what_the_answer_held_by_the_steps_it_may_risk():
    # a CPU where a token more in a batch costs half a step: a copy may go 3 steps (6 tokens) past the
    # most copied tokens a round of this answer had accepted, so an answer's copies grow as they hold
    cpu = profile([STEP * (1 + 0.5 * n) for n in range(65)])
    policy = AutoPolicy(SpeculationParams(draft_max=16, policy="auto"), cpu)
    assert policy.copy_len == 64 and policy.max_len == 16   # copies may run longer than a model's drafts
    assert _copy_steps(policy) == 6
    _copy_held(policy, 5)
    assert _copy_steps(policy) == 11
    _copy_held(policy, 11)
    _copy_held(policy, 2)                   # a shorter copy later does not take back what held
    assert _copy_steps(policy) == 17


def test_a_copy_runs_long_at_once_where_a_long_batch_costs_little_more_than_a_step():
    # a GPU: a batch of 65 costs two steps, so a first copy risks nothing worth holding it back for
    gpu = profile([STEP * (1 + n / 64) for n in range(65)])
    policy = AutoPolicy(SpeculationParams(draft_max=16, policy="auto"), gpu)
    assert _copy_steps(policy) == 64


def test_a_copy_that_has_followed_the_prompt_long_may_go_half_as_far_again():
    # the CPU above, nothing held yet in this answer: a copy's run of more than 12 tokens in the prompt
    # is evidence the answer copies here, as a held copy is (``AnswerReach.copy``); a run of 16 may reach 24
    cpu = profile([STEP * (1 + 0.5 * n) for n in range(65)])
    policy = AutoPolicy(SpeculationParams(draft_max=16, policy="auto"), cpu)
    assert _copy_steps(policy, LookupMatch(12, in_prompt=True)) == 6
    assert _copy_steps(policy, LookupMatch(13, in_prompt=True)) == 19
    assert _copy_steps(policy, LookupMatch(16, in_prompt=True)) == 24
    assert _copy_steps(policy, LookupMatch(30, in_prompt=True)) == 45
    assert _copy_steps(policy, LookupMatch(30, in_prompt=False)) == 6     # a phrase the answer said before


def test_a_draft_models_drafts_grow_as_this_answers_hold():
    # a CPU: a verified token costs half a step more and a drafted one 0.3 of a step, so an answer's
    # first model draft risks 8 steps (``AnswerReach.model``) and the next go that far past what held
    cpu = profile([STEP * (1 + 0.5 * n) for n in range(17)], draft_step=0.3 * STEP)
    policy = AutoPolicy(SpeculationParams(draft_max=16, policy="auto"), cpu)
    first = policy.draft_length(MODEL)
    assert first == 10
    assert [policy.step(n, 0.99, MODEL) for n in range(first)][-1] is Decision.LAST   # it stops there
    policy.observe(Draft([1] * first, [None] * first, [MODEL] * first, [0.99] * first), first)
    assert policy.draft_length(MODEL) == 16            # 10 held: 6 more risk 4.8 steps
    # a GPU: a batch costs about a step and a drafted token a tenth of one: nothing held back
    gpu = profile([STEP * (1 + 0.03 * n) for n in range(17)], draft_step=0.1 * STEP)
    assert AutoPolicy(SpeculationParams(draft_max=16, policy="auto"), gpu).draft_length(MODEL) == 16


def _copy_steps(policy, match=LookupMatch(12, in_prompt=True)):
    """How far the policy lets a sure copy go this round (by default a 12-token match in the prompt, not
    yet a long run, always right)."""
    for _ in range(200):
        policy.acceptance.update(LOOKUP, 0, match, True)
        policy.acceptance.update(LOOKUP, 1, match, True)
    assert policy.draft_length(LOOKUP) == policy.copy_len
    decisions = []
    while not decisions or decisions[-1] is Decision.MORE:
        decisions.append(policy.step(len(decisions), match, LOOKUP))
    return len(decisions) if decisions[-1] is Decision.LAST else len(decisions) - 1


def _lookup_rounds_drafted(policy, score, rounds, accepted=0):
    """Run ``rounds`` rounds in which lookup offers a one-token draft with ``score`` and verification
    accepts ``accepted`` of it; count the rounds whose draft the policy sent."""
    drafted = 0
    for _ in range(rounds):
        if policy.draft_length(LOOKUP) == 0 or policy.step(0, score, LOOKUP) is Decision.STOP:
            policy.observe(Draft(), 0)
            continue
        drafted += 1
        policy.observe(Draft([1], [None], [LOOKUP], [score]), accepted=accepted, draft_s=0.0)
    return drafted


def test_lookup_is_never_parked_it_costs_nothing_to_probe():
    policy = AutoPolicy(AUTO, profile([STEP * (1 + 0.2 * (n - 1)) for n in range(1, 10)]))
    drafted = _lookup_rounds_drafted(policy, LookupMatch(13), 300)
    assert 5 <= drafted <= 20   # backs off to one probe in 64 rounds, but keeps probing


def test_losing_short_matches_do_not_sit_out_a_long_copy_of_the_prompt():
    """An edit's answer: after each change lookup's short matches lose, then a long copy of the
    user's text holds. Lookup's standing is kept per kind of match, so the losses of the first
    kind do not make the copy sit out (issue 43: one standing drafted 9 tokens in a rewrite)."""
    policy = AutoPolicy(AUTO, profile([STEP * (1 + 0.2 * (n - 1)) for n in range(1, 10)]))
    assert _lookup_rounds_drafted(policy, LookupMatch(4), 40) < 12      # losing: backs off
    assert _lookup_rounds_drafted(policy, LookupMatch(16, in_prompt=True), 10, accepted=1) == 10


def test_lookup_alone_does_not_sit_out_over_cheap_misses():
    """Where a batch costs about one step (a GPU), a wrong lookup draft costs a small part of a step:
    lookup alone keeps drafting through its misses. Where a draft model could take the rounds, the
    losing matches still sit out and leave the rounds to it."""
    cheap = [STEP * (1 + 0.05 * (n - 1)) for n in range(1, 10)]
    alone = AutoPolicy(AUTO, profile(cheap))
    assert _lookup_rounds_drafted(alone, LookupMatch(4), 30) == 30
    with_model = AutoPolicy(AUTO, profile(cheap, draft_step=0.1 * STEP))
    assert with_model.may_draft(MODEL) and with_model.wants_main_confidence()  # as a draft model drafter asks
    assert _lookup_rounds_drafted(with_model, LookupMatch(4), 30) < 15


@pytest.mark.parametrize("kind", ["lookup", "lookup+model", "model"])
def test_auto_policy_output_is_the_main_models(kind):
    main = ReferenceModel(n_vocab=6, seed=4, sharpness=4.0)  # small vocabulary: repeats, so lookup matches
    model = DraftModelDrafter(ReferenceSession(ReferenceModel(n_vocab=6, seed=4, sharpness=4.0)))
    drafter = {"lookup": PromptLookupDrafter(), "model": model,
               "lookup+model": LookupThenModelDrafter(PromptLookupDrafter(), model)}[kind]
    gen = SpeculativeGeneration(ReferenceSession(main), main, drafter,
                                AutoPolicy(AUTO, profile([STEP * (1 + 0.1 * n) for n in range(9)], 0.1 * STEP)),
                                SamplingParams(max_tokens=120))
    summary = list(gen.run([0, 1, 2]))[-1]
    ctx = [0, 1, 2]
    for _ in range(120):
        ctx.append(int(np.argmax(main.logits(ctx))))
    assert list(summary.token_ids) == ctx[3:]
    assert summary.accepted > 30


def test_the_loop_tells_the_policy_how_sure_the_main_model_was():
    main = ReferenceModel(n_vocab=12, seed=0)
    seen = []

    class Recording(AutoPolicy):
        def observe(self, draft, accepted, draft_s=None, main_confidence=(), **measured):
            seen.append((accepted, list(main_confidence)))
            super().observe(draft, accepted, draft_s, main_confidence, **measured)

    pays_if_right = profile([STEP * (1 + 0.2 * (n - 1)) for n in range(1, 10)], draft_step=0.3 * STEP)
    drafter = DraftModelDrafter(ReferenceSession(ReferenceModel(n_vocab=12, seed=0)))  # the same model
    gen = SpeculativeGeneration(ReferenceSession(main), main, drafter, Recording(AUTO, pays_if_right),
                                SamplingParams(max_tokens=40))
    list(gen.run([1, 2, 3]))
    assert seen and all(len(confidence) == accepted + 1 for accepted, confidence in seen)
    assert all(0.0 < p <= 1.0 for _, confidence in seen for p in confidence)
    assert sum(accepted for accepted, _ in seen) > 10


def test_the_main_models_confidence_is_read_only_for_a_draft_model():
    """It only decides whether to ask a draft model: with lookup alone, where the draft model would
    pay, the loop reads none (a softmax over a 152k vocabulary per verified token for nothing)."""
    main = ReferenceModel(n_vocab=12, seed=0)
    pays_if_right = profile([STEP * (1 + 0.2 * (n - 1)) for n in range(1, 10)], draft_step=0.3 * STEP)
    confidences = []

    class Recording(AutoPolicy):
        def observe(self, draft, accepted, draft_s=None, main_confidence=(), **measured):
            confidences.extend(main_confidence)
            super().observe(draft, accepted, draft_s, main_confidence, **measured)

    policy = Recording(AUTO, pays_if_right)
    list(SpeculativeGeneration(ReferenceSession(main), main, PromptLookupDrafter(), policy,
                               SamplingParams(max_tokens=40)).run([1, 2, 3, 1, 2]))
    assert confidences == []
    assert policy.may_draft(MODEL) and policy.wants_main_confidence()  # a draft model drafter in play


def test_profile_is_saved_reused_and_invalidated(tmp_path, tiny_models):
    from app.core.engine import Engine
    from app.core.params import ModelParams

    store = ProfileStore(tmp_path / "profiles")
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=256, n_threads=1),
                         ModelParams(str(tiny_models.other), n_ctx=256, n_threads=1), profile_store=store)
    first = engine.costs.profile(5, recalibrate=True)   # measured only when asked (quickdraft calibrate)
    assert first.n_max == 5 and first.draft_step_s > 0 and all(t > 0 for t in first.main_batch_s)
    assert len(list(store.directory.glob("*.json"))) == 1
    engine.close()

    again = Engine.load(ModelParams(str(tiny_models.main), n_ctx=256, n_threads=1),
                        ModelParams(str(tiny_models.other), n_ctx=256, n_threads=1), profile_store=store)
    assert again.costs.profile(5).main_batch_s == pytest.approx(first.main_batch_s, rel=0.01)  # reused
    assert again.costs.profile(5, recalibrate=True).measured_at >= first.measured_at
    again.close()

    other_threads = Engine.load(ModelParams(str(tiny_models.main), n_ctx=256, n_threads=2),
                                ModelParams(str(tiny_models.other), n_ctx=256, n_threads=1), profile_store=store)
    assert store.load(other_threads.costs.key(5)) is None              # settings changed: not valid
    other_threads.costs.profile(5, recalibrate=True)
    assert len(list(store.directory.glob("*.json"))) == 2
    other_threads.close()


def test_a_calibrated_size_timed_dear_is_stored_as_the_next_start_reads_it(tmp_path, tiny_models, monkeypatch):
    # a burst of load during calibrate made a batch of 2 cost four steps, far more than its tokens one by one:
    # the cost model does not learn such a time, and what calibrate stores and shows is what the next start reads
    import app.core.pair_costs as pair_costs
    from app.core.engine import Engine
    from app.core.params import ModelParams

    def timed(main, draft, key, n_max, filler, **_):
        return CostProfile(key=key, main_batch_s=[0.010, 0.040, 0.016, 0.018, 0.020], draft_step_s=0.002,
                           context_position=256, measured_at="2026-11-27T00:00:00", seconds=1.0)

    monkeypatch.setattr(pair_costs, "calibrate", timed)
    store = ProfileStore(tmp_path / "profiles")
    load = lambda: Engine.load(ModelParams(str(tiny_models.main), n_ctx=256, n_threads=1),  # noqa: E731
                               ModelParams(str(tiny_models.other), n_ctx=256, n_threads=1), profile_store=store)
    engine = load()
    first = engine.costs.profile(5, recalibrate=True)
    engine.close()
    assert first.measured == [1, 3, 4, 5] and first.main_batch_s[1] == pytest.approx(0.013)
    again = load()
    assert again.costs.profile(5).main_batch_s == pytest.approx(first.main_batch_s, rel=1e-6)
    again.close()


def test_a_corrupt_profile_is_measured_again(tmp_path):
    store = ProfileStore(tmp_path)
    key = {"main": "x"}
    store.save(profile([0.1, 0.2]).__class__(key=key, main_batch_s=[0.1, 0.2]))
    assert store.load(key).main_batch_s == [0.1, 0.2]
    store.path_for(key).write_text("{not json")
    assert store.load(key) is None


def test_a_jumpy_profile_is_looked_across_when_copying_pays():
    # measured on a 2-core CPU: batches of 9..16 cost about the same (llama.cpp switches kernels)
    jumpy = profile([0.042, 0.079, 0.109, 0.142, 0.176, 0.231, 0.288, 0.400, 0.400, 0.400, 0.405, 0.405,
                     0.433, 0.433, 0.433, 0.433, 0.514])
    policy = AutoPolicy(SpeculationParams(draft_max=16, policy="auto"), jumpy)
    for _ in range(40):  # a copy that goes on: long matches and their continuations are accepted
        policy.acceptance.update(LOOKUP, 0, LookupMatch(4), True)
        policy.acceptance.update(LOOKUP, 1, LookupMatch(4), True)
    _copy_held(policy, 8, LookupMatch(4))
    assert policy.draft_length(LOOKUP) == 16
    decisions = []
    while not decisions or decisions[-1] is Decision.MORE:
        decisions.append(policy.step(len(decisions), LookupMatch(4), LOOKUP))
    assert decisions[-1] is Decision.LAST
    assert len(decisions) == 15   # past the expensive middle, and 15 + 1 fits the cheap batch of 16
    draft = Draft(list(range(16)), [None] * 16, [LOOKUP] * 16, [LookupMatch(4)] * 16)
    assert policy.cut(draft) >= 15


def test_a_round_without_a_draft_reads_no_costs(monkeypatch):
    """The cost model is read when a draft is weighed, not after every round: a round where lookup
    proposes nothing and no draft model is timed reads none of its profiles (each reading costs
    a tenth of a millisecond on a 2-core CPU right after a decode), and the next draft reads them at
    the context reached."""
    from app.core.speculation.costmodel import CostModel

    costs = CostModel({}, 9)
    policy = AutoPolicy(SpeculationParams(draft_max=8), costs)
    reads = []
    real = costs.profile
    monkeypatch.setattr(costs, "profile", lambda context=256, unmeasured="estimate":
                        reads.append((context, unmeasured)) or real(context, unmeasured))
    for i in range(20):
        assert policy.draft_length(LOOKUP) == 8 and not policy.wants_main_confidence()
        policy.observe(Draft(), 0, draft_s=1e-5, verify_s=0.02, context=100 + i)
    assert reads == []
    policy.step(0, LookupMatch(16, in_prompt=True), LOOKUP)
    assert reads and {context for context, _ in reads} == {120}



def test_p_min_ends_a_draft_under_every_policy_and_only_for_model_and_mtp_tokens():
    """llama.cpp's --draft-p-min: a draft-model or MTP token less sure than p_min ends the draft,
    whatever the policy (auto included, which once ignored it); lookup's scores are match lengths."""
    from app.core.speculation.acceptance import MTP
    from app.core.speculation.policy import make_policy

    flat = CostProfile(key={}, main_batch_s=[0.03] * 9, draft_step_s=0.001)
    for name in ("fixed", "pmin", "auto"):
        params = SpeculationParams(draft_max=8, policy=name, p_min=0.5)
        policy = make_policy(params, flat)
        for source in (MODEL, MTP):
            policy.draft_length(source)
            assert policy.step(0, 0.3, source) is Decision.STOP, (name, source)
        policy.draft_length(LOOKUP)
        assert policy.step(0, LookupMatch(12, in_prompt=True), LOOKUP) is not Decision.STOP, name
        if name != "auto":   # auto may stop a sure token too, for its own reasons
            off = make_policy(SpeculationParams(draft_max=8, policy=name), flat)
            assert off.step(0, 0.3, MODEL) is Decision.MORE


def test_a_proposal_lookup_did_not_draft_still_teaches_how_often_such_a_match_is_right():
    """An edit's answer re-joins the prompt after each change with a short match that the policy,
    going by its prior, does not draft; the next token says whether it would have been right, so the
    kind of match earns drafts once it has been (issue 43's copy-2: 0.86x replayed, bound 1.21x)."""
    policy = AutoPolicy(AUTO, profile([STEP * s for s in ONE_THREAD]))
    short = LookupMatch(2, in_prompt=True)
    lookup = PromptLookupDrafter()
    text = [7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8]          # ends with the 2-token match [7, 8]: copy 9, 1, 2 ...
    lookup.prepare(text, policy)
    declined = 0
    while not lookup.draft(text, 8, policy, sampler=None).tokens and declined < 40:
        declined += 1
        lookup.sync(text + [9])                       # not drafted, but it would have been right
    assert 1 <= declined < 40                         # the prior declined it; what it saw earned it drafts
    fresh = AutoPolicy(AUTO, profile([STEP * s for s in ONE_THREAD]))
    prior = fresh.acceptance.chance(LOOKUP, 0, short)
    lookup.draft(text, 8, fresh, sampler=None)
    lookup.sync(text + [4])                           # a wrong one counts against it
    assert fresh.acceptance.chance(LOOKUP, 0, short) < prior


def test_the_default_does_not_teach_lookup_from_what_it_left_to_the_draft_model():
    policy = AutoPolicy(AUTO, profile([STEP * s for s in ONE_THREAD], draft_step=0.05 * STEP))
    assert policy.may_draft(MODEL)
    short = LookupMatch(2, in_prompt=True)
    before = policy.acceptance.chance(LOOKUP, 0, short)
    assert _short_matches_beside_a_model(policy) == [0] * 5   # declined each time, left to the model
    assert policy.acceptance.chance(LOOKUP, 0, short) == before


def _short_matches_beside_a_model(policy, rounds: int = 5) -> list[int]:
    """Lookup beside a draft model, as the engine makes it, proposes a 2-token match each round, and
    the answer takes the token it proposed. Returns the drafts' lengths."""
    model = DraftModelDrafter(ReferenceSession(ReferenceModel(n_vocab=12, seed=1)))
    both = LookupThenModelDrafter(PromptLookupDrafter(tells_unasked=False), model)
    text = [7, 8, 9, 1, 2, 3, 4, 5, 6, 7, 8]   # ends with the 2-token match [7, 8]: copy 9, 1, 2 ...
    both.prepare(text, policy)
    lengths = []
    for _ in range(rounds):
        policy.may_draft(MODEL)   # the chain asks the model for the rounds lookup leaves
        lengths.append(len(both.lookup.draft(text, 8, policy, sampler=None)))
        both.sync(text + [9])
    return lengths


H100_LIKE = profile([STEP * (1 + 0.06 * (n - 1)) for n in range(1, 10)], draft_step=0.24 * STEP)  # a 7B, a 0.5B draft


def _model_rounds(policy, rounds, accepted):
    """Rounds in which the draft model drafts 8 tokens and verification accepts ``accepted`` of them."""
    for _ in range(rounds):
        if not (policy.may_draft(MODEL) and policy.draft_length(MODEL) == 8):
            continue   # sitting out or parked
        policy.observe(Draft([1] * 8, [None] * 8, [MODEL] * 8, [0.95] * 8), accepted=accepted, draft_s=8 * 0.24 * STEP,
                       main_confidence=[0.99] * (accepted + 1))


def test_a_short_copy_yields_the_round_to_a_draft_model_that_does_better():
    """Where a batch of 9 costs 1.5 steps, a model that drafts 8 right beats an uncertain copy: the
    default chain (lookup first) then lets the model draft (the H100's costs: 1.68x -> 1.75x replayed)."""
    short = LookupMatch(2, in_prompt=False)
    policy = AutoPolicy(AUTO, H100_LIKE)
    policy.draft_length(LOOKUP)
    assert policy.step(0, short, LOOKUP) is not Decision.STOP   # the model is not known yet: lookup drafts
    _model_rounds(policy, 3, accepted=8)
    policy.draft_length(LOOKUP)
    assert policy.step(0, short, LOOKUP) is Decision.STOP
    policy.observe(Draft(), 0)
    policy.draft_length(LOOKUP)
    assert policy.step(0, LookupMatch(16, in_prompt=True), LOOKUP) is not Decision.STOP   # a long copy still drafts


def test_a_copy_keeps_its_round_from_a_draft_model_that_misses():
    policy = AutoPolicy(AUTO, H100_LIKE)
    _model_rounds(policy, 6, accepted=2)
    policy.draft_length(LOOKUP)
    assert policy.step(0, LookupMatch(2, in_prompt=False), LOOKUP) is not Decision.STOP


def test_a_draft_models_small_loss_sits_nothing_out_a_steady_one_still_does():
    """Where drafting is cheap (a GPU), a miss that lost under a main step leaves the model drafting the
    next round: sitting out after one such miss (1, 2, 4 ... rounds) left neither drafter drafting in 9
    of 13 rounds of a replayed chat answer. Losses that add up past a step still sit it out."""
    policy = AutoPolicy(AUTO, H100_LIKE)
    assert policy.may_draft(MODEL) and policy.draft_length(MODEL) == 8
    policy.observe(Draft([1, 2], [None] * 2, [MODEL] * 2, [0.95] * 2), accepted=0, draft_s=2 * 0.24 * STEP,
                   main_confidence=[0.99])   # lost about 0.6 of a main step
    assert policy.draft_length(MODEL) == 8
    for _ in range(3):
        policy.observe(Draft([1, 2], [None] * 2, [MODEL] * 2, [0.95] * 2), accepted=0, draft_s=2 * 0.24 * STEP,
                       main_confidence=[0.99])
    assert policy.draft_length(MODEL) == 0


def _copy_rounds(lookup, policy, prompt, answer, rounds):
    """Rounds of an answer that copies ``prompt`` from ``answer`` on, every drafted token right: each
    verifies the draft and takes one more token of the prompt. Returns the drafts' lengths."""
    lengths = []
    for _ in range(rounds):
        draft = lookup.draft(answer, 8, policy, sampler=None)
        lengths.append(len(draft))
        policy.observe(draft, len(draft))
        answer = answer + prompt[len(answer) - len(prompt) - 1:][:len(draft) + 1]
        lookup.sync(answer)
    return lengths


def _copies_broke_after_their_first_token(run):
    """A policy on one thread's costs that saw eight copies of ``run``'s kind break after their first token."""
    policy = AutoPolicy(AUTO, profile([STEP * s for s in ONE_THREAD]))
    for _ in range(8):
        policy.acceptance.update(LOOKUP, 1, run, False)
    return policy


def test_a_copy_drafted_a_token_a_round_still_learns_whether_its_next_tokens_hold():
    """Only a draft of two or more verifies a copy's next token, so where the next tokens' acceptance
    read low enough that only one token paid, it stayed there: a server copied a rewrite's run of the
    prompt one token a round, every token right, for 114 rounds. The copy's second token, checked
    against what the answer took next, teaches it as the next token of such a copy."""
    run = LookupMatch(16, in_prompt=True)
    policy = _copies_broke_after_their_first_token(run)
    low = policy.acceptance.chance(LOOKUP, 1, run)
    prompt = list(range(100, 160))
    lookup = PromptLookupDrafter()
    lookup.prepare(prompt + [1], policy)
    lengths = _copy_rounds(lookup, policy, prompt, prompt + [1] + prompt[:20], rounds=6)
    assert max(lengths) == 1                                  # a token a round: no next token verified
    assert policy.acceptance.chance(LOOKUP, 1, run) > low     # yet the copy going on was learned
    other = _copies_broke_after_their_first_token(run)
    lookup.prepare(prompt + [1], other)
    answer = prompt + [1] + prompt[:20]
    draft = lookup.draft(answer, 8, other, sampler=None)
    assert len(draft) <= 1
    other.observe(draft, len(draft))
    departed = answer + [prompt[20], 7]                       # the answer left the copy at its second token
    for n in range(len(answer) + 1 + len(draft), len(departed) + 1):
        lookup.sync(departed[:n])
    assert other.acceptance.chance(LOOKUP, 1, run) < low


def test_beside_a_draft_model_that_cannot_pay_lookup_learns_from_what_it_did_not_draft():
    """Beside a draft model the rounds lookup declines are the model's, so they teach lookup nothing
    (the test above); where the model cannot pay on this machine nobody takes them, and a kind of
    match the policy declined would never be learned: replayed on a server's learned costs, 2 of 12
    seeds of the default stopped drafting from their third turn to their ninth."""
    policy = AutoPolicy(AUTO, profile([STEP * s for s in ONE_THREAD], draft_step=0.9 * STEP))
    assert not policy.may_draft(MODEL)                       # a draft token costs 0.9 of a step here
    short = LookupMatch(2, in_prompt=True)
    before = policy.acceptance.chance(LOOKUP, 0, short)
    assert _short_matches_beside_a_model(policy) == [0] * 5   # declined each time
    assert policy.acceptance.chance(LOOKUP, 0, short) > before
