"""llama-server's own request bodies (/completion, /infill, /tokenize, /detokenize), checked as the
OpenAI ones are (api.py: the same sampling fields, ranges and refusals), into an ApiRequest or the
arguments of an engine call. Shapes and errors follow llama-server's README and server-context.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.server.api import (ApiRequest, check_model, delivery_from, field_value, json_object, prompt_parts,
                            refuse_chat_fields, sampling_from)
from app.server.errors import ApiError
from app.server.infill import Infill

MAX_EXTRA_CHUNKS = 1024     # input_extra files; each is tokenized on the engine's thread


@dataclass(frozen=True)
class NativeOptions:
    """What a native request asks of its response beyond the answer."""

    return_tokens: bool = False                 # the whole answer's token ids in "tokens" (chunks always have theirs)
    response_fields: tuple[str, ...] = ()       # only these fields ("a/b" for a nested one), as llama-server


def parse_native_completion(body: Any) -> tuple[ApiRequest, NativeOptions]:
    """/completion (and /completions): ``prompt`` as a string, token ids or both mixed."""
    body = _checked(body)
    return ApiRequest("completion", sampling_from(body), prompt=prompt_parts(body.get("prompt")),
                      cache_prompt=_cache_prompt(body), **_delivery(body)), _options(body)


def parse_infill(body: Any) -> tuple[ApiRequest, NativeOptions]:
    """/infill: ``input_prefix`` and ``input_suffix`` (required), ``input_extra``, ``prompt``."""
    body = _checked(body)
    for name in ("input_prefix", "input_suffix"):
        if name not in body:
            raise ApiError(400, f"\"{name}\" is required", param=name)
    prompt = field_value(body, "prompt", str, "a string", "")
    infill = Infill(_text(body, "input_prefix"), _text(body, "input_suffix"), _extra(body.get("input_extra")), prompt)
    return ApiRequest("infill", sampling_from(body), infill=infill, cache_prompt=_cache_prompt(body),
                      **_delivery(body)), _options(body)


@dataclass(frozen=True)
class TokenizeRequest:
    content: tuple[str | int, ...]
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


def parse_tokenize(body: Any) -> TokenizeRequest:
    """/tokenize: ``content`` (a string, or strings and ids mixed; left out: no tokens), ``add_special``
    (false), ``parse_special`` (true), ``with_pieces`` (false), llama-server's defaults."""
    body = json_object(body)
    content = body.get("content")
    parts = () if content is None or content == "" else _parts(content, "content")
    flags = {name: bool(field_value(body, name, bool, "true or false", default))
             for name, default in (("add_special", False), ("parse_special", True), ("with_pieces", False))}
    return TokenizeRequest(parts, **flags)


def parse_detokenize(body: Any, n_vocab: int) -> tuple[int, ...]:
    """/detokenize: ``tokens``, ids of the vocabulary (left out: no text)."""
    tokens = json_object(body).get("tokens")
    if tokens is None:
        return ()
    if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
        raise ApiError(400, "'tokens' must be an array of token ids.", param="tokens")
    outside = [t for t in tokens if not 0 <= t < n_vocab]
    if outside:
        raise ApiError(400, f"Token id {outside[0]} is outside the vocabulary (0..{n_vocab - 1}).", param="tokens")
    return tuple(tokens)


def _checked(body: Any) -> dict:
    body = json_object(body)
    check_model(body)
    refuse_chat_fields(body)
    return body


def _delivery(body: dict) -> dict:
    """Streams as llama-server's native endpoints stream: no usage chunk, so stream_options is refused."""
    if body.get("stream_options") is not None:
        raise ApiError(400, "'stream_options' belongs to /v1/completions; llama-server's native stream has no "
                       "usage chunk.", param="stream_options")
    return delivery_from(body)


def _cache_prompt(body: dict) -> bool:
    return bool(field_value(body, "cache_prompt", bool, "true or false", True))


def _options(body: dict) -> NativeOptions:
    fields = field_value(body, "response_fields", list, "an array of field names") or []
    if not all(isinstance(f, str) for f in fields):
        raise ApiError(400, "'response_fields' must be an array of field names.", param="response_fields")
    return NativeOptions(bool(field_value(body, "return_tokens", bool, "true or false", False)), tuple(fields))


def _text(body: dict, name: str) -> tuple[str | int, ...]:
    value = body[name]
    return () if value == "" else _parts(value, name)


def _parts(value: Any, name: str) -> tuple[str | int, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and all(isinstance(p, str) or (isinstance(p, int) and not isinstance(p, bool))
                                       for p in value):
        return tuple(value)
    raise ApiError(400, f"'{name}' must be a string, or an array of strings and token ids.", param=name)


def _extra(value: Any) -> tuple[tuple[str, str], ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or len(value) > MAX_EXTRA_CHUNKS:
        raise ApiError(400, f"\"input_extra\" must be an array of at most {MAX_EXTRA_CHUNKS} "
                       "{\"filename\": string, \"text\": string}", param="input_extra")
    return tuple(_chunk(chunk) for chunk in value)


def _chunk(chunk: Any) -> tuple[str, str]:
    if not isinstance(chunk, dict) or not isinstance(chunk.get("text"), str):
        raise ApiError(400, "extra_context chunk must contain a \"text\" field with a string value",
                       param="input_extra")
    filename = chunk.get("filename", "tmp")
    if not isinstance(filename, str):
        raise ApiError(400, "extra_context chunk's \"filename\" field must be a string", param="input_extra")
    return filename, chunk["text"]
