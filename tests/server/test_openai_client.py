"""The official openai client against `quickdraft serve` on loopback with the tiny models."""

from __future__ import annotations

import httpx
import pytest

from tests.server.conftest import greedy_text

MESSAGES = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]
GREEDY = {"temperature": 0, "max_tokens": 40}


@pytest.fixture(scope="module")
def reference(tiny_models) -> str:
    """What the main model alone answers, greedy (the server drafts; greedy output must not change)."""
    return greedy_text(tiny_models.main, MESSAGES, 40)


def test_models_lists_the_loaded_main_model(client, served):
    models = client.models.list()
    assert [m.id for m in models.data] == [served.model_id]
    assert models.data[0].model_extra["meta"]["draft"] == "same.gguf"


def test_chat_completion_matches_the_engine_and_reports_draft_timings(client, served, reference):
    answer = client.chat.completions.create(model=served.model_id, messages=MESSAGES, **GREEDY)
    assert answer.choices[0].message.content == reference
    assert answer.choices[0].finish_reason in ("length", "stop")
    assert answer.usage.completion_tokens <= 40 and answer.usage.prompt_tokens > 10
    timings = answer.model_extra["timings"]
    assert timings["predicted_n"] == answer.usage.completion_tokens
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] == timings["draft_n"]  # same weights
    assert timings["predicted_per_second"] > 0 and timings["prompt_ms"] > 0


def test_streamed_chat_has_the_same_text_and_timings_on_every_chunk(client, served, reference):
    stream = client.chat.completions.create(model=served.model_id, messages=MESSAGES, stream=True,
                                            extra_body={"timings_per_token": True}, **GREEDY)
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == reference
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices[0].finish_reason in ("length", "stop")
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) > 3 and all("timings" in c.model_extra for c in content)
    drafted = [c.model_extra["timings"].get("draft_n", 0) for c in content]
    assert drafted == sorted(drafted) and drafted[-1] > 0
    assert chunks[-1].model_extra["timings"]["draft_n"] == drafted[-1]


def test_stream_without_timings_per_token_has_timings_only_at_the_end(client, served):
    chunks = list(client.chat.completions.create(model=served.model_id, messages=MESSAGES, stream=True,
                                                 stream_options={"include_usage": True}, **GREEDY))
    assert [("timings" in c.model_extra) for c in chunks].count(True) == 1
    assert chunks[-1].usage.completion_tokens > 0 and chunks[-1].choices == []
    # on the last chunk, as llama-server sends them: the usage chunk when there is one
    assert chunks[-1].model_extra["timings"]["predicted_n"] == chunks[-1].usage.completion_tokens


def test_completions_stream_and_not_and_stop_strings(client, served):
    plain = client.completions.create(model=served.model_id, prompt="the cat is", **GREEDY)
    streamed = client.completions.create(model=served.model_id, prompt="the cat is", stream=True, **GREEDY)
    assert "".join(c.choices[0].text for c in streamed) == plain.choices[0].text
    assert plain.choices[0].text
    stop = plain.choices[0].text[3:6]
    cut = client.completions.create(model=served.model_id, prompt="the cat is", stop=[stop], **GREEDY)
    assert cut.choices[0].text == plain.choices[0].text[:plain.choices[0].text.index(stop)]
    assert cut.choices[0].finish_reason == "stop"


def test_seeded_sampling_repeats(client, served):
    kw = {"model": served.model_id, "messages": MESSAGES, "temperature": 1.0, "seed": 7, "max_tokens": 20}
    first, second = (client.chat.completions.create(**kw).choices[0].message.content for _ in range(2))
    assert first == second


def test_metrics_count_speculation_like_llama_server(client, served):
    before = httpx.get(served.url + "/metrics").text
    answer = client.chat.completions.create(model=served.model_id, messages=MESSAGES, **GREEDY)
    after = httpx.get(served.url + "/metrics").text
    timings = answer.model_extra["timings"]
    delta = {name: value(after, name) - value(before, name) for name in (
        "llamacpp:spec_decode_num_draft_tokens_total", "llamacpp:spec_decode_num_accepted_tokens_total",
        "llamacpp:tokens_predicted_total")}
    assert delta == {"llamacpp:spec_decode_num_draft_tokens_total": timings["draft_n"],
                     "llamacpp:spec_decode_num_accepted_tokens_total": timings["draft_n_accepted"],
                     "llamacpp:tokens_predicted_total": timings["predicted_n"]}
    assert 'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"}' in after
    assert value(after, "llamacpp:spec_decode_num_drafts_total") > 0


def value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return 0.0


