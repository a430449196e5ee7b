"""RemoteEngine: against Quickdraft's own server, a vLLM-shaped server and error cases.

The vLLM /metrics fixtures (fixtures/vllm_metrics_before.txt, _after.txt) follow vLLM's source:
the counters defined in vllm/v1/spec_decode/metrics.py (vllm:spec_decode_num_drafts,
_num_draft_tokens, _num_accepted_tokens, _num_accepted_tokens_per_pos with the "position" label;
the model_name and engine labels of vllm/v1/metrics/loggers.py), written the way prometheus_client
renders counters (``_total`` and ``_created`` samples, sorted labels, Go-style floats), around the
histogram lines of the sample in vLLM's docs/usage/metrics.md. The counts are invented.

The llama-server fixtures are recorded: llama-server built from the llama.cpp sources vendored in
llama-cpp-python 0.3.36's sdist, run with Qwen2.5-Coder 1.5B Instruct Q4_K_M and its 0.5B draft
(``-md ... --spec-type draft-simple --metrics -np 1``), a /metrics scrape before and after one
streamed greedy chat completion with "timings_per_token" (llama_server_stream.txt).
"""

from __future__ import annotations

import json
import threading
from pathlib import Path

import httpx
import pytest

from app.core.chat.reasoning import split_reasoning
from app.core.frontdoor import GenerationRequest
from app.core.params import SamplingParams
from app.core.remote.client import RemoteEngine, RemoteError, root_url
from app.core.remote.metrics import spec_counters
from app.core.speculation.events import Origin, Round, StopReason, Summary, TokenPiece
from tests.server.conftest import greedy_text, serving

FIXTURES = Path(__file__).parent / "fixtures"
MESSAGES = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]
VLLM_MODEL = "Qwen/Qwen2.5-7B-Instruct"


def test_remote_engine_on_quickdraft_serve_reports_its_speculation_live(tiny_models):
    expected = greedy_text(tiny_models.main, MESSAGES, 40)
    with serving(tiny_models.main, tiny_models.same) as s:
        engine = RemoteEngine(s.url + "/v1/")
        events = list(engine.generate(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=40))))
        engine.close()
    summary = events[-1]
    rounds = [e for e in events if isinstance(e, Round)]
    pieces = [e for e in events if isinstance(e, TokenPiece)]
    assert summary.text == expected == "".join(p.text for p in pieces)
    assert summary.speculation_reported and summary.drafted > 0
    assert summary.accepted == summary.drafted          # the draft has the main model's weights
    assert sum(r.drafted for r in rounds) == summary.drafted and len(rounds) > 3
    assert [p.origin for p in pieces].count(Origin.DRAFT) > len(pieces) // 2
    assert summary.accepted_by_position and summary.accepted_by_position[0] == summary.drafting_rounds
    assert summary.stop_reason in (StopReason.LENGTH, StopReason.EOG) and summary.error is None
    assert summary.estimated_speedup is None   # a fixed policy drafting every round cannot estimate it


def test_remote_engine_sends_the_logit_bias(tiny_models):
    """A ban travels as llama-server's false, and the remote answer is the biased one."""
    from app.core.engine import Engine
    from app.core.params import DrafterKind, ModelParams

    engine = Engine.load(ModelParams(str(tiny_models.main), n_ctx=2048, n_threads=1))
    try:
        plain = list(engine.generate(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=6),
                                                       drafter=DrafterKind.NONE)))[-1]
        biased_sampling = SamplingParams(max_tokens=6, logit_bias=((plain.token_ids[0], float("-inf")),))
        biased = list(engine.generate(GenerationRequest(MESSAGES, sampling=biased_sampling,
                                                        drafter=DrafterKind.NONE)))[-1]
    finally:
        engine.close()
    assert biased.text != plain.text
    with serving(tiny_models.main, tiny_models.same) as s:
        remote = RemoteEngine(s.url + "/v1/")
        events = list(remote.generate(GenerationRequest(MESSAGES, sampling=biased_sampling)))
        remote.close()
    assert events[-1].text == biased.text


def test_remote_engine_reads_another_quickdrafts_estimated_speedup():
    chunks = [{"choices": [{"index": 0, "delta": {"content": w}}]} for w in ("Hel", "lo")]
    chunks.append({"choices": [], "timings": {"predicted_n": 2, "draft_n": 4, "draft_n_accepted": 3,
                                               "estimated_speedup": 1.7}})
    engine = RemoteEngine("http://other:8080", transport=fake_server(sse_stream(chunks, finish="stop"), metrics=None))
    assert list(engine.generate(GenerationRequest(MESSAGES)))[-1].estimated_speedup == 1.7


