"""A chat answer read into OpenAI's parts: reasoning, then content and tool calls, the same whole and
streamed in pieces cut anywhere; a forced call's opening read as the answer's start."""

from __future__ import annotations

import json

import pytest

from app.core.chat.reasoning import ThinkingFormat
from app.core.chat.tools import ToolFormat
from app.server.answers import AnswerPlan, AnswerStream, answer_message

THINK = ThinkingFormat("<think>", "</think>", False, "enable_thinking")
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
QWEN3 = AnswerPlan(THINK, ToolFormat.HERMES)


def _joined(deltas: list[dict]) -> tuple[str, str, list]:
    """(reasoning, content, [(index, id, name, arguments)]) that the deltas add up to, as a client adds them."""
    calls: dict[int, list] = {}
    for delta in deltas:
        for call in delta.get("tool_calls", []):
            entry = calls.setdefault(call["index"], [None, "", ""])
            entry[0] = call.get("id", entry[0])
            entry[1] += call["function"].get("name", "")
            entry[2] += call["function"].get("arguments", "")
    return ("".join(d.get("reasoning_content", "") for d in deltas), "".join(d.get("content", "") for d in deltas),
            [(i, *entry) for i, entry in sorted(calls.items())])


def _streamed(plan: AnswerPlan, pieces: list[str]) -> tuple[str, str, list]:
    stream = AnswerStream(plan)
    reasoning, content, calls = _joined([d for p in pieces for d in stream.feed(p)] + stream.finish())
    return reasoning, content, [(i, name, json.loads(arguments)) for i, _, name, arguments in calls]


def test_reasoning_then_a_call_whole_and_cut_anywhere():
    answer = "<think>\nParis is in France.\n</think>\n\nLet me look." + CALL
    expected = ("Paris is in France.", "Let me look.", [(0, "get_weather", {"location": "Paris"})])
    assert _streamed(QWEN3, [answer]) == expected
    for cut in range(len(answer) + 1):
        assert _streamed(QWEN3, [answer[:cut], answer[cut:]]) == expected, cut
    message, calls = answer_message(QWEN3, answer)
    assert calls and message["content"] == "Let me look." and message["reasoning_content"] == "Paris is in France."
    assert message["tool_calls"][0]["function"] == {"name": "get_weather", "arguments": '{"location": "Paris"}'}


def test_a_call_is_two_deltas_as_openai_streams_it():
    stream = AnswerStream(AnswerPlan(None, ToolFormat.HERMES))
    deltas = stream.feed(CALL) + stream.finish()
    first, second = deltas
    call_id = first["tool_calls"][0]["id"]
    assert first == {"tool_calls": [{"index": 0, "id": call_id, "type": "function",
                                     "function": {"name": "get_weather", "arguments": ""}}]}
    assert second == {"tool_calls": [{"index": 0, "function": {"arguments": '{"location": "Paris"}'}}]}


def test_a_forced_calls_opening_is_read_first_and_closes_an_open_reasoning_block():
    opened = ThinkingFormat("<think>", "</think>", True, "enable_thinking")
    plan = AnswerPlan(opened, ToolFormat.HERMES, prefill='</think>\n\n<tool_call>\n{"name": "')
    rest = 'get_weather", "arguments": {"location": "Paris"}}\n</tool_call>'
    assert _streamed(plan, [rest]) == ("", "", [(0, "get_weather", {"location": "Paris"})])
    assert _streamed(plan, list(rest)) == _streamed(plan, [rest])
    assert _streamed(plan, []) == ("", '<tool_call>\n{"name": "', [])   # nothing came: the opening is all there is


@pytest.mark.parametrize("plan, text, message", [
    (AnswerPlan(), "  as it came  ", {"role": "assistant", "content": "  as it came  "}),
    (AnswerPlan(THINK), "<think>hm</think>Yes.", {"role": "assistant", "content": "Yes.", "reasoning_content": "hm"}),
    (AnswerPlan(None, ToolFormat.HERMES), "No call.", {"role": "assistant", "content": "No call."}),
])
def test_whole_answers_without_calls(plan, text, message):
    assert answer_message(plan, text) == (message, False)
    assert AnswerPlan().plain and not AnswerPlan(THINK).plain
