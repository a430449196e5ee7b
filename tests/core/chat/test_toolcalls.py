"""Tool calls read from answers in each format: whole, streamed in pieces cut at every position (the
markers split across pieces), one character at a time; what cannot be read stays content."""

from __future__ import annotations

import json
import re

import pytest

from app.core.chat.toolcalls import CALL, ToolCallStream, new_call_id, parse_tool_calls
from app.core.chat.tools import ToolFormat

TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"location": {"type": "string"}, "days": {"type": "integer"},
                                     "code": {"type": "string"}}}}}]
PARIS = ("get_weather", {"location": "Paris"})
ROME = ("get_weather", {"location": "Rome"})

# (format, answer, content, calls as (name, arguments))
CASES = [
    (ToolFormat.HERMES, 'Let me check.\n<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n'
                        '</tool_call>', "Let me check.", [PARIS]),
    (ToolFormat.HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>\n'
                        '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Rome"}}\n</tool_call>',
     "", [PARIS, ROME]),
    (ToolFormat.HERMES, '<tool_call>{"arguments": {"location": "Paris"}, "name": "get_weather"}</tool_call>', "", [PARIS]),
    (ToolFormat.HERMES, "a < b, and <tool_c is no call", "a < b, and <tool_c is no call", []),
    (ToolFormat.HERMES, "  The weather is fine.  ", "The weather is fine.", []),
    # Qwen2.5-Coder writes its calls as a JSON block or bare JSON: llama.cpp's Hermes parser reads them too
    (ToolFormat.HERMES, '```json\n{\n  "name": "get_weather",\n  "arguments": {"location": "Paris"}\n}\n```', "",
     [PARIS]),
    (ToolFormat.HERMES, 'Calling:\n{"name": "get_weather", "arguments": {"location": "Paris"}}\nDone.',
     "Calling:\nDone.", [PARIS]),
    (ToolFormat.HERMES, '{{"name": "get_weather", "arguments": {"location": "Paris"}}}', "", [PARIS]),
    (ToolFormat.HERMES, '<function_call>{"name": "get_weather", "arguments": {"location": "Paris"}}</function_call>',
     "", [PARIS]),
    # code, braces and JSON that is no call stay content
    (ToolFormat.HERMES, '```python\nd = {"a": 1}\n```\n```json\n[1, 2]\n```', '```python\nd = {"a": 1}\n```\n```json\n[1, 2]\n```',
     []),
    (ToolFormat.HERMES, '```json\n{"name": "Bob", "age": 3}\n```', '```json\n{"name": "Bob", "age": 3}\n```', []),
    (ToolFormat.HERMES, "Use {x} or ``{`` here: `", "Use {x} or ``{`` here: `", []),
    # Qwen3.5 writes Qwen3-Coder's XML inside Hermes' markers: both formats read both
    (ToolFormat.HERMES, "<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n"
                        "</function>\n</tool_call>", "", [PARIS]),
    (ToolFormat.QWEN3_CODER, "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=location>\nParis\n</parameter>\n"
                             "<parameter=days>\n3\n</parameter>\n<parameter=code>\n75001\n</parameter>\n</function>\n"
                             "</tool_call>", "Sure.", [("get_weather", {"location": "Paris", "days": 3, "code": "75001"})]),
    (ToolFormat.QWEN3_CODER, "<tool_call>\n<function=get_weather>\n<parameter=location>\nNew\nYork\n</parameter>\n"
                             "</function>\n</tool_call>", "", [("get_weather", {"location": "New\nYork"})]),
    (ToolFormat.LLAMA3, '{"name": "get_weather", "parameters": {"location": "Paris"}}', "", [PARIS]),
    (ToolFormat.LLAMA3, '\n<|python_tag|>{"name": "get_weather", "parameters": {"location": "Paris"}}; '
                        '{"name": "get_weather", "parameters": {"location": "Rome"}}', "", [PARIS, ROME]),
    (ToolFormat.LLAMA3, '<|python_tag|>brave_search.call(query="weather in Paris")', "",
     [("brave_search", {"query": "weather in Paris"})]),
    (ToolFormat.LLAMA3, '{"name": "Bob", "age": 3}', '{"name": "Bob", "age": 3}', []),   # JSON, not a call
    (ToolFormat.LLAMA3, "The set {a, b} is fine.", "The set {a, b} is fine.", []),
    (ToolFormat.MISTRAL, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris"}, "id": "a1b2c3d4e"}]',
     "", [PARIS]),
    (ToolFormat.MISTRAL, '[TOOL_CALLS]get_weather[ARGS]{"location": "Paris"}[TOOL_CALLS]get_weather[CALL_ID]x1y2z3w4v'
                         '[ARGS]{"location": "Rome"}', "", [PARIS, ROME]),
    (ToolFormat.MISTRAL, "No [tools] needed [TOOL", "No [tools] needed [TOOL", []),
    (ToolFormat.HARMONY, '<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>'
                         '{"location":"Paris"}<|call|>', "", [PARIS]),
    (ToolFormat.HARMONY, 'to=functions.get_weather<|channel|>commentary json<|message|>{"location": "Paris"}', "", [PARIS]),
    (ToolFormat.HARMONY, "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant<|channel|>commentary "
                         'to=functions.get_weather json<|message|>{"location":"Paris"}<|call|>', "Checking.", [PARIS]),
    (ToolFormat.HARMONY, "It is sunny, to be sure.<|return|>", "It is sunny, to be sure.", []),
]