def test_a_servers_reasoning_content_reads_as_a_thinking_models_reasoning():
    deltas = [{"role": "assistant"}, {"reasoning_content": "The user"}, {"reasoning_content": " greets."},
              {"content": "Hel"}, {"content": "lo"}]
    stream = sse_stream([{"choices": [{"index": 0, "delta": d}]} for d in deltas], finish="stop")
    engine = RemoteEngine("http://gpu-box:8080", transport=fake_server(stream, metrics=None))
    events = list(engine.generate(GenerationRequest(MESSAGES)))
    pieces = [e.text for e in events if isinstance(e, TokenPiece)]
    assert pieces == ["<think>The user", " greets.", "</think>Hel", "lo"]
    assert split_reasoning(engine.thinking_format(), events[-1].text) == ("The user greets.", "Hello")


def test_remote_engine_says_not_reported_for_a_server_without_a_draft_or_metrics():
    stream = sse_stream([{"choices": [{"index": 0, "delta": {"content": w}}]} for w in ("Hel", "lo", "!")],
                        finish="stop", usage={"prompt_tokens": 9, "completion_tokens": 3})
    engine = RemoteEngine("http://gpu-box:8000", transport=fake_server(stream, metrics=None))
    events = list(engine.generate(GenerationRequest(MESSAGES)))
    summary = events[-1]
    assert summary.text == "Hello!" and summary.generated_tokens == 3 and summary.prompt_tokens == 9
    assert not summary.speculation_reported
    assert summary.stop_reason is StopReason.EOG
    assert not any(isinstance(e, Round) for e in events)


def test_remote_engine_reads_vllm_spec_decode_counter_deltas_around_the_answer():
    before, after = [(FIXTURES / f"vllm_metrics_{n}.txt").read_text() for n in ("before", "after")]
    stream = sse_stream([{"choices": [{"index": 0, "delta": {"content": f"word{i} "}}]} for i in range(19)],
                        finish="length", usage={"prompt_tokens": 31, "completion_tokens": 57})
    requests: list[httpx.Request] = []
    engine = RemoteEngine("http://gpu-box:8000/v1", api_key="k", transport=fake_server(stream, [before, after],
                                                                                     requests))
    summary = list(engine.generate(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=57))))[-1]
    assert summary.speculation_reported
    assert (summary.drafted, summary.accepted, summary.drafting_rounds) == (54, 38, 18)
    assert summary.accepted_by_position == (16, 13, 9) and summary.drafted_by_position == (18, 18, 18)
    assert summary.generated_tokens == 57 and summary.stop_reason is StopReason.LENGTH
    assert summary.acceptance_by_position() == pytest.approx([16 / 18, 13 / 18, 9 / 18])
    body = json.loads(next(r for r in requests if r.url.path == "/v1/chat/completions").content)
    assert body["model"] == VLLM_MODEL and body["stream"] and body["max_tokens"] == 57
    assert all(r.headers["authorization"] == "Bearer k" for r in requests)


def test_recorded_llama_server_stream_replays_with_its_rounds_and_draft_origins():
    stream = (FIXTURES / "llama_server_stream.txt").read_text()
    before, after = [(FIXTURES / f"llama_server_metrics_{n}.txt").read_text() for n in ("before", "after")]
    engine = RemoteEngine("http://127.0.0.1:8099", model="qwen", transport=fake_server(stream, [before, after]))
    events = list(engine.generate(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=40))))
    summary, rounds = events[-1], [e for e in events if isinstance(e, Round)]
    pieces = [e for e in events if isinstance(e, TokenPiece)]
    assert summary.text.startswith("```python\ndef fibonacci_iterative(n):\n") and summary.error is None
    assert (summary.prompt_tokens, summary.generated_tokens, summary.stop_reason) == (43, 40, StopReason.LENGTH)
    assert (summary.drafted, summary.accepted, summary.drafting_rounds) == (34, 27, 12)
    assert summary.accepted_by_position == (11, 8, 8)            # from the /metrics delta
    assert summary.prompt_s == pytest.approx(18.511067)          # the server's own prompt time
    assert [(r.drafted, r.accepted) for r in rounds[:4]] == [(3, 3), (3, 3), (3, 1), (3, 0)]
    assert sum(r.accepted for r in rounds) == 27 and len(rounds) == 12
    # a round of k accepted drafts sends k draft tokens, then the main model's own
    assert [p.origin for p in pieces[:6]] == [Origin.MAIN, Origin.DRAFT, Origin.DRAFT, Origin.DRAFT, Origin.MAIN,
                                              Origin.DRAFT]
    assert [p.origin for p in pieces].count(Origin.DRAFT) == 27 and len(pieces) == 40


def test_llama_server_without_metrics_still_reports_from_its_timings():
    stream = (FIXTURES / "llama_server_stream.txt").read_text()
    summary = list(RemoteEngine("http://h:1", model="q", transport=fake_server(stream, None)).generate(GenerationRequest(MESSAGES)))[-1]
    assert summary.speculation_reported and (summary.drafted, summary.accepted) == (34, 27)
    assert summary.drafting_rounds == 12 and summary.accepted_by_position == ()


