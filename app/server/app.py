"""The HTTP routes (Starlette): OpenAI endpoints, llama-server's own (native_routes.py), /health and
/metrics, CORS and API keys (access.py), error objects.

Each generation request becomes a Job on the JobQueue; the handler awaits the job's posted
events on the server's event loop. A client that disconnects cancels its job at once.
"""

from __future__ import annotations

import asyncio
import sys
import traceback
from typing import AsyncIterator, Callable

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from app.core.frontdoor import LoadedPair
from app.core.params import DrafterKind
from app.core.speculation.events import Started, Summary
from app.core.speculation.stats import GenerationStats
from app.server.answers import AnswerStream, answer_message
from app.server.access import ApiKey, Cors, default_origins
from app.server.api import ApiError, parse_chat, parse_completion
from app.server.bodies import body_bytes, json_body
from app.server.native_api import NativeOptions
from app.server.native_responses import NativeAnswer
from app.server.native_routes import NativeRoutes
from app.server.options import ServerOptions, comma_separated, switched_off, with_request_defaults
from app.server.web_page import WEB_PAGE_PATHS, web_page
from app.server.streams import PromptProgress, as_started, bursts, first_item_within, summary_of
from app.server.responses import ResponseShape, finish_reason, live_timings, progress_timings, sse, summary_timings
from app.server.worker import Job, JobQueue


def create_app(jobs: JobQueue, options: ServerOptions = ServerOptions()) -> Starlette:
    """The app, named and opened as ``options`` say."""
    handlers = _Handlers(jobs, options)
    native = NativeRoutes(jobs, handlers.generate, handlers.generate_each, options)
    routes = [
        Route("/health", handlers.health), Route("/v1/health", handlers.health),
        Route("/metrics", handlers.metrics),
        Route("/v1/models", handlers.models), Route("/models", handlers.models),
        Route("/v1/chat/completions", handlers.chat, methods=["POST"]),
        Route("/chat/completions", handlers.chat, methods=["POST"]),
        Route("/v1/completions", handlers.completions, methods=["POST"]),
        # llama-server's own: /completions is its native completion, as /completion
        Route("/completion", native.completion, methods=["POST"]),
        Route("/completions", native.completion, methods=["POST"]),
        Route("/infill", native.infill, methods=["POST"]),
        Route("/tokenize", native.tokenize, methods=["POST"]),
        Route("/detokenize", native.detokenize, methods=["POST"]),
        Route("/apply-template", native.apply_template, methods=["POST"]),
        Route("/chat/completions/input_tokens", native.count_chat_tokens, methods=["POST"]),
        Route("/v1/chat/completions/input_tokens", native.count_chat_tokens, methods=["POST"]),
        Route("/props", native.props),
        Route("/slots", native.slots),
        Route("/slots/{id_slot}", native.slot_action, methods=["POST"]),
        *([Route(path, web_page) for path in WEB_PAGE_PATHS] if options.web_ui else []),
    ]
    app = Starlette(routes=routes, exception_handlers={
        ApiError: _api_error, HTTPException: _http_error, Exception: _server_error})
    if options.api_key:
        app.add_middleware(ApiKey, api_key=options.api_key)
    app.add_middleware(Cors, origins=options.cors_origins or default_origins(options.api_key))   # added last: outermost
    return app


