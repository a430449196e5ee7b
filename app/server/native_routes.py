"""llama-server's own endpoints: /completion (and /completions), /infill, /tokenize, /detokenize,
/apply-template, GET /props, GET /slots and POST /slots/{id} (slot_files.py). Generations go through the same queue, engine path and checks as
/v1/chat/completions (app.py's ``generate``); /tokenize, /detokenize and /apply-template are engine
calls on the same queue, since the vocabulary and the template live on the engine's thread.
"""

from __future__ import annotations

import asyncio
import json
from typing import AsyncIterator, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from app import __version__
from app.core.frontdoor import AnswerEngine
from app.core.llama.library import version as llama_cpp_version
from app.core.params import DrafterKind
from app.core.speculation.events import Started
from app.core.speculation.stats import GenerationStats
from app.server.api import ApiRequest, parse_chat, sampling_from, several_prompts
from app.server.bodies import body_bytes, json_body
from app.server.errors import ApiError
from app.server.infill import mixed_tokens
from app.server.native_api import NativeOptions, parse_detokenize, parse_infill, parse_native_completion, parse_tokenize
from app.server.native_responses import NativeAnswer, generation_settings, token_entries
from app.server.options import ServerOptions, switched_off
from app.server.slot_files import slot_action
from app.server.responses import live_timings, progress_timings, sse, summary_timings
from app.server.streams import bursts, summary_of
from app.server.worker import Done, Failed, Job, JobQueue


class NativeReply:
    """An answer in llama-server's native shape, whole or as ``data: {...}`` events (no [DONE])."""

    trailer = b""

    def __init__(self, job: Job, options: NativeOptions, alias: str | None, first: Started):
        self.job = job
        self.started = first
        self.speculative = job.drafting is not DrafterKind.NONE
        request = job.request
        self.answer = NativeAnswer(alias or job.pair.model_id, first.prompt_tokens, job.prompt_text, job.sampling,
                                   request.stream, options, self.speculative, job.slot)

    async def whole(self) -> dict:
        summary = await summary_of(self.job)
        if summary.error is not None:
            raise ApiError(500, summary.error, type="server_error")
        return self.answer.final(summary, self.job.stopping_word, summary_timings(summary, self.speculative))

    async def events(self, live: GenerationStats) -> AsyncIterator[bytes]:
        per_token = self.job.request.timings_per_token
        answer = self.answer
        async for pieces, summary, progress in bursts(self.job, live, self.started if self.job.request.return_progress else None):
            if progress is not None:
                timings = progress_timings(progress, self.speculative) if per_token else None
                yield sse(answer.chunk("", [], 0, timings) | {"prompt_progress": progress.to_json()})
                continue
            timings = live_timings(live, self.speculative) if per_token else None
            if pieces:
                yield b"".join(sse(answer.chunk(p.text, list(p.token_ids), live.generated_tokens, timings, p.probs))
                               for p in pieces)
            if summary is not None:
                if summary.error is not None:
                    raise ApiError(500, summary.error, type="server_error")
                yield sse(answer.final(summary, self.job.stopping_word, summary_timings(summary, self.speculative)))


