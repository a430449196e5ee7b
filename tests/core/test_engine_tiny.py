"""The engine on real llama.cpp with tiny GGUF models written by the tests."""

from __future__ import annotations

import statistics
import threading

import numpy as np
import pytest

from app.core.engine import Engine, read_pair
from app.core.errors import IncompatibleDraftError, ModelFileError, ModelLoadError, PromptTooLongError
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.binding import LlamaModel, LlamaSession
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.core.speculation.events import Round
from app.core.speculation.events import Origin, Round, Started, StopReason, Summary, TokenPiece

MESSAGES = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]
GREEDY = SamplingParams(max_tokens=48)


@pytest.fixture(scope="module")
def engines(tiny_models):
    made = {
        "none": Engine.load(ModelParams(str(tiny_models.main), n_ctx=512)),
        "same": Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), ModelParams(str(tiny_models.same), n_ctx=512)),
        "other": Engine.load(ModelParams(str(tiny_models.main), n_ctx=512), ModelParams(str(tiny_models.other), n_ctx=512)),
    }
    yield made
    for engine in made.values():
        engine.close()


def generate(engine, drafter=DrafterKind.MODEL, sampling=GREEDY, spec=SpeculationParams(policy="fixed", draft_max=4), **kw):
    return list(engine.generate(GenerationRequest(MESSAGES, sampling=sampling, speculation=spec,
                                                  drafter=DrafterKind(drafter), **kw)))


def test_batched_logits_rows_match_one_token_at_a_time(tiny_models):
    model = LlamaModel(ModelParams(str(tiny_models.main)))
    session = LlamaSession(model, 256, n_threads=1)
    tokens = model.tokenize("the cat is on the mat")
    batched = session.eval(tokens, all_logits=True).copy()
    session.truncate(0)
    single = np.stack([session.eval([t])[-1].copy() for t in tokens])
    # row i belongs to token i (the F16 KV cache makes the last bits differ with batch shape)
    np.testing.assert_allclose(batched, single, rtol=0, atol=0.02)
    assert np.abs(batched[1:] - batched[:-1]).max() > 1.0
    session.close()
    model.close()


@pytest.mark.parametrize("draft", ["same", "other"])
@pytest.mark.parametrize("draft_max", [1, 4, 8])
def test_greedy_speculative_output_is_the_main_models(engines, draft, draft_max):
    base = generate(engines["none"], "none")[-1]
    spec = generate(engines[draft], spec=SpeculationParams(policy="fixed", draft_max=draft_max))[-1]
    assert spec.token_ids == base.token_ids
    assert spec.text == base.text


def test_same_weights_draft_accepts_everything_other_weights_almost_nothing(engines):
    same = generate(engines["same"])[-1]
    other = generate(engines["other"])[-1]
    assert same.drafted > 20 and same.accepted == same.drafted
    assert other.drafted > 20 and other.acceptance_rate < 0.2


@pytest.mark.parametrize("draft", ["same", "other"])
def test_kv_caches_hold_exactly_the_accepted_prefix_after_each_round(engines, draft):
    engine = engines[draft]
    prompt = list(engine.prompt(MESSAGES).tokens)
    snapshots = []
    for event in engine.generate(GenerationRequest(MESSAGES, sampling=GREEDY,
                                                   speculation=SpeculationParams(policy="fixed", draft_max=4))):
        if isinstance(event, Round):
            snapshots.append((event.generated_tokens, list(engine.main.cached), engine.main.kv_positions(),
                              list(engine.draft.cached), engine.draft.kv_positions()))
    context = prompt + list(event.token_ids)
    assert len(snapshots) > 5
    for generated, main_cached, main_kv, draft_cached, draft_kv in snapshots:
        accepted = context[: len(prompt) + generated]
        # the main cache: everything but the newest token, which the next verify batch decodes
        assert main_cached == accepted[:-1]
        assert main_kv == (0, len(accepted) - 2)
        assert draft_cached == accepted[: len(draft_cached)]
        assert draft_kv[1] == len(draft_cached) - 1


def test_counters_add_up_on_llama(engines):
    events = generate(engines["other"], sampling=SamplingParams(max_tokens=33))
    s = events[-1]
    assert isinstance(s, Summary)
    assert s.generated_tokens == 33 == s.accepted + s.main_tokens
    assert sum(len(e.token_ids) for e in events if isinstance(e, TokenPiece)) == 33
    assert sum(len(e.token_ids) for e in events if isinstance(e, TokenPiece) and e.origin is Origin.DRAFT) == s.accepted
    assert s.ttft_s > 0 and s.generation_tps > 0 and s.prompt_tps > 0


