"""Real models, end to end: Qwen2.5-Coder 1.5B with its 0.5B draft, and with Gemma 3 270M (another
vocabulary) (skipped when not present;
run ../shared/models/fetch-bench-models or set QUICKDRAFT_TEST_MODELS)."""

from __future__ import annotations

import pytest

from app.core.compare import first_difference, logit_margin
from app.core.engine import Engine
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from tests.conftest import real_model_dir

MODELS = real_model_dir()
pytestmark = [pytest.mark.real_models,
              pytest.mark.skipif(MODELS is None, reason="real models not present (see tests/real/__doc__)")]
MAIN = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
GEMMA = "gemma-3-270m-q4_k_m.gguf"
MESSAGES = [{"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number."}]


@pytest.fixture(scope="module")
def engine():
    e = Engine.load(ModelParams(str(MODELS / MAIN), n_ctx=1024, n_threads=2),
                    ModelParams(str(MODELS / DRAFT), n_ctx=1024, n_threads=2))
    yield e
    e.close()


def run(engine, drafter):
    engine.forget_cache()
    return list(engine.generate(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=40),
                                speculation=SpeculationParams(policy="fixed", draft_max=4), drafter=DrafterKind(drafter))))[-1]


def test_greedy_speculative_matches_the_main_model_or_parts_at_a_near_tie(engine):
    base, spec = run(engine, "none"), run(engine, "model")
    assert base.generated_tokens == spec.generated_tokens == 40
    diff = first_difference(base.token_ids, spec.token_ids)
    if diff is not None:  # quantized matmuls are not batch-invariant: only a near-tie may flip
        prompt = list(engine.prompt(MESSAGES).tokens)
        assert logit_margin(engine, prompt + list(base.token_ids[:diff])).margin < 0.5
    assert "def" in base.text
    assert spec.generated_tokens == spec.accepted + spec.main_tokens
    assert spec.acceptance_rate > 0.4


def test_gemma_drafts_for_qwen_through_text():
    """Another tokenizer type (SentencePiece for byte-level BPE): Gemma 3 270M drafts text that Qwen's
    tokenizer reads again (app/core/speculation/crossvocab.py); the answer is Qwen's own."""
    gemma = Engine.load(ModelParams(str(MODELS / MAIN), n_ctx=1024, n_threads=2),
                        ModelParams(str(MODELS / GEMMA), n_ctx=1024, n_threads=2))
    try:
        assert gemma.shared_vocab is not None and gemma.shared_vocab.shared > 50_000
        base, spec = run(gemma, "none"), run(gemma, "model")
        diff = first_difference(base.token_ids, spec.token_ids)
        if diff is not None:  # a near-tie flipped by batching, as above
            prompt = list(gemma.prompt(MESSAGES).tokens)
            assert logit_margin(gemma, prompt + list(base.token_ids[:diff])).margin < 0.5
        assert spec.accepted > 0 and [name for name, _, _ in spec.by_drafter] == ["model (other vocabulary)"]
    finally:
        gemma.close()
