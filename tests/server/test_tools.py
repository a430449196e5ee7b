"""Tools and reasoning in the server: requests checked (clear 400s), the tools and switches written into
the model's own template, answers read into tool calls and reasoning, as OpenAI's client reads them
whole and streamed.

The tiny models' random weights write no tool calls, so ``scripted`` makes the engine answer with a
given text (the prompt it was asked, and the markers it was asked to spell, are kept for the test);
the rest runs as served: the request's parsing, the prompt built on the engine's thread, the answer
read and sent by the HTTP side.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import openai
import pytest

from app.core.engine import Engine
from app.core.gguf.tiny import THINKING_SPEC, TinySpec, write_tiny_model
from app.core.speculation.events import Origin, Round, Started, StopReason, Summary, TokenPiece
from tests.server.conftest import serving

TEMPLATES = Path(__file__).parents[1] / "core" / "chat" / "templates"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city.",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
PARIS_CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'


def _template(name: str) -> str:
    return (TEMPLATES / name).read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    d = tmp_path_factory.mktemp("tool-models")
    return {
        "qwen": write_tiny_model(d / "qwen.gguf", TinySpec(chat_tokens=True, name="tiny-qwen",
                                                           chat_template=_template("Qwen-Qwen2.5-7B-Instruct.jinja"))),
        "harmony": write_tiny_model(d / "harmony.gguf", TinySpec(chat_template=_template("openai-gpt-oss-120b.jinja"))),
        "thinking": write_tiny_model(d / "thinking.gguf", THINKING_SPEC),
    }


@pytest.fixture(scope="module")
def qwen(models):
    with serving(models["qwen"]) as s:
        yield s


@pytest.fixture
def client(qwen):
    with openai.OpenAI(base_url=qwen.url + "/v1", api_key="unused", max_retries=0, timeout=30) as c:
        yield c


class Script:
    """What the engine was asked (prompts as text, markers to spell), and the answer it gives."""

    def __init__(self):
        self.answer: str | None = None
        self.answers: list[str] = []       # answers for the next requests, in turn (then ``answer``)
        self.prompts: list[str] = []
        self.spelled: list[tuple] = []


@pytest.fixture
def scripted(monkeypatch):
    script, generate = Script(), Engine.generate

    def scripted_generate(self, request):
        prompt = request.prompt
        script.prompts.append(self.detokenize(prompt))
        script.spelled.append(tuple(request.spell))
        answer = script.answers.pop(0) if script.answers else script.answer
        if answer is None:
            yield from generate(self, request)
            return
        yield Started(len(prompt), 0)
        pieces = [answer[i:i + 5] for i in range(0, len(answer), 5)]
        for i, piece in enumerate(pieces, 1):
            yield TokenPiece(piece, (3,), Origin.MAIN, at_s=0.01 * i)
            yield Round(i, 0, 0, 0.0, 0.001, i, at_s=0.01 * i)
        n = len(pieces)
        yield Summary(len(prompt), len(prompt), n, 0.01, 0.01, 0.01 * n, 0, 0, n, n, 0, 0.0, 0.001 * n,
                      stop_reason=StopReason.EOG, text=answer, at_s=0.01 * (n + 1))

    monkeypatch.setattr(Engine, "generate", scripted_generate)
    return script


def _post(served, body: dict) -> httpx.Response:
    return httpx.post(served.url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 8, **body}, timeout=30)


# --- the request ----------------------------------------------------------------------------------

@pytest.mark.parametrize("body, param, words", [
    ({"tools": {"type": "function"}}, "tools", "an array of tools"),
    ({"tools": [{"type": "function", "function": {"name": "get weather"}}]}, "tools[0].function.name", "1 to 64"),
    ({"tools": [{"type": "code", "function": {"name": "f"}}]}, "tools[0]", '"type": "function"'),
    ({"tools": [WEATHER, WEATHER]}, "tools", "'get_weather' twice"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": "{}"}}]}, "tools[0].function.parameters",
     "JSON Schema object"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "get_time"}}}, "tool_choice",
     "'get_time', which is not among the tools (get_weather)"),
    ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice", '"auto", "none", "required"'),
    ({"tool_choice": "required"}, "tool_choice", "has no 'tools'"),
    ({"tools": [WEATHER], "parallel_tool_calls": "yes"}, "parallel_tool_calls", "true or false"),
    ({"tools": [{"type": "function", "function": {"name": f"f{i}"}} for i in range(1025)]}, "tools",
     "at most 1024 tools; got 1025"),
    ({"response_format": {"type": "sound"}}, "response_format", "must be one of text, json_object, json_schema"),
    ({"response_format": {"type": "json_object", "schema": 123}}, "response_format", "must be a JSON object"),
    ({"response_format": {"type": "json_object", "schema": {"type": "hiccup"}}}, "response_format",
     "cannot be turned into a grammar"),
    ({"json_schema": {"type": "object"}, "grammar": 'root ::= "a"'}, "grammar", "not both"),
    ({"tools": [WEATHER], "tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice",
     "cannot both shape the answer"),
    ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs", "may not set messages"),
    ({"chat_template_kwargs": {"enable_thinking": "no"}}, "chat_template_kwargs", "true or false"),
    ({"enable_thinking": 1}, "enable_thinking", "true or false"),
    ({"reasoning_effort": "max"}, "reasoning_effort", "low, medium, high"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"type": "function"}]}]},
     "messages[0].tool_calls[0]", '"function"'),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": 3}}]}]},
     "messages[0].tool_calls[0].function.arguments", "a string of JSON"),
    ({"messages": [{"role": "tool", "content": "sunny", "tool_call_id": 12}]}, "messages[0].tool_call_id", "a string"),
    ({"messages": [{"role": "assistant", "content": None}]}, "messages[0].content", "a string or an array"),
])
def test_bad_tool_requests_are_400s_that_say_what_is_wrong(qwen, body, param, words):
    response = _post(qwen, body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and words in error["message"]


def _nested(depth: int) -> dict:
    value: dict = {}
    for _ in range(depth - 1):
        value = {"x": value}
    return value


@pytest.mark.parametrize("where", ["parameters", "chat_template_kwargs"])
def test_json_nested_past_the_limit_is_a_400_naming_it(qwen, where):
    """900 levels in a tool's parameters or in chat_template_kwargs overflowed the engine's walk of
    them (a 500 with a RecursionError). The body may nest MAX_JSON_DEPTH (100) levels."""
    deep = _nested(900)
    body = {"tools": [{**WEATHER, "function": {**WEATHER["function"], "parameters": deep}}]} \
        if where == "parameters" else {"chat_template_kwargs": {"deep": deep}}
    response = _post(qwen, body)
    assert response.status_code == 400, response.text
    assert "more than 100 levels deep" in response.json()["error"]["message"]


def test_json_deeper_than_the_decoder_goes_is_a_400_and_shallow_nesting_is_served(qwen):
    text = '{"messages": [{"role": "user", "content": "hi"}], "chat_template_kwargs": {"x": ' \
        + "[" * 100_000 + "]" * 100_000 + "}}"
    response = httpx.post(qwen.url + "/v1/chat/completions", content=text, timeout=30,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400 and "levels deep" in response.json()["error"]["message"]
    assert _post(qwen, {"chat_template_kwargs": {"deep": _nested(90)}}).status_code == 200


@pytest.mark.parametrize("response_format", [
    {"type": "json_object"},
    {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 12}}, "required": ["city"]}}},
    {"type": "text"},
])
def test_completions_take_response_format_as_chat_completions_do(qwen, response_format):
    """/v1/completions and /v1/chat/completions follow one rule: a JSON format's answer is JSON (an object,
    with the schema's required keys), text is free."""
    for path, body in (("/v1/completions", {"prompt": "hi"}), ("/v1/chat/completions", {"messages": ASK})):
        response = httpx.post(qwen.url + path, json={**body, "max_tokens": 200, "response_format": response_format,
                                                     "temperature": 0}, timeout=60)
        assert response.status_code == 200, (path, response.text)
        choice = response.json()["choices"][0]
        text = choice["text"] if "text" in choice else choice["message"]["content"]
        if response_format["type"] != "text" and choice["finish_reason"] == "stop":
            value = json.loads(text)
            assert isinstance(value, dict)
            assert response_format["type"] == "json_object" or isinstance(value["city"], str)


