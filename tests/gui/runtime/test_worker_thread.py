"""The EngineWorker on its own thread, driven by queued signals as the controller drives it."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QObject, Qt, QThread, Signal

from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.core.speculation.events import TokenPiece
from app.core.frontdoor import GenerationRequest
from app.gui.runtime.worker import EngineWorker, LoadRequest

WORKER_SIGNALS = ("loaded", "load_failed", "started", "batch", "finished", "compared", "failed", "idle")
TIMEOUT_MS = 30_000


class Driver(QObject):
    load = Signal(object)
    generate = Signal(object)
    finish = Signal()


class Harness:
    def __init__(self, profiles_dir):
        self.thread = QThread()
        self.worker = EngineWorker(profiles_dir)
        self.worker.moveToThread(self.thread)
        self.driver = Driver()
        queued = Qt.ConnectionType.QueuedConnection
        self.driver.load.connect(self.worker.load, queued)
        self.driver.generate.connect(self.worker.generate, queued)
        self.driver.finish.connect(self.worker.finish, queued)
        self.seen: list[tuple[str, tuple]] = []
        for name in WORKER_SIGNALS:
            getattr(self.worker, name).connect(self._recorder(name))
        self.thread.start()

    def _recorder(self, name: str):
        return lambda *args: self.seen.append((name, args))

    def names(self) -> list[str]:
        return [name for name, _ in self.seen]

    def last(self, name: str):
        return [args for n, args in self.seen if n == name][-1][0]


@pytest.fixture
def harness(qtbot, tmp_path):
    h = Harness(tmp_path / "profiles")
    yield h
    if h.thread.isRunning():
        h.driver.finish.emit()
        assert h.thread.wait(TIMEOUT_MS)


def params(path) -> ModelParams:
    return ModelParams(str(path), n_ctx=512, n_threads=1)


def request(max_tokens: int = 24) -> GenerationRequest:
    return GenerationRequest(({"role": "user", "content": "hello"},),
                             sampling=SamplingParams(temperature=0.0, max_tokens=max_tokens),
                             speculation=SpeculationParams(draft_max=4, policy="fixed"), drafter=DrafterKind.MODEL)


def load(qtbot, h: Harness, main, draft=None) -> None:
    count = len(h.seen)
    h.driver.load.emit(LoadRequest(params(main), params(draft) if draft else None))
    qtbot.waitUntil(lambda: any(n in ("loaded", "load_failed") for n, _ in h.seen[count:]), timeout=TIMEOUT_MS)


def generate(qtbot, h: Harness, req: GenerationRequest) -> list[str]:
    count = len(h.seen)
    h.driver.generate.emit(req)
    qtbot.waitUntil(lambda: "idle" in h.names()[count:], timeout=TIMEOUT_MS)
    return h.names()[count:]


def test_a_generation_streams_batches_then_its_summary_then_idle(qtbot, harness, gui_models):
    load(qtbot, harness, gui_models.main, gui_models.same)
    info = harness.last("loaded")
    assert info.main_path == str(gui_models.main) and info.draft_path == str(gui_models.same)
    names = generate(qtbot, harness, request())
    assert names[0] == "started" and names[-2:] == ["finished", "idle"]
    assert set(names[1:-2]) == {"batch"}
    summary = harness.last("finished")
    batches = [args[0] for name, args in harness.seen if name == "batch"]
    pieces = [e for batch in batches for e in batch.events if isinstance(e, TokenPiece)]
    assert "".join(p.text for p in pieces) == summary.text and summary.generated_tokens == 24
    assert summary.drafted > 0 and summary.accepted == summary.drafted


def test_without_a_model_a_request_fails_and_still_ends_idle(qtbot, harness):
    assert generate(qtbot, harness, request()) == ["failed", "idle"]
    assert "No model is loaded" in harness.last("failed")


def test_a_refused_pair_keeps_the_pair_loaded_before(qtbot, harness, gui_models):
    load(qtbot, harness, gui_models.main)
    load(qtbot, harness, gui_models.main, gui_models.incompatible)
    failure = harness.last("load_failed")
    assert "cannot draft" in failure.message and failure.previous_kept
    assert generate(qtbot, harness, request())[-2:] == ["finished", "idle"]


def test_a_cancelled_request_stops_and_finish_ends_the_thread(qtbot, harness, gui_models):
    load(qtbot, harness, gui_models.main, gui_models.same)
    req = request(max_tokens=1000)
    req.cancel.set()
    generate(qtbot, harness, req)
    summary = harness.last("finished")
    assert summary.stop_reason.value == "cancel" and summary.generated_tokens < 1000
    harness.driver.finish.emit()
    assert harness.thread.wait(TIMEOUT_MS)
