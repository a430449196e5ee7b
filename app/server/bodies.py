"""A request's body: read as it arrives, with a size limit, and decoded as JSON with a depth limit."""

from __future__ import annotations

import json

from starlette.requests import ClientDisconnect, Request

from app.server.errors import ApiError

MAX_BODY_BYTES = 8 << 20
# JSON Schemas and template variables nest a dozen levels; deeper is abuse. The engine walks these
# values recursively (app/core/chat/prompt.py's _Slots), two frames a level: 900 levels overflowed.
MAX_JSON_DEPTH = 100


async def body_bytes(request: Request) -> bytes:
    length = request.headers.get("content-length", "")
    too_big = ApiError(413, f"The request body is over {MAX_BODY_BYTES >> 20} MiB.")
    if length.isdigit() and int(length) > MAX_BODY_BYTES:
        raise too_big
    body = bytearray()
    try:
        async for chunk in request.stream():   # counted as it arrives: a chunked body states no length
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                raise too_big
    except ClientDisconnect:   # it left, or was too slow (protocol.py): nobody to answer, nothing to log
        raise ApiError(400, "The client left before its request body was in.") from None
    return bytes(body)


def json_body(body: bytes):
    too_deep = ApiError(400, f"The request body nests arrays and objects more than {MAX_JSON_DEPTH} levels deep.")
    try:
        value = json.loads(body)
    except RecursionError:   # deeper than the decoder itself goes
        raise too_deep from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"The request body is not valid JSON: {exc}.") from None
    if _depth_over(value, MAX_JSON_DEPTH):
        raise too_deep
    return value


def _depth_over(value, limit: int) -> bool:
    """Whether arrays and objects nest more than ``limit`` deep (the body itself is level 1).
    A loop, not recursion: walking the value must not overflow the way using it would."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack += [(child, depth + 1) for child in children if isinstance(child, (dict, list))]
    return False
