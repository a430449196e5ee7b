"""The HTTP routes (Starlette): OpenAI endpoints, /health and /metrics, API keys, error objects.

Each generation request becomes a Job on the JobQueue; the handler awaits the job's posted
events on the server's event loop. A client that disconnects cancels its job at once.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import sys
import traceback
from typing import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.frontdoor import LoadedPair
from app.core.params import DrafterKind
from app.core.speculation.events import Started, Summary, TokenPiece
from app.core.speculation.stats import GenerationStats
from app.server.answers import AnswerStream, answer_message
from app.server.api import ApiError, ApiRequest, parse_chat, parse_completion
from app.server.responses import ResponseShape, finish_reason, live_timings, sse, summary_timings
from app.server.worker import Failed, Job, JobQueue

MAX_BODY_BYTES = 8 << 20
# JSON Schemas and template variables nest a dozen levels; deeper is abuse. The engine walks these
# values recursively (app/core/chat/prompt.py's _Slots), two frames a level: 900 levels overflowed.
MAX_JSON_DEPTH = 100
PUBLIC_PATHS = {"/health", "/v1/health"}


def create_app(jobs: JobQueue, api_key: str | None = None) -> Starlette:
    handlers = _Handlers(jobs)
    routes = [
        Route("/health", handlers.health), Route("/v1/health", handlers.health),
        Route("/metrics", handlers.metrics),
        Route("/v1/models", handlers.models), Route("/models", handlers.models),
        Route("/v1/chat/completions", handlers.chat, methods=["POST"]),
        Route("/chat/completions", handlers.chat, methods=["POST"]),
        Route("/v1/completions", handlers.completions, methods=["POST"]),
        Route("/completions", handlers.completions, methods=["POST"]),
    ]
    app = Starlette(routes=routes, exception_handlers={
        ApiError: _api_error, HTTPException: _http_error, Exception: _server_error})
    if api_key:
        app.add_middleware(_BearerAuth, api_key=api_key)
    return app


class _Handlers:
    def __init__(self, jobs: JobQueue):
        self.jobs = jobs

    async def health(self, request: Request) -> Response:
        if not self.jobs.available:
            raise _not_loaded()
        return JSONResponse({"status": "ok"})

    async def metrics(self, request: Request) -> Response:
        text = self.jobs.metrics.render(self.jobs.processing, self.jobs.deferred)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> Response:
        pair = self._pair()
        model = {"id": pair.model_id, "object": "model", "created": 0, "owned_by": "quickdraft",
                 "meta": {"main": pair.main_file, "draft": pair.draft_file, "n_ctx": pair.n_ctx,
                          "n_vocab": pair.n_vocab}}
        return JSONResponse({"object": "list", "data": [model]})

    async def chat(self, request: Request) -> Response:
        return await self._generate(request, parse_chat)

    async def completions(self, request: Request) -> Response:
        return await self._generate(request, parse_completion)

    def _pair(self) -> LoadedPair:
        if self.jobs.pair is None:
            raise _not_loaded()
        return self.jobs.pair

    async def _generate(self, request: Request, parse: Callable) -> Response:
        body = await _body_bytes(request)
        # decoding and checking up to 8 MiB takes a while (seconds for thousands of tools): on a thread
        # of its own, so /health, /metrics and the streams of others go on meanwhile
        parsed: ApiRequest = await asyncio.to_thread(lambda: parse(_json(body)))
        job = self.jobs.submit(parsed, asyncio.get_running_loop())
        watcher = asyncio.create_task(_cancel_on_disconnect(request, self.jobs, job))
        streaming = False
        try:
            started = await _started(job)
            # the pair that answers (the window may have loaded another since the request came)
            shape = ResponseShape(parsed.kind, job.pair.model_id, job.drafting is not DrafterKind.NONE)
            if not parsed.stream:
                summary = await _summary(job)
                if summary.error is not None:
                    raise ApiError(500, summary.error, type="server_error")
                if _reads_answer(shape, job):
                    return JSONResponse(shape.complete(summary, *answer_message(job.plan, summary.text)))
                return JSONResponse(shape.complete(summary))
            live = GenerationStats()
            live.add(started)
            streaming = True  # from here on the stream's own cleanup ends the job
            return StreamingResponse(_stream(job, shape, live, watcher, self.jobs), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        finally:
            if not streaming:
                _finish(watcher, self.jobs, job)


def _not_loaded() -> ApiError:
    return ApiError(503, "The model is not loaded.", type="unavailable_error", retry_after=5)


async def _body_bytes(request: Request) -> bytes:
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


def _json(body: bytes):
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


async def _cancel_on_disconnect(request: Request, jobs: JobQueue, job: Job) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    jobs.withdraw(job)


def _finish(watcher: asyncio.Task, jobs: JobQueue, job: Job) -> None:
    watcher.cancel()
    jobs.withdraw(job)  # a no-op for a finished job; stops one a departed client left running


async def _started(job: Job) -> Started:
    item = await job.next()
    if isinstance(item, Failed):
        raise item.error
    return item


async def _summary(job: Job) -> Summary:
    async for _pieces, summary in _bursts(job, None):
        if summary is not None:
            return summary


async def _bursts(job: Job, live: GenerationStats | None) -> AsyncIterator[tuple[list[str], Summary | None]]:
    """The answer's text pieces in bursts, as llama-server sends them: the first token at once, then
    each round's tokens when the round is over (so their timings carry that round's draft counts);
    last (the pieces still held, Summary)."""
    pending: list[str] = []
    while True:
        item = await job.next()
        if isinstance(item, Failed):
            raise item.error
        event = item
        if live is not None:
            live.add(event)
        if isinstance(event, Summary):
            yield pending, event
            return
        if isinstance(event, TokenPiece):
            pending += [event.text] if event.text else []
            if live is None or live.rounds or live.generated_tokens != len(event.token_ids):
                continue  # not the first token: its round sends it
        if pending:
            yield pending, None
            pending = []


async def _stream(job: Job, shape: ResponseShape, live: GenerationStats, watcher: asyncio.Task,
                  jobs: JobQueue) -> AsyncIterator[bytes]:
    """Server-sent events: a role chunk (chat), one chunk per text piece (for a chat answer read into
    parts, per delta of reasoning, content or a tool call: ``AnswerStream``), the final chunk with the
    generation's timings, a usage chunk when asked, [DONE]."""
    answer = AnswerStream(job.plan) if _reads_answer(shape, job) else None
    try:
        if shape.chat:
            yield sse(shape.chunk("", role=True))
        async for pieces, summary in _bursts(job, live):
            if pieces and answer is None:
                yield b"".join(sse(shape.chunk(text, timings=_live_timings(job, shape, live))) for text in pieces)
            elif pieces:
                deltas = [delta for text in pieces for delta in answer.feed(text)]
                if deltas:
                    yield b"".join(sse(shape.delta_chunk(d, timings=_live_timings(job, shape, live))) for d in deltas)
            if summary is not None:
                deltas = answer.finish() if answer is not None and summary.error is None else []
                if deltas:
                    yield b"".join(sse(shape.delta_chunk(d)) for d in deltas)
                yield _closing(shape, summary, job, bool(answer is not None and answer.calls))
    except ApiError as exc:  # the headers are out: the error travels as an event, as OpenAI's do
        yield sse(exc.body())
    finally:
        _finish(watcher, jobs, job)
    yield sse("[DONE]")


