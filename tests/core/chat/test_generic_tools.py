"""llama.cpp's generic tool-call format: the prompt's words and shapes (llama.cpp's and minja's), the
JSON Schema the answer's grammar is made of, and the answer read back, whole and streamed alike."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.core.chat.generic_tools import (INSTRUCTION, TOOLS_INTRO, call_example, generic_grammar, generic_messages,
                                         generic_schema, shown_messages)
from app.core.chat.toolcalls import CONTENT, ToolCallStream, parse_tool_calls
from app.core.chat.tools import ToolFormat, tool_support
from app.core.gguf.tiny_vocab import CHATML_TEMPLATE

WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather now in a city.",
    "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}}
CLOCK = {"type": "function", "function": {"name": "get_time"}}
# minja's example call as it reads in a ChatML prompt (its ToolsPolyfill test writes the same)
CHATML_EXAMPLE = ('{\n  "tool_calls": [\n    {\n      "name": "tool_name",\n      "arguments": {\n        "arg1": '
                  '"some_value"\n      },\n      "id": "call_1___"\n    }\n  ]\n}')


# --- the prompt ------------------------------------------------------------------------------------------

def test_the_instruction_and_the_tools_join_the_system_message_as_llama_cpp_writes_them():
    support = tool_support(CHATML_TEMPLATE)
    assert not support.tools and not support.calls
    messages = generic_messages([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
                                [WEATHER], support, CHATML_TEMPLATE)
    system, user = messages
    tools = json.dumps([WEATHER], indent=2)
    assert system == {"role": "system", "content": f"Be brief.\n\n{INSTRUCTION}\n\n{TOOLS_INTRO}{tools}"
                                                   f"\n\nExample tool call syntax:\n\n{CHATML_EXAMPLE}\n\n"}
    assert user == {"role": "user", "content": "Hi"}
    first, = generic_messages([{"role": "user", "content": "Hi"}], [CLOCK], support, None)[:1]
    assert first["role"] == "system" and first["content"].startswith(INSTRUCTION + "\n\n" + TOOLS_INTRO)
    assert '"parameters": {\n        "type": "object",\n        "properties": {}' in first["content"]


def test_a_template_that_shows_tools_keeps_them_and_gets_the_instruction_alone():
    template = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{{ tools | tojson if tools }}"
    support = tool_support(template)
    assert support.tools and support.format is None
    system, _ = generic_messages([{"role": "user", "content": "Hi"}], [WEATHER], support, template)
    assert system == {"role": "system", "content": INSTRUCTION}


@pytest.mark.parametrize("template", [CHATML_TEMPLATE, None])
def test_the_example_call_is_what_minja_infers(template):
    assert call_example(template) == CHATML_EXAMPLE


def test_earlier_calls_and_results_are_json_text_where_the_template_cannot_show_them():
    messages = [{"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": "", "tool_calls": [{"id": "call_7", "type": "function", "function": {
                    "name": "get_weather", "arguments": '{"location": "Paris"}'}}]},
                {"role": "tool", "tool_call_id": "call_7", "name": "get_weather", "content": "sunny"}]
    user, call, result = shown_messages(messages, tool_support(CHATML_TEMPLATE))
    assert user == messages[0]
    assert call == {"role": "assistant", "content": json.dumps({"tool_calls": [
        {"name": "get_weather", "arguments": {"location": "Paris"}, "id": "call_7"}]}, indent=2)}
    assert result == {"role": "user", "content": json.dumps(
        {"tool_response": {"tool": "get_weather", "content": "sunny", "tool_call_id": "call_7"}}, indent=2)}
    qwen_like = "{% for m in messages %}{% if m.tool_calls %}{{ m.tool_calls | tojson }}{% endif %}{% endfor %}"
    assert shown_messages(messages, tool_support(qwen_like)) == messages   # a template that shows them


# --- the schema ------------------------------------------------------------------------------------------

def test_the_schema_is_llama_cpps_a_call_or_a_response():
    schema = generic_schema([WEATHER, CLOCK], None, parallel=False, required=False)
    call, response = schema["anyOf"]
    assert response == {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"]}
    weather, clock = call["properties"]["tool_call"]["anyOf"]
    assert call["required"] == ["tool_call"]
    assert weather == {"type": "object", "properties": {"name": {"type": "string", "const": "get_weather"},
                                                        "arguments": WEATHER["function"]["parameters"]},
                       "required": ["name", "arguments"], "description": "The weather now in a city."}
    assert clock["properties"]["arguments"] == {"type": "object", "properties": {}}


def test_a_required_call_allows_no_response_and_a_named_one_only_its_function():
    schema = generic_schema([WEATHER, CLOCK], "get_time", parallel=False, required=True)
    assert schema["required"] == ["tool_call"] and schema["properties"]["tool_call"]["properties"]["name"]["const"] \
        == "get_time"


def test_a_response_schema_replaces_the_responses_text():
    schema = {"type": "object", "properties": {"answer": {"type": "integer"}}}
    _, response = generic_schema([WEATHER], None, parallel=False, required=False, response=schema)["anyOf"]
    assert response["properties"]["response"] == schema


def test_parallel_calls_are_a_list_of_calls_with_ids():
    schema = generic_schema([WEATHER], None, parallel=True, required=True)
    calls = schema["properties"]["tool_calls"]
    assert calls["minItems"] == 1 and calls["items"]["required"] == ["name", "arguments", "id"]
    assert calls["items"]["properties"]["id"] == {"type": "string", "minLength": 4}


def test_the_grammar_names_the_keys_and_the_functions():
    grammar = generic_grammar([WEATHER, CLOCK], None, parallel=False, required=False)
    for text in ("tool_call", "response", "get_weather", "get_time", "location"):
        assert text in grammar


# --- the answer ------------------------------------------------------------------------------------------

ANSWERS = [
    ('{"tool_call": {"name": "get_weather", "arguments": {"location": "Paris"}}}', "", [("get_weather",
                                                                                        {"location": "Paris"})]),
    (' { "response" : "It is \\"sunny\\" \\u00e9t\\u00e9 \\ud83d\\ude00\\n" } ', 'It is "sunny" été 😀', []),
    ('{"tool_calls": [{"name": "get_weather", "arguments": {"location": "Rome"}, "id": "abcd"}, '
     '{"name": "get_time", "arguments": {}, "id": "efgh"}]}', "",
     [("get_weather", {"location": "Rome"}), ("get_time", {})]),
    ('{"response": "cut short', "cut short", []),                    # an answer past max_tokens: its text so far
    ('{"tool_call": {"name": "get_weather", "argum', '{"tool_call": {"name": "get_weather", "argum', []),
    ('{"response": {"a": 1}}', '{\n  "a": 1\n}', []),                # llama.cpp writes a response that is no text
    ("not JSON at all", "not JSON at all", []),
]


@pytest.mark.parametrize("text, content, calls", ANSWERS)
def test_an_answer_reads_the_same_whole_and_streamed_in_any_pieces(text, content, calls):
    whole = parse_tool_calls(ToolFormat.GENERIC, text, [WEATHER, CLOCK])
    assert whole.content == content and [(c.name, json.loads(c.arguments)) for c in whole.calls] == calls
    for size in (1, 2, 3, 7):
        stream = ToolCallStream(ToolFormat.GENERIC, [WEATHER, CLOCK])
        items = []
        for i in range(0, len(text), size):
            items += stream.feed(text[i:i + size])
        items += stream.finish()
        assert "".join(t for kind, t in items if kind == CONTENT) == content
        assert [(c.name, c.arguments) for c in stream.calls] == [(c.name, c.arguments) for c in whole.calls]


def test_a_response_streams_as_it_comes_and_the_ids_the_model_wrote_are_kept():
    stream = ToolCallStream(ToolFormat.GENERIC)
    assert stream.feed('{"response": "Hel') == [(CONTENT, "Hel")]
    assert stream.feed("lo \\u00") == [(CONTENT, "lo")]          # an escape is given once whole
    assert stream.feed("e9!") == [(CONTENT, " é!")]
    assert stream.feed('"}') + stream.finish() == []
    answer = parse_tool_calls(ToolFormat.GENERIC, '{"tool_calls": [{"name": "f", "arguments": {}, "id": "abcd"}]}')
    assert [c.id for c in answer.calls] == ["abcd"]


def test_a_template_that_writes_calls_gives_its_own_example():
    template = ("{% for m in messages %}{% if m.tool_calls %}{% for c in m.tool_calls %}<call>{{ c.function.name }} "
                "{{ c.function.arguments | tojson }}</call>{% endfor %}{% else %}[{{ m.role }}] {{ m.content }}{% endif %}"
                "\n{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}")
    assert tool_support(template).calls and not tool_support(template).tools
    assert call_example(template) == '<call>tool_name {"arg1": "some_value"}</call>'


def test_a_template_without_a_system_role_gets_the_tools_in_the_first_user_message():
    gemma = (Path(__file__).parent / "templates" / "google-gemma-2-2b-it.jinja").read_text(encoding="utf-8")
    user, = generic_messages([{"role": "user", "content": "Hi"}], [WEATHER], tool_support(gemma), gemma)
    assert user["role"] == "user" and user["content"].startswith(INSTRUCTION + "\n\n" + TOOLS_INTRO)
    assert user["content"].endswith("\n\nHi")
