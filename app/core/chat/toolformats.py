"""How each tool-call format is read (app/core/chat/tools.py names them): where a call may open in
an answer's text, and what the text from an opening settles, for ``ToolCallStream``
(app/core/chat/toolcalls.py), which feeds them."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from collections.abc import Mapping, Sequence

from app.core.chat.reasoning import REASONING, partial_marker
from app.core.chat.tools import ToolFormat

CONTENT, CALL = "content", "call"   # the answer's parts as tool-call readers see them, with REASONING
_TOOL_CALL, _TOOL_CALL_END = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"
_SEPARATORS = " \t\r\n;"        # between Llama 3's calls


@dataclass(frozen=True)
class Read:
    consumed: int                 # how much of the buffer the read settled
    items: tuple = ()             # (CONTENT | REASONING, text) and (CALL, (name, arguments, id or None))
    part: str | None = None       # harmony: the part the text after it belongs to


# --- readers: where a call may open, and a call read from its opening --------------------------------

class Reader:
    openings: tuple[str, ...] = ()

    def __init__(self, tools: Sequence[Mapping]):
        self.tools = {t["function"]["name"]: t["function"] for t in tools
                      if isinstance(t, Mapping) and isinstance(t.get("function"), Mapping)
                      and isinstance(t["function"].get("name"), str)}

    def opening(self, buf: str, fresh: bool, final: bool) -> tuple[int, int]:
        """(where the first opening in ``buf`` is, -1 for none; how much of its end to hold back)."""
        found = [i for marker in self.openings if (i := buf.find(marker)) >= 0]
        if found:
            return min(found), 0
        return -1, partial_marker(buf, self.openings)

    def read(self, buf: str, final: bool) -> Read | None:
        """What the text from an opening settles; None while more text is needed."""
        raise NotImplementedError


class _Tagged(Reader):
    """``<tool_call>`` ... ``</tool_call>`` around JSON (Hermes) or Qwen3-Coder's XML."""

    openings = (_TOOL_CALL,)

    def read(self, buf: str, final: bool) -> Read | None:
        end = buf.find(_TOOL_CALL_END, len(_TOOL_CALL))
        if end < 0 and not final:
            return None
        consumed = end + len(_TOOL_CALL_END) if end >= 0 else len(buf)
        body = buf[len(_TOOL_CALL):end if end >= 0 else len(buf)]
        call = self._xml(body) if body.lstrip().startswith("<function=") else _json_call(body, ("arguments", "parameters"))
        return Read(consumed, ((CALL, call),) if call else ((CONTENT, buf[:consumed]),))

    def _xml(self, body: str):
        match = re.match(r"\s*<function=([^>\n]+)>(.*?)(?:</function>\s*)?$", body, re.S)
        if not match or not match.group(1).strip():
            return None
        name = match.group(1).strip()
        properties = (self.tools.get(name, {}).get("parameters") or {}).get("properties") or {}
        arguments = {}
        for param in re.finditer(r"<parameter=([^>\n]+)>\n?(.*?)\n?(?:</parameter>|(?=<parameter=)|$)",
                                 match.group(2), re.S):
            key = param.group(1).strip()
            arguments[key] = _typed(param.group(2), properties.get(key))
        return name, arguments, None


class _Hermes(_Tagged):
    """Besides ``<tool_call>``, what llama.cpp's Hermes parser also reads as a call (Qwen2.5-Coder
    writes its calls so): ``{"name": ..., "arguments": ...}`` bare or in a ```json block, or inside
    ``<function_call>``. Other braces and code blocks stay content."""

    openings = (_TOOL_CALL, "<function_call>", "```", "{")

    def read(self, buf: str, final: bool) -> Read | None:
        if buf.startswith(_TOOL_CALL):
            return super().read(buf, final)
        if buf.startswith("<function_call>"):
            end = buf.find("</function_call>")
            if end < 0 and not final:
                return None
            consumed = end + len("</function_call>") if end >= 0 else len(buf)
            body = buf[len("<function_call>"):end if end >= 0 else len(buf)]
            return Read(consumed, _items(_json_call(body, ("arguments", "parameters"), strict=True), buf[:consumed]))
        at = 0
        if buf.startswith("```"):
            fence = re.match(r"```(?:json|xml)?[ \t]*\n\s*", buf)
            if fence is None:
                if not final and re.fullmatch(r"```(?:j(?:s(?:on?)?)?|x(?:ml?)?)?[ \t]*", buf):
                    return None
                return Read(3, ((CONTENT, "```"),))
            at = fence.end()
        named = _names_first(buf, at, final)
        if named is None:
            return None
        if not named:
            return Read(at or 1, ((CONTENT, buf[:at or 1]),))
        doubled = re.match(r"\{\s*(?=\{)", buf[at:])            # {{"name": ...}}: as Qwen2.5-Coder's template shows calls
        inner = at + doubled.end() if doubled else at
        end = json_end(buf, inner)
        if end is None and not final:
            return None
        end = len(buf) if end is None else end
        call = _json_call(buf[inner:end], ("arguments", "parameters"), strict=True)
        if call is None:
            return Read(end, ((CONTENT, buf[:end]),))
        closing = re.match(r"\s*\}", buf[end:]) if doubled else None
        if doubled and closing is None and re.fullmatch(r"\s*", buf[end:]) and not final:
            return None
        end += closing.end() if closing else 0
        if at == 0:
            return Read(end, ((CALL, call),))
        closing = re.match(r"\s*```", buf[end:])                  # the block's closing fence
        if closing is not None:
            return Read(end + closing.end(), ((CALL, call),))
        if re.fullmatch(r"\s*`{0,2}", buf[end:]):                  # it may still come
            return None if not final else Read(len(buf), ((CALL, call),))
        return Read(end, ((CALL, call),))