def _answer(fmt: ToolFormat, holding: str) -> str:
    return next(answer for f, answer, _, _ in CASES if f is fmt and holding in answer)


def _settled(items) -> list:
    """Stream items with their calls as (name, arguments) and text pieces joined by kind."""
    out: list = []
    for kind, item in items:
        if kind == CALL:
            out.append((CALL, (item.name, json.loads(item.arguments))))
        elif out and out[-1][0] == kind:
            out[-1] = (kind, out[-1][1] + item)
        else:
            out.append((kind, item))
    return out


def _streamed(fmt, pieces, parallel=True) -> list:
    stream = ToolCallStream(fmt, TOOLS, parallel)
    items = [item for piece in pieces for item in stream.feed(piece)] + stream.finish()
    return _settled(items)


@pytest.mark.parametrize("fmt, answer, content, calls", CASES)
def test_a_whole_answer_gives_its_content_and_calls(fmt, answer, content, calls):
    parsed = parse_tool_calls(fmt, answer, TOOLS)
    assert parsed.content == content
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == calls
    assert len({c.id for c in parsed.calls}) == len(calls)


@pytest.mark.parametrize("fmt, answer, content, calls", CASES)
def test_streamed_in_two_pieces_cut_anywhere_it_settles_the_same(fmt, answer, content, calls):
    whole = _streamed(fmt, [answer])
    assert [i for kind, i in whole if kind == CALL] == calls
    for cut in range(len(answer) + 1):
        assert _streamed(fmt, [answer[:cut], answer[cut:]]) == whole, cut
    assert _streamed(fmt, list(answer)) == whole


def test_content_streams_before_the_call_and_a_partial_marker_is_held_back():
    stream = ToolCallStream(ToolFormat.HERMES)
    assert stream.feed("Checking the weather <tool") == [("content", "Checking the weather")]
    assert stream.feed("_call>\n{\"name\": \"get_weather\", ") == []
    assert stream.feed('"arguments": {"location": "Paris"}}\n</tool_c') == []
    (kind, call), = stream.feed("all>")
    assert kind == CALL and call.name == "get_weather" and json.loads(call.arguments) == {"location": "Paris"}
    assert stream.feed(" Done.") == [("content", " Done.")] and stream.finish() == []