def test_arguments_that_are_not_json_in_the_conversation_are_a_400(qwen):
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{Paris"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]
    response = _post(qwen, {"messages": messages})
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]


# --- the prompt -------------------------------------------------------------------------------------

def test_the_tools_reach_the_models_own_template(qwen, scripted, client):
    client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER, CLOCK], max_tokens=4, temperature=0)
    prompt = scripted.prompts[-1]
    assert "# Tools" in prompt and json.dumps(WEATHER) in prompt and json.dumps(CLOCK) in prompt
    assert prompt.endswith("assistant\n")                 # "auto": the model decides
    assert "<tool_call>" in scripted.spelled[-1]           # the markers its answer is read by
    client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=4)
    assert "# Tools" not in scripted.prompts[-1] and scripted.spelled[-1] == ()


@pytest.mark.parametrize("choice, opening, rest, name", [
    ("required", 'assistant\n<tool_call>\n{"name": "',
     'get_weather", "arguments": {"location": "Paris"}}\n</tool_call>', "get_weather"),
    ({"type": "function", "function": {"name": "get_time"}},
     'assistant\n<tool_call>\n{"name": "get_time", "arguments": ', "{}}\n</tool_call>", "get_time"),
])
def test_a_required_call_starts_the_answer_with_its_opening(qwen, scripted, client, choice, opening, rest, name):
    scripted.answer = rest      # what the model writes after the opening: the parsers read both
    answer = client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER, CLOCK], tool_choice=choice)
    assert scripted.prompts[-1].endswith(opening)
    call, = answer.choices[0].message.tool_calls
    assert call.function.name == name and answer.choices[0].finish_reason == "tool_calls"


