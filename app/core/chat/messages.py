"""Chat messages checked before a template renders them: each a {"role", "content"} of text, and the
shapes of a tool conversation (OpenAI's): an assistant message with ``tool_calls`` (its content may
then be null) and a ``tool`` message answering one call by its ``tool_call_id``.

What comes out is what templates read, as llama.cpp hands it to them: content always a string (""
for a null content beside tool calls), keys with null values dropped (Llama 3's template asks
``'tool_calls' in message``), only the keys templates know (role, content, tool_calls, tool_call_id,
name, reasoning_content).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.core.errors import InvalidMessagesError

TEXT_KEYS = ("tool_call_id", "name", "reasoning_content")


def check_messages(messages) -> list[dict]:
    """``messages`` as a list of dicts whose role and content are text that can be encoded; an
    InvalidMessagesError that says what is wrong otherwise (a JSON file of the wrong shape, a lone
    surrogate such as "\\ud800", bytes that were not UTF-8 on a command line, a tool call without a
    function name)."""
    if not isinstance(messages, (list, tuple)) or not messages:
        raise InvalidMessagesError('The messages must be a non-empty list of {"role": ..., "content": ...} objects.')
    return [_checked(message, i) for i, message in enumerate(messages, 1)]


def _checked(message: Any, i: int) -> dict:
    if not (isinstance(message, Mapping) and isinstance(message.get("role"), str)):
        raise InvalidMessagesError(f'Message {i} is not a {{"role": text, "content": text}} object.')
    calls = message.get("tool_calls")
    content = message.get("content")
    if content is None and calls:
        content = ""
    if not isinstance(content, str):
        beside = " (an assistant message with tool_calls may have a null content)" \
            if message["role"] == "assistant" else ""
        raise InvalidMessagesError(f'Message {i} is not a {{"role": text, "content": text}} object{beside}.')
    checked: dict = {"role": message["role"], "content": content}
    _check_encodable(checked["role"], f"The role of message {i}")
    _check_encodable(content, f"The content of message {i}")
    if calls:
        checked["tool_calls"] = _tool_calls(calls, i)
    for key in TEXT_KEYS:
        value = message.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            raise InvalidMessagesError(f"The {key} of message {i} must be text.")
        _check_encodable(value, f"The {key} of message {i}")
        checked[key] = value
    return checked


def _tool_calls(calls: Any, i: int) -> list[dict]:
    if not isinstance(calls, (list, tuple)):
        raise InvalidMessagesError(f"The tool_calls of message {i} must be a list.")
    return [_tool_call(call, i, j) for j, call in enumerate(calls, 1)]


def _tool_call(call: Any, i: int, j: int) -> dict:
    where = f"Tool call {j} of message {i}"
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
        raise InvalidMessagesError(f'{where} must be {{"type": "function", "function": {{"name": text, '
                                   f'"arguments": JSON text}}}}.')
    arguments = function.get("arguments")
    if arguments is None:
        arguments = "{}"
    if not isinstance(arguments, (str, Mapping)):
        raise InvalidMessagesError(f"{where}: its arguments must be JSON text (or an object).")
    _check_encodable(function["name"], f"The name of {where.lower()}")
    _check_strings(arguments, f"The arguments of {where.lower()}")
    checked = {"type": "function", "function": {"name": function["name"], "arguments": arguments}}
    if call.get("id") is not None:
        if not isinstance(call["id"], str):
            raise InvalidMessagesError(f"{where}: its id must be text.")
        _check_encodable(call["id"], f"The id of {where.lower()}")
        checked["id"] = call["id"]
    return checked


def _check_strings(value: Any, what: str) -> None:
    if isinstance(value, str):
        _check_encodable(value, what)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            _check_strings(key, what)
            _check_strings(item, what)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _check_strings(item, what)


def _check_encodable(text: str, what: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start]
        raise InvalidMessagesError(
            f"{what} is not valid text: character {exc.start + 1} is {bad!r}, a lone surrogate (invalid UTF-8 "
            f"bytes on the command line, or an unpaired \\u escape in JSON).") from None
