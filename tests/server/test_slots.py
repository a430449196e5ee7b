"""Slots (app/server/slots.py): several requests answered at once, a short answer not held behind a long
one, each answer the one it would be alone, each client's cache its own, /slots and /metrics per slot."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from app.core.engine import Engine
from app.core.params import DrafterKind, ModelParams, SpeculationParams
from app.server.api import ApiError, parse_chat
from app.server.slots import ThreadedJobs
from app.server.streams import summary_of
from app.server.worker import Failed
from tests.server.conftest import N_CTX, greedy_text, serving

LONG_PROMPT = [{"role": "user", "content": "the house is in the"}]   # hundreds of tokens greedily
SHORT_PROMPT = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]


def chat(messages, max_tokens: int):
    return parse_chat({"messages": messages, "temperature": 0, "max_tokens": max_tokens})


def finishing_order(jobs: ThreadedJobs, requests: list) -> tuple[list[int], list]:
    """Submit ``requests`` while the engine's thread is held at its lock, so it admits them together;
    return the order their answers ended in and their Summaries."""
    async def run():
        loop = asyncio.get_running_loop()
        with jobs._cond:   # the engine's thread waits on it: it sees every request at once
            submitted = [jobs.submit(request, loop) for request in requests]
        order: list[int] = []

        async def finish(i, job):
            summary = await summary_of(job)
            order.append(i)
            return summary

        summaries = await asyncio.gather(*(finish(i, job) for i, job in enumerate(submitted)))
        return order, summaries

    return asyncio.run(run())


def threaded(main, draft=None, parallel=2, drafter=DrafterKind.NONE, merge=True) -> ThreadedJobs:
    def load():
        return Engine.load(ModelParams(str(main), n_ctx=N_CTX, n_threads=1),
                           ModelParams(str(draft), n_ctx=N_CTX, n_threads=1) if draft else None)

    jobs = ThreadedJobs(load, SpeculationParams(policy="fixed", draft_max=4), drafter, parallel=parallel, merge=merge)
    jobs.start()
    return jobs


def test_a_short_answer_is_not_held_behind_a_long_one_and_each_is_its_own_greedy_answer(tiny_models):
    """Slots answer in turn, a round each: the short answer ends first, and each answer is the one that
    request gets served alone (without drafting: the main model's own greedy answer; drafting, which
    changes the batches and so the last bits of the logits, the answer one slot gives)."""
    answers = {}
    for drafter, draft in ((DrafterKind.NONE, None), (DrafterKind.MODEL, tiny_models.same)):
        for parallel, first_done in ((2, 1), (1, 0)):   # one slot: the short one waits its turn (the control)
            jobs = threaded(tiny_models.main, draft, parallel, drafter)
            try:
                order, (long, short) = finishing_order(jobs, [chat(LONG_PROMPT, 400), chat(SHORT_PROMPT, 8)])
            finally:
                jobs.stop()
            assert order[0] == first_done, (parallel, order)
            assert long.generated_tokens > 50 and short.generated_tokens <= 8
            assert (long.drafted > 0 and short.drafted > 0) is (drafter is DrafterKind.MODEL)
            answers[drafter, parallel] = (long.text, short.text)
        assert answers[drafter, 2] == answers[drafter, 1], drafter
    assert answers[DrafterKind.NONE, 2] == (greedy_text(tiny_models.main, LONG_PROMPT, 400),
                                            greedy_text(tiny_models.main, SHORT_PROMPT, 8))


def pinned(messages, max_tokens: int, slot: int):
    return parse_chat({"messages": messages, "temperature": 0, "max_tokens": max_tokens, "id_slot": slot})


def test_a_request_pinned_to_a_busy_slot_waits_for_it_and_holds_up_no_other(tiny_models):
    """llama-server's id_slot: the long answer and a short one both pinned to slot 0 take it in turn, and
    a short one behind them that names no slot is answered in slot 1 meanwhile, first. A slot that is
    not there is a 400."""
    jobs = threaded(tiny_models.main, parallel=2)
    try:
        order, summaries = finishing_order(jobs, [pinned(LONG_PROMPT, 200, 0), pinned(SHORT_PROMPT, 8, 0),
                                                  chat(SHORT_PROMPT, 8)])
        assert order == [2, 0, 1], order
        assert all(summary.error is None for summary in summaries)
        with pytest.raises(ApiError, match="id_slot"):
            finishing_order(jobs, [pinned(SHORT_PROMPT, 4, 2)])
    finally:
        jobs.stop()


def test_each_client_keeps_its_own_cache_between_its_turns(tiny_models):
    """Two clients take turns: with a slot each, a client's second turn reads only its new message; in
    one slot the other client's prompt evicted it (the control)."""
    first_a = [{"role": "user", "content": "the cat is on the mat"}]
    first_b = [{"role": "user", "content": "a dog in a house"}]

    def second_turn_cache(parallel: int) -> tuple[int, int]:
        with serving(tiny_models.main, parallel=parallel) as s:
            def ask(messages):
                return httpx.post(s.url + "/v1/chat/completions", timeout=60,
                                  json={"messages": messages, "temperature": 0, "max_tokens": 6}).json()
            answer_a = ask(first_a)
            ask(first_b)
            again = ask(first_a + [answer_a["choices"][0]["message"], {"role": "user", "content": "and then?"}])
            return again["timings"]["cache_n"], answer_a["usage"]["prompt_tokens"]

    cached, first_prompt = second_turn_cache(2)
    assert cached >= first_prompt
    cached_one_slot, _ = second_turn_cache(1)
    assert cached_one_slot < first_prompt