@pytest.mark.parametrize("body, status, param", [
    ({"messages": "hello"}, 400, "messages"),
    ({"messages": [{"role": "robot", "content": "hi"}]}, 400, "messages[0].role"),
    ({"messages": MESSAGES, "temperature": "hot"}, 400, "temperature"),
    ({"messages": MESSAGES, "max_tokens": True}, 400, "max_tokens"),
    ({"messages": MESSAGES, "max_tokens": 0}, 400, "max_tokens"),
    ({"messages": MESSAGES, "stop": ["a", "b", "c", "d", "e"]}, 400, "stop"),
    ({"messages": MESSAGES, "n": 0}, 400, "n"),
    ({"messages": MESSAGES, "model": 4}, 400, "model"),
    ({"messages": MESSAGES, "seed": -5}, 400, "seed"),
    ({"messages": MESSAGES, "seed": 10**29}, 400, "seed"),
    ({"messages": MESSAGES, "max_tokens": 10**12}, 400, "max_tokens"),
    ({"messages": [{"role": "user", "content": "the cat " * 900}]}, 400, "messages"),
])
def test_bad_requests_get_openai_error_objects(served, body, status, param):
    response = httpx.post(served.url + "/v1/chat/completions", json=body)
    assert response.status_code == status
    error = response.json()["error"]
    assert error["param"] == param and error["message"] and error["type"]


def test_seed_minus_one_means_a_random_seed_as_in_llama_server(served):
    body = {"messages": MESSAGES, "seed": -1, "max_tokens": 4, "temperature": 0.8}
    response = httpx.post(served.url + "/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text


def test_prompt_over_the_context_says_so(served):
    response = httpx.post(served.url + "/v1/chat/completions",
                          json={"messages": [{"role": "user", "content": "the cat " * 900}], "stream": True})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "context_length_exceeded"


@pytest.mark.parametrize("content, expected", [(b"{not json", 400), (b"[1, 2]", 400), (b"", 400)])
def test_malformed_bodies(served, content, expected):
    response = httpx.post(served.url + "/v1/chat/completions", content=content,
                          headers={"content-type": "application/json"})
    assert response.status_code == expected
    assert "error" in response.json()


def test_unknown_routes_and_methods_get_error_objects(served):
    assert httpx.get(served.url + "/v1/engines").json()["error"]["code"] == "not_found"
    response = httpx.get(served.url + "/v1/chat/completions")
    assert response.status_code == 405 and "error" in response.json()


def test_health(served):
    assert httpx.get(served.url + "/health").json() == {"status": "ok"}


def test_completion_prompt_as_token_ids_and_ids_outside_the_vocabulary(client, served):
    ids = client.completions.create(model=served.model_id, prompt=[1, 120, 200], max_tokens=5, temperature=0)
    assert ids.usage.prompt_tokens == 3 and ids.usage.completion_tokens >= 1
    response = httpx.post(served.url + "/v1/completions", json={"prompt": [1, 10 ** 6], "max_tokens": 5})
    assert response.status_code == 400 and "outside the vocabulary" in response.json()["error"]["message"]


def test_chat_content_as_text_parts_is_joined_as_llama_cpp_joins_it(client, served):
    text = MESSAGES[0]["content"]
    parts = [{"type": "text", "text": text[:10]}, {"type": "text", "text": text[10:]}]
    joined = {"messages": [{"role": "user", "content": text[:10] + "\n" + text[10:]}]}
    expected = httpx.post(served.url + "/apply-template", json=joined, timeout=30).json()["prompt"]
    prompt = httpx.post(served.url + "/apply-template", json={"messages": [{"role": "user", "content": parts}]},
                        timeout=30).json()["prompt"]
    assert prompt == expected
    prefill = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": parts}]
    prompt = httpx.post(served.url + "/apply-template", json={"messages": prefill}, timeout=30).json()["prompt"]
    assert prompt.endswith(text[:10] + "\n\n" + text[10:])   # a continued answer's parts: a blank line between


def test_a_chunked_body_is_refused_once_it_passes_the_limit_not_after_it_is_all_read(served):
    """A chunked body states no length: the server counts it as it arrives and answers 413 at the limit
    (it once read a whole 1 GB body, 2.16 GB at its peak, before answering)."""
    import socket
    from urllib.parse import urlsplit

    from app.server.bodies import MAX_BODY_BYTES

    url = urlsplit(served.url)
    chunk = b"x" * (1 << 20)
    sent, reply = 0, b""
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        sock.settimeout(0.05)
        while sent < 16 * MAX_BODY_BYTES and not reply:
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                sent += len(chunk)
                reply = sock.recv(4096)
            except socket.timeout:
                continue
            except OSError:   # the server closed the connection after answering
                break
        sock.settimeout(5)
        try:
            reply += sock.recv(4096)
        except OSError:
            pass
    assert reply.startswith(b"HTTP/1.1 413"), reply[:100]
    assert sent <= MAX_BODY_BYTES + 4 * len(chunk)
