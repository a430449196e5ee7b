"""Chat messages to prompt text through the model's own chat template (its GGUF metadata)."""

from __future__ import annotations

from datetime import datetime
from typing import Mapping, Sequence

Message = Mapping[str, str]


def render_prompt(messages: Sequence[Message], template: str | None, bos_token: str = "",
                  eos_token: str = "") -> str:
    """The prompt text for ``messages`` ending where the assistant's answer begins.

    Uses the model's Jinja chat template when it has one that renders; otherwise a plain
    "Role: text" transcript that any model can continue.
    """
    if template:
        try:
            return _render_jinja(template, messages, bos_token, eos_token)
        except Exception:
            pass  # a template our Jinja cannot render: the plain format still works
    return render_plain(messages)


def render_plain(messages: Sequence[Message]) -> str:
    lines = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(lines) + "\n\nAssistant:"


def _render_jinja(template: str, messages: Sequence[Message], bos_token: str, eos_token: str) -> str:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(template).render(
        messages=[dict(m) for m in messages],
        add_generation_prompt=True,
        bos_token=bos_token,
        eos_token=eos_token,
    )


def prompt_tokens(model, messages: Sequence[Message]) -> list[int]:
    """Tokens of the chat prompt for a loaded ``LlamaModel``."""
    text = render_prompt(messages, model.chat_template(), model.token_text(model.bos),
                         model.token_text(model.eos))
    tokens = model.tokenize(text, add_special=True, parse_special=True)
    if len(tokens) >= 2 and tokens[0] == tokens[1] == model.bos:
        tokens = tokens[1:]  # the template wrote BOS itself and the tokenizer added another
    return tokens