def test_slots_and_metrics_show_each_slot(tiny_models):
    with serving(tiny_models.main, parallel=3) as s:
        httpx.post(s.url + "/v1/chat/completions", timeout=60,
                   json={"messages": SHORT_PROMPT, "temperature": 0, "max_tokens": 4})
        slots = httpx.get(s.url + "/slots", timeout=30).json()
        assert [slot["id"] for slot in slots] == [0, 1, 2]
        assert not any(slot["is_processing"] for slot in slots)
        assert all(slot["next_token"] == [{"has_next_token": False, "n_remain": -1, "n_decoded": 0}]
                   for slot in slots)   # llama-server's shape; no budget or count left over from the answer
        assert slots[0]["n_cached"] > 0 and slots[0]["n_ctx"] == N_CTX and slots[2]["n_cached"] == 0
        assert httpx.get(s.url + "/slots?fail_on_no_slot=1", timeout=30).status_code == 200
        metrics = httpx.get(s.url + "/metrics", timeout=30).text
        assert 'quickdraft:slot_processing{slot="2"} 0' in metrics
        assert f'quickdraft:slot_cached_tokens{{slot="0"}} {slots[0]["n_cached"]}' in metrics


def test_a_prompt_too_long_is_refused_before_it_takes_a_slot(tiny_models):
    jobs = threaded(tiny_models.main, parallel=2)
    try:
        async def run():
            job = jobs.submit(parse_chat({"messages": [{"role": "user", "content": "word " * (N_CTX * 2)}]}),
                              asyncio.get_running_loop())
            return await job.next()

        item = asyncio.run(run())
        assert isinstance(item, Failed) and item.error.status == 400
        assert jobs.processing == 0 and not jobs._pool.busy   # it never took a slot
    finally:
        jobs.stop()


