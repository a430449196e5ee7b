"""llama-server's own endpoints, served by the tiny models: /tokenize, /detokenize, /apply-template,
GET /props, /completion (whole and streamed, text or token prompts) and /infill with the model's FIM
tokens, each answered through the same queue and engine as chat, and checked as chat is."""

from __future__ import annotations

import json

import httpx
import pytest

from app.core.engine import Engine
from app.core.frontdoor import GenerationRequest
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.params import DrafterKind, ModelParams, SamplingParams
from app.server.slots import DEFAULT_PARALLEL
from tests.server.conftest import N_CTX, serving

PROMPT = "the cat is on the mat and the dog is in the house"
PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"


@pytest.fixture(scope="module")
def fim_models(tmp_path_factory):
    d = tmp_path_factory.mktemp("fim-models")
    return (write_tiny_model(d / "coder.gguf", TinySpec(seed=0, fim_tokens=True)),
            write_tiny_model(d / "coder-draft.gguf", TinySpec(seed=0, fim_tokens=True)))


@pytest.fixture(scope="module")
def coder(fim_models):
    """A model with FIM tokens drafting with its own weights (every draft token is accepted)."""
    with serving(*fim_models) as s:
        yield s


def post(url: str, path: str, body: dict) -> dict:
    response = httpx.post(url + path, json=body, timeout=60)
    assert response.status_code == 200, response.text
    return response.json()


def events(url: str, path: str, body: dict) -> list[dict]:
    """A native stream's events: ``data: {...}`` lines and no [DONE]."""
    response = httpx.post(url + path, json=body | {"stream": True}, timeout=60)
    assert response.status_code == 200, response.text
    lines = [line[len("data: "):] for line in response.text.splitlines() if line.startswith("data: ")]
    assert "[DONE]" not in lines
    return [json.loads(line) for line in lines]


def alone(model, prompt: list[int], max_tokens: int, **sampling) -> tuple[str, tuple[int, ...]]:
    """The main model's own answer to ``prompt``, with no drafting, from an engine of the test's own."""
    engine = Engine.load(ModelParams(str(model), n_ctx=N_CTX, n_threads=1))
    try:
        request = GenerationRequest(prompt=prompt, sampling=SamplingParams(max_tokens=max_tokens, **sampling),
                                    drafter=DrafterKind.NONE)
        summary = list(engine.generate(request))[-1]
        return summary.text, summary.token_ids
    finally:
        engine.close()


# --- /tokenize, /detokenize ------------------------------------------------------------------------

def test_tokenize_and_detokenize_round_trip(coder):
    tokens = post(coder.url, "/tokenize", {"content": PROMPT})["tokens"]
    assert len(tokens) > 5 and all(isinstance(t, int) for t in tokens)
    assert tokens[0] != 1                       # add_special is false by default: no BOS
    assert post(coder.url, "/tokenize", {"content": PROMPT, "add_special": True})["tokens"] == [1, *tokens]
    # a SentencePiece vocabulary's first word keeps its leading space, as in llama-server (its test strips it)
    assert post(coder.url, "/detokenize", {"tokens": tokens})["content"] == " " + PROMPT


def test_tokenize_reads_control_tokens_unless_told_not_to(coder):
    special = post(coder.url, "/tokenize", {"content": "<|fim_prefix|>the"})["tokens"]
    literal = post(coder.url, "/tokenize", {"content": "<|fim_prefix|>the", "parse_special": False})["tokens"]
    assert special[0] == 270 and 270 not in literal and len(literal) > len(special)
    assert post(coder.url, "/detokenize", {"tokens": special})["content"] == "<|fim_prefix|> the"


def test_tokenize_with_pieces_gives_text_or_bytes(coder):
    tokens = post(coder.url, "/tokenize", {"content": "a 媽", "with_pieces": True})["tokens"]
    pieces = [t["piece"] for t in tokens]
    assert all(isinstance(t["id"], int) for t in tokens)
    assert "".join(p for p in pieces if isinstance(p, str)) == " a "     # byte tokens of one character:
    assert bytes(b for p in pieces if isinstance(p, list) for b in p).decode() == "媽"   # their bytes


