"""Who may use the server: CORS for browser clients on other origins, and the API key.

CORS is answered as llama-server answers it (server-http.cpp): every response carries
``Access-Control-Allow-Origin`` for an allowed origin, and an OPTIONS preflight, on any path, gets 200
with ``Access-Control-Allow-Credentials: true``, ``-Methods: GET, POST, DELETE, OPTIONS`` and
``-Headers: *`` and no key asked, since browsers send no Authorization header on a preflight. The
real request that follows still needs the key. Origins (``--cors-origins``): "*" reflects any origin
(llama-server's default), "localhost" only http(s) origins on localhost, 127.0.0.1 or [::1], else a
comma-separated list of exact origins. Quickdraft's default is "*" with an API key, which then guards
every request, and "localhost" without one, so a web page from elsewhere cannot drive an open server.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.responses import JSONResponse

from app.server.errors import ApiError

ANY_ORIGIN = "*"
LOCALHOST = "localhost"
LOCAL_HOSTS = ("localhost", "127.0.0.1", "::1")
PREFLIGHT_HEADERS = {"Access-Control-Allow-Credentials": "true",
                     "Access-Control-Allow-Methods": "GET, POST, DELETE, OPTIONS",
                     "Access-Control-Allow-Headers": "*"}
# the chat page asks for the key itself, and only the API it calls needs it (as llama-server's web UI)
PUBLIC_PATHS = {"/health", "/v1/health", "/", "/index.html"}


def default_origins(api_key: str | None) -> str:
    return ANY_ORIGIN if api_key else LOCALHOST


def allowed_origin(origin: str, origins: str) -> str | None:
    """The Access-Control-Allow-Origin value for a request from ``origin`` (None: not allowed)."""
    if not origin:
        return None
    if origins == ANY_ORIGIN:
        return origin
    if origins == LOCALHOST:
        return origin if _is_local(origin) else None
    return origin if origin in {o.strip() for o in origins.split(",")} else None


def _is_local(origin: str) -> bool:
    try:
        return urlsplit(origin).hostname in LOCAL_HOSTS
    except ValueError:
        return False


class Cors:
    """Answers preflights and stamps the allowed origin on every response (outermost middleware)."""

    def __init__(self, app, origins: str):
        self.app = app
        self.origins = origins

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        origin = allowed_origin(_header(scope, b"origin"), self.origins)
        # the names as llama-server writes them: clients that keep headers in a plain dict look them up so
        stamp = [(b"Access-Control-Allow-Origin", origin.encode("latin-1"))] if origin else []
        if scope["method"] == "OPTIONS":
            headers = [(k.encode(), v.encode()) for k, v in PREFLIGHT_HEADERS.items()] + stamp
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/html"), (b"content-length", b"0"), *headers]})
            await send({"type": "http.response.body", "body": b""})
            return

        async def stamped(message) -> None:
            if message["type"] == "http.response.start" and stamp:
                message = {**message, "headers": [*message.get("headers", []), *stamp]}
            await send(message)

        await self.app(scope, receive, stamped)


class ApiKey:
    """Every route but /health and the chat page needs the key: ``Authorization: Bearer KEY`` (or the bare key), or
    ``X-Api-Key: KEY`` as llama-server also takes it; else 401 with llama-server's error type."""

    def __init__(self, app, api_key: str):
        self.app = app
        self.key = api_key.encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] not in PUBLIC_PATHS and not self._authorized(scope):
            error = ApiError(401, "Invalid API Key: send 'Authorization: Bearer <key>' (or 'X-Api-Key: <key>').",
                             type="authentication_error", code="invalid_api_key")
            response = JSONResponse(error.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope) -> bool:
        given = _header(scope, b"authorization").encode("latin-1") or _header(scope, b"x-api-key").encode("latin-1")
        given = given[len(b"Bearer "):] if given.startswith(b"Bearer ") else given
        return hmac.compare_digest(given, self.key)


def _header(scope, name: bytes) -> str:
    return dict(scope["headers"]).get(name, b"").decode("latin-1")
