"""The main model's own MTP (nextn) head drafts for it: greedy answers are exactly the main model's
alone, its MTP context stays what feeding the accepted tokens from scratch makes, and a model with
no MTP layers is refused with a message. app/core/llama/mtp.py alone binds llama.cpp's staging API."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.errors import DrafterUnavailableError

from app.core.engine import Engine
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama import mtp
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.core.speculation.acceptance import MTP
from tests.core.llama.mtp_steering import answer, run_steered

PROMPT = "the cat is on the mat and the dog"


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("mtp") / "qwen35.gguf", TinySpec(architecture="qwen35", name="tiny-qwen35"))


@pytest.fixture(scope="module")
def engine(qwen35):
    e = Engine.load(ModelParams(str(qwen35), n_gpu_layers=0, n_ctx=256, n_threads=1))
    yield e
    e.close()


def _answer(engine, drafter: str, draft_max: int = 4, n: int = 32, **options):
    return answer(engine, PROMPT, drafter, draft_max, n, **options)


def test_the_staging_symbols_are_there():
    mtp.check_symbols()   # fails naming the symbol when llama.cpp's staging API changes


def test_a_missing_symbol_is_named(monkeypatch):
    monkeypatch.setitem(mtp._STAGING, "llama_get_embeddings_nextn_ith",
                        ({mtp.ABI: "_Z30llama_get_embeddings_nextn_ith_renamed"}, None, ()))
    monkeypatch.setattr(mtp, "_bound", {})
    with pytest.raises(DrafterUnavailableError, match="llama_get_embeddings_nextn_ith"):
        mtp.check_symbols()
    assert mtp.availability().startswith("unavailable: ") and "nextn_ith" in mtp.availability()


def test_every_staging_symbol_has_a_name_for_each_compiler():
    for name, (names, _, _) in mtp._STAGING.items():
        assert set(names) == {"itanium", "msvc"}
        assert names["msvc"].startswith(f"?{name}@@YA") and names["msvc"].endswith("@Z")
        assert names["itanium"].startswith(f"_Z{len(name)}{name}")


@pytest.mark.parametrize("draft_max", [1, 2, 4])
def test_greedy_mtp_answers_are_the_main_models_own(engine, draft_max):
    _, plain = _answer(engine, "none")
    _, drafted = _answer(engine, "mtp", draft_max)
    assert drafted.token_ids == plain.token_ids
    assert drafted.drafted > 0 and plain.drafted == 0
    assert max(drafted.drafted_by_position and range(len(drafted.drafted_by_position))) == draft_max - 1


@pytest.mark.parametrize("right", [1, 2, 5])
def test_the_mtp_context_matches_one_fed_from_scratch(engine, right):
    """After rounds that accept some drafts and reject others, the head's context (fed incrementally,
    rolled back each round) gives the logits that feeding the whole answer afresh gives."""
    prompt, plain, head = run_steered(engine, _answer, right)
    context = list(prompt) + list(plain.token_ids)
    incremental = head.start(context).copy()
    head.forget()
    from_scratch = head.start(context).copy()
    # llama.cpp's CPU numerics differ between one batch and several (by ~0.02 on this random head's
    # logits); a token fed with the wrong hidden state, or a drafted position kept, moves them by ~1
    assert np.abs(incremental - from_scratch).max() < 0.1
    head.forget()
    assert np.abs(head.start([*context[:-3], context[-2], context[-3], context[-1]]) - from_scratch).max() > 0.3


def test_the_drafts_are_counted_as_mtp(engine):
    seen = []
    original = engine._drafter

    def spy(kind):
        drafter = original(kind)
        real = drafter.draft

        def draft(*args):
            out = real(*args)
            seen.extend(out.sources)
            return out
        drafter.draft = draft
        return drafter

    engine._drafter = spy
    try:
        _, summary = _answer(engine, "mtp", 3)
    finally:
        del engine._drafter
    assert seen and set(seen) == {MTP} and len(seen) == summary.drafted
    assert summary.by_drafter == (("mtp", summary.drafted, summary.accepted),)


def test_a_model_without_mtp_layers_is_refused(tiny_models):
    engine = Engine.load(ModelParams(str(tiny_models.main), n_gpu_layers=0, n_ctx=256, n_threads=1))
    try:
        with pytest.raises(DrafterUnavailableError, match="has no MTP layers"):
            list(engine.generate(GenerationRequest(prompt=[1, 50, 60], drafter=DrafterKind.MTP)))
    finally:
        engine.close()


def test_a_main_with_mtp_layers_loads_them_by_itself_and_every_drafter_works(qwen35):
    """The window and the server load models without knowing the drafter: a main model that carries
    MTP layers is loaded with them, and the other drafters answer as before."""
    engine = Engine.load(ModelParams(str(qwen35), n_gpu_layers=0, n_ctx=256, n_threads=1))
    try:
        assert engine.main_params.load_mtp
        _, lookup = _answer(engine, "lookup")
        _, own = _answer(engine, "mtp")
        assert lookup.generated_tokens == own.generated_tokens == 32 and own.drafted > 0
        assert lookup.token_ids == own.token_ids
    finally:
        engine.close()


# --- the auto policy weighs MTP drafts like the others' ---------------------------------------------

def _policy(batch_times):
    from app.core.speculation.costmodel import CostProfile
    from app.core.speculation.policy import AutoPolicy

    return AutoPolicy(SpeculationParams(draft_max=8, policy="auto"), CostProfile(key={}, main_batch_s=batch_times))


def _chain(policy, confidence: float) -> int:
    """How many MTP tokens of this confidence the policy drafts in one round."""
    from app.core.speculation.policy_base import Decision

    if policy.draft_length(MTP) == 0:
        return 0
    n = 0
    while True:
        decision = policy.step(n, confidence, MTP)
        if decision is Decision.STOP:
            return n
        n += 1
        if decision is Decision.LAST:
            return n


def test_auto_drafts_long_mtp_chains_where_a_batch_costs_one_step_and_none_where_it_costs_n():
    step = 0.03
    gpu = _policy([step] * 9)                                  # verifying a batch costs one step
    cpu = _policy([step * n for n in range(1, 10)])            # a batch of n costs n steps (an MoE main, a CPU)
    assert _chain(gpu, 0.95) >= 4 and _chain(gpu, 0.95) > _chain(gpu, 0.35)
    assert _chain(cpu, 0.95) == 0


def test_auto_learns_what_an_mtp_token_costs_from_the_rounds_it_times():
    from app.core.speculation.costmodel import CostModel, CostProfile
    from app.core.speculation.drafters import Draft
    from app.core.speculation.policy import AutoPolicy

    step = 0.03
    policy = AutoPolicy(SpeculationParams(draft_max=8, policy="auto"),
                        CostModel.from_profile(CostProfile(key={}, main_batch_s=[step] * 9)))
    assert policy.token_cost(MTP) == pytest.approx(AutoPolicy.HEAD_PRIOR_STEPS * step)
    for _ in range(30):   # rounds whose 3 MTP tokens took a whole main step each
        _chain(policy, 0.95)
        draft = Draft()
        for _ in range(3):
            draft.add(5, None, MTP, 0.95)
        policy._more = 2
        policy.observe(draft, 3, draft_s=3 * step, verify_s=step, context=100)
    assert policy.token_cost(MTP) == pytest.approx(step, rel=0.05)


def test_mtp_with_the_auto_policy_gives_the_main_models_answer(engine):
    prompt = engine.main.model.tokenize(PROMPT)
    plain = list(engine.generate(GenerationRequest(prompt=prompt, drafter=DrafterKind.NONE,
                                                   sampling=SamplingParams(max_tokens=32))))[-1]
    auto = list(engine.generate(GenerationRequest(prompt=prompt, drafter=DrafterKind.MTP,
                                                  sampling=SamplingParams(max_tokens=32),
                                                  speculation=SpeculationParams(policy="auto"))))[-1]
    assert auto.error is None and auto.token_ids == plain.token_ids


def test_auto_drafts_mtp_from_a_cold_start_and_stops_where_measured_batches_cost_a_step_per_token():
    """No stored profile: the prior's batch costs let MTP draft (before, judged at the most an
    unmeasured batch can cost, it never drafted, so no batch of 2 or more was ever measured); once
    rounds time batches costing a step per token, it stops."""
    from app.core.speculation.costmodel import CostModel
    from app.core.speculation.drafters import Draft
    from app.core.speculation.policy import AutoPolicy

    policy = AutoPolicy(SpeculationParams(draft_max=8, policy="auto"), CostModel({}, 9))
    assert _chain(policy, 0.95) >= 1
    step = 0.03
    for _ in range(40):
        for n in range(1, 6):   # rounds verifying 0..4 MTP tokens, each batch costing n steps
            draft = Draft()
            for _ in range(n - 1):
                draft.add(5, None, MTP, 0.95)
            policy.observe(draft, n - 1, draft_s=0.25 * step * max(1, n - 1), verify_s=step * n, context=100)
    assert policy.draft_length(MTP) == 0


def test_auto_drafts_mtp_on_the_first_answer(engine):
    """On a fresh engine (no stored profile) the first answer under auto drafts with the MTP head."""
    fresh = Engine.load(ModelParams(engine.main_params.path, n_gpu_layers=0, n_ctx=256, n_threads=1))
    try:
        prompt = fresh.main.model.tokenize(PROMPT)
        summary = list(fresh.generate(GenerationRequest(prompt=prompt, drafter=DrafterKind.MTP,
                                                        sampling=SamplingParams(max_tokens=32),
                                                        speculation=SpeculationParams(policy="auto"))))[-1]
        assert summary.error is None and summary.drafted > 0
    finally:
        fresh.close()