def test_tokenize_mixed_content_and_empty_bodies(coder):
    assert post(coder.url, "/tokenize", {"content": ["the", 270, "cat"]})["tokens"][:3][1:2] != []
    mixed = post(coder.url, "/tokenize", {"content": ["the", 270]})["tokens"]
    assert mixed[-1] == 270
    assert post(coder.url, "/tokenize", {})["tokens"] == []
    assert post(coder.url, "/detokenize", {})["content"] == ""


@pytest.mark.parametrize("path, body, param", [
    ("/tokenize", {"content": 5}, "content"),
    ("/tokenize", {"content": "x", "with_pieces": "yes"}, "with_pieces"),
    ("/tokenize", {"content": [1.5]}, "content"),
    ("/tokenize", {"content": [10 ** 6]}, "content"),
    ("/infill", {"input_prefix": [10 ** 6], "input_suffix": ""}, "input_prefix"),
    ("/detokenize", {"tokens": [10 ** 6]}, "tokens"),
    ("/detokenize", {"tokens": "abc"}, "tokens"),
])
def test_tokenize_and_detokenize_refuse_bad_input_with_400(coder, path, body, param):
    response = httpx.post(coder.url + path, json=body, timeout=30)
    assert response.status_code == 400 and response.json()["error"]["param"] == param


# --- /apply-template, /props -------------------------------------------------------------------------

def test_apply_template_gives_the_prompt_chat_would_use(coder):
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    prompt = post(coder.url, "/apply-template", {"messages": messages})["prompt"]
    assert prompt == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                      "<|im_start|>assistant\n")
    bad = httpx.post(coder.url + "/apply-template", json={"messages": []}, timeout=30)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"
    counted = post(coder.url, "/v1/chat/completions/input_tokens", {"messages": messages})["input_tokens"]
    usage = post(coder.url, "/v1/chat/completions", {"messages": messages, "max_tokens": 1})["usage"]
    assert counted == usage["prompt_tokens"] == len(post(coder.url, "/tokenize", {"content": prompt, "add_special": True})["tokens"])


def test_a_final_assistant_message_is_continued_as_llama_servers_prefill(coder, fim_models):
    """A conversation that ends with an assistant message is answered from inside it (llama-server's
    assistant prefill; vLLM's continue_final_message with add_generation_prompt false): the prompt is the
    rest's, its generation prompt, then that message's text, and the answer is what follows it."""
    asked = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "the cat"}]
    prompt = post(coder.url, "/apply-template", {"messages": asked})["prompt"]
    assert prompt == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nthe cat"
    tokens = post(coder.url, "/tokenize", {"content": prompt, "add_special": True})["tokens"]
    answer = post(coder.url, "/v1/chat/completions", {"messages": asked, "max_tokens": 6, "temperature": 0})
    assert answer["choices"][0]["message"]["content"] == alone(fim_models[0], tokens, 6)[0]
    explicit = {"messages": asked, "continue_final_message": True, "add_generation_prompt": False}
    assert post(coder.url, "/apply-template", explicit)["prompt"] == prompt
    for body, param in ((explicit | {"add_generation_prompt": True}, "continue_final_message"),
                        ({"messages": asked + [{"role": "assistant", "content": "x"}]}, "messages"),
                        ({"messages": asked[:1], "continue_final_message": True, "add_generation_prompt": False},
                         "continue_final_message")):
        response = httpx.post(coder.url + "/v1/chat/completions", json=body, timeout=30)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
    refused = httpx.post(coder.url + "/completion", json={"prompt": "x", "continue_final_message": True}, timeout=30)
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "continue_final_message"
    # add_generation_prompt false alone: the messages and nothing after them, the answer going on from there
    alone_prompt = post(coder.url, "/apply-template", {"messages": asked[:1], "add_generation_prompt": False})["prompt"]
    assert alone_prompt == "<|im_start|>user\nhi<|im_end|>\n"
    tokens = post(coder.url, "/tokenize", {"content": alone_prompt, "add_special": True})["tokens"]
    answer = post(coder.url, "/v1/chat/completions", {"messages": asked[:1], "add_generation_prompt": False,
                                                      "max_tokens": 6, "temperature": 0})
    assert answer["choices"][0]["message"]["content"] == alone(fim_models[0], tokens, 6)[0]


