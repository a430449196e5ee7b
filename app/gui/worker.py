"""The one thread that owns the Engine: loads, generates, unloads, and reports through signals.

The GUI sends requests by queued signals; this object lives on its own QThread, so its slots run
there. Token pieces and rounds are sent in batches (every BATCH_S) to keep the GUI thread free.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal, Slot

from app.core.costmodel import ProfileStore
from app.core.engine import Engine
from app.core.errors import IncompatibleDraftError, QuickdraftError
from app.core.events import Round, Summary, TokenPiece
from app.core.gguf_info import check_pair, read_gguf_info
from app.core.remote import RemoteEngine
from app.core.params import ModelParams, SamplingParams, SpeculationParams
from app.server.worker import Failed, HostedJobs, Job, Stamped
from app.server.worker import Started as ServedStarted

log = logging.getLogger(__name__)
BATCH_S = 0.05


@dataclass(frozen=True)
class LoadRequest:
    main: ModelParams
    draft: ModelParams | None


@dataclass(frozen=True)
class LoadedInfo:
    main_path: str
    draft_path: str | None
    main_name: str
    draft_name: str | None
    warnings: tuple[str, ...]
    placement: tuple[str, ...] = ()   # where each model's layers went, a line each
    remote_url: str | None = None     # chatting through this server instead of local models


@dataclass(frozen=True)
class RemoteRequest:
    """Chat through an OpenAI-compatible server instead of local models."""

    url: str
    api_key: str | None = None
    model: str | None = None          # None: the first model the server lists


@dataclass(frozen=True)
class ServeRequest:
    """Serve the loaded pair over HTTP (the window's "Local server"); see app/server."""

    host: str
    port: int
    api_key: str | None
    speculation: SpeculationParams
    drafter: str


@dataclass(frozen=True)
class ServerState:
    url: str | None                   # where it listens; None: not serving
    message: str = ""                 # why it stopped or could not start


@dataclass(frozen=True)
class ServedEvents:
    """What one of the server's clients is being answered, for the window's speculation panel:
    ``started`` opens a request, batches follow, ``summary`` (or ``error``) closes it."""

    started: ServedStarted | None = None
    batch: "Batch | None" = None
    summary: Summary | None = None
    error: str | None = None


@dataclass(frozen=True)
class LoadFailure:
    message: str
    previous_kept: bool               # the pair loaded before is still loaded


@dataclass(frozen=True)
class GenerateRequest:
    messages: tuple[dict, ...]
    sampling: SamplingParams
    speculation: SpeculationParams
    drafter: str                      # "model", "lookup", "lookup+model" or "none"
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)
    compare: bool = False             # greedy speculative run, then greedy main-only run


@dataclass(frozen=True)
class Started:
    prompt_tokens: int
    monotonic_start: float   # time.monotonic() when decoding began; event times count from here


@dataclass(frozen=True)
class Batch:
    """Events in order; ``times`` holds each event's seconds since the generation started."""

    events: tuple[TokenPiece | Round, ...]
    times: tuple[float, ...]


@dataclass(frozen=True)
class CompareResult:
    speculative: Summary
    baseline: Summary

    @property
    def speedup(self) -> float:
        base = self.baseline.generation_tps
        return self.speculative.generation_tps / base if base > 0 else 0.0

    @property
    def identical(self) -> bool:
        return self.speculative.token_ids == self.baseline.token_ids


