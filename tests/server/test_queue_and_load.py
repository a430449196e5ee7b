"""Slots and the bounded queue, 429 with Retry-After, disconnects that cancel at
once, and a bounded load test with concurrent streaming openai clients."""

from __future__ import annotations

import statistics
import threading
import time
from contextlib import contextmanager

import httpx
import openai
import pytest

from tests.server.conftest import greedy_text, serving

MESSAGES = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]
# the tiny main model answers this greedily with 460 to 1,900 tokens before its end token (which
# depends on the CPU's arithmetic), in 50 ms on a fast machine: ``held`` keeps it running
LONG = {"messages": [{"role": "user", "content": "the house is in the"}], "temperature": 0, "max_tokens": 1800,
        "stream": True}
SHORT = {"messages": MESSAGES, "temperature": 0, "max_tokens": 8}


def cancelled(url: str) -> float:
    for line in httpx.get(url + "/metrics").text.splitlines():
        if line.startswith('quickdraft:requests_finished_total{reason="cancel"}'):
            return float(line.split()[1])
    return 0.0


def wait_until(condition, timeout=10.0) -> float:
    start = time.perf_counter()
    while not condition():
        assert time.perf_counter() - start < timeout, "timed out"
        time.sleep(0.002)
    return time.perf_counter() - start


@pytest.fixture
def held(monkeypatch):
    """LONG's generation, once it has sent its first pieces, waits until the test ends or its client
    leaves, as a long answer would still be running: the test decides how long it runs, not the CPU."""
    from app.core.engine import Engine

    release, generate = threading.Event(), Engine.generate

    def held_generate(self, request):
        for i, event in enumerate(generate(self, request)):
            yield event
            if i == 2 and request.sampling.max_tokens == LONG["max_tokens"]:
                while not release.wait(0.005) and not request.cancel.is_set():
                    pass

    monkeypatch.setattr(Engine, "generate", held_generate)
    yield
    release.set()


def test_a_client_that_disconnects_cancels_its_generation_at_once(served, held):
    before = cancelled(served.url)
    with httpx.stream("POST", served.url + "/v1/chat/completions", json=LONG) as response:
        lines = response.iter_lines()
        assert next(line for line in lines if line.startswith("data:"))
        assert served.jobs.processing == 1
    took = wait_until(lambda: served.jobs.processing == 0)
    assert took < 0.5
    assert cancelled(served.url) == before + 1


@contextmanager
def one_running_one_waiting(s, waiter_timeout: float):
    """A long streamed answer runs while a short request waits; yields the waiting client's thread."""
    with httpx.stream("POST", s.url + "/v1/chat/completions", json=LONG) as running:
        lines = running.iter_lines()  # kept: dropping it would close the connection
        next(lines)
        waiter = threading.Thread(target=lambda: post_quietly(s.url, timeout=waiter_timeout))
        waiter.start()
        wait_until(lambda: s.jobs.deferred == 1)
        yield waiter
    waiter.join()


def post_quietly(url: str, timeout: float) -> None:
    try:
        httpx.post(url + "/v1/chat/completions", json=SHORT, timeout=timeout)
    except httpx.TimeoutException:
        pass


def test_a_waiting_client_that_leaves_frees_its_place(tiny_models, held):
    with serving(tiny_models.main, max_waiting=1, parallel=1) as s:
        with one_running_one_waiting(s, waiter_timeout=0.5) as waiter:
            waiter.join()  # its client gave up while it waited
            wait_until(lambda: s.jobs.deferred == 0, timeout=2)
            assert s.jobs.processing == 1


def test_a_full_queue_answers_429_with_retry_after(tiny_models, held):
    with serving(tiny_models.main, max_waiting=1, parallel=1) as s:
        with one_running_one_waiting(s, waiter_timeout=5):
            refused = httpx.post(s.url + "/v1/chat/completions", json=LONG)
            assert refused.status_code == 429
            assert int(refused.headers["retry-after"]) >= 1
            assert refused.json()["error"]["code"] == "queue_full"
        assert "quickdraft:requests_rejected_total 1" in httpx.get(s.url + "/metrics").text


