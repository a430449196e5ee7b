"""The chat page at / (llama-server serves its web UI there; --no-ui leaves it out): one self-contained
file, resources/webui/index.html, that chats through this server's own /v1/chat/completions, streamed,
and shows each answer's tokens/s and drafted and accepted counts. It loads nothing from elsewhere. The
page itself needs no key (it asks for one when the API answers 401 and keeps it in the browser)."""

from __future__ import annotations

import functools

from starlette.requests import Request
from starlette.responses import Response

from app.paths import resources_dir

WEB_PAGE_PATHS = ("/", "/index.html")


@functools.cache
def _page() -> bytes:
    return (resources_dir() / "webui" / "index.html").read_bytes()


async def web_page(request: Request) -> Response:
    return Response(_page(), media_type="text/html; charset=utf-8", headers={"Cache-Control": "no-cache"})
