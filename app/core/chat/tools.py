"""Tools in a chat template: which format the model writes its calls in, what its template can show
(tools, earlier calls, arguments as objects or as text), the messages as the template wants them,
and the text that makes an answer start with a call.

The formats, told apart by the template's own text as llama.cpp's common/chat.cpp does:

* ``hermes``: Hermes 2 Pro, Qwen2.5, Qwen3: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``;
* ``qwen3_coder``: Qwen3-Coder, Qwen3.5, Nemotron Nano 3: ``<tool_call><function=NAME><parameter=P>V
  </parameter></function></tool_call>``;
* ``llama3``: Llama 3.1 to 3.3: the answer is ``{"name": ..., "parameters": {...}}``, perhaps after
  ``<|python_tag|>``;
* ``mistral``: ``[TOOL_CALLS]`` and a JSON list (Mistral Nemo), or ``NAME[ARGS]{...}`` (Devstral,
  Ministral 3; ``NAME[CALL_ID]ID[ARGS]{...}``, Mistral Small 3.2);
* ``harmony``: gpt-oss: a message ``to=functions.NAME`` on the commentary channel, ``<|message|>``
  and the arguments, ``<|call|>``.

The parsers are in app/core/chat/toolcalls.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import Enum
from functools import lru_cache
from collections.abc import Mapping, Sequence

from app.core.chat.prompt import render_prompt
from app.core.errors import InvalidMessagesError


class ToolFormat(str, Enum):
    HERMES = "hermes"
    QWEN3_CODER = "qwen3_coder"
    LLAMA3 = "llama3"
    MISTRAL = "mistral"
    HARMONY = "harmony"
    GENERIC = "generic"


# templates with <tool_call> that write something else inside it (GLM, MiniMax, MiniCPM, Kimi)
_OTHER_CALL_SYNTAX = ("<arg_key>", "<invoke name=", "<function name=\"", "<|tool_call_begin|>")

# the texts each format's parser reads: where they are control tokens, the answer must spell them
MARKERS = {
    ToolFormat.HERMES: ("<tool_call>", "</tool_call>"),
    ToolFormat.QWEN3_CODER: ("<tool_call>", "</tool_call>"),
    ToolFormat.LLAMA3: ("<|python_tag|>",),
    ToolFormat.MISTRAL: ("[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"),
    ToolFormat.HARMONY: ("<|start|>", "<|channel|>", "<|message|>", "<|end|>", "<|call|>", "<|return|>"),
    ToolFormat.GENERIC: (),
}

# (opening, closing) around a call in each format's answers, for the parts of an answer (reasoning.PartTracker);
# "" closes nothing: the call runs to the answer's end. Qwen2.5-Coder writes its Hermes calls in a ```json fence.
CALL_SPANS = {
    ToolFormat.HERMES: (("<tool_call>", "</tool_call>"), ("```json", "```")),
    ToolFormat.QWEN3_CODER: (("<tool_call>", "</tool_call>"),),
    ToolFormat.LLAMA3: (("<|python_tag|>", ""), ('{"name"', "")),
    ToolFormat.MISTRAL: (("[TOOL_CALLS]", ""),),
    ToolFormat.HARMONY: (("<|channel|>commentary", "<|call|>"),),
    ToolFormat.GENERIC: (('{"tool_call', ""),),
}


def tool_format(template: str | None) -> ToolFormat | None:
    """The format the model of ``template`` writes tool calls in; None when the template shows none
    Quickdraft reads."""
    if not template:
        return None
    if "<|channel|>" in template:
        return ToolFormat.HARMONY
    if "[TOOL_CALLS]" in template:
        return ToolFormat.MISTRAL
    if "<tool_call>" in template and not any(s in template for s in _OTHER_CALL_SYNTAX):
        if "<function=" in template and "<parameter=" in template:
            return ToolFormat.QWEN3_CODER
        return ToolFormat.HERMES
    if "<|start_header_id|>ipython<|end_header_id|>" in template and "<function=" not in template:  # not functionary
        return ToolFormat.LLAMA3
    return None


@dataclass(frozen=True)
class ToolSupport:
    """What a chat template does with tools, found by rendering it (as llama.cpp's jinja caps do)."""

    format: ToolFormat | None
    tools: bool               # the tool definitions reach the prompt
    calls: bool               # an assistant message's tool calls reach the prompt
    object_arguments: bool    # it wants a call's arguments as an object (it writes them with tojson)

    @property
    def usable(self) -> bool:
        return self.format is not None and self.tools


_PROBE_TOOL = {"type": "function", "function": {
    "name": "probe_tool_name", "description": "A tool.",
    "parameters": {"type": "object", "properties": {"probe_arg": {"type": "string", "description": "An argument."}},
                   "required": ["probe_arg"]}}}


def _probe_conversation(arguments) -> list[dict]:
    call = {"id": "call00001", "type": "function", "function": {"name": "probe_call_name", "arguments": arguments}}
    return [{"role": "user", "content": "A question."},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call00001", "content": "A result."},
            {"role": "assistant", "content": "An answer."},
            {"role": "user", "content": "Another question."}]


@lru_cache(maxsize=8)
def tool_support(template: str | None) -> ToolSupport:
    fmt = tool_format(template)
    if not template:
        return ToolSupport(fmt, False, False, False)
    shown = render_prompt([{"role": "user", "content": "A question."}], template, variables={"tools": [_PROBE_TOOL]})
    tools = shown.own and "probe_tool_name" in shown.text
    as_object = render_prompt(_probe_conversation({"probe_arg": "probe_value"}), template,
                              variables={"tools": [_PROBE_TOOL]})
    if as_object.own and "probe_call_name" in as_object.text and "probe_value" in as_object.text \
            and "'probe_arg'" not in as_object.text:
        return ToolSupport(fmt, tools, True, True)
    as_text = render_prompt(_probe_conversation('{"probe_arg": "probe_value"}'), template,
                            variables={"tools": [_PROBE_TOOL]})
    return ToolSupport(fmt, tools, as_text.own and "probe_call_name" in as_text.text, False)


def template_messages(messages: Sequence[Mapping], support: ToolSupport) -> list[dict]:
    """``messages`` (checked: ``check_messages``) as the template wants them, as llama.cpp hands them
    over: a call's arguments, JSON text in the OpenAI API, as an object for a template that writes
    them with ``tojson`` (else it would write a quoted string), as text otherwise. Raises
    InvalidMessagesError for arguments that are not JSON."""
    out = []
    for i, message in enumerate(messages, 1):
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [_call_for_template(call, i, j, support.object_arguments)
                                     for j, call in enumerate(message["tool_calls"], 1)]
        out.append(message)
    return out


def _call_for_template(call: Mapping, i: int, j: int, as_object: bool) -> dict:
    function = dict(call["function"])
    arguments = function.get("arguments")
    if as_object and isinstance(arguments, str):
        try:
            function["arguments"] = json.loads(arguments) if arguments.strip() else {}
        except ValueError as exc:
            raise InvalidMessagesError(f"The arguments of tool call {j} of message {i} are not valid JSON "
                                       f"({exc}).") from None
    elif not as_object and not isinstance(arguments, str):
        function["arguments"] = json.dumps(arguments, ensure_ascii=False)
    return {**call, "function": function}


def call_opening(fmt: ToolFormat, template: str, name: str | None = None) -> list[tuple[str, bool]]:
    """The text that starts a call in ``fmt`` (of the function ``name``, when given), as pieces
    (text, whether it is the template's own: its control-token text counts as control tokens; a name
    comes from a request and never does). An answer that begins with it is a call."""
    if fmt is ToolFormat.HERMES:   # the JSON's start too: after "<tool_call>" alone Qwen2.5-Coder may end its answer
        return [("<tool_call>\n", True), ('{"name": "', False)] + ([(name, False), ('", "arguments": ', False)]
                                                                   if name else [])
    if fmt is ToolFormat.QWEN3_CODER:
        return [("<tool_call>\n<function=", True)] + ([(name, False), (">\n", False)] if name else [])
    if fmt is ToolFormat.LLAMA3:
        return [('{"name": "', False)] + ([(name, False), ('", "parameters": ', False)] if name else [])
    if fmt is ToolFormat.MISTRAL:
        if not name:
            return [("[TOOL_CALLS]", True)]
        if "[ARGS]" in template:
            return [("[TOOL_CALLS]", True), (name, False)]
        return [("[TOOL_CALLS]", True), ('[{"name": "', False), (name, False), ('", "arguments": ', False)]
    return [("<|channel|>commentary to=functions.", True)] + (
        [(name, False), (" <|constrain|>json<|message|>", True)] if name else [])


def spelled_tokens(model, texts: Sequence[str]) -> dict[int, str]:
    """The control tokens in ``texts`` that ``model`` (a loaded ``LlamaModel``) renders as nothing,
    with their text: the answer must spell them for a parser to read them."""
    spelled: dict[int, str] = {}
    for text in texts:
        for token in model.tokenize(text, add_special=False, parse_special=True):
            if model.is_control(token) and not model.piece(token):
                spelled[token] = model.token_text(token)
    return spelled
