"""The one thread that owns the Engine: loads, generates, unloads, and reports through signals.

The GUI sends requests by queued signals; this object lives on its own QThread, so its slots run
there. Token pieces and rounds are sent in batches (every BATCH_S of the engine's clock) to keep the
GUI thread free; every event keeps the engine's own time stamp (``at_s``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Qt, Signal, Slot

from app.core.compare import CompareProgress, compare_greedy
from app.core.engine import Engine, read_pair
from app.core.errors import QuickdraftError
from app.core.frontdoor import AnswerEngine, GenerationRequest
from app.core.params import DrafterKind, ModelParams, SpeculationParams, StatesConfig, SuffixConfig
from app.core.remote.client import RemoteEngine
from app.core.speculation.costmodel import ProfileStore
from app.core.speculation.events import Round, Started, Summary, TokenPiece, run_to_summary
from app.server.slots import HostedJobs
from app.server.worker import Failed, Job

log = logging.getLogger(__name__)
BATCH_S = 0.05
PROGRESS_S = 0.25   # a compare's progress reaches the window at most this often (each run's start always)


@dataclass(frozen=True)
class LoadRequest:
    main: ModelParams
    draft: ModelParams | None
    states: StatesConfig | None = None   # where conversations' cache states are kept (None: nowhere)
    suffix: SuffixConfig | None = None   # where the suffix index of past answers is kept (None: off)
    # set from the GUI thread (the window closing): the load ends at llama.cpp's next tensor
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)


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
    drafter: DrafterKind


@dataclass(frozen=True)
class ServerState:
    url: str | None                   # where it listens; None: not serving
    message: str = ""                 # why it stopped or could not start


@dataclass(frozen=True)
class LoadFailure:
    message: str
    previous_kept: bool               # the pair loaded before is still loaded


@dataclass(frozen=True)
class Batch:
    """Events in order, each stamped with its seconds since the generation started (``at_s``)."""

    events: tuple[TokenPiece | Round, ...]


@dataclass(frozen=True)
class ServedEvents:
    """What one of the server's clients is being answered, for the window's speculation panel:
    ``started`` opens a request, batches follow, ``summary`` (or ``error``) closes it."""

    started: Started | None = None
    batch: Batch | None = None
    summary: Summary | None = None
    error: str | None = None


class EngineWorker(QObject):
    # Signal(object), the payload's type beside it: declared as Signal(Batch) and the like, PySide6
    # converts each payload on the way and the GUI thread stalled 100-250 ms while an answer streamed
    loading = Signal(str)              # what is being loaded
    loaded = Signal(object)            # LoadedPair
    load_failed = Signal(object)       # LoadFailure
    started = Signal(object)           # app.core.speculation.events.Started, the engine's first event
    batch = Signal(object)             # Batch
    finished = Signal(object)          # Summary
    compared = Signal(object)          # app.core.compare.CompareResult
    compare_progress = Signal(object)  # app.core.compare.CompareProgress, thinned to PROGRESS_S
    failed = Signal(str)               # a generation could not run; the message is for the user
    idle = Signal()                    # a generate or compare request has ended, however it ended
    server_state = Signal(object)      # ServerState
    served = Signal(object)            # ServedEvents: the server's clients' answers, as they run
    _jobs_waiting = Signal()           # the HTTP thread queued a job: serve it on this thread

    def __init__(self, profiles_dir: str | Path | None = None):
        super().__init__()
        self._engine: AnswerEngine | None = None
        self._profiles = ProfileStore(profiles_dir) if profiles_dir else None
        self._hosted: HostedJobs | None = None
        self._server = None                # app.server.run.LocalServer while serving
        self._served: _Batcher | None = None
        self._shown: Job | None = None     # the client's answer the window shows (one at a time)
        self._jobs_waiting.connect(self._serve_jobs, Qt.ConnectionType.QueuedConnection)

    @Slot(object)
    def load(self, request: LoadRequest) -> None:
        try:
            self.loading.emit(Path(request.main.path).name)
            # a bad file or pair is refused before the working pair is unloaded
            read_pair(request.main.path, request.draft.path if request.draft else None)
            self._close_engine()
            engine = Engine.load(request.main, request.draft, profile_store=self._profiles,
                                 cancelled=request.cancel.is_set, states=request.states, suffix=request.suffix)
            pair = engine.pair   # renders the chat template: a template that fails is a failed load
        except QuickdraftError as exc:
            self._load_failed(str(exc))
        except Exception as exc:  # llama.cpp can fail in ways the engine does not name
            log.exception("loading failed")
            self._load_failed(f"The model could not be loaded: {exc}")
        else:
            self._engine = engine
            if self._hosted is not None:
                self._hosted.lend(engine)
            self.loaded.emit(pair)

    @Slot(object)
    def connect_remote(self, request: RemoteRequest) -> None:
        """Use an OpenAI-compatible server's model instead of local ones."""
        self.loading.emit(request.url)
        engine = RemoteEngine(request.url, request.api_key, request.model)
        try:
            pair = engine.pair   # asks the server for its models: fails here if unreachable
        except QuickdraftError as exc:
            engine.close()
            self.load_failed.emit(LoadFailure(str(exc), self._engine is not None))
            return
        self._stop_server("The local server serves local models only; it stopped when the window "
                          "connected to a remote server.")
        self._close_engine()
        self._engine = engine
        self.loaded.emit(pair)

    def _load_failed(self, message: str) -> None:
        if self._engine is None:
            self._stop_server("The local server stopped: no model is loaded.")
        self.load_failed.emit(LoadFailure(message, self._engine is not None))

    @Slot(object)
    def generate(self, request: GenerationRequest) -> None:
        self._answer(lambda engine: self.finished.emit(self._stream(engine, request)))

    @Slot(object)
    def compare(self, request: GenerationRequest) -> None:
        """Greedy with the request's drafter, then the main model alone: ``compared`` gets both."""
        self._answer(lambda engine: self._compare(engine, request))

    def _answer(self, run) -> None:
        """Run a generate or compare request on the loaded engine; any failure becomes ``failed``."""
        try:
            if self._engine is None:
                raise QuickdraftError("No model is loaded. Choose a main model first.")
            run(self._engine)
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
        if self._engine is None or self._engine.pair.remote_url is not None:
            self.server_state.emit(ServerState(None, "Load a local model first: the server serves the loaded pair."))
            return
        from app.server.options import ServerOptions
        from app.server.run import LocalServer  # uvicorn and starlette: only when serving

        hosted = HostedJobs(self._engine, self._jobs_waiting.emit, request.speculation, request.drafter,
                            observe=self._observe_served)
        try:
            server = LocalServer(hosted, request.host, request.port, ServerOptions(api_key=request.api_key or None))
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
        """Every item the server's jobs are sent, on this thread: one client's answer at a time (the first
        to start while none is shown) passed on to the window in batches."""
        if isinstance(item, Started) and self._shown is None:
            self._shown = job
            self._served = _Batcher(lambda batch: self.served.emit(ServedEvents(batch=batch)))
            self.served.emit(ServedEvents(started=item))
        elif job is not self._shown:
            return
        elif isinstance(item, (Summary, Failed)):
            self._served.flush()
            self._served = self._shown = None
            self.served.emit(ServedEvents(summary=item) if isinstance(item, Summary)
                             else ServedEvents(error=item.error.message))
        elif not isinstance(item, Started):
            self._served.add(item)

    def _close_engine(self) -> None:
        if self._hosted is not None:   # the clients' slots borrow the engine's models: closed first
            self._hosted.release()
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def _stream(self, engine: AnswerEngine, request: GenerationRequest) -> Summary:
        """Run one generation, sending Started and then batches of events; returns its Summary."""
        batches = _Batcher(self.batch.emit)

        def send(event) -> None:
            if isinstance(event, Started):
                self.started.emit(event)
            else:
                batches.add(event)

        summary = run_to_summary(engine.generate(request), send)
        batches.flush()
        return summary

    def _compare(self, engine: AnswerEngine, request: GenerationRequest) -> None:
        tokens = engine.prompt(request.messages, request.template_variables).tokens
        result = compare_greedy(engine, tokens, request.drafter, request.sampling.max_tokens,
                                request.speculation, request.cancel, _Thinned(self.compare_progress.emit))
        if result is not None:
            self.compared.emit(result)


class _Thinned:
    """A compare's progress passed on at most every PROGRESS_S, and whenever a run or its reading starts
    or ends (one signal per token would flood the GUI thread)."""

    def __init__(self, emit):
        self._emit = emit
        self._last: CompareProgress | None = None
        self._sent = 0.0

    def __call__(self, progress: CompareProgress) -> None:
        now, last = time.monotonic(), self._last
        phase_changed = last is None or (last.run, last.reading is None) != (progress.run, progress.reading is None)
        if phase_changed or now - self._sent >= PROGRESS_S:
            self._emit(progress)
            self._last, self._sent = progress, now


class _Batcher:
    """Token pieces and rounds on their way to the GUI thread, in batches of BATCH_S of the engine's
    clock (each event keeps its own stamp): the window's answers and the server's clients' alike."""

    def __init__(self, emit):
        self._emit = emit            # called with a Batch
        self._events: list[TokenPiece | Round] = []
        self._sent_s = 0.0

    def add(self, event: TokenPiece | Round) -> None:
        self._events.append(event)
        if event.at_s - self._sent_s >= BATCH_S:
            self.flush()
            self._sent_s = event.at_s

    def flush(self) -> None:
        if self._events:
            self._emit(Batch(tuple(self._events)))
        self._events = []