def test_vllm_counters_sum_over_engines_and_skip_created_samples():
    text = (FIXTURES / "vllm_metrics_after.txt").read_text()
    two_engines = text + text.replace('engine="0"', 'engine="1"')
    one, two = spec_counters(text), spec_counters(two_engines)
    assert (one.drafts, one.draft_tokens, one.accepted) == (138, 414, 289)
    assert two.accepted == 2 * one.accepted and two.accepted_per_pos == tuple(2 * n for n in one.accepted_per_pos)
    assert spec_counters("# HELP vllm:num_requests_running x\nvllm:num_requests_running 0.0\n") is None


def test_cancel_stops_reading_and_ends_with_a_cancel_summary():
    stream = sse_stream([{"choices": [{"index": 0, "delta": {"content": "x"}}]}] * 50, finish="length")
    cancel = threading.Event()
    engine = RemoteEngine("http://gpu-box:8000", transport=fake_server(stream, metrics=None))
    events = []
    for event in engine.generate(GenerationRequest(MESSAGES, cancel=cancel)):
        events.append(event)
        if len(events) == 5:
            cancel.set()
    assert events[-1].stop_reason is StopReason.CANCEL and len(events) == 6  # 5 pieces, then the summary
    assert isinstance(events[-1], Summary)


def test_a_server_error_in_the_stream_ends_with_an_error_summary():
    stream = ('data: {"choices": [{"index": 0, "delta": {"content": "par"}}]}\n\n'
              'data: {"error": {"message": "out of memory", "type": "server_error"}}\n\n')
    summary = list(RemoteEngine("http://h:1", transport=fake_server(stream, None)).generate(GenerationRequest(MESSAGES)))[-1]
    assert summary.stop_reason is StopReason.ERROR and "out of memory" in summary.error and summary.text == "par"


def test_refusals_and_unreachable_servers_raise_one_clear_error(tiny_models):
    with serving(tiny_models.main, api_key="sesame", host="0.0.0.0") as s:
        url = f"http://127.0.0.1:{s.server.port}"
        with pytest.raises(RemoteError, match="HTTP 401: Invalid API Key"):
            list(RemoteEngine(url, api_key="wrong").generate(GenerationRequest(MESSAGES)))
        # a server serving one pair answers whatever model name a client sends, as llama-server does
        assert list(RemoteEngine(url, api_key="sesame", model="gpt-4").generate(GenerationRequest(MESSAGES)))[-1].error is None
        port = s.server.port
    with pytest.raises(RemoteError, match="cannot reach"):
        list(RemoteEngine(f"http://127.0.0.1:{port}").generate(GenerationRequest(MESSAGES)))


@pytest.mark.parametrize("given, root", [
    ("http://box:8080/v1/", "http://box:8080"), ("box:8000", "http://box:8000"),
    ("https://llm.example.org/api/v1", "https://llm.example.org/api"),
    ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
])
def test_root_url_accepts_what_people_paste(given, root):
    assert root_url(given) == root


def test_root_url_refuses_other_schemes():
    with pytest.raises(RemoteError):
        root_url("ftp://box/v1")


# --- a scripted OpenAI-compatible server -----------------------------------------------------------

def sse_stream(chunks: list[dict], finish: str, usage: dict | None = None) -> str:
    events = [*chunks, {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}]
    if usage:
        events.append({"choices": [], "usage": usage})
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"


def fake_server(stream: str, metrics: list[str] | None, seen: list | None = None) -> httpx.MockTransport:
    scrapes = iter(metrics or [])

    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": VLLM_MODEL, "object": "model"}]})
        if request.url.path == "/metrics":
            return httpx.Response(200, text=next(scrapes)) if metrics else httpx.Response(404, text="Not Found")
        return httpx.Response(200, text=stream, headers={"content-type": "text/event-stream"})

    return httpx.MockTransport(handle)


def test_remote_engine_sends_the_grammar_and_the_server_follows_it(tiny_models):
    with serving(tiny_models.main, tiny_models.same) as s:
        remote = RemoteEngine(s.url + "/v1/")
        events = list(remote.generate(GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=8),
                                                        grammar='root ::= ("x" | "y"){4}')))
        remote.close()
    assert len(events[-1].text) == 4 and set(events[-1].text) <= {"x", "y"}


def test_log_probabilities_are_refused_not_dropped_for_a_remote_server():
    from app.core.errors import QuickdraftError
    from app.core.params import SamplingParams
    from app.core.remote.client import _sampling_body

    with pytest.raises(QuickdraftError, match="log-probabilities are not read from a remote server"):
        _sampling_body(SamplingParams(logprobs=2))
    assert "logprobs" not in _sampling_body(SamplingParams())
