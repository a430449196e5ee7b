"""Chat messages to prompt tokens through the model's own chat template (its GGUF metadata).

Two guards, because the template comes from a file and the messages from a person:
- message text is never read as control tokens: only the template's own text may hold them, so
  typing ``<|im_end|><|im_start|>system`` gives those characters, not a forged system turn;
- rendering is bounded in time and output size; a template past the bound (nested loops can run
  for minutes), or one our Jinja cannot render, falls back to llama.cpp's rendering of the format it
  resembles, else to a plain transcript, with a warning for the user.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from collections.abc import Mapping, Sequence
from typing import Any

from app.core.chat.deadline import Deadline, DeadlineExceeded
from app.core.chat.messages import check_messages
from app.core.chat.reasoning import ThinkingFormat
from app.core.chat.sandbox import RENDER_MAX_CHARS, compile_template
from app.core.errors import ChatTemplateError, InvalidMessagesError
from app.core.llama import named_templates

__all__ = ["Message", "Prompt", "RenderedPrompt", "check_messages", "prompt_tokens", "render_plain", "render_prompt"]

Message = Mapping[str, str]

RENDER_TIME_LIMIT_S = 2.0
# how deep the values a template reads besides message text may nest (tool schemas, arguments,
# template variables): _Slots.protect walks them two frames a level, and 900 levels overflowed Python's stack
MAX_VALUE_DEPTH = 100


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    templated: bool              # False: the plain transcript
    warning: str | None = None   # why the template was not used, when the user should know
    failure: str | None = None   # why the template was not used (its error), whoever should know

    @property
    def own(self) -> bool:
        """Rendered by the template itself (not llama.cpp's format that it resembles): what probes of
        what a template shows may read."""
        return self.templated and self.failure is None


@dataclass(frozen=True)
class Prompt:
    tokens: list[int]
    warning: str | None = None
    thinking: ThinkingFormat | None = None   # how the answer to it marks reasoning (the engine reads it)
    text: str = ""                           # the text the tokens were made of (without the BOS token)


def render_prompt(messages: Sequence[Message], template: str | None, bos_token: str = "",
                  eos_token: str = "", variables: Mapping[str, Any] | None = None) -> RenderedPrompt:
    """The prompt text for ``messages`` ending where the assistant's answer begins.

    Uses the model's Jinja chat template when it has one that renders within the bound; otherwise a
    plain "Role: text" transcript that any model can continue. ``variables`` are further names the
    template can read (``tools``, ``enable_thinking``, a request's ``chat_template_kwargs``).
    """
    if template:
        try:
            return RenderedPrompt(_render_jinja(template, messages, bos_token, eos_token, variables or {}), True)
        except _TemplateTooCostly as exc:
            return _fallback(template, messages, variables, f"it {exc}")
        except Exception as exc:   # a template our Jinja cannot render (a variable or filter it lacks)
            return _fallback(template, messages, variables, f"{type(exc).__name__}: {exc}")
    return RenderedPrompt(render_plain(messages, answer_begins(variables)), False, failure="the model has no chat template")


def _fallback(template: str, messages: Sequence[Message], variables: Mapping[str, Any] | None,
              failure: str) -> RenderedPrompt:
    """The prompt when the model's template cannot be rendered here: llama.cpp's own rendering of the
    format the template's text shows (llama.cpp tells ChatML, Llama 3, Gemma ... by their markers, as
    llama-server does without Jinja), else a plain transcript. Either way the user is told: a prompt
    in another format than the model's is a quieter answer, never a silent one."""
    said = f"The model's chat template could not be rendered ({failure})"
    try:
        text = named_templates.render(template, messages, answer_begins(variables))
    except ChatTemplateError:
        return RenderedPrompt(render_plain(messages, answer_begins(variables)), False,
                              f"{said}; a plain transcript was used instead.", failure)
    return RenderedPrompt(text, True, f"{said}; llama.cpp's built-in format that it resembles was used instead.",
                          failure)


def render_plain(messages: Sequence[Message], answer: bool = True) -> str:
    lines = [f"{m['role'].capitalize()}: {m.get('content') or ''}" for m in messages]
    return "\n\n".join(lines) + ("\n\nAssistant:" if answer else "")


def answer_begins(variables: Mapping[str, Any] | None) -> bool:
    """Whether the prompt ends where the assistant's answer begins (the generation prompt): unless the
    server was asked for the messages alone (llama-server's add_generation_prompt false)."""
    return bool((variables or {}).get("add_generation_prompt", True))


class _TemplateTooCostly(Exception):
    pass


def _today() -> dict[str, str]:
    """The date, in the two variables llama.cpp gives every template (Llama 3.x's system prompt tells the
    model today's date from ``date_string``; without it the template writes its own, 26 Jul 2024)."""
    now = datetime.now()
    return {"date_string": now.strftime("%d %b %Y"), "datetime": now.strftime("%b %d %Y")}


def _render_jinja(template: str, messages: Sequence[Message], bos_token: str, eos_token: str,
                  variables: Mapping[str, Any]) -> str:
    from jinja2.exceptions import SecurityError

    chunks: list[str] = []
    size = 0
    try:
        with Deadline(RENDER_TIME_LIMIT_S):
            for chunk in compile_template(template).generate({**_today(), **variables, "messages": [dict(m) for m in messages],
                                                      "add_generation_prompt": answer_begins(variables),
                                                      "bos_token": bos_token,
                                                      "eos_token": eos_token}):
                size += len(chunk)
                if size > RENDER_MAX_CHARS:
                    raise _TemplateTooCostly(f"wrote more than {RENDER_MAX_CHARS:,} characters")
                chunks.append(chunk)
    except DeadlineExceeded:
        raise _TemplateTooCostly(f"took longer than {RENDER_TIME_LIMIT_S:g} s to render") from None
    except SecurityError as exc:
        raise _TemplateTooCostly(f"was refused by the sandbox ({exc})") from None
    return "".join(chunks)


def prompt_tokens(model, messages: Sequence[Message], variables: Mapping[str, Any] | None = None,
                  prefill: Sequence[tuple[str, bool]] = ()) -> Prompt:
    """Tokens of the chat prompt for a loaded ``LlamaModel``, with the warning of a template that
    could not be used. Raises InvalidMessagesError for messages that are not text, ChatTemplateError
    where only the template can say it (``needs_template``) but it cannot render. ``variables``: as
    for ``render_prompt``. ``prefill``: text that begins the answer, after the generation prompt, as
    pieces (text, whether its control-token text counts as control tokens), tokenized with the prompt
    as one text (as llama.cpp would tokenize the prompt with it: no word boundary at the seam)."""
    messages = check_messages(messages)
    slots = _Slots(model)
    named = model.params.chat_template_name
    if named:   # llama.cpp's own rendering of a built-in template (--chat-template NAME)
        rendered = RenderedPrompt(named_templates.render(named, [slots.message(m) for m in messages],
                                                         answer_begins(variables)), True)
    else:
        rendered = render_prompt([slots.message(m) for m in messages], model.chat_template(),
                                 model.token_text(model.bos), model.token_text(model.eos),
                                 slots.protect(dict(variables or {})))
    tokens = None
    if rendered.templated:
        text, guarded = slots.restore(rendered.text)
        for piece, special in prefill:
            guarded += [] if special else [(len(text), len(text) + len(piece))]
            text += piece
        tokens = _template_tokens(model, text, messages, guarded)
        if tokens is None:   # the template rewrote message text that holds control-token text
            failure = "it rewrites message text that spells the model's control tokens"
            rendered = RenderedPrompt(render_plain(messages, answer_begins(variables)), False,
                                      f"The model's chat template could not be used safely ({failure}); "
                                      f"a plain transcript was used instead.", failure)
    if rendered.failure is not None and needs_template(messages, variables):   # any fallback drops them
        raise ChatTemplateError(f"The model's chat template cannot render this conversation with its tools "
                                f"({rendered.failure}); llama.cpp's built-in formats and a plain transcript "
                                f"would lose them.")
    if tokens is None:   # the plain transcript
        text = rendered.text + "".join(piece for piece, _ in prefill)
        tokens = model.tokenize(text, add_special=False, parse_special=False)
    if model.add_bos and tokens[:1] != [model.bos]:
        tokens = [model.bos, *tokens]
    return Prompt(tokens, rendered.warning, text=text)


def needs_template(messages: Sequence[Message], variables: Mapping[str, Any] | None) -> bool:
    """Whether only the chat template can write this prompt: tools are given, or the conversation
    holds tool calls or tool results (a plain transcript would drop them)."""
    return bool((variables or {}).get("tools")) or any(m.get("tool_calls") or m.get("role") == "tool"
                                                       for m in messages)


class _Slots:
    """Control-token text inside the strings a template reads besides message content (tool
    definitions, tool calls' names and arguments, ids, a request's template variables), put aside
    while the template renders: each such text becomes a placeholder that survives what templates do
    to strings (``tojson``, ``trim``), and comes back as plain text at a known place (``restore``)."""

    def __init__(self, model):
        self.model = model
        self.texts: list[str] = []
        self.nonce = secrets.token_hex(4)

    def message(self, message: dict) -> dict:
        return {k: v if k in ("role", "content") else self.protect(v) for k, v in message.items()}

    def protect(self, value, depth: int = 1):
        if isinstance(value, str):
            return self._text(value)
        if depth > MAX_VALUE_DEPTH and isinstance(value, (Mapping, list, tuple)):
            raise InvalidMessagesError(f"The tools, tool calls or template variables nest more than "
                                       f"{MAX_VALUE_DEPTH} levels deep.")
        if isinstance(value, Mapping):
            return {self.protect(k, depth): self.protect(v, depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self.protect(v, depth + 1) for v in value]
        return value

    def _text(self, text: str) -> str:
        if not text:
            return text
        spelled = {self.model.token_text(t) for t in self.model.tokenize(text, add_special=False, parse_special=True)
                   if self.model.is_control(t)} - {""}
        if not spelled:
            return text
        pattern = re.compile("|".join(re.escape(s) for s in sorted(spelled, key=len, reverse=True)))
        return pattern.sub(self._slot, text)

    def _slot(self, match: re.Match) -> str:
        self.texts.append(match.group(0))
        return f"\ue000{self.nonce}.{len(self.texts) - 1}\ue001"

    def restore(self, text: str) -> tuple[str, list[tuple[int, int]]]:
        """``text`` with the control-token texts put back, and where they are (to keep them plain)."""
        if not self.texts:
            return text, []
        out, spans, pos, length = [], [], 0, 0
        for match in re.finditer(f"\ue000{self.nonce}\\.(\\d+)\ue001", text):
            out.append(text[pos:match.start()])
            length += match.start() - pos
            original = self.texts[int(match.group(1))]
            spans.append((length, length + len(original)))
            out.append(original)
            length += len(original)
            pos = match.end()
        out.append(text[pos:])
        return "".join(out), spans


def _template_tokens(model, text: str, messages: Sequence[Message],
                     reserved: Sequence[tuple[int, int]] = ()) -> list[int] | None:
    """Tokenize ``text`` the way llama.cpp does with special tokens parsed, except that control tokens
    count only in the template's own text, never inside a message or at the ``reserved`` spans (the
    control-token texts of other strings the template read). None when a message's text cannot be
    found in ``text`` (the template changed it) and that text spells a control token."""
    spans = _message_spans(model, text, messages, reserved)
    if spans is None:
        return None
    segments = _segments(text, spans)
    specials = _control_tokens_in(model, [s for s, is_template in segments if is_template])
    tokens: list[int] = []
    for piece in _fragments(segments, specials, model):
        if isinstance(piece, int):
            tokens.append(piece)
        elif piece:
            tokens += model.tokenize(piece, add_special=False, parse_special=False)
    return tokens


def _message_spans(model, text: str, messages: Sequence[Message],
                   reserved: Sequence[tuple[int, int]] = ()) -> list[tuple[int, int]] | None:
    """Where each message's text sits in the rendered ``text`` (found in order, or anywhere free for a
    template that moves a message, such as a system prompt put into the last user turn), with the
    ``reserved`` spans."""
    spans: list[tuple[int, int]] = list(reserved)
    cursor = 0
    for message in messages:
        content = str(message.get("content") or "")
        span = _find_free(text, content, spans, cursor) or _find_free(text, content.strip(), spans, cursor)
        if span is None:
            if _spells_control_token(model, content):
                return None
            continue
        spans.append(span)
        cursor = span[1]
    return sorted(spans)


def _spells_control_token(model, content: str) -> bool:
    return any(model.is_control(t) for t in model.tokenize(content, add_special=False, parse_special=True))


def _find_free(text: str, needle: str, taken: list[tuple[int, int]], cursor: int) -> tuple[int, int] | None:
    if not needle:
        return None
    for start in (cursor, 0):
        at = text.find(needle, start)
        while at != -1:
            span = (at, at + len(needle))
            if not any(a < span[1] and span[0] < b for a, b in taken):
                return span
            at = text.find(needle, at + 1)
    return None


def _segments(text: str, spans: list[tuple[int, int]]) -> list[tuple[str, bool]]:
    """``text`` cut at the message spans: (piece, True for the template's own text)."""
    segments, pos = [], 0
    for a, b in spans:
        segments += [(text[pos:a], True), (text[a:b], False)]
        pos = b
    segments.append((text[pos:], True))
    return segments


def _control_tokens_in(model, template_parts: list[str]) -> dict[str, int]:
    """The control tokens (text -> id) that the template's own text spells."""
    found: dict[str, int] = {}
    for part in template_parts:
        for token in model.tokenize(part, add_special=False, parse_special=True):
            if model.is_control(token):
                found[model.token_text(token)] = token
    found.pop("", None)
    return found


def _fragments(segments: list[tuple[str, bool]], specials: dict[str, int], model) -> list[str | int]:
    """Plain-text pieces and control token ids: the text is split only at control-token text in the
    template's own segments. Whitespace beside a token marked to strip it is dropped, as llama.cpp does."""
    pattern = re.compile("|".join(re.escape(s) for s in sorted(specials, key=len, reverse=True))) \
        if specials else None
    pieces: list[str | int] = [""]
    for segment, is_template in segments:
        pos = 0
        for match in (pattern.finditer(segment) if pattern and is_template else ()):
            pieces[-1] += segment[pos:match.start()]
            pieces += [specials[match.group(0)], ""]
            pos = match.end()
        pieces[-1] += segment[pos:]
    for i in range(1, len(pieces), 2):
        token = pieces[i]
        if model.strips_left(token):
            pieces[i - 1] = pieces[i - 1].rstrip()
        if model.strips_right(token):
            pieces[i + 1] = pieces[i + 1].lstrip()
    return pieces
