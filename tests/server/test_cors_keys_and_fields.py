"""Browser clients (CORS, a preflight without the key), the key as llama-server takes it, --alias,
and the OpenAI fields llama-server adds or fills: n_predict, logit_bias (kept exactly under
speculation), cached_tokens, a null role-chunk content; fields Quickdraft cannot honour get a 400."""

from __future__ import annotations

import json

import httpx
import numpy as np
import pytest

from app.core.engine import Engine
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams
from tests.server.conftest import N_CTX, serving

KEY = "sk-test-key"
CHAT = {"messages": [{"role": "user", "content": "the cat is on the mat"}], "max_tokens": 4, "temperature": 0}
PREFLIGHT = {"Origin": "http://web.example.com", "Access-Control-Request-Method": "POST",
             "Access-Control-Request-Headers": "Authorization"}


@pytest.fixture(scope="module")
def keyed(tiny_models):
    with serving(tiny_models.main, tiny_models.same, api_key=KEY, aliases="house-model") as s:
        yield s


def test_a_preflight_needs_no_key_and_gets_llama_servers_headers(keyed):
    response = httpx.options(keyed.url + "/v1/chat/completions", headers=PREFLIGHT)
    assert response.status_code == 200 and response.text == ""
    assert response.headers["access-control-allow-origin"] == "http://web.example.com"   # any origin, with a key
    assert response.headers["access-control-allow-credentials"] == "true"
    assert response.headers["access-control-allow-methods"] == "GET, POST, DELETE, OPTIONS"
    assert response.headers["access-control-allow-headers"] == "*"


def test_the_real_request_still_needs_the_key(keyed):
    origin = {"Origin": "http://web.example.com"}
    refused = httpx.post(keyed.url + "/v1/chat/completions", json=CHAT, headers=origin)
    assert refused.status_code == 401 and refused.json()["error"]["type"] == "authentication_error"
    assert refused.headers["access-control-allow-origin"] == "http://web.example.com"   # the browser can read why
    for given in ({"Authorization": f"Bearer {KEY}"}, {"Authorization": KEY}, {"X-Api-Key": KEY}):
        answered = httpx.post(keyed.url + "/v1/chat/completions", json=CHAT, headers=origin | given, timeout=30)
        assert answered.status_code == 200, given
        assert answered.headers["access-control-allow-origin"] == "http://web.example.com"
    wrong = httpx.post(keyed.url + "/completion", json={"prompt": "x"}, headers={"X-Api-Key": "nope"})
    assert wrong.status_code == 401


def test_the_alias_names_the_model_everywhere(keyed):
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.get(keyed.url + "/v1/models", headers=auth).json()["data"][0]["id"] == "house-model"
    assert httpx.post(keyed.url + "/v1/chat/completions", json=CHAT, headers=auth, timeout=30).json()["model"] \
        == "house-model"
    assert httpx.post(keyed.url + "/completion", json={"prompt": "the", "n_predict": 2}, headers=auth,
                      timeout=30).json()["model"] == "house-model"
    assert httpx.get(keyed.url + "/props", headers=auth).json()["model_alias"] == "house-model"


@pytest.mark.parametrize("origin, allowed", [("http://localhost:3000", True), ("http://127.0.0.1", True),
                                             ("http://[::1]:8080", True), ("http://evil.com", False),
                                             ("http://localhost.evil.com", False)])
def test_without_a_key_only_local_origins_are_allowed_by_default(served, origin, allowed):
    response = httpx.options(served.url + "/completion", headers=PREFLIGHT | {"Origin": origin})
    assert response.status_code == 200
    assert response.headers.get("access-control-allow-origin") == (origin if allowed else None)


def test_cors_origins_can_be_listed(tiny_models):
    with serving(tiny_models.main, cors_origins="https://a.example, https://b.example") as s:
        for origin, allowed in (("https://b.example", True), ("https://c.example", False)):
            response = httpx.get(s.url + "/health", headers={"Origin": origin})
            assert response.headers.get("access-control-allow-origin") == (origin if allowed else None)