class NativeRoutes:
    """The handlers; ``generate`` is app.py's generation path (parse, queue, reply)."""

    def __init__(self, jobs: JobQueue, generate: Callable, generate_each: Callable, options: ServerOptions):
        self.jobs = jobs
        self.generate = generate
        self.generate_each = generate_each
        self.options = options
        self.alias = options.model_id

    async def completion(self, request: Request) -> Response:
        """One prompt, or several in an array (``several_prompts``): each then a job of its own."""
        body = await asyncio.to_thread(json_body, await body_bytes(request))
        prompts = several_prompts(body.get("prompt")) if isinstance(body, dict) else None
        if prompts is None:
            return await self.generate(request, parse_native_completion, NativeReply, body)
        return await self.generate_each(request, [body | {"prompt": prompt} for prompt in prompts],
                                        parse_native_completion, NativeReply)

    async def infill(self, request: Request) -> Response:
        return await self.generate(request, parse_infill, NativeReply)

    async def tokenize(self, request: Request) -> Response:
        body = await body_bytes(request)
        asked = await asyncio.to_thread(lambda: parse_tokenize(json_body(body)))   # up to 8 MiB: off the loop

        def run(engine: AnswerEngine) -> dict:
            tokens = mixed_tokens(engine, asked.content, asked.add_special, asked.parse_special, param="content")
            return {"tokens": token_entries(tokens, engine.pieces(tokens)) if asked.with_pieces else tokens}

        return await self._call(run)

    async def detokenize(self, request: Request) -> Response:
        body, n_vocab = await body_bytes(request), self._pair().n_vocab
        tokens = await asyncio.to_thread(lambda: parse_detokenize(json_body(body), n_vocab))
        return await self._call(lambda engine: {"content": b"".join(engine.pieces(tokens)).decode("utf-8", "replace")})

    async def apply_template(self, request: Request) -> Response:
        """The prompt text /v1/chat/completions would give the model for these messages (tools included):
        the template's output, as llama-server's (the BOS token, added when tokenized, is not in it)."""
        return await self._chat_prompt(request, lambda prompt: {"prompt": prompt.text})

    async def count_chat_tokens(self, request: Request) -> Response:
        """llama-server's /chat/completions/input_tokens: how many tokens that prompt is, BOS included."""
        return await self._chat_prompt(request, lambda prompt: {"input_tokens": len(prompt.tokens)})

    async def _chat_prompt(self, request: Request, answer: Callable) -> Response:
        body = await body_bytes(request)
        chat: ApiRequest = await asyncio.to_thread(lambda: parse_chat(json_body(body)))
        return await self._call(lambda engine: answer(self.jobs.chat_prompt(engine, chat)[0]))

    async def props(self, request: Request) -> Response:
        """GET /props: what llama-server tells of itself, where Quickdraft has it."""
        pair = self._pair()
        defaults = sampling_from(dict(self.options.request_defaults))   # serve's --temp ... over llama-server's own
        params = generation_settings(defaults, False, self.jobs.drafting is not DrafterKind.NONE)
        return JSONResponse({
            "default_generation_settings": {"params": params, "n_ctx": pair.n_ctx},
            "total_slots": self.jobs.parallel, "model_alias": self.alias or pair.model_id, "model_path": pair.main_path,
            "modalities": {"vision": False, "video": False, "audio": False},
            "endpoint_slots": self.options.slots_endpoint, "endpoint_props": False,
            "endpoint_metrics": self.options.metrics_endpoint,
            "chat_template": pair.chat_template or "", "is_sleeping": False,
            "build_info": f"quickdraft {__version__} (llama-cpp-python {llama_cpp_version()})",
            "speculative": {"draft_model": pair.draft_path, "drafter": self.jobs.drafting.value},
        })

    async def slots(self, request: Request) -> Response:
        """GET /slots: each slot, answering or idle; with ?fail_on_no_slot=1, 503 when none is free (as
        llama-server); 501 when the server was started with --no-slots."""
        if not self.options.slots_endpoint:
            raise switched_off("slots")
        self._pair()
        slots = self.jobs.slots()
        if request.query_params.get("fail_on_no_slot") in ("1", "true") and \
                len([s for s in slots if s["is_processing"]]) >= self.jobs.parallel:
            raise ApiError(503, "No slot is available.", type="unavailable_error", retry_after=1)
        return JSONResponse(slots)

    async def slot_action(self, request: Request) -> Response:
        """POST /slots/{id}?action=save|restore|erase: on that slot's engine, once it is free."""
        action = await slot_action(request, self.options.slot_save_path, self.jobs.drafting)
        return await self._call(action.run, action.slot)

    def _pair(self):
        if self.jobs.pair is None:
            raise ApiError(503, "The model is not loaded.", type="unavailable_error", retry_after=5)
        return self.jobs.pair

    async def _call(self, run: Callable[[AnswerEngine], dict], slot: int = -1) -> Response:
        """``run(engine)`` on the engine's thread (``slot``'s engine, with one), through the queue: its dict
        as JSON, rendered off the event loop (millions of tokens with their pieces take seconds), or its error."""
        job = self.jobs.call(run, asyncio.get_running_loop(), slot)
        try:
            item = await job.next()
        finally:
            self.jobs.withdraw(job)
        if isinstance(item, Failed):
            raise item.error
        assert isinstance(item, Done)
        body = await asyncio.to_thread(json.dumps, item.value, ensure_ascii=False, separators=(",", ":"))
        return Response(body.encode("utf-8"), media_type="application/json")