def test_a_stopped_engine_answers_503(tiny_models):
    with serving(tiny_models.main) as s:
        s.jobs.stop()
        response = httpx.post(s.url + "/v1/chat/completions", json={"messages": MESSAGES})
        assert response.status_code == 503 and "retry-after" in response.headers
        assert httpx.get(s.url + "/health").status_code == 503


CLIENTS, REQUESTS, MAX_TOKENS = 8, 5, 24


def test_load_concurrent_streaming_clients_get_the_lone_answer_or_a_refusal(tiny_models):
    expected = greedy_text(tiny_models.main, MESSAGES, MAX_TOKENS)
    with serving(tiny_models.main, tiny_models.other, max_waiting=3) as s:
        results: list[tuple[str, object, float]] = []
        lock = threading.Lock()

        def client_loop():
            with openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0, timeout=30) as client:
                for _ in range(REQUESTS):
                    outcome = one_request(client, s.model_id)
                    with lock:
                        results.append(outcome)

        started = time.perf_counter()
        threads = [threading.Thread(target=client_loop) for _ in range(CLIENTS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        wall = time.perf_counter() - started
        assert not any(t.is_alive() for t in threads), "a client hung"
        assert len(results) == CLIENTS * REQUESTS
        done = [r for r in results if r[0] == "ok"]
        refused = [r for r in results if r[0] == "refused"]
        assert all(text == expected for _, text, _ in done)
        assert {status for _, status, _ in refused} <= {429, 503}
        assert len(done) + len(refused) == len(results) and done
        latencies = sorted(t for *_, t in done)
        print(f"\nload: {CLIENTS} clients x {REQUESTS} streamed requests in {wall:.2f} s: {len(done)} completed "
              f"(latency median {statistics.median(latencies):.3f} s, max {latencies[-1]:.3f} s), "
              f"{len(refused)} refused with 429/503")
        assert httpx.get(s.url + "/health").json() == {"status": "ok"}
        assert one_request(openai.OpenAI(base_url=s.url + "/v1", api_key="unused", max_retries=0),
                           s.model_id)[1] == expected


def one_request(client, model_id) -> tuple[str, object, float]:
    start = time.perf_counter()
    try:
        stream = client.chat.completions.create(model=model_id, messages=MESSAGES, temperature=0,
                                                max_tokens=MAX_TOKENS, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
        return "ok", text, time.perf_counter() - start
    except openai.APIStatusError as exc:
        return "refused", exc.status_code, time.perf_counter() - start


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.20", "example.org"])
def test_other_addresses_need_an_api_key(host):
    from app.core.errors import QuickdraftError
    from app.server.run import check_exposure

    with pytest.raises(QuickdraftError, match="--api-key"):
        check_exposure(host, None)
    check_exposure(host, "sesame")
    for loopback in ("127.0.0.1", "::1", "localhost"):
        check_exposure(loopback, None)


def test_an_api_key_guards_every_route_but_health(tiny_models):
    with serving(tiny_models.main, api_key="sesame", host="0.0.0.0") as s:
        url = f"http://127.0.0.1:{s.server.port}"
        assert httpx.get(url + "/health").status_code == 200
        for path in ("/v1/models", "/metrics"):
            assert httpx.get(url + path).status_code == 401
            assert httpx.get(url + path, headers={"Authorization": "Bearer wrong"}).status_code == 401
        with openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0) as bad:
            with pytest.raises(openai.AuthenticationError):
                bad.models.list()
        with openai.OpenAI(base_url=url + "/v1", api_key="sesame", max_retries=0) as good:
            answer = good.chat.completions.create(model=s.model_id, messages=MESSAGES, max_tokens=4)
            assert answer.usage.completion_tokens >= 1


def test_a_burst_is_held_to_the_queue_before_the_first_job_has_started():
    """`serve --queue 2` and 20 requests at once: as many as there are slots to answer and two to wait
    are taken, the others refused, also while the engine's thread has not yet taken the first job (a
    burst once got 10 or all 20 accepted: refusal only began once a job was running)."""
    import asyncio

    from app.core.frontdoor import LoadedPair
    from app.server.api import ApiError, ApiRequest
    from app.server.worker import JobQueue
    from app.core.params import SamplingParams

    request = ApiRequest("chat", SamplingParams(max_tokens=4), messages=({"role": "user", "content": "hi"},))
    for parallel in (1, 4):
        queue = JobQueue(max_waiting=2)
        queue.parallel = parallel
        queue.pair = LoadedPair("tiny", "tiny.gguf", n_ctx=256, n_vocab=270)
        loop = asyncio.new_event_loop()
        accepted = refused = 0
        try:
            for _ in range(20):
                try:
                    queue.submit(request, loop)
                    accepted += 1
                except ApiError as exc:
                    assert exc.status == 429 and exc.code == "queue_full"
                    refused += 1
        finally:
            loop.close()
        assert (accepted, refused) == (parallel + 2, 18 - parallel)


def test_a_client_that_trickles_its_headers_is_disconnected_and_others_are_served(tiny_models, monkeypatch):
    """A byte every few seconds once held a connection (and its file descriptor) for good: now the
    request's headers must be in HEADER_TIMEOUT_S after the connection opened."""
    import socket

    from app.server import protocol

    monkeypatch.setattr(protocol, "HEADER_TIMEOUT_S", 0.5)
    with serving(tiny_models.main) as s:
        port = int(s.url.rsplit(":", 1)[1])
        slow = socket.create_connection(("127.0.0.1", port), timeout=5)
        started, closed = time.perf_counter(), False
        for byte in b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n":   # never the blank line
            try:
                slow.sendall(bytes([byte]))
                slow.settimeout(0.1)
                if slow.recv(1) == b"":
                    closed = True
                    break
            except socket.timeout:
                continue
            except OSError:
                closed = True
                break
            if time.perf_counter() - started > 5:
                break
        slow.close()
        assert closed and time.perf_counter() - started < 3
        # a client that sends its request at once is served, on a kept-alive connection twice
        with httpx.Client() as client:
            for _ in range(2):
                assert client.post(s.url + "/v1/chat/completions", json=SHORT).status_code == 200


def test_a_client_that_trickles_its_body_gets_a_408_and_others_are_served_meanwhile(tiny_models, monkeypatch):
    """Once the headers were in, a body sent a byte every few seconds held its connection for good
    (300 of them filled a 256-file limit). Now the body must keep up with MIN_BODY_RATE after
    BODY_GRACE_S, counted per connection as it arrives; one that falls behind is answered 408 and closed."""
    import socket

    from app.server import protocol

    monkeypatch.setattr(protocol, "BODY_GRACE_S", 0.5)
    with serving(tiny_models.main) as s:
        port = int(s.url.rsplit(":", 1)[1])
        slow = socket.create_connection(("127.0.0.1", port), timeout=30)   # a guard, not the assertion
        slow.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000000\r\n\r\n{")
        with httpx.Client() as client:   # the slow client does not hold up another
            assert client.post(s.url + "/v1/chat/completions", json=SHORT).status_code == 200
        reply = b""
        try:
            while chunk := slow.recv(4096):
                reply += chunk
        except socket.timeout:
            pass
        slow.close()
        assert reply.startswith(b"HTTP/1.1 408 "), reply[:80]
        assert b'"code":"request_timeout"' in reply.replace(b" ", b""), reply


def test_refused_accepts_are_reported_once_per_interval_with_their_count(capsys):
    """asyncio logs a traceback for each accept() refused for want of file descriptors: 76 MB of
    stderr in 50 s under a crowd. The server's loop reports them once per ACCEPT_LOG_INTERVAL_S."""
    import asyncio
    import errno

    from app.server.protocol import AcceptErrorThrottle

    async def refuse_many():
        AcceptErrorThrottle.install()
        loop = asyncio.get_running_loop()
        for _ in range(1000):
            loop.call_exception_handler({"message": "socket.accept() out of system resource",
                                         "exception": OSError(errno.EMFILE, "Too many open files")})

    asyncio.run(refuse_many())
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "Too many open files" in lines[0], lines


def test_while_a_request_is_checked_health_answers(tiny_models, monkeypatch):
    """Checking a body ran on the event loop: 20,000 tools held /health for 24 s. Now it runs on a
    thread of its own. Here the check waits until /health has answered, which it could never do if
    the check held the loop (the wait then ends at its guard, and the test fails)."""
    from app.server import app as server_app
    from app.server.api import parse_chat

    checking, health_answered, waited = threading.Event(), threading.Event(), []

    def held_parse(body):
        checking.set()
        waited.append(health_answered.wait(20))
        return parse_chat(body)

    monkeypatch.setattr(server_app, "parse_chat", held_parse)
    with serving(tiny_models.main) as s:
        post = threading.Thread(target=httpx.post, args=(s.url + "/v1/chat/completions",), kwargs={"json": SHORT})
        post.start()
        assert checking.wait(20)
        assert httpx.get(s.url + "/health", timeout=60).status_code == 200
        health_answered.set()
        post.join(60)
    assert waited == [True]


def test_under_a_crowd_with_misbehaving_clients_the_server_stays_responsive(tiny_models, monkeypatch):
    """scripts/server_load.py's crowd, small and short: well-behaved streams are served or told 429,
    clients that drop, trickle their headers or body, send oversized chunked bodies or 20,000 tools get
    what they deserve, and /health and /metrics still answer."""
    import importlib.util
    from pathlib import Path

    from app.server import protocol

    monkeypatch.setattr(protocol, "HEADER_TIMEOUT_S", 0.5)
    monkeypatch.setattr(protocol, "BODY_GRACE_S", 0.5)
    path = Path(__file__).resolve().parents[2] / "scripts" / "server_load.py"
    spec = importlib.util.spec_from_file_location("server_load", path)
    load = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(load)
    result = load.run(tiny_models.main, None, clients=15, seconds=3.0)
    outcomes = result["outcomes"]
    assert result["served_well_behaved"] > 0 and result["health_after"] == 200 and result["metrics_after"]
    assert {k for k in outcomes if k.startswith("good ")} <= {"good 200", "good 429"}, outcomes
    assert {k for k in outcomes if k.startswith("oversized ")} == {"oversized 413"}, outcomes
    assert outcomes.get("trickle closed by the server", 0) >= 1, outcomes
    assert outcomes.get("slow body 408", 0) >= 1, outcomes
    assert {k for k in outcomes if k.startswith("slow body ")} <= {"slow body 408", "slow body still open at the end"}
    assert {k for k in outcomes if k.startswith("many tools ")} == {"many tools 400"}, outcomes
    assert result["served"] >= result["served_well_behaved"] and result["refused"] > 0 and result["peak_fds"] > 0


def test_a_stream_that_waits_for_a_slot_gets_its_headers_and_a_comment_at_once(tiny_models, held, monkeypatch):
    """Clients with a 30 s read timeout gave up on a stream queued behind a long answer: nothing came
    until it started. Now its headers and an SSE comment go out after ADMIT_GRACE_S, and a comment every
    KEEPALIVE_S, then its answer; a stream answered at once has no comment."""
    from app.server import app as server_app

    monkeypatch.setattr(server_app, "ADMIT_GRACE_S", 0.05)
    monkeypatch.setattr(server_app, "KEEPALIVE_S", 0.05)
    with serving(tiny_models.main, parallel=1) as s:
        with httpx.stream("POST", s.url + "/v1/chat/completions", json=LONG) as running:
            lines = running.iter_lines()
            next(lines)
            with httpx.stream("POST", s.url + "/v1/chat/completions", json={**SHORT, "stream": True},
                              timeout=30) as waiting:
                assert waiting.status_code == 200 and s.jobs.deferred == 1
                waiting_lines = waiting.iter_lines()
                comments = [next(waiting_lines), next(waiting_lines), next(waiting_lines)]
                assert comments == [": waiting for a free slot", "", ": waiting for a free slot"]
                running.close()   # the long answer's client leaves: the short one starts
                rest = [line for line in waiting_lines if line.startswith("data:")]
        assert rest[-1] == "data: [DONE]" and any('"finish_reason":"length"' in line.replace(" ", "") for line in rest)
        monkeypatch.setattr(server_app, "ADMIT_GRACE_S", 60.0)   # the slot is free: it starts well within
        with httpx.stream("POST", s.url + "/v1/chat/completions", json={**SHORT, "stream": True}) as alone:
            assert not [line for line in alone.iter_lines() if line.startswith(":")]
