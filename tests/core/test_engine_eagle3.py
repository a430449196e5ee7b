"""An EAGLE-3 drafter through the whole loop: chosen as the pair's draft, it drafts for the main model
from the main model's hidden states (the default choice drafts with it), greedy answers stay the main
model's own, its drafts count as EAGLE-3's, rounds that reject some drafts leave its context as a fresh
one would be, and choosing EAGLE-3 with no EAGLE-3 drafter loaded says why."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.engine import Engine
from app.core.errors import DrafterUnavailableError
from app.core.frontdoor import GenerationRequest
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.eagle3 import Eagle3Head
from app.core.params import DEFAULT_DRAFTER, DrafterKind, ModelParams
from tests.core.llama.mtp_steering import answer, fresh_start, run_steered

PROMPT = "the cat is on the mat and the dog sat by the door"
DRAFTER = TinySpec(architecture="eagle3", name="tiny-eagle3", n_layer=1, target_layers=(0, 1, 1))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("eagle3-engine")
    return write_tiny_model(d / "main.gguf", TinySpec()), write_tiny_model(d / "eagle3.gguf", DRAFTER)


def _load(main, drafter=None) -> Engine:
    params = dict(n_gpu_layers=0, n_ctx=256, n_threads=1)
    return Engine.load(ModelParams(str(main), **params), ModelParams(str(drafter), **params) if drafter else None)


@pytest.fixture(scope="module")
def engine(files):
    e = _load(*files)
    yield e
    e.close()


def _answer(engine, drafter: str, draft_max: int = 4, n: int = 32, **options):
    return answer(engine, PROMPT, drafter, draft_max, n, **options)


def test_the_drafter_file_is_the_pairs_draft_and_the_default_drafts_with_it(engine):
    pair = engine.pair
    assert engine.draft is None and engine.drafter_file is not None
    assert pair.drafts_as is DrafterKind.EAGLE3 and pair.draft_name == "tiny-eagle3"
    assert pair.who_drafts(DEFAULT_DRAFTER) is DrafterKind.EAGLE3
    assert pair.who_drafts(DrafterKind.LOOKUP) is DrafterKind.LOOKUP
    assert {name for name, _ in pair.placement} == {"main", "draft"}


@pytest.mark.parametrize("draft_max", [1, 2, 4])
def test_greedy_answers_are_the_main_models_own(engine, draft_max):
    _, plain = _answer(engine, "none")
    _, drafted = _answer(engine, "eagle3", draft_max)
    assert drafted.token_ids == plain.token_ids
    assert drafted.drafted > 0 and plain.drafted == 0
    assert len(drafted.drafted_by_position) == draft_max


def test_the_drafts_are_counted_as_eagle3(engine):
    _, summary = _answer(engine, DEFAULT_DRAFTER.value, 3)
    assert summary.drafted > 0
    assert summary.by_drafter == (("eagle3", summary.drafted, summary.accepted),)
    assert isinstance(engine._heads[DrafterKind.EAGLE3], Eagle3Head)


@pytest.mark.parametrize("right", [1, 2, 5])
def test_after_rejected_drafts_the_drafters_context_is_a_fresh_ones(files, engine, right):
    """Rounds accept some drafts and reject others, the main model rolled back each round: the drafter's
    logits for the whole answer are then those of a fresh engine that read the same tokens once."""
    prompt, plain, head = run_steered(engine, _answer, right, kind="eagle3")
    context = list(prompt) + list(plain.token_ids)
    assert engine.main.cached == context[:-1] and head.can_follow(context)
    incremental = head.start(context).copy()
    from_scratch = fresh_start(lambda: _load(*files), "eagle3", context)
    # one batch against several changes llama.cpp's CPU numerics slightly; a wrong pair moves them by far more
    assert np.abs(incremental - from_scratch).max() < 0.1


def test_sampled_answers_draft_and_repeat_with_the_seed(engine):
    """Sampling: the drafter samples its tokens from its own distribution (so the loop knows q, and the
    answer is drawn from the main model's distribution whatever it proposes); one seed, one answer."""
    _, first = _answer(engine, "eagle3", 4, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    _, again = _answer(engine, "eagle3", 4, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=7)
    assert first.drafted > 0 and first.token_ids == again.token_ids


def test_eagle3_without_an_eagle3_drafter_says_why(files):
    main, _ = files
    engine = _load(main)
    try:
        with pytest.raises(DrafterUnavailableError, match="no EAGLE-3 drafter loaded"):
            list(engine.generate(GenerationRequest(prompt=[1, 50, 60], drafter=DrafterKind.EAGLE3)))
    finally:
        engine.close()