# --- OpenAI fields ----------------------------------------------------------------------------------

@pytest.mark.parametrize("field, value", [("logprobs", "yes"), ("top_logprobs", 2), ("presence_penalty", 0.5),
                                          ("frequency_penalty", 1), ("continue_final_message", True)])
def test_fields_quickdraft_cannot_honour_are_refused_naming_them(served, field, value):
    response = httpx.post(served.url + "/v1/chat/completions", json=CHAT | {field: value})
    assert response.status_code == 400 and response.json()["error"]["param"] == field
    assert field in response.json()["error"]["message"]


def test_neutral_values_are_answered(served):
    neutral = {"logprobs": False, "top_logprobs": None, "presence_penalty": 0, "frequency_penalty": 0.0}
    assert httpx.post(served.url + "/v1/chat/completions", json=CHAT | neutral, timeout=30).status_code == 200


def test_n_choices_are_each_the_answer_to_the_request(served):
    """A chat's n (2 to 16) is answered as that many requests, in slots of their own where free: greedy,
    each choice is the one answer; the usage counts the prompt once and every choice's tokens."""
    one = httpx.post(served.url + "/v1/chat/completions", json=CHAT | {"max_tokens": 6, "temperature": 0}, timeout=30).json()
    three = httpx.post(served.url + "/v1/chat/completions", json=CHAT | {"max_tokens": 6, "temperature": 0, "n": 3},
                       timeout=60).json()
    assert [c["index"] for c in three["choices"]] == [0, 1, 2]
    assert {c["message"]["content"] for c in three["choices"]} == {one["choices"][0]["message"]["content"]}
    assert three["usage"]["completion_tokens"] == 3 * one["usage"]["completion_tokens"]
    assert three["usage"]["prompt_tokens"] == one["usage"]["prompt_tokens"]
    for extra, param in (({"n": 2, "stream": True}, "stream"), ({"n": 17}, "n")):
        response = httpx.post(served.url + "/v1/chat/completions", json=CHAT | extra, timeout=30)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text


def test_n_predict_wins_over_max_tokens_as_in_llama_server(served):
    body = CHAT | {"max_tokens": 9, "n_predict": 3}
    usage = httpx.post(served.url + "/v1/chat/completions", json=body, timeout=30).json()["usage"]
    assert usage["completion_tokens"] == 3