def test_sampling_with_a_seed_replays_and_respects_the_filters(engines):
    sampling = SamplingParams(temperature=0.8, top_k=5, top_p=0.9, min_p=0.05, seed=42, max_tokens=30)
    a = generate(engines["other"], sampling=sampling)[-1]
    b = generate(engines["other"], sampling=sampling)[-1]
    c = generate(engines["other"], sampling=SamplingParams(**{**vars(sampling), "seed": 43}))[-1]
    assert a.token_ids == b.token_ids
    assert a.token_ids != c.token_ids
    assert a.generated_tokens == 30


def test_stop_string_and_max_tokens(engines):
    full = generate(engines["same"])[-1]
    stop = full.text[10:13]
    stopped = generate(engines["same"], sampling=SamplingParams(max_tokens=48, stop=(stop,)))[-1]
    assert stopped.stop_reason is StopReason.STOP_STRING
    assert stopped.text == full.text[: full.text.index(stop)]
    assert generate(engines["same"], sampling=SamplingParams(max_tokens=5))[-1].generated_tokens == 5


def test_cancel_is_checked_every_round(engines):
    cancel = threading.Event()
    rounds = 0
    for event in engines["other"].generate(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=200),
                                                             cancel=cancel)):
        if isinstance(event, Round):
            rounds += 1
            cancel.set()
    assert event.stop_reason is StopReason.CANCEL
    assert rounds == 1


def test_prompt_longer_than_context_is_a_clear_error(tiny_models):
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=64))
    long_messages = [{"role": "user", "content": "the cat " * 200}]
    with pytest.raises(PromptTooLongError, match=f"context holds {engine.main.n_ctx}"):
        list(engine.generate(GenerationRequest(long_messages)))
    assert engine.main.cached == []  # nothing was decoded
    assert generate(engine, "none", sampling=SamplingParams(max_tokens=3))[-1].generated_tokens == 3
    engine.close()


def test_a_second_generation_reuses_the_cached_prompt(engines):
    engine = engines["none"]
    first = generate(engine, "none")[-1]
    again = generate(engine, "none")[-1]
    assert first.prompt_tokens == again.prompt_tokens
    assert again.prompt_tokens_evaluated == 1 < first.prompt_tokens
    assert again.token_ids == first.token_ids


def test_chat_template_and_plain_fallback(tiny_models):
    with_template = Engine.load(ModelParams(str(tiny_models.main), n_ctx=256))
    without = Engine.load(ModelParams(str(tiny_models.no_template), n_ctx=256))
    text_with = with_template.detokenize(with_template.prompt(MESSAGES).tokens)
    text_without = without.detokenize(without.prompt(MESSAGES).tokens)
    assert "<|im_start|>user" in text_with and text_with.endswith("<|im_start|>assistant\n")
    assert "User: the cat" in text_without and text_without.endswith("Assistant:")
    with_template.close()
    without.close()


# --- bad input -------------------------------------------------------------------------------------

def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        Engine.load(ModelParams(str(tmp_path / "nope.gguf")))


def test_not_a_gguf_file(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"<html>404 Not Found</html>" * 10)
    with pytest.raises(ModelFileError, match="not a GGUF"):
        Engine.load(ModelParams(str(bad)))


@pytest.mark.parametrize("keep", [0.5, 0.999, 0.01])
def test_truncated_gguf(tiny_models, tmp_path, keep):
    data = tiny_models.main.read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(ModelFileError, match="truncated|damaged"):
        Engine.load(ModelParams(str(cut)))


def test_unknown_architecture(tmp_path):
    path = write_tiny_model(tmp_path / "alien.gguf", TinySpec(architecture="notanarch"))
    with pytest.raises(ModelLoadError, match="notanarch"):
        Engine.load(ModelParams(str(path)))


def test_the_start_event_says_what_the_cache_reused_and_every_event_is_stamped(engines):
    engine = engines["same"]
    engine.forget_cache()
    first, again = generate(engine), generate(engine)
    for events in (first, again):
        started, summary = events[0], events[-1]
        assert isinstance(started, Started) and started.at_s == 0.0
        assert started.prompt_tokens == summary.prompt_tokens
        assert started.evaluated_tokens == summary.prompt_tokens_evaluated
        stamps = [e.at_s for e in events]
        assert stamps == sorted(stamps) and summary.at_s == pytest.approx(summary.ttft_s + summary.generation_s)
        assert all(e.at_s >= summary.ttft_s for e in events if isinstance(e, (Round, TokenPiece)))
    assert first[0].cached_tokens == 0
    assert again[0].cached_tokens == again[0].prompt_tokens - 1   # the last prompt token is decoded again


def test_incompatible_draft_is_refused_with_the_reason(tiny_models):
    with pytest.raises(IncompatibleDraftError, match="MTP drafter for gemma4 models"):
        Engine.load(ModelParams(str(tiny_models.main)), ModelParams(str(tiny_models.incompatible)))