@pytest.mark.parametrize("fmt, answer", [
    (ToolFormat.HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"location": }}\n</tool_call>'),
    (ToolFormat.HERMES, '<tool_call>\n{"arguments": {"location": "Paris"}}\n</tool_call>'),          # no name
    (ToolFormat.HERMES, '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Par'),      # cut short
    (ToolFormat.HERMES, '<tool_call>\n{"name": "get_weather", "arguments": "not json"}\n</tool_call>'),
    (ToolFormat.QWEN3_CODER, "<tool_call>\n<function=>\n</function>\n</tool_call>"),
    (ToolFormat.LLAMA3, '{"name": "get_weather", "parameters": [1, 2]}'),
    (ToolFormat.LLAMA3, '{"name": "get_weather", "parameters": {"location": "Paris"'),
    (ToolFormat.MISTRAL, '[TOOL_CALLS][{"name": "get_weather", "arguments": {"location": "Paris"}}, {"oops": 1}]'),
    (ToolFormat.MISTRAL, '[TOOL_CALLS]get_weather[ARGS]{"location": Paris}'),
    (ToolFormat.HARMONY, "to=functions.get_weather<|channel|>commentary json<|message|>{location: Paris}<|call|>"),
])
def test_a_call_that_cannot_be_read_is_content_not_an_error(fmt, answer):
    parsed = parse_tool_calls(fmt, answer, TOOLS)
    assert parsed.calls == [] and parsed.content
    for cut in range(len(answer) + 1):
        assert _streamed(fmt, [answer[:cut], answer[cut:]]) == [("content", parsed.content)]


def test_the_text_of_a_malformed_call_is_kept_as_written():
    answer = 'Here:\n<tool_call>\n{"name": "get_weather", "arguments": {"location": }}\n</tool_call>\nSorry.'
    assert parse_tool_calls(ToolFormat.HERMES, answer).content == answer


def test_without_parallel_calls_only_the_first_is_kept():
    answer = _answer(ToolFormat.HERMES, "Rome")
    parsed = parse_tool_calls(ToolFormat.HERMES, answer, parallel=False)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == [PARIS]
    assert parsed.content == ""
    assert [i for kind, i in _streamed(ToolFormat.HERMES, list(answer), parallel=False) if kind == CALL] == [PARIS]


def test_harmony_analysis_after_a_message_is_reasoning():
    answer = ("<|channel|>final<|message|>First.<|end|><|start|>assistant<|channel|>analysis<|message|>Hmm.<|end|>"
              "<|start|>assistant<|channel|>final<|message|>Second.")
    parsed = parse_tool_calls(ToolFormat.HARMONY, answer)
    assert (parsed.content, parsed.reasoning, parsed.calls) == ("First.Second.", "Hmm.", [])


def test_ids_are_the_models_own_or_fresh_and_mistrals_are_nine_letters_and_digits():
    nemo = parse_tool_calls(ToolFormat.MISTRAL, _answer(ToolFormat.MISTRAL, '"id": "a1b2c3d4e"')).calls
    assert nemo[0].id == "a1b2c3d4e"
    small = parse_tool_calls(ToolFormat.MISTRAL, _answer(ToolFormat.MISTRAL, "[CALL_ID]")).calls
    assert small[1].id == "x1y2z3w4v" and re.fullmatch(r"[A-Za-z0-9]{9}", small[0].id)
    assert re.fullmatch(r"call_[A-Za-z0-9]{24}", new_call_id(ToolFormat.HERMES))
    assert len({new_call_id() for _ in range(50)}) == 50


def test_arguments_are_a_json_object_text_whatever_the_model_wrote():
    answer = '<tool_call>\n{"name": "get_weather", "arguments": "{\\"location\\": \\"Paris\\"}"}\n</tool_call>'
    call, = parse_tool_calls(ToolFormat.HERMES, answer).calls
    assert json.loads(call.arguments) == {"location": "Paris"}
    bare = parse_tool_calls(ToolFormat.HERMES, '<tool_call>{"name": "now"}</tool_call>').calls[0]
    assert (bare.name, bare.arguments) == ("now", "{}")
