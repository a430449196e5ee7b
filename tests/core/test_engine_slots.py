"""Engine.another_slot: a server slot's engine on the same loaded models, with contexts of its own."""

from __future__ import annotations

from app.core.engine import Engine
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.core.speculation.events import run_to_summary

MESSAGES = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]


def answer(engine: Engine, messages=MESSAGES) -> str:
    request = GenerationRequest(messages, sampling=SamplingParams(max_tokens=24), drafter=DrafterKind.MODEL,
                                speculation=SpeculationParams(policy="fixed", draft_max=4))
    return run_to_summary(engine.generate(request)).text


def test_a_slot_shares_the_models_and_what_is_learned_but_not_the_caches(tiny_models):
    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=512, n_threads=1),
                         ModelParams(str(tiny_models.same), n_ctx=512, n_threads=1))
    try:
        expected = answer(engine)
        slot = engine.another_slot()
        try:
            assert slot.main.model is engine.main.model and slot.draft.model is engine.draft.model
            assert slot.main is not engine.main and slot.draft is not engine.draft
            assert slot.main.threads is engine.main.threads and slot.draft.threads is engine.draft.threads
            assert slot.costs is engine.costs and slot.acceptance is engine.acceptance
            assert slot.cached_length == 0 < engine.cached_length
            assert answer(slot) == expected
            cached = engine.main.cached[:]
            answer(slot, [{"role": "user", "content": "a dog"}])
            assert engine.main.cached == cached          # a slot's answer leaves the other caches alone
            tokens = engine.prompt(MESSAGES).tokens
            assert engine.cached_prefix(tokens) == len(tokens) and slot.cached_prefix(tokens) < len(tokens)
        finally:
            slot.close()
        assert answer(engine) == expected                # closing a slot keeps the models
    finally:
        engine.close()