def test_verbose_answers_carry_llama_servers_native_body_with_the_prompt(coder):
    """"verbose": true (or serve --verbose) adds llama-server's __verbose to an OpenAI answer: its native
    body, the prompt the template made among it; at the end of a stream, on the finish chunk."""
    messages = [{"role": "user", "content": "hi"}]
    prompt = post(coder.url, "/apply-template", {"messages": messages})["prompt"]
    body = {"messages": messages, "max_tokens": 4, "temperature": 0}
    plain = post(coder.url, "/v1/chat/completions", body)
    verbose = post(coder.url, "/v1/chat/completions", body | {"verbose": True})
    assert "__verbose" not in plain and verbose["__verbose"]["prompt"].endswith(prompt)   # after BOS, as llama-server's
    assert verbose["__verbose"]["content"] == verbose["choices"][0]["message"]["content"]
    assert verbose["__verbose"]["tokens_predicted"] == verbose["usage"]["completion_tokens"]
    streamed = httpx.post(coder.url + "/v1/chat/completions", json=body | {"verbose": True, "stream": True}, timeout=60)
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    [finish] = [c for c in chunks if c.get("choices") and c["choices"][0]["finish_reason"]]
    assert finish["__verbose"]["prompt"].endswith(prompt) and sum("__verbose" in c for c in chunks) == 1


def test_props_tells_what_the_server_has(coder, fim_models):
    props = httpx.get(coder.url + "/props", timeout=30).json()
    assert props["model_path"] == str(fim_models[0]) and props["total_slots"] == DEFAULT_PARALLEL and props["endpoint_slots"]
    assert props["default_generation_settings"]["n_ctx"] == N_CTX
    params = props["default_generation_settings"]["params"]
    assert (params["temperature"], params["top_k"], params["top_p"], params["min_p"]) == (0.8, 40, 0.95, 0.05)
    assert params["n_predict"] == -1 and params["seed"] == -1          # no limit but the context; a random seed
    assert props["chat_template"].startswith("{% for message in messages %}")
    assert props["modalities"] == {"vision": False, "video": False, "audio": False}
    assert props["build_info"].startswith("quickdraft ")
    assert props["speculative"]["draft_model"] == str(fim_models[1])


# --- /completion ----------------------------------------------------------------------------------

@pytest.mark.parametrize("path", ["/completion", "/completions"])
def test_completion_is_the_main_models_own_answer_in_llama_servers_shape(coder, fim_models, path):
    body = post(coder.url, path, {"prompt": PROMPT, "n_predict": 12, "temperature": 0, "return_tokens": True})
    assert post(coder.url, path, {"prompt": PROMPT, "n_predict": 2})["tokens"] == []   # only when asked
    tokens = post(coder.url, "/tokenize", {"content": PROMPT, "add_special": True})["tokens"]
    text, ids = alone(fim_models[0], tokens, 12)
    assert body["content"] == text and body["tokens"] == list(ids)
    assert body["tokens_predicted"] == len(ids) and body["tokens_evaluated"] == len(tokens)
    assert body["stop"] is True and body["stop_type"] in ("limit", "eos") and body["truncated"] is False
    assert body["prompt"] == "<s> " + PROMPT and body["model"] == "coder" and 0 <= body["id_slot"] < DEFAULT_PARALLEL
    assert body["generation_settings"]["n_predict"] == 12 and body["generation_settings"]["temperature"] == 0
    assert body["timings"]["predicted_n"] == len(ids) and body["timings"]["draft_n"] > 0