def test_the_next_turn_with_the_tools_result_renders_the_call_and_the_result(qwen, scripted, client):
    scripted.answer = "It is sunny in Paris."
    messages = ASK + [{"role": "assistant", "content": None, "tool_calls": [{"id": "call_7", "type": "function", "function": {
        "name": "get_weather", "arguments": '{"location": "Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_7", "content": "sunny, 24 C"}]
    answer = client.chat.completions.create(model="any", messages=messages, tools=[WEATHER])
    prompt = scripted.prompts[-1]
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>' in prompt
    assert "<tool_response>\nsunny, 24 C\n</tool_response>" in prompt
    assert answer.choices[0].message.content == "It is sunny in Paris." and answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.tool_calls is None


# --- the answer -------------------------------------------------------------------------------------

def test_a_call_comes_back_as_tool_calls_with_content_null(qwen, scripted, client):
    scripted.answer = PARIS_CALL
    answer = client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER])
    choice = answer.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    call, = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_") and call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"location": "Paris"}


def test_a_streamed_call_comes_in_deltas_as_openai_sends_them(qwen, scripted, client):
    scripted.answer = "Checking.\n" + PARIS_CALL + "\n" + PARIS_CALL.replace("Paris", "Rome")
    chunks = list(client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER], stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert deltas[0].role == "assistant"
    assert "".join(d.content or "" for d in deltas) == "Checking."
    calls = [call for d in deltas for call in d.tool_calls or []]
    firsts = [c for c in calls if c.id is not None]
    assert [(c.index, c.type, c.function.name, c.function.arguments) for c in firsts] == \
        [(0, "function", "get_weather", ""), (1, "function", "get_weather", "")]
    assert len({c.id for c in firsts}) == 2
    arguments = ["".join(c.function.arguments for c in calls if c.index == i and c.id is None) for i in (0, 1)]
    assert [json.loads(a) for a in arguments] == [{"location": "Paris"}, {"location": "Rome"}]
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    whole = client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER]).choices[0].message
    assert whole.content == "Checking." and [c.function.arguments for c in whole.tool_calls] == arguments


def test_without_parallel_calls_only_the_first_comes_back(qwen, scripted, client):
    scripted.answer = PARIS_CALL + PARIS_CALL.replace("Paris", "Rome")
    answer = client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER], parallel_tool_calls=False)
    assert [json.loads(c.function.arguments) for c in answer.choices[0].message.tool_calls] == [{"location": "Paris"}]


def test_a_malformed_call_is_content(qwen, scripted, client):
    scripted.answer = '<tool_call>\n{"name": "get_weather", "arguments": {"location": }}\n</tool_call>'
    answer = client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER])
    assert answer.choices[0].message.content == scripted.answer and answer.choices[0].message.tool_calls is None
    assert answer.choices[0].finish_reason == "stop"


