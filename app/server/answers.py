"""A chat answer's parts for the server: the prompt as a request's tools and template switches make it
(built on the engine's thread), and the answer's text cut into reasoning, content and tool calls, in
the shapes of OpenAI's messages and stream deltas (``reasoning_content`` as llama-server sends it).

A forced call is a prefill and a grammar. ``tool_choice`` "required", or a named function, must make
the answer a call: the call's opening (Qwen2.5's ``<tool_call>\\n{"name": "``; with a name, up to
``"arguments": ``) is written after the generation prompt, as if the model had begun so, and a
grammar (app/core/chat/toolgrammar.py) holds the rest to a declared function's name and arguments
that match its schema, on the main model's distribution at every verified position (the engine's
loop: app/core/speculation/constraint.py), so the answer is the constrained main model's own. The
parsers read the prefill as the answer's start. A grammar the request gives (``grammar``,
``json_schema``, ``response_format``) starts after the reasoning: a thinking model's open block is
closed by the prefill first, as for a forced call.

Where the template shows no tools that Quickdraft reads (no template, a template without tools, a
built-in template chosen by name, a call syntax it does not parse), tools are llama.cpp's generic
format (app/core/chat/generic_tools.py): they are described in the system message, and a grammar
holds every answer (not only a forced one) to its JSON, a call or a response. ``tool_choice`` "none"
shows no tools and reads none, as llama-server.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.core.chat.messages import check_messages
from app.core.chat.prompt import Prompt, needs_template
from app.core.chat.reasoning import REASONING, ThinkingFormat, ReasoningSplitter
from app.core.chat.generic_tools import generic_grammar, generic_messages, shown_messages
from app.core.chat.toolcalls import CALL, CONTENT, ToolCall, ToolCallStream
from app.core.chat.toolgrammar import call_grammar
from app.core.chat.tools import CALL_SPANS, MARKERS, ToolFormat, call_opening, template_messages, tool_support
from app.core.frontdoor import AnswerEngine
from app.server.api import ApiError, ApiRequest

@dataclass(frozen=True)
class AnswerPlan:
    """How to read one chat answer."""

    thinking: ThinkingFormat | None = None   # the template's reasoning markers (None: it does not think)
    tools: ToolFormat | None = None          # the format calls are read in (None: the answer is text)
    tool_defs: tuple[dict, ...] = ()         # the request's tools (their schemas type Qwen3-Coder's values)
    parallel: bool = True                    # False: only the first call is kept
    prefill: str = ""                        # the answer's start written into the prompt (a forced call)
    spell: tuple[str, ...] = ()              # marker texts whose control tokens the answer must spell
    call_spans: tuple[tuple[str, str], ...] = ()   # around a call in the answer, for its parts' statistics
    grammar: str | None = None               # GBNF the answer after the prefill follows (None: free text)

    @property
    def plain(self) -> bool:
        """The answer is its text as it comes (no reasoning, no tools)."""
        return self.thinking is None and self.tools is None and not self.prefill


def chat_prompt(engine: AnswerEngine, request: ApiRequest) -> tuple[Prompt, AnswerPlan]:
    """The prompt of a chat request (its tokens and text) and how to read its answer. Raises ApiError
    (400) for a request whose parts cannot shape one answer, QuickdraftError for messages or a
    template that fail."""
    template = engine.pair.chat_template
    choice = request.tools
    active = choice is not None and choice.mode != "none"
    messages = check_messages(list(request.messages))
    continued = messages.pop()["content"] if request.continues_final else None   # the answer's own start
    variables = dict(request.template_variables) | ({} if request.generation_prompt else {"add_generation_prompt": False})
    support = tool_support(template) if active or needs_template(messages, None) else None
    if support is not None:
        messages = template_messages(shown_messages(messages, support), support)
    generic = active and not support.usable   # llama.cpp's generic format: the template shows no tools we read
    if generic:
        messages = generic_messages(messages, choice.tools, support, template)
    if active and support.tools:
        variables["tools"] = [dict(t) for t in choice.tools]
    chat = engine.prompt(messages, variables)
    thinking = chat.thinking
    forced = active and choice.mode in ("required", "function")
    grammar = request.grammar
    schema = request.response_schema if generic and not forced else None   # it shapes the generic format's response
    _check_shapes(engine.pair.model_id, forced, generic, grammar is not None and schema is None, continued is not None)
    prefill: list[tuple[str, bool]] = []
    if (forced or generic or grammar is not None or continued is not None) and thinking is not None \
            and thinking.starts_open:
        prefill.append((thinking.end + "\n\n", True))   # the grammar (or the text continued) is the answer, not reasoning
    fmt = ToolFormat.GENERIC if generic else support.format if active else None
    parallel = active and choice.parallel and (support.calls or not generic)   # llama.cpp's rule for the generic format
    if generic:
        grammar = generic_grammar(choice.tools, choice.name, parallel, forced, schema)
    elif forced:
        prefill += call_opening(fmt, template, choice.name)
        grammar = call_grammar(fmt, template, choice.tools, choice.name, choice.parallel)
    opening = "".join(text for text, _ in prefill)   # what the parsers read as the answer's start
    if continued:   # written after it, as llama-server writes an assistant prefill; not sent again
        prefill.append((continued, False))
    if prefill:
        chat = engine.prompt(messages, variables, prefill)
    if not active:
        return chat, AnswerPlan(thinking, prefill=opening, grammar=grammar)
    return chat, AnswerPlan(thinking, fmt, choice.tools, parallel, opening, MARKERS[fmt], CALL_SPANS[fmt], grammar)


def _check_shapes(model_name: str, forced: bool, generic: bool, grammar: bool, continued: bool) -> None:
    """A forced call, the generic format's JSON answer, a request's grammar and a continued final
    message each decide how the answer starts: only one may (``grammar``: one the answer cannot take)."""
    if forced and grammar:
        raise ApiError(400, "A forced tool call ('tool_choice') and a grammar or JSON schema ('grammar', "
                       "'json_schema', 'response_format') cannot both shape the answer: give one.", param="tool_choice")
    if forced and continued:
        raise ApiError(400, "A forced tool call ('tool_choice') cannot continue a final assistant message.",
                       param="tool_choice")
    if generic and (grammar or continued):
        what = "follow a GBNF 'grammar' (a JSON schema shapes its response)" if grammar \
            else "continue a final assistant message"
        raise ApiError(400, f"The chat template of {model_name} shows no tools Quickdraft reads, so with 'tools' its "
                       "answer is llama.cpp's generic JSON ({\"tool_call\": ...} or {\"response\": ...}), which "
                       f"cannot also {what}. Send one or the other (or \"tool_choice\": \"none\").", param="tools")


class AnswerStream:
    """An answer's text, fed in pieces as they come, as OpenAI stream deltas: {"reasoning_content"},
    {"content"} and, for each call, {"tool_calls": [{index, id, type, function: {name, arguments: ""}}]}
    then {"tool_calls": [{index, function: {arguments}}]}, as OpenAI streams a call."""

    def __init__(self, plan: AnswerPlan):
        self.plan = plan
        self._splitter = ReasoningSplitter(plan.thinking) if plan.thinking is not None else None
        self._tools = ToolCallStream(plan.tools, plan.tool_defs, plan.parallel) if plan.tools is not None else None
        self._prefill = plan.prefill

    @property
    def calls(self) -> list[ToolCall]:
        return self._tools.calls if self._tools is not None else []

    def feed(self, text: str) -> list[dict]:
        text, self._prefill = self._prefill + text, ""
        return self._deltas(self._splitter.feed(text) if self._splitter is not None else [("answer", text)])

    def finish(self) -> list[dict]:
        out = self.feed("") if self._prefill else []
        if self._splitter is not None:
            out += self._deltas(self._splitter.finish())
        if self._tools is not None:
            out += self._tool_deltas(self._tools.finish())
        return out

    def _deltas(self, pieces) -> list[dict]:
        out: list[dict] = []
        for part, text in pieces:
            if part == REASONING:
                out.append({"reasoning_content": text})
            elif self._tools is not None:
                out += self._tool_deltas(self._tools.feed(text))
            elif text:
                out.append({"content": text})
        return out

    def _tool_deltas(self, items) -> list[dict]:
        out: list[dict] = []
        for kind, item in items:
            if kind == CALL:
                index = self.calls.index(item)
                out.append({"tool_calls": [{"index": index, "id": item.id, "type": "function",
                                            "function": {"name": item.name, "arguments": ""}}]})
                out.append({"tool_calls": [{"index": index, "function": {"arguments": item.arguments}}]})
            else:
                out.append({"content" if kind == CONTENT else "reasoning_content": item})
        return out


def answer_message(plan: AnswerPlan, text: str) -> tuple[dict, bool]:
    """A whole answer as OpenAI's message (content null when it is only calls), and whether it calls
    tools: what the stream's deltas add up to."""
    stream = AnswerStream(plan)
    deltas = stream.feed(text) + stream.finish()
    content = "".join(d.get("content", "") for d in deltas)
    reasoning = "".join(d.get("reasoning_content", "") for d in deltas)
    message: dict = {"role": "assistant", "content": content if content or not stream.calls else None}
    if reasoning:
        message["reasoning_content"] = reasoning
    if stream.calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in stream.calls]
    return message, bool(stream.calls)