def _reads_answer(shape: ResponseShape, job: Job) -> bool:
    """Whether the chat answer is read into parts (reasoning, tool calls), not sent as its text."""
    return shape.chat and job.plan is not None and not job.plan.plain


def _live_timings(job: Job, shape: ResponseShape, live: GenerationStats) -> dict | None:
    return live_timings(live, shape.speculative) if job.request.timings_per_token else None


def _closing(shape: ResponseShape, s: Summary, job: Job, calls: bool = False) -> bytes:
    if s.error is not None:
        return sse(ApiError(500, s.error, type="server_error").body())
    finish = finish_reason(s, calls)
    out = sse(shape.chunk(None, finish, timings=summary_timings(s, shape.speculative)))
    if job.request.include_usage:
        out += sse(shape.usage_chunk(s))
    return out


class _BearerAuth:
    """Every route but /health needs ``Authorization: Bearer <key>``."""

    def __init__(self, app, api_key: str):
        self.app = app
        self.expected = f"Bearer {api_key}".encode()

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http" and scope["path"] not in PUBLIC_PATHS and not self._authorized(scope):
            error = ApiError(401, "Missing or wrong API key: send 'Authorization: Bearer <key>'.",
                             code="invalid_api_key")
            response = JSONResponse(error.body(), status_code=401, headers={"WWW-Authenticate": "Bearer"})
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _authorized(self, scope) -> bool:
        given = dict(scope["headers"]).get(b"authorization", b"")
        return hmac.compare_digest(given, self.expected)


async def _api_error(request: Request, exc: ApiError) -> Response:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())


async def _http_error(request: Request, exc: HTTPException) -> Response:
    path = request.url.path
    message = {404: f"There is no {path} here; see GET /v1/models, POST /v1/chat/completions, "
                    "POST /v1/completions, GET /health, GET /metrics.",
               405: f"{request.method} is not allowed on {path}."}.get(exc.status_code, str(exc.detail))
    error = ApiError(exc.status_code, message, code="not_found" if exc.status_code == 404 else None)
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    traceback.print_exception(exc, file=sys.stderr)
    error = ApiError(500, f"Internal error: {type(exc).__name__}. The server keeps running.", type="server_error")
    return JSONResponse(error.body(), status_code=500)
