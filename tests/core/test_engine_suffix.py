"""The suffix index through the engine, on real llama.cpp with tiny models: fed by answers, drafting
with the greedy answer unchanged, refused for another vocabulary, nothing read or written when off."""

from __future__ import annotations

import shutil

import pytest

from app.core.engine import Engine
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams, SuffixConfig
from app.core.errors import DrafterUnavailableError
from app.core.speculation.suffix_store import list_indexes

MESSAGES = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]
GREEDY = SamplingParams(max_tokens=40)


def answer(engine, drafter, messages=MESSAGES, spec=SpeculationParams(policy="fixed", draft_max=6)):
    summary = list(engine.generate(GenerationRequest(messages, sampling=GREEDY, speculation=spec,
                                                     drafter=drafter, empty_cache=True)))[-1]
    if engine.suffix is not None:
        engine.suffix.flush()
    return summary


@pytest.fixture
def config(tmp_path):
    return SuffixConfig(tmp_path / "suffix-index", 8 << 20)


def test_an_answer_fed_to_the_index_is_drafted_again_and_the_greedy_answer_is_unchanged(tiny_models, config):
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), suffix=config)
    try:
        plain = answer(engine, DrafterKind.NONE)
        assert engine.suffix.index.documents == 1   # the prompt and its answer, one document
        again = answer(engine, DrafterKind.SUFFIX)
        assert again.token_ids == plain.token_ids
        drafted, accepted = {name: (d, a) for name, d, a in again.by_drafter}[DrafterKind.SUFFIX]
        assert accepted > 0.8 * len(plain.token_ids) and accepted == drafted
        default = answer(engine, DrafterKind.LOOKUP_MODEL)   # no draft model: lookup, else the index
        assert default.token_ids == plain.token_ids and default.accepted > 0
        # the same conversation again feeds nothing new but the answer: the prompt was fed before
        assert engine.suffix.index.tokens < 3 * len(engine.prompt(MESSAGES).tokens) + 3 * len(plain.token_ids)
    finally:
        engine.close()
    reloaded = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), suffix=config)
    try:
        reloaded.suffix.flush()   # built on the writer thread
        assert reloaded.suffix.index.documents == 3   # every answer's document, read back from disk
        assert answer(reloaded, DrafterKind.SUFFIX).token_ids == plain.token_ids
    finally:
        reloaded.close()


def test_lookup_alone_never_asks_the_index(tiny_models, config):
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), suffix=config)
    try:
        answer(engine, DrafterKind.NONE)
        summary = answer(engine, DrafterKind.LOOKUP)
        assert DrafterKind.SUFFIX not in {name for name, _, _ in summary.by_drafter}
    finally:
        engine.close()


def test_a_model_of_another_vocabulary_is_refused(tiny_models, config, tmp_path):
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), suffix=config)
    answer(engine, DrafterKind.NONE)
    engine.close()
    impostor = tmp_path / "elsewhere" / tiny_models.main.name   # the same file name: the same index folder
    impostor.parent.mkdir()
    shutil.copy(tiny_models.other_vocab, impostor)
    other = Engine.load(ModelParams(str(impostor), n_ctx=512), suffix=config)
    try:
        assert other.suffix is None
        assert any("another vocabulary" in w for w in other.pair.warnings)
        with pytest.raises(DrafterUnavailableError, match="suffix index is off"):
            answer(other, DrafterKind.SUFFIX)
    finally:
        other.close()
    assert [s.documents for s in list_indexes(config.folder)] == [1]   # untouched


def test_with_the_index_off_nothing_is_read_or_written(tiny_models, config):
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512))
    try:
        answer(engine, DrafterKind.LOOKUP_MODEL)
        with pytest.raises(DrafterUnavailableError):
            answer(engine, DrafterKind.SUFFIX)
    finally:
        engine.close()
    assert not config.folder.exists()


def test_server_slots_share_the_index_and_each_feeds_its_own_conversation(tiny_models, config):
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), suffix=config)
    slot = engine.another_slot()
    try:
        answer(slot, DrafterKind.NONE)
        assert engine.suffix is slot.suffix and engine.suffix.index.documents == 1
    finally:
        slot.close()
        engine.close()


def test_a_comparisons_runs_feed_nothing(tiny_models, config):
    from app.core.compare import greedy_run

    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), suffix=config)
    try:
        tokens = engine.prompt(MESSAGES).tokens
        greedy_run(engine, tokens, DrafterKind.NONE, 16, SpeculationParams())
        greedy_run(engine, tokens, DrafterKind.SUFFIX, 16, SpeculationParams())
        engine.suffix.flush()
        assert engine.suffix.index.documents == 0
    finally:
        engine.close()


def test_beside_a_draft_model_prompt_lookup_learns_only_from_its_drafts(tiny_models, config):
    """Lookup learns from proposals it did not draft only where no draft model takes those rounds
    (PromptLookupDrafter._tell_unasked): the engine's default, with the index or without it."""
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), ModelParams(str(tiny_models.same), n_ctx=512),
                         suffix=config)
    try:
        with_model = engine._drafter(DrafterKind.LOOKUP_MODEL)
        assert with_model.drafters[0].tells_unasked is False
        assert engine._drafter(DrafterKind.LOOKUP).tells_unasked is True
        memory, engine.suffix = engine.suffix, None   # the index off for this run
        assert engine._drafter(DrafterKind.LOOKUP_MODEL).lookup.tells_unasked is False
        engine.suffix = memory
    finally:
        engine.close()
    alone = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), suffix=config)
    try:
        assert alone._drafter(DrafterKind.LOOKUP_MODEL).drafters[0].tells_unasked is True
    finally:
        alone.close()