def _names_first(buf: str, at: int, final: bool) -> bool | None:
    """Whether a JSON object whose first key is "name" starts at ``buf[at]``; None: too early to say."""
    match = re.match(r"\{\s*(?:\{\s*)?", buf[at:])
    if match is None:
        return None if not final and not buf[at:] else False
    rest = buf[at + match.end():]
    if rest.startswith('"name"'):
        return True
    return None if not final and '"name"'.startswith(rest) else False


class _Llama3(Reader):
    """The answer itself is the call (``{"name": ..., "parameters": ...}``, several apart by ";"), or
    ``<|python_tag|>`` opens one: JSON, or a built-in tool's ``name.call(key="value")``."""

    openings = (_PYTHON_TAG,)

    def opening(self, buf: str, fresh: bool, final: bool) -> tuple[int, int]:
        if fresh:
            rest = buf.lstrip(_SEPARATORS)
            if rest.startswith(("{", _PYTHON_TAG)) or (not rest and final):
                return 0, 0
            if not rest or _PYTHON_TAG.startswith(rest):
                return -1, len(buf)
        return super().opening(buf, fresh, final)

    def read(self, buf: str, final: bool) -> Read | None:
        start = len(buf) - len(buf.lstrip(_SEPARATORS))
        at = start
        if buf.startswith(_PYTHON_TAG, at):
            at += len(_PYTHON_TAG)
            at += len(buf[at:]) - len(buf[at:].lstrip())
        if at >= len(buf):
            return None if not final else Read(len(buf), ((CONTENT, buf[start:]),))
        if buf[at] != "{":
            if re.match(r"\w+\.call\(", buf[at:]):   # a built-in tool: the call ends the answer
                return None if not final else Read(len(buf), _items(_builtin_call(buf[at:]), buf[start:]))
            if not final and re.fullmatch(r"[\w.]*", buf[at:]):
                return None
            return Read(at, ((CONTENT, buf[start:at]),))   # code, not a call: text
        end = json_end(buf, at)
        if end is None:
            return None if not final else Read(len(buf), _items(_json_call(buf[at:], ("parameters", "arguments"),
                                                                            strict=True), buf[start:]))
        return Read(end, _items(_json_call(buf[at:end], ("parameters", "arguments"), strict=True), buf[start:end]))


class _Mistral(Reader):
    """``[TOOL_CALLS]`` and a JSON list of calls (Nemo), or ``NAME[ARGS]{...}`` (Devstral, Ministral 3),
    ``NAME[CALL_ID]ID[ARGS]{...}`` (Small 3.2)."""

    marker = "[TOOL_CALLS]"
    openings = (marker,)

    def read(self, buf: str, final: bool) -> Read | None:
        at = len(self.marker) + len(buf[len(self.marker):]) - len(buf[len(self.marker):].lstrip())
        if at >= len(buf):
            return None if not final else Read(len(buf), ((CONTENT, buf),))
        if buf[at] == "[":
            end = json_end(buf, at)
            if end is None and not final:
                return None
            end = len(buf) if end is None else end
            return Read(end, _list_items(buf[at:end], buf[:end]))
        head = re.match(r"([^\s\[\]{]+)(?:\[CALL_ID\]([^\[]*))?\[ARGS\]", buf[at:])
        if head is None:
            if not final and "[ARGS]" not in buf[at:] and len(buf) - at < 512:
                return None
            return Read(len(self.marker), ((CONTENT, self.marker),))   # not a call: go on with the text
        args_at = at + head.end()
        end = json_end(buf, args_at)
        if end is None and not final:
            return None
        end = len(buf) if end is None or end < 0 else end
        arguments = _object(buf[args_at:end])
        call = (head.group(1), arguments, (head.group(2) or "").strip() or None) if arguments is not None else None
        return Read(end, _items(call, buf[:end]))


