"""DFlash and DSpark block drafters through the whole loop: chosen as the pair's draft, one pass proposes
a block from the main model's hidden states (the default choice drafts with it), greedy answers stay the
main model's own, the drafts count as DFlash's, the drafter's context after rounds that verify and reject
blocks is a fresh one's, DSpark's anchor-first block gives one token more, and the auto policy prices a
block as one pass whose cost it learns."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.engine import Engine
from app.core.errors import DrafterUnavailableError, IncompatibleDraftError
from app.core.frontdoor import GenerationRequest
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.dflash import DFlashHead
from app.core.params import DEFAULT_DRAFTER, DrafterKind, ModelParams, SpeculationParams
from app.core.speculation.acceptance import DFLASH
from tests.core.llama.mtp_steering import answer

PROMPT = "the cat is on the mat and the dog sat by the door"
DFLASH_SPEC = TinySpec(architecture="dflash", name="tiny-dflash", n_layer=2, target_layers=(0, 1), block_size=8)
DSPARK_SPEC = TinySpec(architecture="dflash", name="tiny-dspark", n_layer=1, target_layers=(0, 1), block_size=8,
                       markov_rank=8)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("dflash-engine")
    return {"main": write_tiny_model(d / "main.gguf", TinySpec()),
            "dflash": write_tiny_model(d / "dflash.gguf", DFLASH_SPEC),
            "dspark": write_tiny_model(d / "dspark.gguf", DSPARK_SPEC)}


def _load(main, drafter=None) -> Engine:
    params = dict(n_gpu_layers=0, n_ctx=256, n_threads=1)
    return Engine.load(ModelParams(str(main), **params), ModelParams(str(drafter), **params) if drafter else None)


@pytest.fixture(scope="module", params=["dflash", "dspark"])
def engine(request, files):
    e = _load(files["main"], files[request.param])
    yield e
    e.close()


def _answer(engine, drafter: str, draft_max: int = 6, n: int = 32, **options):
    return answer(engine, PROMPT, drafter, draft_max, n, **options)


def test_the_drafter_file_is_the_pairs_draft_and_the_default_drafts_with_it(engine):
    assert engine.draft is None and engine.pair.drafts_as is DrafterKind.DFLASH
    assert engine.pair.who_drafts(DEFAULT_DRAFTER) is DrafterKind.DFLASH


@pytest.mark.parametrize("draft_max", [1, 3, 6])
def test_greedy_answers_are_the_main_models_own(engine, draft_max):
    _, plain = _answer(engine, "none")
    _, drafted = _answer(engine, "dflash", draft_max)
    assert drafted.token_ids == plain.token_ids
    assert drafted.drafted > 0 and len(drafted.drafted_by_position) == draft_max
    assert drafted.by_drafter == (("dflash", drafted.drafted, drafted.accepted),)


def test_dspark_reads_the_anchors_own_row_so_a_block_gives_one_token_more(files):
    for name, first_row, max_block in (("dflash", 1, 7), ("dspark", 0, 8)):
        engine = _load(files["main"], files[name])
        try:
            _answer(engine, "dflash", 8)
            head = engine._heads[DrafterKind.DFLASH]
            assert (head.first_row, head.max_block) == (first_row, max_block)
            _, summary = _answer(engine, "dflash", 8)
            assert len(summary.drafted_by_position) == max_block   # never more than the block holds
        finally:
            engine.close()


def test_after_verified_and_rejected_blocks_the_drafters_context_is_a_fresh_ones(files, engine):
    """Random weights: nearly every drafted token is rejected, so each round rolls the main model back.
    The block the drafter then gives for the whole answer is the one a fresh engine that read it once gives."""
    prompt, summary = _answer(engine, "dflash", 6)
    assert summary.drafted > summary.accepted
    context = list(prompt) + list(summary.token_ids)
    head = engine._heads[DrafterKind.DFLASH]
    incremental, _ = head.block(context, head.max_block)
    drafter = files["dflash" if head.first_row else "dspark"]
    fresh = _load(files["main"], drafter)
    try:
        fresh_head = fresh._head(DrafterKind.DFLASH)
        fresh.main.eval(context[:-1])
        from_scratch, _ = fresh_head.block(context, fresh_head.max_block)
    finally:
        fresh.close()
    # one batch against several changes llama.cpp's CPU numerics slightly; a wrong injected row moves them far more
    assert np.abs(incremental - from_scratch).max() < 0.1
    head.forget()
    assert np.abs(head.block(context, head.max_block)[0] - from_scratch).max() < 0.1


def test_dsparks_confidence_head_scores_its_tokens(files):
    """DSpark's confidence head (a sigmoid per block row) is each drafted token's score, as llama.cpp's
    p-min reads it; DFlash, without one, scores a token by its top probability."""
    for name, has_confidence in (("dspark", True), ("dflash", False)):
        engine = _load(files["main"], files[name])
        try:
            prompt, summary = _answer(engine, "dflash", 6)
            head = engine._heads[DrafterKind.DFLASH]
            context = list(prompt) + list(summary.token_ids)
            logits, confidence = head.block(context, head.max_block)
            assert head.has_confidence is has_confidence and (confidence is not None) is has_confidence
            if has_confidence:
                assert confidence.shape == (len(logits),) and ((confidence > 0) & (confidence < 1)).all()
                seen, given = [], []
                real_block = head.block
                head.block = lambda *args: (out := real_block(*args), given.extend(out[1].tolist()))[0]
                original = engine._drafter

                def spy(kind):
                    drafter = original(kind)
                    real = drafter.draft
                    drafter.draft = lambda *args: (out := real(*args), seen.extend(out.scores))[0]
                    return drafter
                engine._drafter = spy
                try:
                    _answer(engine, "dflash", 6)
                finally:
                    del engine._drafter, head.block
                assert seen and set(seen) <= set(given)   # each token's score is its row's confidence
        finally:
            engine.close()


def test_sampled_answers_draft_and_repeat_with_the_seed(engine):
    sampling = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=11)
    _, first = _answer(engine, "dflash", 6, **sampling)
    _, again = _answer(engine, "dflash", 6, **sampling)
    assert first.drafted > 0 and first.token_ids == again.token_ids


def test_dflash_without_a_dflash_drafter_says_why(files):
    engine = _load(files["main"])
    try:
        with pytest.raises(DrafterUnavailableError, match="no DFlash drafter loaded"):
            list(engine.generate(GenerationRequest(prompt=[1, 50, 60], drafter=DrafterKind.DFLASH)))
    finally:
        engine.close()


def test_a_dflash_drafter_without_a_mask_token_is_refused(tmp_path, files, monkeypatch):
    from app.core.llama import dflash

    engine = _load(files["main"], files["dflash"])
    try:
        real = dflash.lib

        class NoMask:
            def __getattr__(self, name):
                return (lambda vocab: -1) if name == "llama_vocab_mask" else getattr(real(), name)
        monkeypatch.setattr(dflash, "lib", lambda: NoMask())
        with pytest.raises(IncompatibleDraftError, match="has no mask token"):
            DFlashHead(engine.main, engine.drafter_file)
    finally:
        monkeypatch.undo()
        engine.close()


# --- the auto policy prices a block as one pass --------------------------------------------------

def _policy(batch_times, learns: bool = False):
    """The auto policy on these batch times: fixed, or a cost model that learns from the rounds."""
    from app.core.speculation.costmodel import CostModel, CostProfile
    from app.core.speculation.policy import AutoPolicy

    profile = CostProfile(key={}, main_batch_s=batch_times)
    return AutoPolicy(SpeculationParams(draft_max=8, policy="auto"), CostModel.from_profile(profile) if learns else profile)


def test_a_block_is_asked_for_where_verifying_is_cheap_and_not_where_it_costs_a_step_per_token():
    step = 0.03
    assert _policy([step] * 9).draft_length(DFLASH) == 8            # a GPU: a batch costs about one step
    assert _policy([step * n for n in range(1, 10)]).draft_length(DFLASH) == 0   # a CPU: n steps


def test_the_policy_learns_what_a_block_costs_and_stops_asking_when_it_costs_too_much():
    from app.core.speculation.drafters import Draft

    step = 0.03
    policy = _policy([step] * 9, learns=True)
    assert policy._block_s() == pytest.approx(policy.BLOCK_PRIOR_STEPS * step) and policy.token_cost(DFLASH) == 0
    for _ in range(30):   # rounds whose block took 20 main steps
        policy.draft_length(DFLASH)
        draft = Draft()
        draft.add(5, None, DFLASH, 0.9)
        policy.observe(draft, 1, draft_s=20 * step, verify_s=step, context=100)
    assert policy._block_s() == pytest.approx(20 * step, rel=0.05)
    assert policy.draft_length(DFLASH) == 0


def test_a_blocks_rows_are_copied_out_whole_and_stay_when_the_drafter_decodes_again(engine, monkeypatch):
    """The block's rows sit one after another in llama.cpp's logits, so they are copied out in one go:
    each row is the one llama.cpp gives for its token, and a later block does not change them."""
    from app.core.llama.library import lib

    prompt, summary = _answer(engine, "dflash", 6)
    context = list(prompt) + list(summary.token_ids)
    head = engine._heads[DrafterKind.DFLASH]
    calls = []
    get_ith = lib().llama_get_logits_ith
    monkeypatch.setattr(lib(), "llama_get_logits_ith", lambda ctx, i: (calls.append(i), get_ith(ctx, i))[1])
    rows, _ = head.block(context, head.max_block)
    assert len(calls) == 2                     # the first row and the last, to see that they lie in one run
    each = np.stack([np.ctypeslib.as_array(get_ith(head._ctx, i), shape=(head.n_vocab,))
                     for i in range(head.max_block + head.first_row)])[head.first_row:]
    assert np.array_equal(rows, each)
    head.block(context[:-3], head.max_block)   # the drafter's next decode writes over llama.cpp's buffer
    assert np.array_equal(rows, each) and not np.array_equal(rows, np.ctypeslib.as_array(
        get_ith(head._ctx, head.first_row), shape=(head.n_vocab,)))