def test_completion_streams_pieces_then_a_final_event(coder):
    whole = post(coder.url, "/completion", {"prompt": PROMPT, "n_predict": 10, "temperature": 0,
                                            "return_tokens": True})
    chunks = events(coder.url, "/completion", {"prompt": PROMPT, "n_predict": 10, "temperature": 0})
    *pieces, last = chunks
    assert all(c["stop"] is False for c in pieces) and last["stop"] is True
    assert "".join(c["content"] for c in pieces) == whole["content"]
    assert [t for c in pieces for t in c["tokens"]] == whole["tokens"]
    assert last["content"] == "" and last["tokens"] == [] and "timings" in last
    assert pieces[-1]["tokens_predicted"] == whole["tokens_predicted"]


def test_completion_prompt_as_tokens_or_mixed(coder, fim_models):
    tokens = post(coder.url, "/tokenize", {"content": PROMPT})["tokens"]
    by_ids = post(coder.url, "/completion", {"prompt": tokens, "n_predict": 6, "temperature": 0})
    mixed = post(coder.url, "/completion", {"prompt": [tokens[0], PROMPT[1:]], "n_predict": 6, "temperature": 0})
    assert by_ids["content"] == alone(fim_models[0], tokens, 6)[0]
    assert by_ids["tokens_evaluated"] == len(tokens) and mixed["tokens_evaluated"] >= 2


def test_completion_answers_several_prompts_each_as_alone(coder, fim_models):
    """llama-server's multi-prompt /completion: an array with no token id at its top level holds
    several prompts (strings, token arrays, prompt objects); the answers come as one array in their
    order, each the main model's own answer to its prompt."""
    tokens = post(coder.url, "/tokenize", {"content": PROMPT, "add_special": True})["tokens"]   # as a string prompt is
    other = post(coder.url, "/tokenize", {"content": "the dog", "add_special": True})["tokens"]
    body = {"prompt": [tokens, {"prompt_string": PROMPT}, "the dog"], "n_predict": 6, "temperature": 0}
    answers = httpx.post(coder.url + "/completion", json=body, timeout=60).json()
    assert [a["content"] for a in answers] == [alone(fim_models[0], t, 6)[0] for t in (tokens, tokens, other)]
    single = post(coder.url, "/completion", {"prompt": {"prompt_string": PROMPT}, "n_predict": 6, "temperature": 0})
    assert single["content"] == answers[0]["content"]
    for refused, param in (({"prompt": {"prompt_string": PROMPT, "multimodal_data": ["iVBORw0KGgo="]}}, "prompt"),
                           ({"prompt": [PROMPT, PROMPT], "stream": True}, "stream")):
        response = httpx.post(coder.url + "/completion", json=refused, timeout=30)
        assert response.status_code == 400 and response.json()["error"]["param"] == param, response.text
    several = httpx.post(coder.url + "/v1/completions", json={"prompt": [PROMPT, PROMPT]}, timeout=30)
    assert several.status_code == 400 and several.json()["error"]["param"] == "prompt"


def test_completion_names_the_slot_that_answered_and_takes_the_slot_it_names(coder):
    for slot in (2, 1):
        assert post(coder.url, "/completion", {"prompt": PROMPT, "n_predict": 2, "id_slot": slot})["id_slot"] == slot


def test_completion_stop_words_and_response_fields(coder):
    whole = post(coder.url, "/completion", {"prompt": PROMPT, "n_predict": 16, "temperature": 0})
    word = whole["content"][4:7]
    assert word and word in whole["content"]
    stopped = post(coder.url, "/completion", {"prompt": PROMPT, "n_predict": 16, "temperature": 0, "stop": [word]})
    assert stopped["stop_type"] == "word" and stopped["stopping_word"] == word
    assert stopped["content"] == whole["content"][:whole["content"].index(word)]
    fields = post(coder.url, "/completion", {"prompt": PROMPT, "n_predict": 4, "temperature": 0,
                                             "response_fields": ["content", "timings/predicted_n", "missing"]})
    assert set(fields) == {"content", "timings/predicted_n"} and fields["timings/predicted_n"] == 4


