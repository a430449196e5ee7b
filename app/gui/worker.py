"""The one thread that owns the Engine: loads, generates, unloads, and reports through signals.

The GUI sends requests by queued signals; this object lives on its own QThread, so its slots run
there. Token pieces and rounds are sent in batches (every BATCH_S of the engine's clock) to keep the
GUI thread free; every event keeps the engine's own time stamp (``at_s``).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.core.compare import CompareResult, compare_greedy
from app.core.costmodel import ProfileStore
from app.core.engine import Engine, read_pair
from app.core.errors import QuickdraftError
from app.core.events import Round, Started, Summary, TokenPiece
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams

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


@dataclass(frozen=True)
class LoadFailure:
    message: str
    previous_kept: bool               # the pair loaded before is still loaded


@dataclass(frozen=True)
class GenerateRequest:
    messages: tuple[dict, ...]
    sampling: SamplingParams
    speculation: SpeculationParams
    drafter: DrafterKind | str        # a DrafterKind or its value
    cancel: threading.Event = field(default_factory=threading.Event, compare=False)
    compare: bool = False             # greedy speculative run, then greedy main-only run


@dataclass(frozen=True)
class Batch:
    """Events in order, each stamped with its seconds since the generation started (``at_s``)."""

    events: tuple[TokenPiece | Round, ...]


class EngineWorker(QObject):
    # Signal(object), the payload's type beside it: declared as Signal(Batch) and the like, PySide6
    # converts each payload on the way and the GUI thread stalled 100-250 ms while an answer streamed
    loading = Signal(str)              # what is being loaded
    loaded = Signal(object)            # LoadedInfo
    load_failed = Signal(object)       # LoadFailure
    started = Signal(object)           # app.core.events.Started, the engine's first event
    batch = Signal(object)             # Batch
    finished = Signal(object)          # Summary
    compared = Signal(object)          # app.core.compare.CompareResult
    failed = Signal(str)               # a generation could not run; the message is for the user
    idle = Signal()                    # a generate request has ended, however it ended

    def __init__(self, profiles_dir: str | Path | None = None):
        super().__init__()
        self._engine: Engine | None = None
        self._profiles = ProfileStore(profiles_dir) if profiles_dir else None

    @Slot(object)
    def load(self, request: LoadRequest) -> None:
        try:
            self.loading.emit(Path(request.main.path).name)
            # a bad file or pair is refused before the working pair is unloaded
            read_pair(request.main.path, request.draft.path if request.draft else None)
            self._close_engine()
            engine = Engine.load(request.main, request.draft, profile_store=self._profiles)
        except QuickdraftError as exc:
            self.load_failed.emit(LoadFailure(str(exc), self._engine is not None))
        except Exception as exc:  # llama.cpp can fail in ways the engine does not name
            log.exception("loading failed")
            self.load_failed.emit(LoadFailure(f"The model could not be loaded: {exc}", self._engine is not None))
        else:
            self._engine = engine
            self.loaded.emit(LoadedInfo(
                request.main.path, request.draft.path if request.draft else None,
                engine.main_info.display_name, engine.draft_info.display_name if engine.draft_info else None,
                engine.warnings, tuple(f"{name}: {where.describe()}" for name, where in engine.placement().items())))

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
        self._close_engine()
        self.thread().quit()

    def _close_engine(self) -> None:
        if self._engine is not None:
            self._engine.close()
            self._engine = None

    def _stream(self, engine: Engine, request: GenerateRequest) -> Summary:
        """Run one generation, sending Started and then batches of events; returns its Summary."""
        events: list[TokenPiece | Round] = []
        sent_s = 0.0
        for event in engine.generate(list(request.messages), sampling=request.sampling,
                                     speculation=request.speculation, drafter=request.drafter,
                                     cancel=request.cancel):
            if isinstance(event, Started):
                self.started.emit(event)
            elif isinstance(event, Summary):
                if events:
                    self.batch.emit(Batch(tuple(events)))
                return event
            else:
                events.append(event)
                if event.at_s - sent_s >= BATCH_S:
                    self.batch.emit(Batch(tuple(events)))
                    events, sent_s = [], event.at_s
        raise QuickdraftError("The generation ended without a summary.")

    def _compare(self, engine: Engine, request: GenerateRequest) -> None:
        tokens = engine.prompt(list(request.messages)).tokens
        result = compare_greedy(engine, tokens, request.drafter, request.sampling.max_tokens,
                                request.speculation, request.cancel)
        if result is not None:
            self.compared.emit(result)
