"""llama.cpp's generic tool-call format: tools for a model whose chat template shows none that
Quickdraft reads (no template, a template without tools, a built-in template chosen by name, or a
template whose own call syntax Quickdraft does not parse).

The model is told in a system message, in llama.cpp's words, to answer in JSON, and what the tools
are; a grammar made from llama.cpp's JSON Schema holds the answer to that JSON on the main model's
distribution (so speculation stays lossless):

* ``{"tool_call": {"name": N, "arguments": {...}}}``: one call of a declared function, its arguments
  valid for its parameters' schema;
* ``{"tool_calls": [{"name": N, "arguments": {...}, "id": "..."}, ...]}`` instead, where parallel
  calls are asked for and the template can show them (llama.cpp turns parallel calls off otherwise);
* ``{"response": "..."}``: a reply to the user, unless a call is required.

The words and shapes are those of llama.cpp's ``common_chat_params_init_generic`` and of minja's
polyfills (the chat template runner llama.cpp used with it), so that the prompt is llama-server's:
llama.cpp adds the answer-in-JSON instruction to the system message, minja then adds the tools (where
the template does not show them) with an example call, and writes an earlier assistant message's
calls (and the tools' results) as JSON text where the template cannot show them, and the system
message's text into the first user message where the template has no system role (Gemma 2). The vendored
llama.cpp since replaced this format by parsers inferred from each template; the format is the one
that makes any model's answer a call that can be read.

``GenericReader`` reads the answer for ``ToolCallStream`` (toolcalls.py): calls once their JSON is
whole, a response's text as it streams.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import lru_cache

from app.core.chat.prompt import render_prompt
from app.core.chat.toolformats import CALL, CONTENT, Read, Reader, call_from, json_end
from app.core.chat.toolgrammar import EMPTY_PARAMETERS
from app.core.chat.tools import ToolSupport, template_messages, tool_support
from app.core.llama.grammar import json_schema_grammar

INSTRUCTION = ("Respond in JSON format, either with `tool_call` (a request to call tools) or with `response` "
               "reply to the user's request")
TOOLS_INTRO = "You can call any of the following tools to satisfy the user's requests: "

# minja's example call: rendered by the template, and what is left of it is the example
_EXAMPLE_CALL = {"id": "call_1___", "type": "function",
                 "function": {"name": "tool_name", "arguments": {"arg1": "some_value"}}}
_TURN_END_PROBE = "\ue000turn-end-probe\ue001"
_SYSTEM_PROBE = "\ue000system-probe\ue001"


# --- the prompt ----------------------------------------------------------------------------------------

def generic_messages(messages: Sequence[Mapping], tools: Sequence[Mapping], support: ToolSupport,
                     template: str | None) -> list[dict]:
    """``messages`` (checked, calls written as ``shown_messages`` writes them) with the instruction
    and, where the template does not show tools, the tools and an example call, in the system message."""
    out = add_system(messages, INSTRUCTION)
    if not support.tools:
        out = add_system(out, tools_text(tools, template))
    return out if shows_system(template) else _system_in_first_user(out)


@lru_cache(maxsize=8)
def shows_system(template: str | None) -> bool:
    """Whether the template renders a system message (Gemma 2's refuses one); without a Jinja template
    the prompt's writer does."""
    if not template:
        return True
    rendered = render_prompt([{"role": "system", "content": _SYSTEM_PROBE}, {"role": "user", "content": "Hey"}],
                             template)
    return rendered.own and _SYSTEM_PROBE in rendered.text


def _system_in_first_user(messages: list[dict]) -> list[dict]:
    """The system message's text at the start of the first user message, a line between (minja's
    polyfill for a template without a system role)."""
    if not messages or messages[0]["role"] != "system" or len(messages) < 2 or messages[1]["role"] != "user":
        return messages
    system, user, *rest = messages
    return [{**user, "content": f"{system['content']}\n{user.get('content') or ''}".rstrip("\n")}, *rest]


def shown_messages(messages: Sequence[Mapping], support: ToolSupport) -> list[dict]:
    """Where the template cannot show an assistant message's calls, each such message and each tool
    result as JSON text (minja's polyfill: ``{"tool_calls": [...]}`` as the assistant's content, a
    result as a user message ``{"tool_response": {...}}``), so that any template or a plain
    transcript keeps them; ``messages`` as they are otherwise."""
    if support.calls:
        return [dict(m) for m in messages]
    return [_calls_as_text(m) if m.get("tool_calls") else _result_as_text(m) if m.get("role") == "tool" else dict(m)
            for m in messages]


def add_system(messages: Sequence[Mapping], text: str) -> list[dict]:
    """``text`` after the system message's own, a blank line between (one is put first where none is)."""
    out = [dict(m) for m in messages]
    if out and out[0].get("role") == "system":
        out[0] = {"role": "system", "content": f"{out[0].get('content') or ''}\n\n{text}"}
        return out
    return [{"role": "system", "content": text}, *out]


def tools_text(tools: Sequence[Mapping], template: str | None) -> str:
    """The tools as minja describes them (each as llama.cpp hands tools over: type, then the
    function's name, description and parameters), with an example call where one can be made."""
    described = [{"type": "function", "function": {
        "name": t["function"]["name"], "description": t["function"].get("description", ""),
        "parameters": t["function"].get("parameters") or EMPTY_PARAMETERS}} for t in tools]
    example = call_example(template)
    text = TOOLS_INTRO + json.dumps(described, indent=2, ensure_ascii=False)
    return text + (f"\n\nExample tool call syntax:\n\n{example}\n\n" if example else "")


def _calls_as_text(message: Mapping) -> dict:
    calls = []
    for call in message["tool_calls"]:
        function = call["function"]
        written = {"name": function["name"], "arguments": _parsed(function.get("arguments"))}
        calls.append(written | ({"id": call["id"]} if call.get("id") else {}))
    shown: dict = {"tool_calls": calls}
    if message.get("content"):
        shown["content"] = message["content"]
    rest = {k: v for k, v in message.items() if k not in ("tool_calls", "content")}
    return rest | {"content": json.dumps(shown, indent=2, ensure_ascii=False)}


def _result_as_text(message: Mapping) -> dict:
    response: dict = {"tool": message["name"]} if message.get("name") else {}
    response["content"] = message.get("content") or ""
    if message.get("tool_call_id"):
        response["tool_call_id"] = message["tool_call_id"]
    return {"role": "user", "content": json.dumps({"tool_response": response}, indent=2, ensure_ascii=False)}


def _parsed(arguments):
    """A call's arguments as an object where their text is JSON (minja parses them; else they stay text)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


@lru_cache(maxsize=8)
def call_example(template: str | None) -> str:
    """How an assistant's call reads in ``template``'s prompt, as minja infers it: the rendered
    conversation with a call (as the template writes calls, or as JSON text where it cannot), past
    what the one without it shares, less the turn's end. Without a
    Jinja template (a plain transcript, or a built-in template by name) it is the call as JSON, what
    minja infers for llama.cpp's default ChatML; "" where the template writes no call."""
    user = {"role": "user", "content": "Hey"}
    native = {"role": "assistant", "content": "", "tool_calls": [_EXAMPLE_CALL]}
    if not template:
        return _calls_as_text(native)["content"]
    support = tool_support(template)
    call = template_messages([native], support)[0] if support.calls else _calls_as_text(native)
    asked = render_prompt([user], template)
    full = render_prompt([user, call], template, variables={"add_generation_prompt": False})
    if not (asked.own and full.own):
        return ""
    example = _without_turn_end(full.text, template)[_shared_length(asked.text, full.text):]
    return example if "tool_name" in example or "some_value" in example else ""


def _shared_length(prefix: str, full: str) -> int:
    """minja's common prefix: it never ends just after a '<' (DeepSeek R1's template opens <think>
    in the generation prompt where a past message has none)."""
    length = 0
    for i, (a, b) in enumerate(zip(prefix, full)):
        if a != b:
            break
        if a != "<":
            length = i + 1
    return length


def _without_turn_end(text: str, template: str) -> str:
    """``text`` without the assistant turn's end at its close (minja cuts the EOS token there; the
    turn's end is what the template writes after an assistant message's content)."""
    probe = render_prompt([{"role": "user", "content": "Hey"}, {"role": "assistant", "content": _TURN_END_PROBE}],
                          template, variables={"add_generation_prompt": False})
    at = probe.text.find(_TURN_END_PROBE) if probe.own else -1
    end = probe.text[at + len(_TURN_END_PROBE):] if at >= 0 else ""
    return text[:-len(end)] if end.strip() and text.endswith(end) else text


# --- the grammar ---------------------------------------------------------------------------------------

def generic_schema(tools: Sequence[Mapping], name: str | None, parallel: bool, required: bool,
                   response: Mapping | None = None) -> dict:
    """llama.cpp's JSON Schema of the answer: a call of a declared function (of ``name`` alone when
    given), several where ``parallel``, or a response unless a call is ``required``: text, or a value
    of the request's ``response`` schema (its response_format)."""
    calls = [_call_schema(t["function"], parallel) for t in tools if name is None or t["function"]["name"] == name]
    one = calls[0] if len(calls) == 1 else {"anyOf": calls}
    if parallel:
        call = {"type": "object", "properties": {"tool_calls": {"type": "array", "items": one, "minItems": 1}},
                "required": ["tool_calls"]}
    else:
        call = {"type": "object", "properties": {"tool_call": one}, "required": ["tool_call"]}
    if required:
        return call
    replied = {"type": "object", "properties": {"response": dict(response or {"type": "string"})},
               "required": ["response"]}
    return {"anyOf": [call, replied]}


def _call_schema(function: Mapping, parallel: bool) -> dict:
    schema = {"type": "object", "properties": {
        "name": {"type": "string", "const": function["name"]},
        "arguments": function.get("parameters") or EMPTY_PARAMETERS}, "required": ["name", "arguments"]}
    if function.get("description"):
        schema["description"] = function["description"]
    if parallel:   # the model names its calls, as llama.cpp asks: the ids come back with the calls
        schema["properties"]["id"] = {"type": "string", "minLength": 4}
        schema["required"].append("id")
    return schema


def generic_grammar(tools: Sequence[Mapping], name: str | None, parallel: bool, required: bool,
                    response: Mapping | None = None) -> str:
    """The GBNF of ``generic_schema`` (llama-cpp-python's converter). Raises GrammarError where a
    tool's parameters cannot be turned into a grammar."""
    return json_schema_grammar(generic_schema(tools, name, parallel, required, response),
                               "The tools' parameters (or the response schema)")


# --- the answer ----------------------------------------------------------------------------------------

_KEY = re.compile(r'\{\s*"(tool_calls|tool_call|response)"\s*:\s*')
_PARTIAL_KEY = re.compile(r'\{\s*(?:"[a-z_]*(?:"\s*(?::\s*)?)?)?')
_ESCAPE = re.compile(r'\\(?:["\\/bfnrt]|u[0-9a-fA-F]{4})')
_HIGH_SURROGATE = re.compile(r"\\u[dD][89abAB][0-9a-fA-F]{2}")
_LOW_SURROGATE = re.compile(r"\\u[dD][c-fC-F][0-9a-fA-F]{2}")


class GenericReader(Reader):
    """The answer is one JSON object (see the module docstring). A call is given once its object is
    whole; a response's text as it comes, each piece once its escapes are whole. Text that is no such
    object (an answer cut before its end, a call that cannot be read) is content, as the model wrote it."""

    def __init__(self, tools: Sequence[Mapping]):
        super().__init__(tools)
        self._state = ""     # "": before an object; "text": inside a response's string; "end": after it

    def opening(self, buf: str, fresh: bool, final: bool) -> tuple[int, int]:
        if self._state:
            return 0, 0
        rest = buf.lstrip()
        if fresh and rest.startswith("{"):
            return len(buf) - len(rest), 0
        return (-1, len(buf)) if fresh and not rest and not final else (-1, 0)

    def read(self, buf: str, final: bool) -> Read | None:
        if self._state == "text":
            return self._response_text(buf, final)
        if self._state == "end":
            return self._object_end(buf, final)
        key = _KEY.match(buf)
        if key is not None and key.group(1) == "response":
            if buf.startswith('"', key.end()):    # a response's text: given as it comes
                self._state = "text"
                return Read(key.end() + 1)
            if key.end() == len(buf) and not final:
                return None
        elif key is None and not final and _PARTIAL_KEY.fullmatch(buf):
            return None    # too early to say which key opens the object
        end = json_end(buf, 0)
        if end is None and not final:
            return None
        end = len(buf) if end is None or end < 0 else end
        return Read(end, _items(buf[:end]))

    def _response_text(self, buf: str, final: bool) -> Read | None:
        """The response's text up to its closing quote, or as far as its escapes are whole."""
        i = 0
        while i < len(buf) and buf[i] != '"':
            if buf[i] != "\\":
                i += 1
                continue
            escape = _ESCAPE.match(buf, i)
            if escape is None:
                break
            if _HIGH_SURROGATE.fullmatch(escape.group()) and not final:   # the pair's second half too
                second = _LOW_SURROGATE.match(buf, escape.end())
                if second is None and len(buf) - escape.end() < 6:
                    break
                i = second.end() if second else escape.end()
                continue
            i = escape.end()
        closed = i < len(buf) and buf[i] == '"'
        if closed:
            self._state = "end"
        elif i == 0 and not final:
            return None
        text = _decoded(buf[:i])
        return Read(i + 1 if closed else len(buf) if final else i, ((CONTENT, text),) if text else ())

    def _object_end(self, buf: str, final: bool) -> Read | None:
        closing = re.match(r"\s*\}\s*", buf)
        if closing is None and not final and not buf.strip():
            return None
        self._state = ""
        return Read(closing.end()) if closing else Read(len(buf), ((CONTENT, buf),))


def _items(text: str) -> tuple:
    """What a whole answer object holds: its calls, or its response's text; the text itself when it
    is neither (llama.cpp gives such an answer as content)."""
    try:
        obj = json.loads(text)
    except ValueError:
        return ((CONTENT, text),)
    if isinstance(obj, dict) and isinstance(obj.get("tool_calls"), list) and obj["tool_calls"]:
        calls = [call_from(c, ("arguments",), strict=True) for c in obj["tool_calls"]]
        return ((CONTENT, text),) if None in calls else tuple((CALL, c) for c in calls)
    if isinstance(obj, dict) and "tool_call" in obj:
        call = call_from(obj["tool_call"], ("arguments",), strict=True)
        return ((CALL, call),) if call else ((CONTENT, text),)
    if isinstance(obj, dict) and "response" in obj:
        response = obj["response"]
        return ((CONTENT, _sendable(response) if isinstance(response, str) else json.dumps(response, indent=2)),)
    return ((CONTENT, text),)


def _decoded(text: str) -> str:
    """A JSON string's inside (escapes whole) as its text."""
    try:
        decoded = json.loads(f'"{text}"')
    except ValueError:   # a raw control character, which only an answer past the grammar holds
        return text
    return _sendable(decoded)


def _sendable(text: str) -> str:
    """A lone surrogate (half a pair the model never closed) cannot be sent as UTF-8: U+FFFD stands for it."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