class _Handlers:
    def __init__(self, jobs: JobQueue, options: ServerOptions):
        self.jobs = jobs
        self.options = options
        self.alias = options.model_id

    async def health(self, request: Request) -> Response:
        if not self.jobs.available:
            raise _not_loaded()
        return JSONResponse({"status": "ok"})

    async def metrics(self, request: Request) -> Response:
        if not self.options.metrics_endpoint:
            raise switched_off("metrics")
        text = self.jobs.metrics.render(self.jobs.processing, self.jobs.deferred, self.jobs.slots())
        response = PlainTextResponse(text, media_type="text/plain; version=0.0.4")
        # the name as llama-server writes it (Starlette's headers are lower-case): clients that keep
        # headers in a plain dict look it up so, llama.cpp's tests among them
        response.raw_headers.append((b"Process-Start-Time-Unix", str(self.jobs.metrics.started).encode()))
        return response

    async def models(self, request: Request) -> Response:
        pair = self._pair()
        model = {"id": self.alias or pair.model_id, "object": "model", "created": 0, "owned_by": "quickdraft",
                 "aliases": list(comma_separated(self.options.aliases)), "tags": list(comma_separated(self.options.tags)),
                 "meta": {"main": pair.main_file, "draft": pair.draft_file, "n_ctx": pair.n_ctx,
                          "n_vocab": pair.n_vocab}}
        return JSONResponse({"object": "list", "data": [model]})

    async def chat(self, request: Request) -> Response:
        body = await asyncio.to_thread(json_body, await body_bytes(request))
        n = body.get("n") if isinstance(body, dict) else None
        if not (isinstance(n, int) and not isinstance(n, bool) and 1 < n <= MAX_CHOICES):
            return await self.generate(request, lambda body: (parse_chat(body), None), OpenAIReply, body)
        answers = await self.answer_each(request, [body | {"n": 1}] * n, lambda body: (parse_chat(body), None),
                                         OpenAIReply)
        return JSONResponse(choices_of(answers))

    async def completions(self, request: Request) -> Response:
        return await self.generate(request, lambda body: (parse_completion(body), None), OpenAIReply)

    def _pair(self) -> LoadedPair:
        if self.jobs.pair is None:
            raise _not_loaded()
        return self.jobs.pair

    async def generate(self, request: Request, parse: Callable, reply: Callable, body: object = None) -> Response:
        """A generation: ``parse`` makes the body (read here unless given, decoded) an (ApiRequest,
        options) pair on a thread, the queue runs it, ``reply(job, options, alias, started)`` (once it
        started) shapes its answer, whole or streamed: OpenAIReply, or native_routes.NativeReply."""
        if body is None:
            raw = await body_bytes(request)
            body = await asyncio.to_thread(json_body, raw)
        body = with_request_defaults(body, self.options.request_defaults)
        # checking takes a while (seconds for thousands of tools): on a thread of its own, so /health,
        # /metrics and the streams of others go on meanwhile
        parsed, options = await asyncio.to_thread(parse, body)
        job = self.jobs.submit(parsed, asyncio.get_running_loop())
        watcher = asyncio.create_task(_cancel_on_disconnect(request, self.jobs, [job]))
        streaming = False
        try:
            item = await first_item_within(job, ADMIT_GRACE_S) if parsed.stream else await job.next()
            if item is None:   # every slot is busy: the headers go out now, the stream says it waits
                streaming = True
                return StreamingResponse(_stream_once_started(job, reply, (options, self.alias), watcher, self.jobs),
                                         media_type="text/event-stream", headers=STREAM_HEADERS)
            first = as_started(item)
            answer = reply(job, options, self.alias, first)
            if not parsed.stream:
                return JSONResponse(await answer.whole())
            live = GenerationStats()
            live.add(first)
            streaming = True  # from here on the stream's own cleanup ends the job
            return StreamingResponse(_stream(job, answer, live, watcher, self.jobs), media_type="text/event-stream",
                                     headers=STREAM_HEADERS)
        finally:
            if not streaming:
                _finish(watcher, self.jobs, job)

    async def generate_each(self, request: Request, bodies: list, parse: Callable, reply: Callable) -> Response:
        """Several prompts in one request (llama-server's /completion given an array of prompts): the
        answers as one JSON array in the prompts' order (``answer_each``)."""
        return JSONResponse(await self.answer_each(request, bodies, parse, reply))

    async def answer_each(self, request: Request, bodies: list, parse: Callable, reply: Callable) -> list[dict]:
        """Each body a job of its own, answered in a slot of its own where one is free; the whole answers
        in order. Not streamed: a stream would interleave them."""
        asked = [await asyncio.to_thread(parse, with_request_defaults(body, self.options.request_defaults))
                 for body in bodies]
        if any(parsed.stream for parsed, _ in asked):
            raise ApiError(400, "Several prompts or choices ('n') are answered together only without 'stream'.",
                           param="stream")
        loop, jobs = asyncio.get_running_loop(), []
        watcher = asyncio.create_task(_cancel_on_disconnect(request, self.jobs, jobs))
        try:
            for parsed, _ in asked:
                jobs.append(self.jobs.submit(parsed, loop))
            answers = []
            for job, (_, options) in zip(jobs, asked):
                answers.append(await reply(job, options, self.alias, as_started(await job.next())).whole())
            return answers
        finally:
            watcher.cancel()
            for job in jobs:
                self.jobs.withdraw(job)


