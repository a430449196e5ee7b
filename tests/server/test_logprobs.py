"""Token log-probabilities through the server, in each API's shape: OpenAI chat (logprobs,
top_logprobs), OpenAI's legacy completions (logprobs: N), llama-server's /completion (n_probs); whole and
streamed alike, and the same with a drafter as without (the main model's own distribution)."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.server.conftest import serving

CHAT = {"messages": [{"role": "user", "content": "the cat is on the mat"}], "max_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def servers(tiny_models):
    with serving(tiny_models.main, tiny_models.same) as drafting, serving(tiny_models.main) as plain:
        yield drafting, plain


def events(url: str, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", url + path, json=body | {"stream": True}, timeout=60) as response:
        assert response.status_code == 200
        lines = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines if line != "[DONE]"]


def test_a_chat_answer_carries_each_tokens_logprob_and_its_top_alternatives(servers):
    drafting, plain = servers
    body = CHAT | {"logprobs": True, "top_logprobs": 2}
    answers = [httpx.post(s.url + "/v1/chat/completions", json=body, timeout=60).json() for s in servers]
    for answer in answers:
        content = answer["choices"][0]["logprobs"]["content"]
        assert len(content) == answer["usage"]["completion_tokens"] - (answer["choices"][0]["finish_reason"] == "stop")
        assert "".join(t["token"] for t in content) == answer["choices"][0]["message"]["content"]
        for token in content:
            assert token["logprob"] <= 0 and len(token["top_logprobs"]) == 2
            assert token["top_logprobs"][0]["token"] == token["token"]   # greedy: the likeliest
            assert bytes(token["bytes"]).decode("utf-8", "replace") == token["token"]
    drafted, alone = (a["choices"][0]["logprobs"]["content"] for a in answers)
    assert [t["token"] for t in drafted] == [t["token"] for t in alone]
    assert [t["logprob"] for t in drafted] == pytest.approx([t["logprob"] for t in alone], abs=1e-3)


def test_a_streamed_chat_answer_carries_the_same_logprobs_as_the_whole_one(servers):
    drafting, _ = servers
    body = CHAT | {"logprobs": True, "top_logprobs": 1}
    whole = httpx.post(drafting.url + "/v1/chat/completions", json=body, timeout=60).json()
    chunks = events(drafting.url, "/v1/chat/completions", body)
    streamed = [t for c in chunks for choice in c["choices"] if choice.get("logprobs")
                for t in choice["logprobs"]["content"]]
    assert streamed == whole["choices"][0]["logprobs"]["content"]


def test_without_logprobs_the_answer_has_none(servers):
    answer = httpx.post(servers[0].url + "/v1/chat/completions", json=CHAT, timeout=60).json()
    assert answer["choices"][0]["logprobs"] is None


def test_a_legacy_completion_lists_tokens_logprobs_alternatives_and_offsets(servers):
    answer = httpx.post(servers[0].url + "/v1/completions", json={"prompt": "the cat", "max_tokens": 6,
                                                                  "temperature": 0, "logprobs": 3}, timeout=60).json()
    probs = answer["choices"][0]["logprobs"]
    assert len(probs["tokens"]) == len(probs["token_logprobs"]) == len(probs["top_logprobs"]) > 0
    assert all(len(top) <= 3 and max(top.values()) == pytest.approx(lp) for top, lp in
               zip(probs["top_logprobs"], probs["token_logprobs"]))   # greedy: its own is the best
    assert probs["text_offset"][0] == 0
    assert [b - a for a, b in zip(probs["text_offset"], probs["text_offset"][1:])] == [len(t) for t in probs["tokens"][:-1]]


def test_llama_servers_n_probs_gives_completion_probabilities_whole_and_streamed(servers):
    body = {"prompt": "the cat", "n_predict": 6, "temperature": 0, "n_probs": 2}
    whole = httpx.post(servers[0].url + "/completion", json=body, timeout=60).json()
    probs = whole["completion_probabilities"]
    assert "".join(p["token"] for p in probs) == whole["content"]
    assert all(p["top_logprobs"][0]["id"] == p["id"] and len(p["top_logprobs"]) == 2 for p in probs)
    streamed = [p for event in events(servers[0].url, "/completion", body) for p in event.get("completion_probabilities", [])]
    assert streamed == probs


@pytest.mark.parametrize("body, param", [({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
                                         ({"top_logprobs": 2}, "top_logprobs"), ({"logprobs": 101}, "logprobs")])
def test_logprobs_out_of_range_are_refused_naming_them(servers, body, param):
    response = httpx.post(servers[0].url + "/v1/chat/completions", json=CHAT | body, timeout=60)
    assert response.status_code == 400 and response.json()["error"]["param"] == param


def test_post_sampling_probs_are_the_drawn_distributions(servers):
    greedy = httpx.post(servers[0].url + "/completion", json={"prompt": "the cat", "n_predict": 4, "temperature": 0,
                                                             "n_probs": 3, "post_sampling_probs": True}, timeout=60).json()
    for p in greedy["completion_probabilities"]:   # greedy: the chosen token is certain, and alone
        assert p["prob"] == 1.0 and [t["id"] for t in p["top_probs"]] == [p["id"]]
    sampled = httpx.post(servers[0].url + "/completion", json={"prompt": "the cat", "n_predict": 4, "temperature": 1.0,
                                                              "top_k": 5, "seed": 7, "n_probs": 10,
                                                              "post_sampling_probs": True}, timeout=60).json()
    for p in sampled["completion_probabilities"]:
        assert 0 < p["prob"] <= 1 and 1 <= len(p["top_probs"]) <= 5   # top-k 5: no sixth token can be drawn
        assert sum(t["prob"] for t in p["top_probs"]) == pytest.approx(1.0)
        assert p["id"] in [t["id"] for t in p["top_probs"]]