def test_completion_seeded_sampling_repeats_and_cache_prompt_false_gives_the_same_answer(coder):
    body = {"prompt": PROMPT, "n_predict": 12, "temperature": 1.0, "seed": 7}
    first = post(coder.url, "/completion", body)
    assert post(coder.url, "/completion", body)["content"] == first["content"]
    fresh = post(coder.url, "/completion", body | {"cache_prompt": False})
    assert fresh["content"] == first["content"] and fresh["timings"]["cache_n"] == 0


@pytest.mark.parametrize("body, param", [
    ({"prompt": 5}, "prompt"),
    ({"prompt": PROMPT, "n_predict": "ten"}, "n_predict"),
    ({"prompt": PROMPT, "n_predict": -2}, "n_predict"),
    ({"prompt": PROMPT, "temperature": 9}, "temperature"),
    ({"prompt": PROMPT, "id_slot": 9}, "id_slot"), ({"prompt": PROMPT, "id_slot": -2}, "id_slot"),
    ({"prompt": PROMPT, "n_probs": -1}, "n_probs"),
    ({"prompt": PROMPT, "n_probs": 2, "post_sampling_probs": "yes"}, "post_sampling_probs"),
    ({"prompt": PROMPT, "grammar": "root ::= this is (not valid GBNF"}, "grammar"),
    ({"prompt": PROMPT, "samplers": ["top_k", "adaptive_p"]}, "samplers"),
    ({"prompt": PROMPT, "samplers": "kpz"}, "samplers"),
    ({"prompt": PROMPT, "samplers": {"top_k": 1}}, "samplers"),
    ({"prompt": PROMPT, "repeat_penalty": 1.1}, "repeat_penalty"),
    ({"prompt": PROMPT, "stream_options": {"include_usage": True}}, "stream_options"),
    ({"prompt": PROMPT, "response_fields": "content"}, "response_fields"),
])
def test_completion_refuses_what_it_cannot_honour_with_400_naming_it(coder, body, param):
    response = httpx.post(coder.url + "/completion", json=body, timeout=30)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_completion_neutral_values_of_unsupported_fields_are_answered(coder):
    neutral = {"repeat_penalty": 1.0, "presence_penalty": 0, "n_probs": 0, "mirostat": 0, "top_n_sigma": -1}
    assert post(coder.url, "/completion", {"prompt": PROMPT, "n_predict": 2} | neutral)["tokens_predicted"] == 2


def test_completion_over_the_context_is_llama_servers_context_error(coder):
    response = httpx.post(coder.url + "/completion", json={"prompt": [5] * (N_CTX + 1)}, timeout=30)
    error = response.json()["error"]
    assert response.status_code == 400 and error["type"] == "exceed_context_size_error"
    assert (error["n_prompt_tokens"], error["n_ctx"]) == (N_CTX + 1, N_CTX)


# --- /infill --------------------------------------------------------------------------------------

def tokens_of(url: str, text: str) -> list[int]:
    return post(url, "/tokenize", {"content": text, "parse_special": False})["tokens"]


def fim_layout(url: str, prefix: str, suffix: str, prompt: str, extra: list[tuple[str, str]], n_ctx: int) -> list[int]:
    """llama-server's format_prompt_infill, written out: the extra files (at most n_ctx - 2048 + 2 of their
    tokens, the last ones), the BOS, then prefix and prompt, suffix, middle."""
    pre, suf, mid, repo, sep = 270, 271, 272, 273, 274
    files = [repo, *tokens_of(url, "myproject\n")]
    for filename, text in extra:
        files += [sep, *tokens_of(url, filename + "\n"), *tokens_of(url, text)]
    files += [sep, *tokens_of(url, "filename\n")]
    files = files[len(files) - min(len(files), n_ctx - 2048 + 2):]
    return files + [1, pre, *tokens_of(url, prefix), *tokens_of(url, prompt), suf, *tokens_of(url, suffix), mid]