def choices_of(answers: list[dict]) -> dict:
    """One chat answer holding the ``n`` answers' choices, indexed in order, and their usage summed (the
    prompt once: each was read from the same prompt); each answer's own timings are left out."""
    choices = [dict(answer["choices"][0], index=i) for i, answer in enumerate(answers)]
    completion = sum(answer["usage"]["completion_tokens"] for answer in answers)
    usage = dict(answers[0]["usage"], completion_tokens=completion,
                 total_tokens=answers[0]["usage"]["prompt_tokens"] + completion)
    return {key: value for key, value in answers[0].items() if key != "timings"} | {"choices": choices, "usage": usage}


STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MAX_CHOICES = 16   # a chat request's 'n': each choice is answered as a request of its own
ADMIT_GRACE_S = 1.0   # a stream's headers wait this long for its answer to start (a quick refusal keeps its status)
KEEPALIVE_S = 5.0     # then a comment this often while it waits for a slot
WAITING = b": waiting for a free slot\n\n"


class OpenAIReply:
    """An answer in OpenAI's shape (chat or completion), whole or as stream chunks ending in [DONE]."""

    trailer = sse("[DONE]")

    def __init__(self, job: Job, options: object, alias: str | None, first: Started):
        # the pair that answers (the window may have loaded another since the request came)
        self.job = job
        self.started = first
        self.shape = ResponseShape(job.request.kind, alias or job.pair.model_id, job.drafting is not DrafterKind.NONE,
                                   logprobs=job.request.sampling.logprobs is not None)
        self.native = NativeAnswer(self.shape.model_id, first.prompt_tokens, job.prompt_text, job.sampling,
                                   job.request.stream, NativeOptions(), self.shape.speculative)

    async def whole(self) -> dict:
        summary = await summary_of(self.job)
        if summary.error is not None:
            raise ApiError(500, summary.error, type="server_error")
        if _reads_answer(self.shape, self.job):
            body = self.shape.complete(summary, *answer_message(self.job.plan, summary.text))
        else:
            body = self.shape.complete(summary)
        return body | self.verbose(summary)

    def verbose(self, summary: Summary) -> dict:
        """llama-server's __verbose, when asked (the request's verbose, serve --verbose): the answer's native
        body, the prompt as text among it."""
        if not self.job.verbose:
            return {}
        timings = summary_timings(summary, self.shape.speculative)
        return {"__verbose": self.native.final(summary, self.job.stopping_word, timings)}

    async def events(self, live: GenerationStats) -> AsyncIterator[bytes]:
        """A role chunk (chat), one chunk per text piece (for a chat answer read into parts, per delta
        of reasoning, content or a tool call: ``AnswerStream``), the final chunk with the generation's
        timings, a usage chunk when asked."""
        job, shape = self.job, self.shape
        answer = AnswerStream(job.plan) if _reads_answer(shape, job) else None
        progressing = job.request.return_progress
        if shape.chat and not progressing:   # with progress, each progress chunk carries the role
            yield sse(shape.chunk(None, role=True))
        held: list = []   # log-probabilities of tokens whose text has not gone out yet
        async for pieces, summary, progress in bursts(job, live, self.started if progressing else None):
            if progress is not None:
                yield sse(_progress_chunk(shape, progress, job))
                continue
            if pieces and answer is None:
                chunks = []
                for piece in pieces:
                    held += piece.probs
                    if piece.text:
                        chunks.append(sse(shape.chunk(piece.text, timings=_live_timings(job, shape, live), probs=held)))
                        held = []
                if chunks:
                    yield b"".join(chunks)
            elif pieces:
                held += [p for piece in pieces for p in piece.probs]
                deltas = [delta for piece in pieces if piece.text for delta in answer.feed(piece.text)]
                if deltas:   # a burst's log-probabilities go with its first delta
                    yield b"".join(sse(shape.delta_chunk(d, timings=_live_timings(job, shape, live),
                                                         probs=held if i == 0 else ())) for i, d in enumerate(deltas))
                    held = []
            if summary is not None:
                deltas = answer.finish() if answer is not None and summary.error is None else []
                if answer is not None and (deltas or held):
                    yield b"".join(sse(shape.delta_chunk(d, probs=held if i == 0 else ()))
                                   for i, d in enumerate(deltas or [{}]))
                elif held:   # tokens that showed no text (a character cut short at the end)
                    yield sse(shape.chunk("", probs=held))
                yield _closing(shape, summary, job, bool(answer is not None and answer.calls), self.verbose(summary))


def _not_loaded() -> ApiError:
    return ApiError(503, "The model is not loaded.", type="unavailable_error", retry_after=5)