class _Harmony(Reader):
    """gpt-oss's messages after the reasoning: a header (``<|start|>assistant``, ``<|channel|>...``,
    ``to=functions.NAME``) up to ``<|message|>``, then the body up to ``<|end|>``, ``<|call|>`` or
    ``<|return|>``. A body sent to a function is a call; others are content, an analysis body reasoning."""

    _ENDS = ("<|end|>", "<|return|>", "<|call|>")
    openings = ("<|start|>", "<|channel|>", "to=functions.", *_ENDS)

    def read(self, buf: str, final: bool) -> Read | None:
        for end in self._ENDS:
            if buf.startswith(end):
                return Read(len(end), part=CONTENT)
        head_end = buf.find("<|message|>")
        if head_end < 0:
            return None if not final else Read(len(buf))   # a header without a message: nothing to show
        header, body_at = buf[:head_end], head_end + len("<|message|>")
        recipient = re.search(r"to=functions\.([^\s<]+)", header)
        if recipient is None:
            channel = re.search(r"<\|channel\|>\s*(\w+)", header)
            return Read(body_at, part=REASONING if channel and channel.group(1) == "analysis" else CONTENT)
        stops = [(i, m) for m in (*self._ENDS, "<|start|>", "<|channel|>") if (i := buf.find(m, body_at)) >= 0]
        if not stops and not final:
            return None
        stop, marker = min(stops) if stops else (len(buf), "")
        body = buf[body_at:stop]
        arguments = _object(body)
        call = (recipient.group(1), arguments, None) if arguments is not None else None
        consumed = stop + len(marker) if marker in self._ENDS else stop
        return Read(consumed, ((CALL, call),) if call else ((CONTENT, body),), part=CONTENT)


READERS = {ToolFormat.HERMES: _Hermes, ToolFormat.QWEN3_CODER: _Tagged, ToolFormat.LLAMA3: _Llama3,
            ToolFormat.MISTRAL: _Mistral, ToolFormat.HARMONY: _Harmony}


# --- JSON --------------------------------------------------------------------------------------------

def _items(call, text: str) -> tuple:
    return ((CALL, call),) if call else ((CONTENT, text),)


def _json_call(text: str, argument_keys: Sequence[str], strict: bool = False):
    """(name, arguments, id) from ``{"name": ..., "arguments": {...}}``; None when it is not one.
    ``strict``: the arguments key must be there (a bare JSON answer with a "name" is no call)."""
    try:
        obj = json.loads(text)
    except ValueError:
        return None
    return call_from(obj, argument_keys, strict)


def call_from(obj, argument_keys: Sequence[str], strict: bool = False):
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"].strip():
        return None
    key = next((k for k in argument_keys if k in obj), None)
    if key is None and strict:
        return None
    arguments = obj.get(key) if key else {}
    if isinstance(arguments, str):
        arguments = _object(arguments)
    if arguments is None and key is not None and obj.get(key) is None:
        arguments = {}
    if not isinstance(arguments, dict):
        return None
    given_id = obj.get("id") if isinstance(obj.get("id"), str) and obj.get("id") else None
    return obj["name"].strip(), arguments, given_id


def _list_items(text: str, raw: str) -> tuple:
    """Mistral Nemo's list of calls: all of them, or the text when one cannot be read."""
    try:
        calls = json.loads(text)
    except ValueError:
        return ((CONTENT, raw),)
    read = [call_from(c, ("arguments", "parameters")) for c in calls] if isinstance(calls, list) and calls else [None]
    if any(c is None for c in read):
        return ((CONTENT, raw),)
    return tuple((CALL, c) for c in read)


def _object(text: str) -> dict | None:
    try:
        value = json.loads(text) if text.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _builtin_call(text: str):
    """Llama 3's built-in tool call ``brave_search.call(query="...")``."""
    match = re.match(r"\s*(\w+)\.call\((.*)\)\s*$", text, re.S)
    if not match:
        return None
    arguments = {}
    for arg in re.finditer(r'(\w+)\s*=\s*("(?:[^"\\]|\\.)*"|[^,]+)', match.group(2)):
        value = arg.group(2).strip()
        try:
            arguments[arg.group(1)] = json.loads(value)
        except ValueError:
            arguments[arg.group(1)] = value
    return match.group(1), arguments, None


def _typed(text: str, schema) -> object:
    """A Qwen3-Coder parameter's value: text where its schema says string (or says nothing and the
    text is no JSON), else the JSON value it spells."""
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    kinds = kind if isinstance(kind, list) else [kind] if kind else []
    if "string" in kinds:
        return text
    try:
        return json.loads(text)
    except ValueError:
        return text


def json_end(text: str, start: int) -> int | None:
    """Where the JSON object or array starting at ``text[start]`` (after whitespace) ends (the index
    past it); None when the text ends first; -1 when no object or array starts there."""
    i = start + len(text[start:]) - len(text[start:].lstrip())
    if i >= len(text):
        return None
    if text[i] not in "{[":
        return -1
    depth, in_string, escaped = 0, False, False
    for j in range(i, len(text)):
        c = text[j]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "{[":
            depth += 1
        elif c in "}]":
            depth -= 1
            if depth == 0:
                return j + 1
    return None
