"""Structured output through the server with the tiny models: response_format, llama-server's grammar
and json_schema, and forced tool calls are enforced on the main model's distribution, greedy and
sampled, with and without a drafter; a bad grammar or schema is a 400 naming it."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx
import pytest

from app.core.gguf.tiny import TinySpec, write_tiny_model
from tests.server.conftest import serving

TEMPLATES = Path(__file__).parents[1] / "core" / "chat" / "templates"
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
# strings by pattern: the tiny model's byte tokens can write bytes that are no UTF-8, which llama.cpp's
# grammar counts as characters of their own (a maxLength then counts them, where Python sees U+FFFD); no
# integer ranges: llama-cpp-python 0.3.36's converter does not read minimum and maximum
SCHEMA = {"type": "object", "properties": {"city": {"type": "string", "pattern": "^[A-Za-z ]{1,10}$"},
                                           "ok": {"type": "boolean"},
                                           "n": {"type": "integer"}},
          "required": ["city", "ok", "n"]}
WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string", "pattern": "^[A-Za-z]{1,12}$"},
                                     "days": {"type": "integer"}},
    "required": ["location"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "enum": ["UTC", "CET"]}}, "required": ["zone"]}}}
SAMPLINGS = [{"temperature": 0}, {"temperature": 1.0, "top_k": 0, "top_p": 1.0, "min_p": 0, "seed": 3}]


def conforms(value, schema: dict) -> bool:
    """``value`` against the small part of JSON Schema these tests use."""
    kind = schema.get("type")
    if "enum" in schema:
        return value in schema["enum"]
    if kind == "object":
        props = schema.get("properties", {})
        return isinstance(value, dict) and set(schema.get("required", ())) <= set(value) \
            and set(value) <= set(props) and all(conforms(v, props[k]) for k, v in value.items())
    if kind == "string":
        return isinstance(value, str) and re.fullmatch(schema.get("pattern", "^.*$")[1:-1], value) is not None
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool) \
            and schema.get("minimum", value) <= value <= schema.get("maximum", value)
    if kind == "boolean":
        return isinstance(value, bool)
    return True


@pytest.fixture(scope="module")
def qwen_model(tmp_path_factory):
    template = (TEMPLATES / "Qwen-Qwen2.5-7B-Instruct.jinja").read_text(encoding="utf-8")
    return write_tiny_model(tmp_path_factory.mktemp("structured") / "qwen.gguf",
                            TinySpec(chat_tokens=True, name="tiny-qwen", chat_template=template))


@pytest.fixture(scope="module", params=["none", "model", "lookup"])
def served(request, qwen_model):
    """The tiny Qwen-templated model alone, drafting for itself, and drafting by prompt lookup."""
    draft = qwen_model if request.param == "model" else None
    with serving(qwen_model, draft, drafter=request.param) as s:
        yield s


def post(served, path: str, body: dict) -> httpx.Response:
    return httpx.post(served.url + path, json=body, timeout=120)


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("response_format", [
    {"type": "json_schema", "json_schema": {"name": "weather", "schema": SCHEMA}},
    {"type": "json_object", "schema": SCHEMA},
])
def test_response_format_answers_json_that_matches_the_schema(served, sampling, response_format):
    response = post(served, "/v1/chat/completions", {"messages": ASK, "max_tokens": 400,
                                                     "response_format": response_format, **sampling})
    assert response.status_code == 200, response.text
    choice = response.json()["choices"][0]
    assert choice["finish_reason"] == "stop", choice
    assert conforms(json.loads(choice["message"]["content"]), SCHEMA), choice["message"]["content"]


@pytest.mark.parametrize("sampling", SAMPLINGS)
def test_a_plain_json_object_is_asked_with_json_object(served, sampling):
    response = post(served, "/v1/chat/completions", {"messages": ASK, "max_tokens": 400, **sampling,
                                                     "response_format": {"type": "json_object"}})
    choice = response.json()["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"]), dict)
    else:   # a random model's object may run long: what came is an object's start
        assert choice["message"]["content"].startswith("{")


@pytest.mark.parametrize("sampling", SAMPLINGS)
@pytest.mark.parametrize("choice, names", [
    ("required", {"get_weather", "get_time"}),
    ({"type": "function", "function": {"name": "get_time"}}, {"get_time"}),
])
def test_a_forced_call_calls_a_declared_function_with_arguments_its_schema_allows(served, sampling, choice, names):
    response = post(served, "/v1/chat/completions", {"messages": ASK, "tools": [WEATHER, CLOCK], "max_tokens": 400,
                                                     "tool_choice": choice, **sampling})
    assert response.status_code == 200, response.text
    answer = response.json()["choices"][0]
    assert answer["finish_reason"] == "tool_calls", answer
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, CLOCK)}
    for call in answer["message"]["tool_calls"]:
        assert call["function"]["name"] in names
        assert conforms(json.loads(call["function"]["arguments"]), schemas[call["function"]["name"]])


def test_llama_servers_grammar_and_json_schema_on_completion_and_chat(served):
    five = post(served, "/completion", {"prompt": "I believe", "n_predict": 6, "grammar": 'root ::= "a"{5,5}'})
    assert five.status_code == 200 and five.json()["content"] == "aaaaa"
    const = post(served, "/v1/chat/completions", {"messages": ASK, "max_tokens": 10, "json_schema": {"const": "42"}})
    assert const.json()["choices"][0]["message"]["content"] == '"42"'
    listed = post(served, "/v1/completions", {"prompt": "x", "max_tokens": 10, "temperature": 1, "seed": 1,
                                              "json_schema": {"items": [{"type": "boolean"}]}})
    assert isinstance(json.loads(listed.json()["choices"][0]["text"])[0], bool)


@pytest.mark.parametrize("path, body, words", [
    ("/completion", {"prompt": "x", "grammar": "root ::= this is (not valid GBNF"}, "expecting ')'"),
    ("/v1/chat/completions", {"messages": ASK, "grammar": 'start ::= "a"'}, "does not contain a 'root' symbol"),
    ("/v1/chat/completions", {"messages": ASK, "grammar": 'root ::= root "a"'}, "left recursion"),
    ("/v1/completions", {"prompt": "x", "grammar": 5}, "a string of GBNF"),
])
def test_a_bad_grammar_is_a_400_naming_the_problem(served, path, body, words):
    response = post(served, path, body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "grammar" and words in error["message"], error


def test_a_tools_schema_the_converter_cannot_read_is_a_400_naming_the_tool(served):
    bad = {"type": "function", "function": {"name": "odd", "parameters": {"type": "hiccup"}}}
    response = post(served, "/v1/chat/completions", {"messages": ASK, "tools": [WEATHER, bad], "tool_choice": "required"})
    assert response.status_code == 400 and "'odd'" in response.json()["error"]["message"]


def test_a_grammar_the_vocabulary_cannot_write_ends_with_an_error_not_a_hang(served):
    """No token's text begins with a NUL byte: the grammar allows nothing, and the answer ends saying so."""
    response = post(served, "/v1/completions", {"prompt": "x", "max_tokens": 5, "grammar": 'root ::= "\\x00"'})
    assert response.status_code >= 400 and "grammar allows no token" in response.text, response.text


def test_a_thinking_model_closes_its_reasoning_before_the_json(tmp_path):
    from app.core.gguf.tiny import THINKING_SPEC

    model = write_tiny_model(tmp_path / "thinking.gguf", THINKING_SPEC)
    with serving(model) as s:
        choice = post(s, "/v1/chat/completions", {"messages": ASK, "max_tokens": 300, "temperature": 0,
                                                  "response_format": {"type": "json_schema",
                                                                      "json_schema": {"schema": SCHEMA}}}).json()
    message = choice["choices"][0]["message"]
    assert not message.get("reasoning_content") and conforms(json.loads(message["content"]), SCHEMA), message