class EngineWorker(QObject):
    loading = Signal(str)              # what is being loaded
    loaded = Signal(object)            # LoadedInfo
    load_failed = Signal(object)       # LoadFailure
    started = Signal(object)           # Started
    batch = Signal(object)             # Batch
    finished = Signal(object)          # Summary
    compared = Signal(object)          # CompareResult
    failed = Signal(str)               # a generation could not run; the message is for the user
    idle = Signal()                    # a generate request has ended, however it ended
    server_state = Signal(object)      # ServerState
    served = Signal(object)            # ServedEvents: the server's clients' answers, as they run
    _jobs_waiting = Signal()           # the HTTP thread queued a job: serve it on this thread

    def __init__(self, profiles_dir: str | Path | None = None):
        super().__init__()
        self._engine: Engine | RemoteEngine | None = None
        self._profiles = ProfileStore(profiles_dir) if profiles_dir else None
        self._hosted: HostedJobs | None = None
        self._server = None                # app.server.run.LocalServer while serving
        self._served: _ServedBatcher | None = None
        self._jobs_waiting.connect(self._serve_jobs, Qt.ConnectionType.QueuedConnection)

    @Slot(object)
    def load(self, request: LoadRequest) -> None:
        try:
            self.loading.emit(Path(request.main.path).name)
            _preflight(request)  # a bad file or pair is refused before the working pair is unloaded
            self._close_engine()
            engine = Engine.load(request.main, request.draft, profile_store=self._profiles)
        except QuickdraftError as exc:
            self._load_failed(str(exc))
        except Exception as exc:  # llama.cpp can fail in ways the engine does not name
            log.exception("loading failed")
            self._load_failed(f"The model could not be loaded: {exc}")
        else:
            self._engine = engine
            if self._hosted is not None:
                self._hosted.lend(engine)
            self.loaded.emit(LoadedInfo(
                request.main.path, request.draft.path if request.draft else None,
                engine.main_info.display_name, engine.draft_info.display_name if engine.draft_info else None,
                engine.warnings, tuple(f"{name}: {where.describe()}" for name, where in engine.placement().items())))

    @Slot(object)
    def connect_remote(self, request: RemoteRequest) -> None:
        """Use an OpenAI-compatible server's model instead of local ones."""
        self.loading.emit(request.url)
        engine = RemoteEngine(request.url, request.api_key, request.model)
        try:
            name = engine.display_name   # asks the server for its models: fails here if unreachable
        except QuickdraftError as exc:
            engine.close()
            self.load_failed.emit(LoadFailure(str(exc), self._engine is not None))
            return
        self._stop_server("The local server serves local models only; it stopped when the window "
                          "connected to a remote server.")
        self._close_engine()
        self._engine = engine
        self.loaded.emit(LoadedInfo(request.url, None, name, None, (), (f"remote: {engine.url}",),
                                    remote_url=request.url))

    def _load_failed(self, message: str) -> None:
        if self._engine is None:
            self._stop_server("The local server stopped: no model is loaded.")
        self.load_failed.emit(LoadFailure(message, self._engine is not None))

    @Slot(object)
    def generate(self, request: GenerateRequest) -> None:
        try:
            if self._engine is None:
                raise QuickdraftError("No model is loaded. Choose a main model first.")
            if request.compare:
                self._compare(self._engine, request)
            else:
                self.finished.emit(self._stream(self._engine, request))
        except QuickdraftError as exc:
            self.failed.emit(str(exc))
        except MemoryError:
            self.failed.emit("Out of memory while generating. Try a smaller context size or model.")
        except Exception as exc:
            log.exception("generation failed")
            self.failed.emit(f"Generation failed: {exc}")
        finally:
            self.idle.emit()

    @Slot()
    def finish(self) -> None:
        """The last request: free the models and end this worker's thread (the window waits on it)."""
        self._stop_server("The application is quitting.")
        self._close_engine()
        self.thread().quit()

    # --- the local server: its clients share this thread's engine with the window -----------------

    @Slot(object)
    def start_server(self, request: ServeRequest) -> None:
        if self._server is not None:
            self.server_state.emit(ServerState(self._server.url))
            return
        if not isinstance(self._engine, Engine):
            self.server_state.emit(ServerState(None, "Load a local model first: the server serves the loaded pair."))
            return
        from app.server.run import LocalServer  # uvicorn and starlette: only when serving

        hosted = HostedJobs(self._engine, self._jobs_waiting.emit, request.speculation, request.drafter,
                            observe=self._observe_served)
        try:
            server = LocalServer(hosted, request.host, request.port, request.api_key or None)
            server.start()
        except QuickdraftError as exc:
            hosted.stop()
            self.server_state.emit(ServerState(None, f"The local server could not start: {exc}."))
            return
        self._hosted, self._server = hosted, server
        self.server_state.emit(ServerState(server.url))

    @Slot()
    def stop_server(self) -> None:
        self._stop_server("")

    def _stop_server(self, message: str) -> None:
        if self._server is None:
            return
        self._hosted.stop()
        self._server.stop()
        self._hosted = self._server = None
        self.server_state.emit(ServerState(None, message))

    @Slot()
    def _serve_jobs(self) -> None:
        if self._hosted is not None:
            self._hosted.serve_next()

    def _observe_served(self, job: Job, item: object) -> None:
        """Every item the server's jobs are sent, on this thread: passed on to the window in batches."""
        if isinstance(item, ServedStarted):
            self._served = _ServedBatcher(self.served.emit)
            self.served.emit(ServedEvents(started=item))
        elif self._served is not None:
            self._served.add(item)
            if not isinstance(item, Stamped) or isinstance(item.event, Summary):
                self._served = None

    def _close_engine(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def _stream(self, engine: Engine, request: GenerateRequest) -> Summary:
        """Run one generation, sending batches of events; returns its Summary."""
        n_prompt = len(engine.tokenize_messages(list(request.messages))) if isinstance(engine, Engine) else 0
        start = last_emit = time.monotonic()
        self.started.emit(Started(n_prompt, start))
        events: list[TokenPiece | Round] = []
        times: list[float] = []
        summary: Summary | None = None
        for ev in engine.generate(list(request.messages), sampling=request.sampling,
                                  speculation=request.speculation, drafter=request.drafter,
                                  cancel=request.cancel):
            now = time.monotonic()
            if isinstance(ev, Summary):
                summary = ev
                break
            events.append(ev)
            times.append(now - start)
            if now - last_emit >= BATCH_S:
                self.batch.emit(Batch(tuple(events), tuple(times)))
                events, times, last_emit = [], [], now
        if events:
            self.batch.emit(Batch(tuple(events), tuple(times)))
        if summary is None:
            raise QuickdraftError("The generation ended without a summary.")
        return summary

    def _compare(self, engine: Engine, request: GenerateRequest) -> None:
        greedy = SamplingParams(temperature=0.0, top_k=request.sampling.top_k, top_p=1.0, min_p=0.0,
                                seed=0, max_tokens=request.sampling.max_tokens)
        speculative = request.drafter if request.drafter != "none" else "lookup"
        runs = {}
        for drafter in (speculative, "none"):
            if request.cancel.is_set():
                return
            runs[drafter] = self._run_silently(engine, request, greedy, drafter)
        if request.cancel.is_set():
            return
        self.compared.emit(CompareResult(runs[speculative], runs["none"]))

    def _run_silently(self, engine: Engine, request: GenerateRequest, sampling: SamplingParams,
                      drafter: str) -> Summary:
        engine.forget_cache()  # both runs decode the whole prompt, so neither gets a head start
        events = engine.generate(list(request.messages), sampling=sampling, speculation=request.speculation,
                                 drafter=drafter, cancel=request.cancel)
        summary = [ev for ev in events if isinstance(ev, Summary)][-1]
        if summary.error:
            raise QuickdraftError(summary.error)
        return summary


class _ServedBatcher:
    """Sends a server job's events on in batches of BATCH_S, as the window's own are sent."""

    def __init__(self, emit):
        self._emit = emit
        self._events: list = []
        self._times: list[float] = []
        self._last = time.monotonic()

    def add(self, item: object) -> None:
        if isinstance(item, Failed):
            self._flush()
            self._emit(ServedEvents(error=item.error.message))
        elif isinstance(item.event, Summary):
            self._flush()
            self._emit(ServedEvents(summary=item.event))
        else:
            self._events.append(item.event)
            self._times.append(item.at_s)
            if time.monotonic() - self._last >= BATCH_S:
                self._flush()

    def _flush(self) -> None:
        if self._events:
            self._emit(ServedEvents(batch=Batch(tuple(self._events), tuple(self._times))))
        self._events, self._times, self._last = [], [], time.monotonic()


def _preflight(request: LoadRequest) -> None:
    """Read both files' metadata and check the pair: cheap, and raises the engine's own errors."""
    main = read_gguf_info(request.main.path)
    if request.draft is not None:
        draft = read_gguf_info(request.draft.path)
        pair = check_pair(main, draft)
        if not pair.compatible:
            raise IncompatibleDraftError(
                f"{draft.display_name} cannot draft for {main.display_name}: {'; '.join(pair.reasons)}.")