def test_cached_tokens_are_the_prompt_read_from_the_cache(served):
    body = {"prompt": "the cat is on the mat and the dog is in the house", "max_tokens": 3, "temperature": 0}
    httpx.post(served.url + "/v1/completions", json=body, timeout=30)
    again = httpx.post(served.url + "/v1/completions", json=body, timeout=30).json()
    cached = again["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == again["timings"]["cache_n"] and cached == again["usage"]["prompt_tokens"] - 1


def test_the_role_chunk_has_null_content(served):
    response = httpx.post(served.url + "/v1/chat/completions", json=CHAT | {"stream": True}, timeout=30)
    first = json.loads(response.text.splitlines()[0][len("data: "):])
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": None}


def test_a_prompt_over_the_context_is_llama_servers_context_error(served):
    long = {"messages": [{"role": "user", "content": "the " * (2 * N_CTX)}]}
    error = httpx.post(served.url + "/v1/chat/completions", json=long, timeout=30).json()["error"]
    assert error["type"] == "exceed_context_size_error" and error["n_ctx"] == N_CTX
    assert error["n_prompt_tokens"] > N_CTX and error["code"] == "context_length_exceeded"
    assert error["message"] == (f"request ({error['n_prompt_tokens']} tokens) exceeds the available context size "
                                f"({N_CTX} tokens), try increasing it")   # llama-server's words, which clients read


# --- logit_bias -------------------------------------------------------------------------------------

def alone(model, prompt: list[int], **sampling) -> tuple[int, ...]:
    engine = Engine.load(ModelParams(str(model), n_ctx=N_CTX, n_threads=1))
    try:
        request = GenerationRequest(prompt=prompt, sampling=SamplingParams(max_tokens=8, **sampling),
                                    drafter=DrafterKind.NONE)
        return list(engine.generate(request))[-1].token_ids
    finally:
        engine.close()


@pytest.mark.parametrize("form", ["openai", "llama-server"])
def test_logit_bias_is_the_main_models_biased_answer_under_speculation(served, tiny_models, form):
    """The server drafts with the main model's own weights, unbiased: the drafts of banned tokens are
    rejected, and the answer is the main model's own greedy answer with the bias, token for token."""
    prompt = [1, 259, 263, 107, 262]
    plain = alone(tiny_models.main, prompt)
    banned = plain[0]
    bias = {str(banned): -100} if form == "openai" else [[banned, False]]
    body = {"prompt": prompt, "max_tokens": 8, "temperature": 0, "logit_bias": bias}
    answer = httpx.post(served.url + "/v1/completions", json=body, timeout=30).json()
    n = answer["usage"]["completion_tokens"]
    value = -100.0 if form == "openai" else float("-inf")
    expected = alone(tiny_models.main, prompt, logit_bias=((banned, value),))
    assert banned not in expected[:1] and answer["timings"]["draft_n"] > 0
    tokens = httpx.post(served.url + "/completion", json=body | {"n_predict": 8, "return_tokens": True},
                        timeout=30).json()["tokens"]
    assert tuple(tokens) == expected and n == len(expected)


@pytest.mark.parametrize("bias", [{"": 1}, {"5": 1000}, [[5]], "5", {"5": True}, {str(10 ** 6): 1}, [[1.5, 1]]])
def test_bad_logit_bias_is_refused(served, bias):
    response = httpx.post(served.url + "/v1/chat/completions", json=CHAT | {"logit_bias": bias}, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == "logit_bias"


@pytest.mark.parametrize("form", ["object", "array"])
def test_logit_bias_texts_bias_each_of_their_tokens(served, tiny_models, form):
    """llama-server's text keys: every token of the text (no BOS, control-token text as text) is biased."""
    prompt = [1, 259, 263, 107, 262]
    plain = alone(tiny_models.main, prompt)
    text = httpx.post(served.url + "/detokenize", json={"tokens": list(plain)}).json()["content"]
    tokens = httpx.post(served.url + "/tokenize", json={"content": text, "parse_special": False}).json()["tokens"]
    assert set(tokens) & set(plain)      # the bias bans tokens of the plain answer
    bias = {text: False} if form == "object" else [[text, False]]
    body = {"prompt": prompt, "n_predict": 8, "temperature": 0, "logit_bias": bias, "return_tokens": True}
    answer = httpx.post(served.url + "/completion", json=body, timeout=30).json()
    assert tuple(answer["tokens"]) == alone(tiny_models.main, prompt, logit_bias=tuple((t, -np.inf) for t in tokens))
    assert sorted(entry["token"] for entry in answer["generation_settings"]["logit_bias"]) == sorted(set(tokens))


def test_ignore_eos_bans_the_end_of_generation_tokens(served):
    """A bias that makes the tiny model end at once (its EOS is token 2); ignore_eos bans it, as llama-server."""
    body = {"prompt": "the cat", "n_predict": 5, "temperature": 0, "logit_bias": {"2": 100}}
    ended = httpx.post(served.url + "/completion", json=body, timeout=30).json()
    assert (ended["stop_type"], ended["tokens_predicted"]) == ("eos", 1)
    ignored = httpx.post(served.url + "/completion", json=body | {"ignore_eos": True}, timeout=30).json()
    assert (ignored["stop_type"], ignored["tokens_predicted"]) == ("limit", 5)
    assert {"bias": None, "token": 2} in ignored["generation_settings"]["logit_bias"]   # llama-server's -inf
