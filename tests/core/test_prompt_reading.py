"""A long prompt is read in chunks with a Reading after each (how far, how fast), so a front end can show
progress where a long conversation read again takes a minute; the answer is the one a prompt read at
once gives, and a short prompt sends no Reading at all."""

from __future__ import annotations

import pytest

from app.core.engine import Engine
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams
from app.core.speculation import loop
from app.core.speculation.events import Reading, TokenPiece


@pytest.fixture(scope="module")
def engine(tiny_models):
    e = Engine.load(ModelParams(str(tiny_models.main), n_gpu_layers=0, n_ctx=2048, n_threads=1))
    yield e
    e.close()


def _events(engine, prompt):
    engine.forget_cache()
    request = GenerationRequest(prompt=prompt, drafter=DrafterKind.NONE, sampling=SamplingParams(max_tokens=12))
    return list(engine.generate(request))


def test_a_long_prompt_is_read_in_chunks_each_followed_by_a_reading(engine, monkeypatch):
    prompt = (engine.main.model.tokenize("the cat is on the mat and the dog sat by the door ") * 90)[:1200]
    events = _events(engine, prompt)
    readings = [e for e in events if isinstance(e, Reading)]
    assert [(r.done, r.total) for r in readings] == [(512, 1200), (1024, 1200), (1200, 1200)]
    assert all(a.at_s <= b.at_s for a, b in zip(readings, readings[1:])) and readings[-1].tokens_per_s > 0
    first_piece = next(i for i, e in enumerate(events) if isinstance(e, TokenPiece))
    assert events.index(readings[-1]) < first_piece   # all read before the first token
    monkeypatch.setattr(engine, "read_chunk", 10_000)   # the same prompt read at once
    at_once = _events(engine, prompt)
    assert not [e for e in at_once if isinstance(e, Reading)]
    assert at_once[-1].token_ids == events[-1].token_ids


def test_a_short_prompt_sends_no_reading(engine):
    events = _events(engine, engine.main.model.tokenize("the cat is on the mat"))
    assert not [e for e in events if isinstance(e, Reading)] and events[-1].error is None


def test_a_server_slot_reads_in_smaller_chunks_so_the_others_wait_less(engine, monkeypatch):
    """Slots step in turn: a slot's chunk is what another slot's request waits for at most."""
    prompt = (engine.main.model.tokenize("the cat is on the mat and the dog sat by the door ") * 40)[:300]
    monkeypatch.setattr(engine, "read_chunk", loop.SHARED_READ_CHUNK)
    readings = [(e.done, e.total) for e in _events(engine, prompt) if isinstance(e, Reading)]
    assert readings == [(128, 300), (256, 300), (300, 300)]


def test_the_servers_slots_read_in_shared_chunks_and_a_single_slot_in_whole_batches(tiny_models):
    from app.server.slots import SlotPool

    def opened():
        return Engine.load(ModelParams(str(tiny_models.main), n_gpu_layers=0, n_ctx=256, n_threads=1))

    for limit, chunk in ((2, loop.SHARED_READ_CHUNK), (1, loop.READ_CHUNK)):
        first = opened()
        pool = SlotPool(opened, limit, first=first)
        try:
            pool.open_all()
            assert [slot.engine.read_chunk for slot in pool.slots] == [chunk] * limit
        finally:
            pool.close()
            first.close()