def test_infill_prompt_is_llama_servers_fim_layout(coder, fim_models):
    extra = [{"filename": "util.py", "text": "x = 1\n"}]
    body = post(coder.url, "/infill", {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": extra,
                                       "prompt": "a", "n_predict": 8, "temperature": 0})
    expected = fim_layout(coder.url, PREFIX, SUFFIX, "a", [("util.py", "x = 1\n")], N_CTX)
    assert body["tokens_evaluated"] == len(expected)
    assert body["prompt"] == post(coder.url, "/detokenize", {"tokens": expected})["content"]
    assert body["content"] == alone(fim_models[0], expected, 8)[0]      # the main model's own answer


def test_infill_keeps_every_extra_file_where_the_context_has_room(coder, fim_models):
    """The layout with a context of 8192 (where llama-server keeps up to 6146 tokens of extra files)."""
    from app.server.infill import Infill, infill_tokens

    extra = (("util.py", "x = 1\n"), ("b.py", "y = 2\n"))
    engine = Engine.load(ModelParams(str(fim_models[0]), n_ctx=N_CTX, n_threads=1))
    try:
        tokens = infill_tokens(engine, Infill((PREFIX,), (SUFFIX,), extra, "a"), 8192)
    finally:
        engine.close()
    assert tokens == fim_layout(coder.url, PREFIX, SUFFIX, "a", list(extra), 8192)


def test_infill_streams_like_completion(coder):
    base = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_predict": 6, "temperature": 0}
    whole = post(coder.url, "/infill", base)
    *pieces, last = events(coder.url, "/infill", base)
    assert "".join(c["content"] for c in pieces) == whole["content"] and last["stop"] is True


def test_infill_takes_what_an_editor_sends_and_ends_at_a_line_indented_less(coder):
    """llama.vim's FIM request, as it sends it: its sampler chain (top_k, top_p and llama.cpp's infill
    sampler, no temperature); n_indent ends the suggestion at a line indented less than the code it
    completes; t_max_predict_ms ends it at a line break once out of time; t_max_prompt_ms has no effect,
    as in llama-server."""
    body = {"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": [], "prompt": "", "n_predict": 48,
            "n_indent": 4, "top_k": 40, "top_p": 0.99, "stream": False, "samplers": ["top_k", "top_p", "infill"],
            "cache_prompt": True, "t_max_prompt_ms": 500, "t_max_predict_ms": 1000,
            "response_fields": ["content", "timings/predicted_n", "truncated", "tokens_cached"]}
    answer = post(coder.url, "/infill", body)
    assert set(answer) >= {"content", "timings/predicted_n", "truncated", "tokens_cached"}
    for line in answer["content"].split("\n")[1:]:
        assert not line.strip() or len(line) - len(line.lstrip(" \t")) >= 4, answer["content"]


@pytest.mark.parametrize("body, param", [
    ({"input_suffix": SUFFIX}, "input_prefix"),
    ({"input_prefix": PREFIX}, "input_suffix"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "prompt": 5}, "prompt"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": {"text": "x"}}, "input_extra"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": [{"filename": "a"}]}, "input_extra"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "input_extra": [{"text": "x", "filename": 3}]}, "input_extra"),
    ({"input_prefix": 5, "input_suffix": SUFFIX}, "input_prefix"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "n_indent": "four"}, "n_indent"),
    ({"input_prefix": PREFIX, "input_suffix": SUFFIX, "t_max_predict_ms": 0.5}, "t_max_predict_ms"),
])
def test_infill_refuses_bad_input_with_400(coder, body, param):
    response = httpx.post(coder.url + "/infill", json=body, timeout=30)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_infill_on_a_model_without_fim_tokens_is_refused_saying_so(served):
    response = httpx.post(served.url + "/infill", json={"input_prefix": PREFIX, "input_suffix": SUFFIX}, timeout=30)
    error = response.json()["error"]
    assert response.status_code == 400 and error["type"] == "not_supported_error"
    assert "prefix, suffix, middle" in error["message"]
    assert httpx.post(served.url + "/completion", json={"prompt": PROMPT, "n_predict": 2}).status_code == 200
