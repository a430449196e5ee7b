"""GUI fixtures: tiny GGUF models, a data dir per test and a MainWindow built on them."""

from __future__ import annotations

import asyncio
import gc
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from app.core.gguf.tiny import TinySpec, write_tiny_model  # noqa: E402
from app.gui.main_window import MainWindow  # noqa: E402
from app.gui.widgets.theme import STYLE_SHEET  # noqa: E402
from app.models.memory import MachineMemory  # noqa: E402
from app.paths import app_paths  # noqa: E402
from app.storage.settings import Settings, SettingsStore  # noqa: E402
from tests.models.fakehub import serve_for_a_test  # noqa: E402

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
LOAD_TIMEOUT_MS = 30_000
ANSWER_TIMEOUT_MS = 60_000


@dataclass(frozen=True)
class GuiModels:
    main: Path
    same: Path          # same weights as main: every drafted token is accepted
    other: Path         # other weights, same vocabulary
    other_vocab: Path   # another vocabulary: it drafts through text
    garbage: Path       # not a GGUF at all
    truncated: Path     # a GGUF cut short
    incompatible: Path  # an MTP drafter made for gemma4 models: it cannot draft for the main model


@pytest.fixture(scope="session")
def gui_models(tmp_path_factory) -> GuiModels:
    d = tmp_path_factory.mktemp("gui-models")
    main = write_tiny_model(d / "main.gguf", TinySpec(seed=0))
    garbage = d / "garbage.gguf"
    garbage.write_bytes(os.urandom(4096))
    truncated = d / "truncated.gguf"
    truncated.write_bytes(main.read_bytes()[:3000])
    return GuiModels(
        main=main,
        same=write_tiny_model(d / "same.gguf", TinySpec(seed=0)),
        other=write_tiny_model(d / "other.gguf", TinySpec(seed=1)),
        other_vocab=write_tiny_model(d / "other-vocab.gguf", TinySpec(seed=2, other_vocab=True)),
        garbage=garbage,
        truncated=truncated,
        incompatible=write_tiny_model(d / "gemma4-assistant.gguf", TinySpec(architecture="gemma4-assistant",
                                                                            name="tiny-gemma4-assistant")),
    )


# One thread per model: the test machine has two cores and llama.cpp's spinning threads fight the
# GUI thread for them otherwise.
TEST_SETTINGS = Settings(threads=1, n_ctx=2048, temperature=0.0, max_tokens=48, draft_max=4, draft_policy="fixed",
                         default_system_prompt="You are terse.")


@pytest.fixture(autouse=True)
def _style(qapp):
    qapp.setStyle("Fusion")
    qapp.setStyleSheet(STYLE_SHEET)


@pytest.fixture(autouse=True)
def _collect_on_the_gui_thread():
    """A test's Qt objects left in reference cycles are collected here, on the GUI thread. Left to the
    cyclic collector they go whenever any thread allocates enough, and a later test's server thread
    deleting a QObject (a controller's QThread) made Qt abort the whole run."""
    yield
    gc.collect()


@pytest.fixture
def make_window(qtbot, tmp_path):
    """Build a MainWindow on a data dir (default: this test's tmp dir) with test settings."""

    def make(data_dir: Path | None = None, settings: Settings | None = None, **changes) -> MainWindow:
        paths = app_paths(data_dir or tmp_path / "data")
        store = SettingsStore(paths.settings_file)
        if settings is not None or changes or not paths.settings_file.exists():
            store.save(replace(settings or TEST_SETTINGS, **changes))
        window = MainWindow(paths, SettingsStore(paths.settings_file))
        qtbot.addWidget(window)
        window.resize(1440, 900)
        window.show()
        return window

    return make


def send(window: MainWindow, text: str) -> bool:
    """Type ``text`` in the composer and press Send, as a user does; True when an answer started."""
    window.composer.input.setPlainText(text)
    window.composer.submit()
    return window.controller.is_generating


def wait_loaded(qtbot, window: MainWindow) -> None:
    controller = window.controller
    qtbot.waitUntil(lambda: not controller.loading and controller.loaded is not None, timeout=LOAD_TIMEOUT_MS)


def wait_answering(qtbot, window: MainWindow, rounds: int = 1):
    """Wait until the answer under way shows text after ``rounds`` rounds; returns that generation."""
    c = window.controller
    qtbot.waitUntil(lambda: c.active is not None and c.active.live.text != "" and c.active.live.rounds >= rounds,
                    timeout=ANSWER_TIMEOUT_MS)
    return c.active


def wait_idle(qtbot, window: MainWindow) -> None:
    qtbot.waitUntil(lambda: not window.controller.is_busy, timeout=ANSWER_TIMEOUT_MS)


@pytest.fixture
def loaded_window(make_window, gui_models, qtbot):
    """A window with the tiny main model and its same-weights draft loaded."""
    window = make_window(main_model=str(gui_models.main), draft_model=str(gui_models.same), drafter="model")
    wait_loaded(qtbot, window)
    return window


# --- the model manager's views: a qasync loop and a local fake Hugging Face Hub ---------------------

MACHINE = MachineMemory(16 * 10**9, 12 * 10**9, False, None, None)   # 16 GB of RAM, no GPU
TIMEOUT_MS = 15_000


@pytest.fixture
def qloop(qapp):
    """A qasync loop over the running QApplication, as the dialog gets in the app; closed afterwards."""
    import qasync

    loop = qasync.QEventLoop(qapp, already_running=True)
    asyncio.set_event_loop(loop)
    yield loop
    qapp.aboutToQuit.disconnect(loop._after_run_forever)
    loop._after_run_forever()
    loop._QEventLoop__is_running = False   # stop() would also ask the QApplication to exit
    asyncio.events._set_running_loop(None)
    loop.close()
    asyncio.set_event_loop(None)


@pytest.fixture
def hub(tmp_path_factory, monkeypatch):
    yield from serve_for_a_test(tmp_path_factory.mktemp("hub"), monkeypatch)
