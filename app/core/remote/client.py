"""An engine on an OpenAI-compatible server (llama-server, vLLM, another Quickdraft): the same
``generate()`` and events as the local Engine, for models too big for this machine.

Speculation statistics come from wherever the server reports them: llama-server's per-chunk
``timings`` (draft_n, draft_n_accepted; asked for with "timings_per_token"), else the deltas of the
speculation counters on its /metrics around the answer (vLLM; llama-server started with --metrics).
When neither reports anything the Summary says ``speculation_reported=False`` instead of zeros.

A thinking model's reasoning comes as ``reasoning_content`` deltas (llama-server, Quickdraft, vLLM);
it is passed on as the ``<think>`` block a local thinking model writes, so that the window and the
CLI read both alike (``RemoteEngine.thinking_format``).
"""

from __future__ import annotations

import functools
import math
import json
import threading
import time
from collections.abc import Mapping
from typing import Any, Iterator, Sequence
from urllib.parse import urlsplit

import httpx

from app.core.chat.prompt import Message, Prompt
from app.core.chat.reasoning import ThinkingFormat
from app.core.errors import QuickdraftError
from app.core.frontdoor import GenerationRequest, LoadedPair
from app.core.lm import FimTokens
from app.core.params import SamplingParams
from app.core.remote.metrics import SpecCounters, spec_counters
from app.core.speculation.events import Event, Origin, Round, StopReason, Summary, TokenPiece

CONNECT_TIMEOUT_S = 10.0
READ_TIMEOUT_S = 600.0   # a big model may think long before its first token
FINISH = {"stop": StopReason.EOG, "length": StopReason.LENGTH, "eos": StopReason.EOG}
# how a server's reasoning_content is marked in the answer's text (no switch: the server's template decides)
REMOTE_THINKING = ThinkingFormat("<think>", "</think>", starts_open=False, switch=None)


class RemoteError(QuickdraftError):
    """The server could not be reached or refused the request."""


