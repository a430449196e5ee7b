"""A draft of another vocabulary on real llama.cpp (app/core/speculation/crossvocab.py), with tiny models
of two tokenizer types: SentencePiece (the tests' usual vocabulary) and byte-level BPE (as Qwen's). The
greedy answer is the main model's own with a random draft and with one steered to the answer (accepted
and rejected drafts); sampling drafts on the shared tokens; the pair check offers such a draft."""

from __future__ import annotations

import pytest

from app.core.engine import Engine, read_pair
from app.core.gguf.info import read_gguf_info
from app.core.gguf.pair_check import OTHER_VOCABULARY_NOTE, check_pair
from app.core.gguf.shared_vocab import token_bytes
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.binding import LlamaModel
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.core.speculation.acceptance import CROSS
from app.core.speculation.crossvocab import draft_prompt
from app.core.speculation.events import run_to_summary
from tests.core.speculation.crossvocab_steering import SteeredDraft

MESSAGES = [{"role": "user", "content": "the cat is on the mat and the dog is in the house, caf\u00e9 \u00fcber"}]
FIXED = SpeculationParams(policy="fixed", draft_max=4)


@pytest.fixture(scope="module")
def bpe(tmp_path_factory):
    d = tmp_path_factory.mktemp("bpe")
    return {"draft": write_tiny_model(d / "bpe-draft.gguf", TinySpec(seed=5, bpe_vocab=True, chat_tokens=True)),
            "main": write_tiny_model(d / "bpe-main.gguf", TinySpec(seed=6, bpe_vocab=True, chat_tokens=True))}


@pytest.fixture(scope="module")
def engines(tiny_models, bpe):
    """"spm+bpe": the usual SentencePiece main with a BPE draft; "bpe+spm": the other way round."""
    made = {"spm+bpe": Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), ModelParams(str(bpe["draft"]), n_ctx=512)),
            "bpe+spm": Engine.load(ModelParams(str(bpe["main"]), n_ctx=512), ModelParams(str(tiny_models.main), n_ctx=512))}
    yield made
    for engine in made.values():
        engine.close()


def answer(engine, drafter=DrafterKind.MODEL, sampling=SamplingParams(max_tokens=48), spec=FIXED, prompt=None):
    return run_to_summary(engine.generate(GenerationRequest(MESSAGES if prompt is None else (), prompt=prompt,
                                                            sampling=sampling, speculation=spec, drafter=DrafterKind(drafter))))


def test_a_draft_of_another_vocabulary_is_offered_with_what_it_costs(tiny_models, bpe):
    main, draft = read_gguf_info(tiny_models.main), read_gguf_info(bpe["draft"])
    pair = check_pair(main, draft)
    assert pair.compatible and pair.other_vocabulary and OTHER_VOCABULARY_NOTE in pair.warnings
    assert "tokenizer types" in pair.vocabulary_differences[0]
    other = check_pair(main, read_gguf_info(tiny_models.other_vocab))   # SentencePiece too, other ids
    assert other.compatible and other.other_vocabulary and "vocabularies differ" in other.vocabulary_differences[0]
    same = check_pair(main, read_gguf_info(tiny_models.other))
    assert same.compatible and not same.other_vocabulary and OTHER_VOCABULARY_NOTE not in same.warnings
    assert read_pair(str(tiny_models.main), str(bpe["draft"]))[2][0] == OTHER_VOCABULARY_NOTE


@pytest.mark.parametrize("which", ["main", "draft"])
def test_token_texts_read_from_the_file_are_the_pieces_llama_cpp_renders(tiny_models, bpe, which):
    for path in (tiny_models.main, bpe[which]):
        model = LlamaModel(ModelParams(str(path)))
        try:
            texts = token_bytes(read_gguf_info(path))
            assert [t or b"" for t in texts] == [b"" if model.is_control(i) else model.piece(i)
                                                 for i in range(model.n_vocab)]
        finally:
            model.close()


def test_the_engine_maps_the_shared_tokens_once_at_load(engines):
    for engine in engines.values():
        assert engine.shared_vocab is not None and engine.shared_vocab.shared > 250
        assert "tokens are main-model tokens too" in engine.shared_vocab.describe()


@pytest.mark.parametrize("pair", ["spm+bpe", "bpe+spm"])
@pytest.mark.parametrize("drafter", ["model", "lookup+model"])
@pytest.mark.parametrize("draft_max", [1, 4])
def test_greedy_answer_is_the_main_models_with_a_draft_of_another_vocabulary(engines, pair, drafter, draft_max):
    alone = answer(engines[pair], "none")
    spec = answer(engines[pair], drafter, spec=SpeculationParams(policy="fixed", draft_max=draft_max))
    assert spec.error is None and spec.token_ids == alone.token_ids and spec.text == alone.text
    assert spec.drafted > 0 and CROSS in [name for name, _, _ in spec.by_drafter]


@pytest.mark.parametrize("pair", ["spm+bpe", "bpe+spm"])
def test_greedy_answer_is_the_main_models_with_a_draft_steered_to_it(engines, pair):
    """The draft spells the main model's answer in its own tokens (every fifth one wrong): its text is
    read by the main model's tokenizer, accepted where right, and the draft follows the answer again."""
    engine = engines[pair]
    prompt = list(engine.prompt(MESSAGES).tokens)
    alone = answer(engine, "none", prompt=prompt)
    text = b"".join(engine.main.model.piece(t) for t in alone.token_ids)
    real = engine.draft
    start = len(draft_prompt(engine.main.model, real.model, prompt))
    engine.draft = SteeredDraft(real, real.model, start, text, real.model.eos, wrong_every=5)
    try:
        spec = answer(engine, "model", prompt=prompt)
    finally:
        engine.draft = real
    assert spec.token_ids == alone.token_ids
    assert spec.accepted > 0.3 * spec.drafted and spec.accepted < spec.drafted
    assert {name for name, _, _ in spec.by_drafter} == {CROSS}


def test_sampling_drafts_on_the_shared_tokens_and_replays_with_a_seed(engines):
    engine = engines["spm+bpe"]
    sampling = SamplingParams(temperature=0.8, seed=7, max_tokens=48)
    first, again = answer(engine, sampling=sampling), answer(engine, sampling=sampling)
    assert first.error is None and first.drafted > 0 and first.generated_tokens == 48
    assert first.token_ids == again.token_ids


def test_the_auto_policy_times_the_draft_and_calibration_measures_it(engines):
    engine = engines["bpe+spm"]
    engine.costs.forget()
    answer(engine, spec=SpeculationParams())   # auto: the draft's step is timed after the answer
    assert engine.costs.model(SpeculationParams().batch_max).draft_step_s is not None
    profile = engine.costs.profile(5, recalibrate=True)
    assert profile.draft_step_s > 0
    engine.costs.forget()
