"""Generations from a bounded queue, each event stamped on the engine thread's clock and posted to the
asyncio loop of the request that asked for it. The engine thread is the server's own (ThreadedJobs in
slots.py, for ``quickdraft serve``) or the window's (HostedJobs in slots.py, the window's "Local
server"); both answer several at once, in slots."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Callable, Generator

from app.core.chat.prompt import Prompt
from app.core.errors import PromptTooLongError, QuickdraftError
from app.core.frontdoor import AnswerEngine, GenerationRequest, LoadedPair
from app.core.params import DEFAULT_DRAFTER, DrafterKind, SamplingParams, SpeculationParams
from app.core.speculation.events import StopReason, Summary, until_summary
from app.core.speculation.loop import check_prompt_fits
from app.server.answers import AnswerPlan, chat_prompt
from app.server.api import ApiError, ApiRequest, with_template_defaults
from app.server.infill import infill_tokens, mixed_tokens
from app.server.metrics import ServerMetrics

RECENT_JOBS = 8   # how many recent generations the Retry-After estimate averages


@dataclass(frozen=True)
class Failed:
    error: ApiError


@dataclass(frozen=True)
class Done:
    """What an engine call (``JobQueue.call``) returned."""

    value: object


@dataclass(eq=False)
class Job:
    """One request's generation; the engine thread posts the engine's events (Started first, each
    stamped on the engine's clock), or Failed, to ``outbox``."""

    request: ApiRequest
    loop: asyncio.AbstractEventLoop
    outbox: asyncio.Queue = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    pair: LoadedPair | None = None  # the pair that answers it: set on the engine thread before Started is posted
    drafting: DrafterKind = DrafterKind.NONE   # who really drafts for it (NONE: nobody), set there too
    plan: AnswerPlan | None = None  # chat: how to read its answer (tools, reasoning), set there too
    # an engine call instead of a generation: run on the engine's thread, its value posted as Done
    call: Callable[[AnswerEngine], object] | None = None
    sampling: SamplingParams | None = None   # the request's, logit_bias's texts made tokens, set there too
    prompt_text: str = ""           # completion, infill: the prompt as text (control tokens shown), set there too
    stopping_word: str = ""         # the stop string that ended the answer, set there before the Summary is posted
    verbose: bool = False           # its answer carries __verbose (the request's or serve --verbose), set there too
    slot: int = 0                   # the slot that answers it, set there too
    on_slot: int = -1               # a call on one slot's engine (its cache saved, restored, erased); -1: none

    @property
    def pinned(self) -> int:
        """The slot it must wait for (-1: none): a generation's id_slot, or the slot a call acts on."""
        return self.on_slot if self.call is not None else self.request.id_slot

    def post(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.outbox.put_nowait, item)
        except RuntimeError:  # the request's loop is gone: nobody is listening any more
            self.cancel.set()

    async def next(self):
        return await self.outbox.get()


class JobQueue:
    """The bounded queue of generations and how one is served. Which thread serves them is a
    subclass's business: ThreadedJobs' own (``quickdraft serve``), or the window's engine thread
    (HostedJobs), where the window's chat and the server's clients share one engine."""

    def __init__(self, speculation: SpeculationParams = SpeculationParams(), drafter: DrafterKind = DEFAULT_DRAFTER,
                 max_waiting: int = 8, metrics: ServerMetrics | None = None,
                 observe: Callable[[Job, object], None] | None = None):
        self.speculation = speculation
        self.drafter = drafter
        self.max_waiting = max_waiting
        self.metrics = metrics or ServerMetrics()
        self.pair: LoadedPair | None = None
        self.drafting = DrafterKind.NONE   # who really drafts with the pair as loaded (NONE: nobody)
        self._observe = observe       # sees every item a job is sent, on the engine's thread
        self._engine: AnswerEngine | None = None
        self._waiting: deque[Job] = deque()
        self._answering: list[Job] = []   # the jobs being answered now (one per slot)
        self.parallel = 1                 # how many are answered at once (ThreadedJobs' slots)
        self.template_defaults: dict = {}  # what every chat template reads unless the request says (serve's flags)
        self.verbose = False               # every OpenAI answer carries __verbose (serve --verbose)
        self._told: set[str] = set()       # the prompt warnings said on the server's console
        self._stopping = False
        self._cond = threading.Condition()
        self._durations: deque[float] = deque(maxlen=RECENT_JOBS)

    @property
    def available(self) -> bool:
        return not self._stopping and self.pair is not None

    @property
    def processing(self) -> int:
        return len(self._answering)

    def slots(self) -> list[dict]:
        """The one slot, as llama-server's /slots shows it (ThreadedJobs has several)."""
        if self.pair is None:
            return []
        return [{"id": 0, "id_task": -1, "n_ctx": self.pair.n_ctx, "speculative": self.drafting is not DrafterKind.NONE,
                 "is_processing": bool(self._answering)}]

    @property
    def deferred(self) -> int:
        return len(self._waiting)

    # --- requests (the HTTP side's thread) -------------------------------------------------------

    def call(self, call: Callable[[AnswerEngine], object], loop: asyncio.AbstractEventLoop, slot: int = -1) -> Job:
        """Queue ``call(engine)`` (llama-server's /tokenize, /detokenize, /apply-template) on the engine's
        thread, where llama.cpp's objects live, behind the same queue and limits as a generation; with
        ``slot``, on that slot's engine once the slot is free (its cache saved, restored or erased)."""
        return self.submit(None, loop, call, slot)

    def submit(self, request: ApiRequest | None, loop: asyncio.AbstractEventLoop,
               call: Callable[[AnswerEngine], object] | None = None, on_slot: int = -1) -> Job:
        """Queue a generation, or refuse it: 503 while unavailable, 429 when the queue is full."""
        with self._cond:
            if not self.available:
                raise ApiError(503, "The model is not loaded (the server is starting or stopping).",
                               type="unavailable_error", code="unavailable", retry_after=5)
            # `parallel` answering and max_waiting waiting, counted alike in a burst that arrives before
            # the engine's thread has taken the first jobs (then none is answered yet)
            if len(self._waiting) + len(self._answering) >= self.parallel + self.max_waiting:
                self.metrics.count_rejected()
                raise ApiError(429, f"The server is busy: {len(self._answering)} requests are answered and "
                               f"{len(self._waiting)} are waiting. Retry later.", type="rate_limit_error",
                               code="queue_full", retry_after=self._retry_after())
            job = Job(request, loop, call=call, on_slot=on_slot)
            self._waiting.append(job)
            self._cond.notify_all()
        self._job_waiting()
        return job

    def withdraw(self, job: Job) -> None:
        """The client is gone: stop its generation at the next round, or drop it from the queue."""
        job.cancel.set()
        with self._cond:
            if job in self._waiting:
                self._waiting.remove(job)
                job.post(Failed(ApiError(499, "The client closed the request.")))  # ends its handler

    def _job_waiting(self) -> None:
        """A job was queued (called on the HTTP side's thread, outside the lock)."""

    def _use(self, engine: AnswerEngine) -> None:
        """Serve with ``engine`` from now on; on the engine's thread."""
        self._engine = engine
        self.pair = engine.pair
        self.drafting = self.pair.who_drafts(self.drafter, self.speculation)

    def _retry_after(self) -> int:
        mean = sum(self._durations) / len(self._durations) if self._durations else 1.0
        return max(1, math.ceil(mean * (len(self._waiting) + 1) / self.parallel))

    def _refuse_all(self) -> None:
        """Stop taking jobs: cancel the running one and answer the waiting ones 503."""
        with self._cond:
            self._stopping = True
            for job in self._answering:
                job.cancel.set()
            for job in self._waiting:
                job.cancel.set()
                job.post(Failed(ApiError(503, "The server is stopping.", type="unavailable_error", retry_after=5)))
            self._waiting.clear()
            self._cond.notify_all()

    # --- the engine's thread ---------------------------------------------------------------------

    def _finish(self, job: Job, last, started: float, counted: bool = True) -> None:
        """The job's last item (its Summary, Failed, Done) goes out once it no longer counts as answered,
        so the client's next request finds room."""
        if counted:   # only generations: the Retry-After estimate is about them
            self._durations.append(time.perf_counter() - started)
        with self._cond:
            if job in self._answering:
                self._answering.remove(job)
        self._send(job, last)

    def _send(self, job: Job, item) -> None:
        if self._observe is not None:
            self._observe(job, item)
        job.post(item)

    def _run_call(self, job: Job) -> Done | Failed:
        job.pair = self.pair
        if job.cancel.is_set():
            return Failed(ApiError(499, "The client closed the request."))
        try:
            return Done(job.call(self._engine_for(job)))
        except ApiError as exc:
            return Failed(exc)
        except QuickdraftError as exc:
            return Failed(ApiError(400, str(exc)))
        except Exception as exc:
            return internal_error(exc)

    def _engine_for(self, job: Job) -> AnswerEngine:
        """The engine a call runs on (SlotJobs: a slot's, for a call on one)."""
        return self._engine

    def _prepare(self, job: Job) -> list[int] | Failed:
        """The job's prompt as tokens, its sampling checked (on any slot's engine: they share the models),
        or why it cannot be answered."""
        job.pair, job.drafting = self.pair, self.drafting   # before anything is posted: the handler names the pair
        if job.cancel.is_set():  # its client left before its turn
            return Failed(ApiError(499, "The client closed the request."))
        try:
            tokens = self._prompt_tokens(job)
            check_prompt_fits(tokens, self.pair.n_ctx)
            job.sampling = self._sampling(job.request)
        except PromptTooLongError as exc:
            return Failed(context_error(job.request.kind, exc))
        except QuickdraftError as exc:
            return Failed(ApiError(400, str(exc)))
        except ApiError as exc:
            return Failed(exc)
        job.verbose = self.verbose or job.request.verbose
        if job.request.kind != "chat" or job.verbose:   # llama-server's native answers show their prompt
            job.prompt_text = _text(self._engine.pieces(tokens))
        return tokens

    def _answer(self, job: Job, engine: AnswerEngine,
                tokens: list[int] | Failed | None) -> Generator[object, None, Summary | Failed]:
        """The job's events, one at a time, answered by ``engine`` (its slot's); its last item (the
        Summary, or Failed) is the generator's value. ``tokens``: what ``_prepare`` made of it, or None
        to prepare it here."""
        tokens = self._prepare(job) if tokens is None else tokens
        if isinstance(tokens, Failed):
            return tokens
        plan = job.plan
        request = GenerationRequest(prompt=tokens, sampling=job.sampling, speculation=self.speculation,
                                    drafter=self.drafter, cancel=job.cancel, spell=plan.spell if plan else (),
                                    tool_spans=plan.call_spans if plan else None,
                                    empty_cache=not job.request.cache_prompt,
                                    grammar=plan.grammar if plan else job.request.grammar)
        try:
            events = engine.generate(request)
        except QuickdraftError as exc:   # a grammar llama.cpp refuses: the request's fault, said before any token
            return Failed(ApiError(400, str(exc), param="grammar"))
        summary = yield from until_summary(events)
        if summary.stop_reason is StopReason.STOP_STRING:
            job.stopping_word = _stopping_word(summary, _text(engine.pieces(summary.token_ids)),
                                               job.sampling.stop)
        self.metrics.record(summary)
        return summary

    def chat_prompt(self, engine: AnswerEngine, request: ApiRequest) -> tuple[Prompt, AnswerPlan]:
        """A chat request's prompt and answer plan, the server's template defaults under its own variables."""
        return chat_prompt(engine, with_template_defaults(request, self.template_defaults))

    def _prompt_tokens(self, job: Job) -> list[int]:
        engine, request = self._engine, job.request
        if request.kind == "chat":
            prompt, job.plan = self.chat_prompt(engine, request)
            self._tell(prompt.warning)
            return list(prompt.tokens)
        if request.kind == "infill":
            return infill_tokens(engine, request.infill, self.pair.n_ctx)
        return mixed_tokens(engine, request.prompt, add_special=True, parse_special=True)

    def _tell(self, warning: str | None) -> None:
        """A prompt's warning (its template could not be used) on the console, once: a server's clients
        see only the answer, and whoever runs it should know the prompt was not the model's format."""
        if warning and warning not in self._told:
            self._told.add(warning)
            print(f"warning: {warning}", file=sys.stderr, flush=True)

    def _sampling(self, request: ApiRequest) -> SamplingParams:
        """The request's sampling with logit_bias's texts as their tokens (llama-server's rule: each
        token of the text, tokenized without BOS) and, for ignore_eos, the end-of-generation tokens
        banned (llama-server's way too), checked: every biased token is in the vocabulary, and not
        every token is banned."""
        bias = dict(request.sampling.logit_bias)
        for text, value in request.bias_texts:
            bias.update((token, value) for token in self._engine.tokenize(text, add_special=False, parse_special=False))
        if request.ignore_eos:
            bias.update((token, -math.inf) for token in self._engine.eog_tokens())
        n_vocab = self.pair.n_vocab
        outside = [token for token in bias if token >= n_vocab]
        if outside:
            raise ApiError(400, f"'logit_bias' names token {outside[0]}, outside the vocabulary (0..{n_vocab - 1}).",
                           param="logit_bias")
        if sum(1 for b in bias.values() if b == -math.inf) >= n_vocab:
            raise ApiError(400, "'logit_bias' bans every token of the vocabulary.", param="logit_bias")
        return dataclasses.replace(request.sampling, logit_bias=tuple(bias.items()))


def internal_error(exc: Exception) -> Failed:
    """A defect, not the client's doing: logged, answered 500; the server keeps serving."""
    traceback.print_exception(exc, file=sys.stderr)
    return Failed(ApiError(500, f"Internal error: {type(exc).__name__}: {exc}", type="server_error"))


def _text(pieces: list[bytes]) -> str:
    return b"".join(pieces).decode("utf-8", "replace")


def _stopping_word(summary: Summary, generated: str, stops: tuple[str, ...]) -> str:
    """The stop string that ended the answer: the answer's text ends just before it, so it is the one
    found first in what was generated after that text."""
    rest = generated[len(summary.text):]
    found = [(rest.find(stop), i) for i, stop in enumerate(stops) if stop and stop in rest]
    return stops[min(found)[1]] if found else ""


def context_error(kind: str, exc: PromptTooLongError) -> ApiError:
    """A prompt over the context, as llama-server says it (its words, which clients look for to shorten a
    conversation; exceed_context_size_error, with the counts)."""
    return ApiError(400, f"request ({exc.n_prompt} tokens) exceeds the available context size ({exc.n_ctx} tokens), "
                    f"try increasing it", type="exceed_context_size_error", param="messages" if kind == "chat" else "prompt",
                    code="context_length_exceeded", extra={"n_prompt_tokens": exc.n_prompt, "n_ctx": exc.n_ctx})