class RemoteEngine:
    """The AnswerEngine (app/core/frontdoor.py) of a server: it renders its own prompts, drafts as it
    chooses, and says so in the statistics it reports."""

    def __init__(self, url: str, api_key: str | None = None, model: str | None = None,
                 transport: httpx.BaseTransport | None = None):
        self.given_url = url      # as the user gave it: what settings remember
        self.url = root_url(url)
        self._model = model
        self._metrics_available = True
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=self.url, headers=headers, transport=transport,
                                    timeout=httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S))

    @property
    def model(self) -> str:
        """The model to ask for: the one given, else the first the server lists."""
        if self._model is None:
            data = self._get_json("/v1/models").get("data") or []
            if not data or not isinstance(data[0], dict) or "id" not in data[0]:
                raise RemoteError(f"{self.url} lists no models.")
            self._model = str(data[0]["id"])
        return self._model

    @property
    def display_name(self) -> str:
        return f"{self.model} at {urlsplit(self.url).netloc}"

    @functools.cached_property
    def pair(self) -> LoadedPair:
        """The server's model; asking for it fails here (RemoteError) when the server cannot be reached."""
        return LoadedPair(main_name=self.display_name, main_path=self.given_url, placement=(("remote", self.url),),
                          thinking=REMOTE_THINKING, remote_url=self.given_url)

    def close(self) -> None:
        self._client.close()

    def thinking_format(self, variables: Mapping[str, Any] | None = None) -> ThinkingFormat:
        """How the answer's text marks the reasoning a server sends apart (its template is its own)."""
        return REMOTE_THINKING

    def prompt(self, messages: Sequence[Message], variables: Mapping[str, Any] | None = None,
               prefill: Sequence[tuple[str, bool]] = ()) -> Prompt:
        raise RemoteError(f"{self.url} renders its own prompts: it cannot be asked for their tokens.")

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        raise RemoteError(f"{self.url} keeps its tokenizer: send it the text instead.")

    def pieces(self, tokens: Sequence[int]) -> list[bytes]:
        raise RemoteError(f"{self.url} keeps its tokenizer: it cannot be asked for token texts.")

    def fim_tokens(self) -> FimTokens:
        raise RemoteError(f"{self.url} keeps its tokenizer: it cannot be asked for fill-in-the-middle tokens.")

    def eog_tokens(self) -> list[int]:
        raise RemoteError(f"{self.url} keeps its tokenizer: it cannot be asked for its end-of-generation tokens.")

    def generate(self, request: GenerationRequest) -> Iterator[Event]:
        """Stream an answer from the server as TokenPiece and Round events and, last, a Summary, each
        stamped with the seconds since the request was sent. No Started event: the server says how
        long the prompt was only at the end. The request's speculation, drafter, template variables
        and parts' markers are the server's business: they are not sent; a grammar is (``grammar``)."""
        body = _sampling_body(request.sampling) | {"model": self.model, "stream": True, "timings_per_token": True,
                                                   "stream_options": {"include_usage": True}}
        if request.grammar is not None:   # llama-server's field, which Quickdraft's server takes too
            body["grammar"] = request.grammar
        if request.prompt is not None:
            path, body = "/v1/completions", body | {"prompt": list(request.prompt)}
        else:
            path, body = "/v1/chat/completions", body | {"messages": [dict(m) for m in request.messages]}
        return self._stream(path, body, request.cancel)

    # --- one answer ------------------------------------------------------------------------------

    def _stream(self, path: str, body: dict, cancel: threading.Event) -> Iterator[Event]:
        before = self._scrape()
        reader = ChunkReader(time.perf_counter())
        stop, error = None, None
        try:
            with self._client.stream("POST", path, json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    raise RemoteError(f"{self.url} refused the request: {_error_message(response)}")
                for data in sse_data(response.iter_lines()):
                    if cancel.is_set():
                        stop = StopReason.CANCEL
                        break
                    if data == "[DONE]":
                        reader.done = True
                        break
                    yield from reader.add(_chunk(data))
        except httpx.HTTPError as exc:
            if not reader.chunks:
                raise RemoteError(f"cannot reach {self.url}: {exc}") from None
            stop, error = StopReason.ERROR, f"lost the connection to {self.url}: {exc}"
        except RemoteChunkError as exc:
            stop, error = StopReason.ERROR, str(exc)
        after = self._scrape() if before is not None else None
        yield from reader.close_round()
        yield reader.summary(stop, error, after - before if after is not None else None)

    def _scrape(self) -> SpecCounters | None:
        """The server's speculation counters now, or None when it has no /metrics or no such counters."""
        if not self._metrics_available:
            return None
        try:
            response = self._client.get("/metrics", timeout=CONNECT_TIMEOUT_S)
        except httpx.HTTPError:
            response = None
        counters = spec_counters(response.text) if response is not None and response.status_code == 200 else None
        self._metrics_available = counters is not None
        return counters

    def _get_json(self, path: str) -> dict:
        try:
            response = self._client.get(path, timeout=CONNECT_TIMEOUT_S)
        except httpx.HTTPError as exc:
            raise RemoteError(f"cannot reach {self.url}: {exc}") from None
        if response.status_code >= 400:
            raise RemoteError(f"{self.url}{path}: {_error_message(response)}")
        try:
            data = response.json()
        except ValueError:
            raise RemoteError(f"{self.url}{path} did not answer JSON; is this an OpenAI-compatible server?") from None
        return data if isinstance(data, dict) else {}


class RemoteChunkError(QuickdraftError):
    """The server sent an error, or something that is not a chunk, in the middle of the answer."""


class ChunkReader:
    """Turns streamed chunks into events. With per-chunk timings a change of ``draft_n`` opens a
    round: its first ``draft_n_accepted`` increase of tokens are accepted drafts, then the main
    model's own token (llama-server sends one chunk per token, and so does Quickdraft)."""

    def __init__(self, start: float):
        self.start = start
        self.chunks = 0
        self.pieces: list[str] = []
        self.first_s: float | None = None
        self.last_s = 0.0
        self.timings: dict = {}
        self.usage: dict = {}
        self.finish: str | None = None
        self.done = False
        self.drafted = self.accepted = 0
        self.rounds = 0
        self._open: tuple[int, int] | None = None   # (drafted, accepted) of the round being received
        self._drafts_left = 0
        self._in_reasoning = False

    def add(self, chunk: dict) -> Iterator[Event]:
        self.chunks += 1
        now = time.perf_counter() - self.start
        if isinstance(chunk.get("timings"), dict):
            yield from self._timings(chunk["timings"], now)
        if isinstance(chunk.get("usage"), dict):
            self.usage = chunk["usage"]
        choice = (chunk.get("choices") or [{}])[0]
        self.finish = choice.get("finish_reason") or self.finish
        text = self._marked(*_choice_parts(choice))
        if text:
            self.first_s = now if self.first_s is None else self.first_s
            self.last_s = now
            self.pieces.append(text)
            origin = Origin.DRAFT if self._drafts_left > 0 else Origin.MAIN
            self._drafts_left -= origin is Origin.DRAFT
            yield TokenPiece(text, (), origin, at_s=now)

    def _marked(self, reasoning: str, content: str) -> str:
        """A delta's reasoning and content as text, the reasoning inside REMOTE_THINKING's markers."""
        text = ""
        if reasoning:
            text = ("" if self._in_reasoning else REMOTE_THINKING.start) + reasoning
            self._in_reasoning = True
        if content and self._in_reasoning:
            text += REMOTE_THINKING.end
            self._in_reasoning = False
        return text + content

    def _timings(self, timings: dict, now: float) -> Iterator[Round]:
        self.timings = timings
        drafted, accepted = int(timings.get("draft_n") or 0), int(timings.get("draft_n_accepted") or 0)
        if drafted > self.drafted:
            yield from self.close_round(now)
            self._open = (drafted - self.drafted, accepted - self.accepted)
            self._drafts_left = accepted - self.accepted
            self.drafted, self.accepted = drafted, accepted

    def close_round(self, now: float | None = None) -> Iterator[Round]:
        if self._open is not None:
            drafted, accepted = self._open
            elapsed = now if now is not None else time.perf_counter() - self.start
            yield Round(self.rounds, drafted, accepted, 0.0, 0.0, len(self.pieces), elapsed)
            self.rounds += 1
            self._open = None

    def summary(self, stop: StopReason | None, error: str | None, delta: SpecCounters | None) -> Summary:
        t, u = self.timings, self.usage
        generated = int(u.get("completion_tokens") or t.get("predicted_n") or len(self.pieces))
        prompt = int(u.get("prompt_tokens") or (t.get("prompt_n", 0) + t.get("cache_n", 0)))
        evaluated = int(t.get("prompt_n", prompt))
        ttft = self.first_s if self.first_s is not None else time.perf_counter() - self.start
        spec = self._speculation(delta)
        drafted, accepted, drafts, per_pos = spec or (0, 0, 0, ())
        if stop is None:
            stop = FINISH.get(self.finish or "", StopReason.EOG) if self.done else StopReason.ERROR
            error = None if self.done else "the server closed the stream before it ended the answer"
        return Summary(
            prompt_tokens=prompt, prompt_tokens_evaluated=evaluated, generated_tokens=generated,
            ttft_s=ttft, prompt_s=t["prompt_ms"] / 1000 if "prompt_ms" in t else ttft,
            generation_s=max(0.0, self.last_s - ttft),
            drafted=drafted, accepted=accepted, main_tokens=generated - accepted,
            rounds=max(0, generated - accepted - 1) if spec else 0, drafting_rounds=drafts,
            draft_s=0.0, verify_s=0.0,
            accepted_by_position=per_pos, drafted_by_position=(drafts,) * len(per_pos),
            stop_reason=stop, error=error, text="".join(self.pieces), speculation_reported=spec is not None,
            at_s=time.perf_counter() - self.start, estimated_speedup=_positive(t.get("estimated_speedup")))

    def _speculation(self, delta: SpecCounters | None) -> tuple[int, int, int, tuple[int, ...]] | None:
        """(drafted, accepted, drafts, accepted per position) as reported, or None."""
        per_pos = tuple(int(n) for n in delta.accepted_per_pos) if delta is not None else ()
        if "draft_n" in self.timings or self.drafted:
            drafted = max(self.drafted, int(self.timings.get("draft_n") or 0))
            accepted = max(self.accepted, int(self.timings.get("draft_n_accepted") or 0))
            drafts = int(delta.drafts) if delta is not None else self.rounds + (self._open is not None)
            return drafted, accepted, drafts, per_pos
        if delta is not None:
            return int(delta.draft_tokens), int(delta.accepted), int(delta.drafts), per_pos
        return None


def root_url(url: str) -> str:
    """``http://host:port`` from what a user may paste: a trailing slash, /v1, or no scheme."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise RemoteError(f"{url!r} is not an http(s) URL of a server.")
    path = parts.path[:-3] if parts.path.endswith("/v1") else parts.path
    return f"{parts.scheme}://{parts.netloc}{path}"


def sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event (one data line per event, as OpenAI servers send)."""
    for line in lines:
        if line.startswith("data:"):
            yield line[5:].strip()
        elif line.startswith("error:"):  # llama-server's error event
            yield json.dumps({"error": {"message": line[6:].strip()}})


def _chunk(data: str) -> dict:
    try:
        chunk = json.loads(data)
    except ValueError:
        raise RemoteChunkError(f"the server sent something that is not JSON: {data[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise RemoteChunkError(f"the server sent an unexpected chunk: {data[:80]!r}")
    if "error" in chunk:
        error = chunk["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise RemoteChunkError(f"the server failed: {message}")
    return chunk


def _choice_parts(choice: dict) -> tuple[str, str]:
    """(reasoning, content) of a streamed choice: a chat delta's, or a completion's text."""
    delta = choice.get("delta")
    if not isinstance(delta, dict):
        text = choice.get("text")
        return "", text if isinstance(text, str) else ""
    reasoning, content = delta.get("reasoning_content"), delta.get("content")
    return (reasoning if isinstance(reasoning, str) else "", content if isinstance(content, str) else "")


def _sampling_body(s: SamplingParams) -> dict:
    if s.logprobs is not None:   # the server's streamed answer is read as text here, not its token probabilities
        raise QuickdraftError("log-probabilities are not read from a remote server: ask it with logprobs directly")
    body = {"temperature": s.temperature, "top_p": s.top_p, "top_k": s.top_k, "min_p": s.min_p,
            "max_tokens": s.max_tokens}
    if s.seed is not None:
        body["seed"] = s.seed
    if s.stop:
        body["stop"] = list(s.stop)
    if s.logit_bias:   # llama-server's form, in which false bans a token (JSON has no -inf)
        body["logit_bias"] = [[token, bias if math.isfinite(bias) else False] for token, bias in s.logit_bias]
    return body


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json().get("error")
        message = error.get("message") if isinstance(error, dict) else error
    except (ValueError, AttributeError):
        message = None
    return f"HTTP {response.status_code}: {message or response.text[:200] or response.reason_phrase}"


def _positive(value) -> float | None:
    """A number a server reported, if it is one above 0 (another Quickdraft's ``estimated_speedup``)."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None
