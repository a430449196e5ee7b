"""llama.cpp's built-in chat templates, by name (llama-server's ``--chat-template NAME``): the formats
llama.cpp writes in C++ (src/llama-chat.cpp) for a model whose GGUF holds no Jinja template, or one the
user would rather replace. Rendered by llama.cpp itself, so the text is llama-server's."""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

from app.core.errors import ChatTemplateError
from app.core.llama.library import lib


def names() -> tuple[str, ...]:
    """The names llama.cpp knows (chatml, llama3, mistral-v7, ...)."""
    llama_cpp = lib()
    count = llama_cpp.llama_chat_builtin_templates(None, 0)
    out = (ctypes.c_char_p * count)()
    llama_cpp.llama_chat_builtin_templates(out, count)
    return tuple(name.decode() for name in out)


def render(name: str, messages: Sequence[dict], add_assistant: bool) -> str:
    """``messages`` (role and text) in template ``name``, ending with the assistant's header when
    ``add_assistant``; ChatTemplateError where llama.cpp refuses them (a role the format has no place for)."""
    llama_cpp = lib()
    texts = [(m["role"].encode(), (m.get("content") or "").encode()) for m in messages]
    chat = (llama_cpp.llama_chat_message * len(texts))(*[llama_cpp.llama_chat_message(role=role, content=content)
                                                         for role, content in texts])
    size = 2 * sum(len(role) + len(content) for role, content in texts) + 256
    while True:   # llama.cpp says how long the text is; asked again when it did not fit
        buf = ctypes.create_string_buffer(size)
        n = llama_cpp.llama_chat_apply_template(name.encode(), chat, len(texts), add_assistant, buf, size)
        if n < 0:
            raise ChatTemplateError(f"llama.cpp's built-in chat template {name!r} cannot render this conversation.")
        if n <= size:
            return buf.raw[:n].decode("utf-8", "replace")
        size = n