def test_the_windows_chat_answers_between_two_turns_of_a_clients_answer(tiny_models):
    """The window's server (HostedJobs) takes a round of each client's slot a turn on the window's engine
    thread; the window's own answer runs between two turns instead of after the client's whole answer,
    and the client's slot leaves the window's cache alone."""
    from app.core.frontdoor import GenerationRequest
    from app.core.params import SamplingParams
    from app.core.speculation.events import run_to_summary
    from app.server.slots import HostedJobs

    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=N_CTX, n_threads=1))
    wakes = []
    jobs = HostedJobs(engine, lambda: wakes.append(1), SpeculationParams(policy="fixed", draft_max=4),
                      DrafterKind.NONE)
    loop = asyncio.new_event_loop()
    try:
        window_question = [{"role": "user", "content": "a dog"}]
        first = run_to_summary(engine.generate(GenerationRequest(window_question, sampling=SamplingParams(max_tokens=8))))
        window_cache = engine.main.cached[:]
        client = jobs.submit(chat(LONG_PROMPT, 400), loop)
        assert wakes   # the host is told there is work
        for _ in range(5):
            assert jobs.serve_next()
        assert jobs.processing == 1 and engine.main.cached == window_cache
        window = run_to_summary(engine.generate(GenerationRequest(
            window_question + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "more"}],
            sampling=SamplingParams(max_tokens=8))))
        assert window.generated_tokens > 0 and jobs.processing == 1       # the client's answer goes on after
        assert window.prompt_tokens - window.prompt_tokens_evaluated >= first.prompt_tokens   # its cache was kept
        while jobs.serve_next():
            pass
        summary = loop.run_until_complete(summary_of(client))
        assert summary.text == greedy_text(tiny_models.main, LONG_PROMPT, 400)
        assert [slot["is_processing"] for slot in jobs.slots()][:1] == [False]
    finally:
        jobs.stop()
        loop.close()
        engine.close()


def test_the_slots_verify_batches_are_decoded_in_one_pass_where_the_main_model_allows(tiny_models, tmp_path):
    """Slots whose main model keeps keys and values are sequences of one context: their verify batches go
    into one llama_decode (each answer still its own: the test above). A recurrent main model's slots
    keep contexts of their own, as do one slot's and those of a server told --no-cont-batching."""
    from app.core.gguf.tiny import TinySpec, write_tiny_model

    jobs = threaded(tiny_models.main, tiny_models.same, 2, DrafterKind.MODEL)
    try:
        _, (long, short) = finishing_order(jobs, [chat(LONG_PROMPT, 60), chat(SHORT_PROMPT, 30)])
        shared = jobs._pool.shared
        assert shared is not None and shared.merged > 0 and long.drafted > 0 and short.drafted > 0
        assert jobs.metrics.decode_slots > jobs.metrics.decodes   # /metrics' n_busy_slots_per_decode over 1
        assert sorted(slot.engine.main.seq for slot in jobs._pool.slots) == [0, 1]
    finally:
        jobs.stop()
    recurrent = write_tiny_model(tmp_path / "mamba.gguf", TinySpec(architecture="mamba"))
    for main, parallel, merge in ((recurrent, 2, True), (tiny_models.main, 1, True), (tiny_models.main, 2, False)):
        jobs = threaded(main, parallel=parallel, merge=merge)
        try:
            assert jobs._pool.shared is None
        finally:
            jobs.stop()


def test_a_prompt_read_in_chunks_beside_another_slots_answer_keeps_its_own_logits(tiny_models):
    """A slot reading a long prompt yields between its chunks; the other slot's decodes on the shared
    context meanwhile write llama.cpp's logits, so the reading slot's rows must be its own copy."""
    long_prompt = [{"role": "user", "content": "the cat is on the mat and the dog sat by the door " * 8}]   # 4 chunks
    alone = {}
    for parallel in (1, 2):
        jobs = threaded(tiny_models.main, tiny_models.same, parallel, DrafterKind.MODEL)
        try:
            _, summaries = finishing_order(jobs, [chat(LONG_PROMPT, 200), chat(long_prompt, 12)])
            alone[parallel] = [s.token_ids for s in summaries]
            assert parallel == 1 or jobs._pool.shared.merged > 0
        finally:
            jobs.stop()
    assert alone[2] == alone[1]