def test_without_tools_the_answer_is_its_text(qwen, scripted, client):
    scripted.answer = "  " + PARIS_CALL + "  "
    answer = client.chat.completions.create(model="any", messages=ASK)
    assert answer.choices[0].message.content == scripted.answer and answer.choices[0].finish_reason == "stop"


def test_real_generation_with_tools_answers(qwen, client):
    answer = client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER], max_tokens=12, temperature=0)
    streamed = client.chat.completions.create(model="any", messages=ASK, tools=[WEATHER], max_tokens=12, temperature=0,
                                              stream=True)
    text = "".join(c.choices[0].delta.content or "" for c in streamed if c.choices)
    assert answer.choices[0].finish_reason == "length" and text == (answer.choices[0].message.content or "")


def test_harmony_calls_and_reasoning_effort(models, scripted):
    with serving(models["harmony"]) as served:
        scripted.answer = ("<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
                           'to=functions.get_weather <|constrain|>json<|message|>{"location": "Paris"}<|call|>')
        body = _post(served, {"tools": [WEATHER], "reasoning_effort": "high"}).json()
        assert "Reasoning: high" in scripted.prompts[-1] and "get_weather" in scripted.prompts[-1]
        assert {"<|call|>", "<|message|>", "<|channel|>"} <= set(scripted.spelled[-1])
        message = body["choices"][0]["message"]
        assert message["reasoning_content"] == "Need the weather." and message["content"] is None
        assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"location": "Paris"}'}
        assert body["choices"][0]["finish_reason"] == "tool_calls"


# --- reasoning --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def thinking(models):
    with serving(models["thinking"]) as s:
        yield s


def test_reasoning_comes_apart_as_reasoning_content_whole_and_streamed(thinking, scripted):
    scripted.answer = "Paris is in France.\n</think>\n\nIt is sunny."
    message = _post(thinking, {}).json()["choices"][0]["message"]
    assert message == {"role": "assistant", "content": "It is sunny.", "reasoning_content": "Paris is in France."}
    with openai.OpenAI(base_url=thinking.url + "/v1", api_key="x", max_retries=0, timeout=30) as client:
        chunks = list(client.chat.completions.create(model="any", messages=ASK, stream=True))
    deltas = [c.choices[0].delta for c in chunks if c.choices]
    assert "".join(d.model_extra.get("reasoning_content") or "" for d in deltas) == "Paris is in France."
    assert "".join(d.content or "" for d in deltas) == "It is sunny."


@pytest.mark.parametrize("body", [{"enable_thinking": False}, {"chat_template_kwargs": {"enable_thinking": False}}])
def test_thinking_can_be_switched_off_per_request(thinking, scripted, body):
    scripted.answer = "It is sunny."
    message = _post(thinking, body).json()["choices"][0]["message"]
    tail = scripted.prompts[-1].rsplit("assistant", 1)[1]
    assert "<think>" in tail and "</think>" in tail             # the template wrote an empty, closed block
    assert message == {"role": "assistant", "content": "It is sunny."}
    _post(thinking, {})
    tail = scripted.prompts[-1].rsplit("assistant", 1)[1]
    assert "<think>" in tail and "</think>" not in tail


def test_the_demo_script_runs_the_round_trip(qwen, scripted, monkeypatch, capsys):
    import runpy
    import sys

    demo = runpy.run_path(str(Path(__file__).parents[2] / "scripts" / "tool_call_demo.py"))
    # whole, streamed, the turn after the result (the model calls again), that turn with "none"
    scripted.answers = ["```json\n" + PARIS_CALL[12:-13] + "\n```", PARIS_CALL, PARIS_CALL, "Sunny, 24 C."]
    monkeypatch.setattr(sys, "argv", ["tool_call_demo.py", "--url", qwen.url])
    assert demo["main"]() == 0
    out = capsys.readouterr().out
    assert out.count('get_weather({"location": "Paris"})') == 3 and "'Sunny, 24 C.'" in out and out.endswith("OK\n")
    assert "# Tools" not in scripted.prompts[-1] and "<tool_response>" in scripted.prompts[-1]
