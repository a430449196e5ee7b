"""Tools for a model whose chat template shows none (the tiny ChatML model; the tiny model without a
template): llama.cpp's generic format, end to end. The tools are described in the system message, a
grammar holds the answer to ``{"tool_call": ...}`` or ``{"response": ...}``, and the answer comes
back as OpenAI's tool_calls or content, whole and streamed, the same with speculation as without.

The tiny models' random weights make real answers here: the grammar alone makes them calls. Their
tools take bounded arguments (enums, booleans), so that a call ends within a few dozen tokens.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest

from app.core.chat.generic_tools import INSTRUCTION, TOOLS_INTRO
from tests.server.conftest import serving
from tests.server.test_tools import scripted  # noqa: F401 (a fixture: the engine answers a given text)

DICE = {"type": "function", "function": {
    "name": "roll_dice", "description": "Roll dice.",
    "parameters": {"type": "object", "properties": {"sides": {"type": "integer", "enum": [4, 6, 20]},
                                                    "loud": {"type": "boolean"}},
                   "required": ["sides", "loud"]}}}
COLOR = {"type": "function", "function": {
    "name": "pick_color", "parameters": {"type": "object", "properties": {"color": {"enum": ["red", "green"]}},
                                         "required": ["color"]}}}
TOOLS = [DICE, COLOR]
ASK = [{"role": "system", "content": "You are a game master."}, {"role": "user", "content": "Roll for me."}]
GREEDY = {"temperature": 0, "max_tokens": 160}


@pytest.fixture(scope="module", params=["chatml", "no template"])
def served(request, tiny_models):
    with serving(tiny_models.main if request.param == "chatml" else tiny_models.no_template) as s:
        yield s


@pytest.fixture(scope="module")
def chatml(tiny_models):
    with serving(tiny_models.main) as s:
        yield s


def _chat(served, **body) -> dict:
    response = httpx.post(served.url + "/v1/chat/completions", json={"messages": ASK, **body}, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()["choices"][0]


def _valid(call: dict) -> bool:
    """Whether a call names a declared function with arguments its schema allows."""
    arguments = json.loads(call["function"]["arguments"])
    if call["function"]["name"] == "roll_dice":
        return set(arguments) == {"sides", "loud"} and arguments["sides"] in (4, 6, 20) \
            and isinstance(arguments["loud"], bool)
    return call["function"]["name"] == "pick_color" and arguments == {"color": arguments.get("color")} \
        and arguments["color"] in ("red", "green")


def test_a_required_call_is_a_declared_function_with_arguments_its_schema_allows(served):
    choice = _chat(served, tools=TOOLS, tool_choice="required", **GREEDY)
    assert choice["finish_reason"] == "tool_calls" and choice["message"]["content"] is None
    call, = choice["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_") and _valid(call)
    named = _chat(served, tools=TOOLS, tool_choice={"type": "function", "function": {"name": "pick_color"}}, **GREEDY)
    call, = named["message"]["tool_calls"]
    assert call["function"]["name"] == "pick_color" and _valid(call)


def test_auto_answers_a_valid_call_or_content(served):
    for seed in range(3):
        choice = _chat(served, tools=TOOLS, seed=seed, max_tokens=160)
        calls = choice["message"].get("tool_calls")
        if calls:
            assert choice["finish_reason"] == "tool_calls" and all(_valid(c) for c in calls)
        else:   # a response: its text (cut where max_tokens ends it)
            assert isinstance(choice["message"]["content"], str) and "response" not in choice["message"]["content"]


def test_the_prompt_describes_the_tools_in_the_system_message_and_none_shows_none(chatml):
    def prompt(**body) -> str:
        return httpx.post(chatml.url + "/apply-template", json={"messages": ASK, **body}, timeout=60).json()["prompt"]

    shown = prompt(tools=TOOLS)
    color = {"name": "pick_color", "description": "", "parameters": COLOR["function"]["parameters"]}   # llama.cpp's keys
    described = json.dumps([DICE, {"type": "function", "function": color}], indent=2)
    assert shown.startswith(f"<|im_start|>system\nYou are a game master.\n\n{INSTRUCTION}\n\n{TOOLS_INTRO}{described}"
                            "\n\nExample tool call syntax:\n\n{\n  \"tool_calls\": [")
    assert shown.endswith("<|im_start|>user\nRoll for me.<|im_end|>\n<|im_start|>assistant\n")
    assert prompt(tools=TOOLS, tool_choice="none") == prompt()


def test_a_streamed_call_comes_in_openai_deltas_as_the_whole_answer_has_it(chatml):
    with openai.OpenAI(base_url=chatml.url + "/v1", api_key="unused", max_retries=0, timeout=120) as client:
        whole = client.chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice="required", **GREEDY)
        chunks = list(client.chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice="required",
                                                     stream=True, **GREEDY))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    calls = [call for d in deltas for call in d.tool_calls or []]
    first, rest = calls[0], calls[1:]
    assert (first.index, first.type, first.function.arguments) == (0, "function", "") and first.id
    assert all(c.index == 0 and c.id is None for c in rest)
    expected, = whole.choices[0].message.tool_calls
    assert first.function.name == expected.function.name
    assert "".join(c.function.arguments for c in rest) == expected.function.arguments
    assert chunks[-1].choices[0].finish_reason == "tool_calls" and not any(d.content for d in deltas)


def test_greedy_answers_are_the_same_with_speculation_as_without(tiny_models):
    answers = []
    for draft in (None, tiny_models.other, tiny_models.same):
        with serving(tiny_models.main, draft) as s:
            answers.append([_shape(_chat(s, tools=TOOLS, tool_choice=choice, **GREEDY))
                            for choice in ("required", "auto")])
    assert answers[0] == answers[1] == answers[2]


def _shape(choice: dict) -> tuple:
    message = choice["message"]
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in message.get("tool_calls") or []]
    return choice["finish_reason"], message["content"], calls


def test_a_response_is_content_as_it_streams_and_none_reads_no_call(chatml, scripted):  # noqa: F811
    scripted.answer = '{"response": "It is \\"6\\", caf\\u00e9."}'
    with openai.OpenAI(base_url=chatml.url + "/v1", api_key="unused", max_retries=0, timeout=60) as client:
        chunks = list(client.chat.completions.create(model="any", messages=ASK, tools=TOOLS, stream=True))
        deltas = [c.choices[0].delta for c in chunks if c.choices]
        assert "".join(d.content or "" for d in deltas) == 'It is "6", café.' and not any(d.tool_calls for d in deltas)
        assert len([d for d in deltas if d.content]) > 1        # given as it came, not at the end
        scripted.answer = '{"tool_call": {"name": "pick_color", "arguments": {"color": "red"}}}'
        plain = client.chat.completions.create(model="any", messages=ASK, tools=TOOLS, tool_choice="none")
    assert plain.choices[0].message.content == scripted.answer and plain.choices[0].message.tool_calls is None
    assert INSTRUCTION not in scripted.prompts[-1]


def test_earlier_calls_and_results_reach_the_prompt_as_json(chatml):
    messages = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "roll_dice", "arguments": '{"sides": 6, "loud": true}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4"}]
    for body in ({"tools": TOOLS}, {}):
        response = httpx.post(chatml.url + "/apply-template", json={"messages": messages, **body}, timeout=60)
        assert response.status_code == 200, response.text
        prompt = response.json()["prompt"]
        assert '<|im_start|>assistant\n{\n  "tool_calls": [\n    {\n      "name": "roll_dice",\n      "arguments": ' \
               '{\n        "sides": 6,\n        "loud": true\n      },\n      "id": "call_1"\n    }\n  ]\n}<|im_end|>' \
               in prompt
        assert '<|im_start|>user\n{\n  "tool_response": {\n    "content": "4",\n    "tool_call_id": "call_1"\n  }\n}' \
               in prompt


def test_a_json_schema_beside_generic_tools_shapes_the_response(chatml, scripted):  # noqa: F811
    scripted.answer = '{"response": {"answer": 6}}'
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}, "required": ["answer"]}
    choice = _chat(chatml, tools=TOOLS, response_format={"type": "json_schema", "json_schema": {"schema": schema}})
    assert json.loads(choice["message"]["content"]) == {"answer": 6} and choice["message"].get("tool_calls") is None
    scripted.answer = None     # the model's own answer, under the grammar: a call, or a response the schema allows
    choice = _chat(chatml, tools=TOOLS, response_format={"type": "json_schema", "json_schema": {"schema": schema}},
                   **GREEDY)
    calls = choice["message"].get("tool_calls")
    assert all(_valid(c) for c in calls) if calls else isinstance(json.loads(choice["message"]["content"])["answer"], int)


@pytest.mark.parametrize("body, words", [
    ({"grammar": 'root ::= "yes"'}, "cannot also follow a GBNF 'grammar'"),
    ({"messages": ASK + [{"role": "assistant", "content": "Sure"}]}, "cannot also continue a final assistant message"),
])
def test_what_cannot_join_the_generic_answer_is_a_400_saying_why(chatml, body, words):
    response = httpx.post(chatml.url + "/v1/chat/completions",
                          json={"messages": ASK, "tools": TOOLS, "max_tokens": 4, **body}, timeout=60)
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert words in message and "shows no tools Quickdraft reads" in message and "generic JSON" in message
