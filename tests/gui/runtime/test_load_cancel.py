"""Closing the window while a model loads (issue 42): the controller's shutdown cancels the load under
way, so the worker's thread ends at llama.cpp's next tensor instead of after the whole file. Here the
load is a stand-in that reads "tensors" until it is told to stop, so the test waits on events, not times."""

from __future__ import annotations

import threading
import time

from app.core.errors import LoadCancelledError
from app.gui.runtime import worker as worker_module
from app.gui.runtime.controller import ChatController
from app.paths import app_paths
from app.storage.settings import SettingsStore
from tests.gui.conftest import TEST_SETTINGS

LONGEST_LOAD_S = 60.0   # the stand-in gives up after this, so a broken cancel fails the test, never hangs it


def test_shutting_down_mid_load_cancels_the_load(qtbot, tmp_path, tiny_models, monkeypatch):
    started, outcome = threading.Event(), []

    def slow_load(main, draft=None, cancelled=None, **_options):
        started.set()
        for _ in range(int(LONGEST_LOAD_S / 0.01)):   # one "tensor" after another, asking as llama.cpp does
            if cancelled is not None and cancelled():
                outcome.append("cancelled")
                raise LoadCancelledError(f"Loading {main.path} was cancelled.")
            time.sleep(0.01)
        outcome.append("ran to the end")
        raise AssertionError("the load was never cancelled")

    monkeypatch.setattr(worker_module.Engine, "load", staticmethod(slow_load))
    paths = app_paths(tmp_path / "data")
    SettingsStore(paths.settings_file).save(TEST_SETTINGS)
    controller = ChatController(paths, SettingsStore(paths.settings_file))
    controller.start()
    try:
        assert controller.load_pair(str(tiny_models.main))
        assert started.wait(LONGEST_LOAD_S)
    finally:
        controller.shut_down()   # returns once the worker's thread has ended (a failed test must end it too)
    assert outcome == ["cancelled"]
    assert controller.thread.isFinished()
    controller.deleteLater()   # on this, the GUI thread
