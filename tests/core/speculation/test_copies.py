"""Copies (prompt lookup) may draft longer than other drafts, up to SpeculationParams.copy_max, and the
long batch sizes they need are timed while a prompt is read, once per size."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.params import SamplingParams, SpeculationParams
from app.core.speculation.acceptance import LOOKUP, MODEL
from app.core.speculation.costmodel import CostModel, CostProfile
from app.core.speculation.drafters import DraftModelDrafter, PromptLookupDrafter
from app.core.speculation.events import Round
from app.core.speculation.loop import SpeculativeGeneration
from app.core.speculation.policy import AutoPolicy
from app.core.speculation.policy_base import FixedPolicy
from tests.core.speculation.reference_model import ReferenceModel, ReferenceSession

STEP = 0.040
AUTO = SpeculationParams(draft_max=8)   # copies up to 32: batches up to 33


@pytest.mark.parametrize("draft_max, copy_max", [(16, 64), (8, 32), (4, 16), (32, 64), (100, 100), (0, 0)])
def test_copies_run_to_64_tokens_four_times_a_short_draft_max_or_draft_max_when_longer(draft_max, copy_max):
    params = SpeculationParams(draft_max=draft_max)
    assert params.copy_max == copy_max and params.batch_max == copy_max + 1


def test_a_copy_may_draft_longer_than_a_draft_model():
    free = CostProfile(key={}, main_batch_s=[STEP] * AUTO.batch_max, draft_step_s=0.02 * STEP)
    policy = AutoPolicy(AUTO, free)
    assert policy.draft_length(LOOKUP) == 32 and policy.draft_length(MODEL) == 8


def test_a_size_never_measured_costs_at_most_the_next_bigger_size_measured():
    costs = CostModel({}, 33)
    for n, seconds in [(1, STEP), (2, 1.9 * STEP), (33, 14 * STEP)]:
        for _ in range(3):
            costs.observe_main(n, 0, seconds)
    most = costs.profile(0, unmeasured="most")
    assert all(most.main_batch(n) <= most.main_batch(33) + 1e-12 for n in range(3, 33))
    assert most.main_batch(3) == pytest.approx(most.main_batch(2) + most.main_batch(1))   # smaller + a step


def test_the_long_sizes_to_time_are_the_largest_then_half_each_once():
    costs = CostModel({}, 33)
    assert costs.size_to_measure(room=40) == 33 and costs.size_to_measure(room=20) == 17
    assert costs.size_to_measure(room=10) == 0
    costs.observe_main(33, 0, 0.5)
    assert costs.size_to_measure(room=40) == 17
    costs.observe_main(17, 0, 0.3)
    assert costs.size_to_measure(room=40) == 0


def generation(drafter, policy, main: ReferenceModel, max_tokens: int = 60):
    session = ReferenceSession(main)
    return session, SpeculativeGeneration(session, main, drafter, policy, SamplingParams(max_tokens=max_tokens))


def greedy(main: ReferenceModel, prompt: list[int], n: int) -> list[int]:
    ctx = list(prompt)
    for _ in range(n):
        ctx.append(int(np.argmax(main.logits(ctx))))
    return ctx[len(prompt):]


PROMPT = [i % 5 for i in range(40)]


def test_reading_a_prompt_times_the_copies_longest_batch_and_answers_as_the_main_model_alone():
    main = ReferenceModel(n_vocab=6, seed=4, sharpness=4.0)
    policy = AutoPolicy(AUTO, CostModel({}, AUTO.batch_max))
    session, gen = generation(PromptLookupDrafter(), policy, main)
    summary = list(gen.run(PROMPT))[-1]
    assert session.batches[:2] == [40 - 33, 33]              # the prompt's last 33 tokens as one batch
    assert policy.costs.known(33) and not policy.costs.known(17)
    assert list(summary.token_ids) == greedy(main, PROMPT, 60)
    session, gen = generation(PromptLookupDrafter(), policy, main)
    list(gen.run(PROMPT[:-1]))
    assert session.batches[:2] == [39 - 17, 17]              # the next prompt: half of it, then none
    assert policy.costs.size_to_measure(room=40) == 0


@pytest.mark.parametrize("why", ["no copies", "fixed costs", "fixed policy", "short prompt"])
def test_no_batch_is_timed_where_no_copy_could_use_it(why):
    main = ReferenceModel(n_vocab=6, seed=4, sharpness=4.0)
    drafter = DraftModelDrafter(ReferenceSession(main)) if why == "no copies" else PromptLookupDrafter()
    costs = CostProfile(key={}, main_batch_s=[STEP * n for n in range(1, 34)]) if why == "fixed costs" else \
        CostModel({}, AUTO.batch_max)
    policy = FixedPolicy(AUTO) if why == "fixed policy" else AutoPolicy(AUTO, costs)
    prompt = PROMPT[:10] if why == "short prompt" else PROMPT
    session, gen = generation(drafter, policy, main)
    list(gen.run(prompt))
    assert session.batches[0] == len(prompt)


def test_where_long_batches_are_cheap_a_copy_drafts_past_draft_max_and_the_answer_is_the_main_models():
    main = ReferenceModel(n_vocab=6, seed=4, sharpness=4.0)  # a small vocabulary: the answer repeats itself
    cheap = CostProfile(key={}, main_batch_s=[STEP * (1 + 0.05 * n) for n in range(AUTO.batch_max)])
    session, gen = generation(PromptLookupDrafter(), AutoPolicy(AUTO, cheap), main, max_tokens=120)
    events = list(gen.run([0, 1, 2]))
    assert max(e.drafted for e in events if isinstance(e, Round)) > AUTO.draft_max
    assert list(events[-1].token_ids) == greedy(main, [0, 1, 2], 120)