async def _cancel_on_disconnect(request: Request, jobs: JobQueue, watched: list[Job]) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass
    for job in watched:
        jobs.withdraw(job)


def _finish(watcher: asyncio.Task, jobs: JobQueue, job: Job) -> None:
    watcher.cancel()
    jobs.withdraw(job)  # a no-op for a finished job; stops one a departed client left running


async def _stream(job: Job, answer, live: GenerationStats, watcher: asyncio.Task, jobs: JobQueue) -> AsyncIterator[bytes]:
    """Server-sent events: the answer's own (``answer.events``), an error as an event, its trailer."""
    try:
        async for data in answer.events(live):
            yield data
    except ApiError as exc:  # the headers are out: the error travels as an event, as OpenAI's do
        yield sse(exc.body())
    finally:
        _finish(watcher, jobs, job)
    if answer.trailer:
        yield answer.trailer


async def _stream_once_started(job: Job, reply: Callable, reply_args: tuple, watcher: asyncio.Task,
                               jobs: JobQueue) -> AsyncIterator[bytes]:
    """A stream whose request waits for a slot: an SSE comment at once and every KEEPALIVE_S while it
    waits (clients with a read timeout of 30 s keep listening; SSE readers skip comments), then the
    answer as ``_stream`` sends it, or its failure as an error event."""
    handed_over = False
    try:
        yield WAITING
        while (item := await first_item_within(job, KEEPALIVE_S)) is None:
            yield WAITING
        try:
            first = as_started(item)
        except ApiError as exc:
            yield sse(exc.body())
            return
        answer = reply(job, reply_args[0], reply_args[1], first)
        live = GenerationStats()
        live.add(first)
        handed_over = True   # from here on _stream's own cleanup ends the job
        async for data in _stream(job, answer, live, watcher, jobs):
            yield data
    finally:
        if not handed_over:
            _finish(watcher, jobs, job)


def _reads_answer(shape: ResponseShape, job: Job) -> bool:
    """Whether the chat answer is read into parts (reasoning, tool calls), not sent as its text."""
    return shape.chat and job.plan is not None and not job.plan.plain


def _progress_chunk(shape: ResponseShape, progress: PromptProgress, job: Job) -> dict:
    """llama-server's progress chunk: a chat's role delta (a completion's empty text) with prompt_progress."""
    timings = progress_timings(progress, shape.speculative) if job.request.timings_per_token else None
    return shape.chunk(None if shape.chat else "", role=shape.chat, timings=timings) | \
        {"prompt_progress": progress.to_json()}


def _live_timings(job: Job, shape: ResponseShape, live: GenerationStats) -> dict | None:
    return live_timings(live, shape.speculative) if job.request.timings_per_token else None


def _closing(shape: ResponseShape, s: Summary, job: Job, calls: bool = False, verbose: dict | None = None) -> bytes:
    """The finish chunk (with ``verbose``'s __verbose, as llama-server's first chunk of its final result),
    and the usage chunk when asked; the timings go with the last of them, as llama-server sends them."""
    if s.error is not None:
        return sse(ApiError(500, s.error, type="server_error").body())
    finish, timings = finish_reason(s, calls), summary_timings(s, shape.speculative)
    if not job.request.include_usage:
        return sse(shape.chunk(None, finish, timings=timings) | (verbose or {}))
    return sse(shape.chunk(None, finish) | (verbose or {})) + sse(shape.usage_chunk(s) | {"timings": timings})


async def _api_error(request: Request, exc: ApiError) -> Response:
    return JSONResponse(exc.body(), status_code=exc.status, headers=exc.headers())


async def _http_error(request: Request, exc: HTTPException) -> Response:
    path = request.url.path
    message = {404: f"There is no {path} here; see GET /v1/models, POST /v1/chat/completions, "
                    "POST /v1/completions, POST /completion, /infill, /tokenize, /detokenize, /apply-template, "
                    "/chat/completions/input_tokens, "
                    "GET /props, /health, /metrics.",
               405: f"{request.method} is not allowed on {path}."}.get(exc.status_code, str(exc.detail))
    error = ApiError(exc.status_code, message, code="not_found" if exc.status_code == 404 else None)
    return JSONResponse(error.body(), status_code=exc.status_code, headers=exc.headers)


async def _server_error(request: Request, exc: Exception) -> Response:
    traceback.print_exception(exc, file=sys.stderr)
    error = ApiError(500, f"Internal error: {type(exc).__name__}. The server keeps running.", type="server_error")
    return JSONResponse(error.body(), status_code=500)