def test_one_pair_check_reads_the_files_and_refuses_before_loading(tiny_models, monkeypatch):
    """What the window's worker checks before unloading the working pair is what the engine checks."""
    with pytest.raises(IncompatibleDraftError) as refused:
        read_pair(str(tiny_models.main), str(tiny_models.incompatible))
    monkeypatch.setattr("app.core.engine._open", lambda *a: pytest.fail("a model was loaded"))
    with pytest.raises(IncompatibleDraftError) as at_load:
        Engine.load(ModelParams(str(tiny_models.main)), ModelParams(str(tiny_models.incompatible)))
    assert str(at_load.value) == str(refused.value)
    assert "MTP drafter for gemma4 models" in str(refused.value)
    _, draft, warnings = read_pair(str(tiny_models.main), str(tiny_models.bigger))
    assert draft is not None and any("not smaller" in w for w in warnings)
    assert read_pair(str(tiny_models.main), None)[1:] == (None, [])


def test_draft_larger_than_main_is_a_warning(tiny_models):
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=128), ModelParams(str(tiny_models.bigger), n_ctx=128))
    assert any("not smaller" in w for w in engine.warnings)
    engine.close()


def test_model_too_large_for_memory(tiny_models, monkeypatch):
    monkeypatch.setattr("app.core.engine.total_memory_bytes", lambda: 100_000)
    with pytest.raises(ModelLoadError, match="needs about .* this machine has"):
        Engine.load(ModelParams(str(tiny_models.main)))


def test_each_answer_estimates_its_speedup_from_the_learned_costs(tiny_models, monkeypatch):
    """Under auto the cost model knows what a step of the main model alone costs: the Summary says
    how much faster the answer was (estimated); a policy without a cost model says nothing. The step
    is the one the policy gives the summary, unless the answer timed three rounds alone itself (then
    theirs), so the check does not hang on this machine's load (it compared the two, 20% apart at most)."""
    from app.core.engine import Engine
    from app.core.params import ModelParams, SamplingParams, SpeculationParams
    from app.core.speculation import policy, stats

    given = []
    learned_step = policy.AutoPolicy.main_step_s
    monkeypatch.setattr(policy.AutoPolicy, "main_step_s",
                        lambda self, context: given.append(learned_step(self, context)) or given[-1])
    engine = Engine.load(ModelParams(str(tiny_models.main), n_gpu_layers=0, n_ctx=256, n_threads=1),
                         ModelParams(str(tiny_models.same), n_gpu_layers=0, n_ctx=256, n_threads=1))
    try:
        prompt = engine.main.model.tokenize("the cat is on the mat and the dog is on the mat")
        events = list(engine.generate(GenerationRequest(prompt=prompt, sampling=SamplingParams(max_tokens=24))))
        auto, alone = events[-1], [e.verify_s for e in events if isinstance(e, Round) and e.drafted == 0]
        step = statistics.median(alone) if len(alone) >= stats.ALONE_ROUNDS else given[-1]
        assert given[-1] and auto.estimated_speedup == pytest.approx(step * (auto.generated_tokens - 1) / auto.generation_s)
        assert auto.to_dict()["estimated_speedup"] == auto.estimated_speedup
        fixed = list(engine.generate(GenerationRequest(prompt=prompt, sampling=SamplingParams(max_tokens=24),
                                                       speculation=SpeculationParams(policy="fixed", draft_max=4))))[-1]
        assert fixed.estimated_speedup is None
    finally:
        engine.close()


COPYING = [{"role": "user", "content": "copy this: the cat is on the mat and the dog is in the house, "
                                       "the cat is on the mat and the dog is in the house"}]


@pytest.mark.parametrize("drafter", [DrafterKind.LOOKUP, DrafterKind.LOOKUP_MODEL])
@pytest.mark.parametrize("spec", [SpeculationParams(policy="fixed", draft_max=8), SpeculationParams(draft_max=16)])
def test_greedy_output_is_the_main_models_with_chained_lookup(engines, drafter, spec):
    """Lookup copies on from its match and looks up again where the copy reaches the end of the text;
    whatever it proposes, on real llama.cpp the greedy answer is the main model's alone."""
    base = list(engines["none"].generate(GenerationRequest(COPYING, sampling=GREEDY, drafter=DrafterKind.NONE)))[-1]
    spec_run = list(engines["same"].generate(GenerationRequest(COPYING, sampling=GREEDY, speculation=spec,
                                                               drafter=drafter)))[-1]
    assert spec_run.token_ids == base.token_ids and spec_run.text == base.text
    if spec.policy == "fixed":
        assert spec_run.drafted > 0
