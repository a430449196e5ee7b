"""A separate MTP drafter file (Gemma 4's "assistant") drafts for the main model it was made for: it
shares the main context's memory (llama.cpp's ctx_other), greedy answers are exactly the main model's
alone, and every other pairing of it is refused with a message, before anything loads."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.engine import Engine
from app.core.errors import IncompatibleDraftError, ModelLoadError
from app.core.gguf.info import read_gguf_info
from app.core.gguf.pair_check import check_pair
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama import mtp
from app.core.params import DrafterKind, ModelParams
from app.core.speculation.acceptance import MTP
from tests.core.llama.mtp_steering import answer, fresh_start, run_steered

PROMPT = "the cat is on the mat and the dog is in the house of the cat"


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    d = tmp_path_factory.mktemp("gemma4")
    main = write_tiny_model(d / "gemma4.gguf", TinySpec(architecture="gemma4", name="tiny-gemma4"))
    assistant = write_tiny_model(d / "gemma4-assistant.gguf",
                                 TinySpec(architecture="gemma4-assistant", name="tiny-gemma4-assistant", seed=1))
    wider = write_tiny_model(d / "gemma4-wide.gguf", TinySpec(architecture="gemma4", name="tiny-gemma4-wide",
                                                              n_embd=128))
    return main, assistant, wider


def _load(main, draft=None) -> Engine:
    return Engine.load(ModelParams(str(main), n_gpu_layers=0, n_ctx=256, n_threads=1),
                       ModelParams(str(draft), n_gpu_layers=0, n_ctx=256, n_threads=1) if draft else None)


@pytest.fixture(scope="module")
def engine(gemma):
    main, assistant, _ = gemma
    e = _load(main, assistant)
    yield e
    e.close()


def _answer(engine, drafter: str, draft_max: int = 4, n: int = 32, **options):
    return answer(engine, PROMPT, drafter, draft_max, n, **options)


def test_the_pairing_check_knows_an_mtp_drafter(gemma, tiny_models):
    main, assistant, wider = gemma
    drafter = read_gguf_info(assistant)
    assert drafter.is_mtp_drafter and drafter.n_embd_out == read_gguf_info(main).n_embd
    assert check_pair(read_gguf_info(main), drafter).compatible
    other = check_pair(read_gguf_info(tiny_models.main), drafter)
    assert not other.compatible and "MTP drafter for gemma4 models" in other.message()
    size = check_pair(read_gguf_info(wider), drafter)
    assert not size.compatible and "another size of gemma4" in size.message()
    itself = check_pair(drafter, read_gguf_info(main))
    assert not itself.compatible and "not a model that answers" in itself.message()


def test_an_mtp_drafter_cannot_be_loaded_as_the_main_model_or_for_another_one(gemma, tiny_models):
    main, assistant, wider = gemma
    with pytest.raises(ModelLoadError, match="is an MTP drafter, not a model that answers"):
        _load(assistant)
    with pytest.raises(IncompatibleDraftError, match="another size of gemma4"):
        _load(wider, assistant)
    with pytest.raises(IncompatibleDraftError, match="MTP drafter for gemma4 models"):
        _load(tiny_models.main, assistant)


@pytest.mark.parametrize("draft_max", [1, 2, 4])
def test_greedy_answers_with_the_mtp_drafter_are_the_main_models_own(engine, draft_max):
    _, plain = _answer(engine, "none")
    _, drafted = _answer(engine, "mtp", draft_max)
    assert drafted.token_ids == plain.token_ids
    assert drafted.drafted > 0 and plain.drafted == 0
    assert len(drafted.drafted_by_position) == draft_max


def test_the_pair_drafts_with_mtp_whatever_model_drafter_is_asked(engine):
    """The MTP drafter is the pair's draft: "model" and "lookup+model" (the default) draft with it."""
    seen = []
    original = engine._drafter

    def spy(kind):
        drafter = original(kind)
        seen.append(getattr(drafter, "name", None))
        return drafter

    engine._drafter = spy
    try:
        _, plain = _answer(engine, "none")
        for asked in ("model", "lookup+model"):
            _, summary = _answer(engine, asked)
            assert summary.token_ids == plain.token_ids and summary.drafted > 0
    finally:
        del engine._drafter
    assert seen == [None, MTP, MTP]
    assert engine.draft is None and engine.pair.drafts_as is DrafterKind.MTP and engine.pair.draft_path is not None
    assert {name for name, _ in engine.pair.placement} == {"main", "draft"}


@pytest.mark.parametrize("right", [1, 2, 5])
def test_after_rejected_drafts_the_drafter_sees_what_a_fresh_main_model_gives(gemma, engine, right):
    """The assistant reads the main model's cache and hidden states: after rounds that accept some
    drafts and reject others (the main cache rolled back each round), its logits for the answer are
    those of a fresh engine that read the same tokens once."""
    prompt, plain, head = run_steered(engine, _answer, right)
    assert isinstance(head, mtp.AssistantHead)

    context = list(prompt) + list(plain.token_ids)
    assert engine.main.cached == context[:-1] and head.can_follow(context)
    incremental = head.start(context).copy()

    main, assistant, _ = gemma
    from_scratch = fresh_start(lambda: _load(main, assistant), "mtp", context)
    # one batch against several changes llama.cpp's CPU numerics slightly; a wrong cache moves them by far more
    assert np.abs(incremental - from_scratch).max() < 0.1


def test_the_auto_policy_with_the_mtp_drafter_gives_the_main_models_answer(engine):
    _, plain = _answer(engine, "none")
    _, auto = _answer(engine, "mtp", draft_max=8, policy="auto")
    assert auto.token_ids == plain.token_ids
