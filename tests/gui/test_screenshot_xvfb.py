"""The app under a real X server: Xvfb at 1280x800, the xcb platform plugin, ``python main.py``.

The app's own self-test (app/gui/smoke.py) loads the tiny pair, sends a message, waits for the
answer and grabs the window to test-artifacts/xvfb_main_window.png; this test checks that the
window fits the screen and that the picture is more than a blank surface. Unlike the offscreen
screenshot, this one goes through the platform plugin a Linux desktop uses (fonts, screen size).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from PySide6.QtGui import QImage

from app.gui import smoke
from app.paths import app_paths
from app.storage.settings import SettingsStore
from tests.gui.conftest import ARTIFACTS, TEST_SETTINGS

SCREEN = (1280, 800)
REPO = Path(__file__).resolve().parents[2]
SCREENSHOT = ARTIFACTS / "xvfb_main_window.png"
APP_TIMEOUT_S = 180
XCB_PROBE = "from PySide6.QtWidgets import QApplication; print(QApplication([]).platformName())"


@pytest.fixture
def x_display():
    """A fresh Xvfb screen of SCREEN size; its DISPLAY name."""
    if shutil.which("Xvfb") is None:
        pytest.skip("Xvfb is not installed (apt-get install xvfb)")
    read_end, write_end = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write_end), "-screen", "0", f"{SCREEN[0]}x{SCREEN[1]}x24",
                               "-nolisten", "tcp"], pass_fds=(write_end,),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    os.close(write_end)
    with os.fdopen(read_end) as announced:
        number = announced.readline().strip()   # Xvfb writes its display number once it accepts clients
    try:
        if not number:
            pytest.skip(f"Xvfb did not start: {server.communicate(timeout=10)[1].decode(errors='replace')[-500:]}")
        yield f":{number}"
    finally:
        server.terminate()
        server.wait(timeout=10)


def xcb_env(display: str) -> dict[str, str]:
    env = dict(os.environ, DISPLAY=display, QT_QPA_PLATFORM="xcb", PYTHONPATH=str(REPO))
    env.pop("WAYLAND_DISPLAY", None)
    return env


def require_xcb(env: dict[str, str]) -> None:
    probe = subprocess.run([sys.executable, "-c", XCB_PROBE], env=env, capture_output=True, text=True, timeout=60)
    if probe.returncode != 0 or probe.stdout.strip() != "xcb":
        pytest.skip("Qt's xcb platform plugin cannot start under Xvfb (missing libraries? scripts/setup.sh "
                    f"--check-qt names them): {probe.stderr.strip()[-500:]}")


def test_the_app_under_xvfb_fits_1280x800_and_shows_an_answer(x_display, gui_models, tmp_path):
    env = xcb_env(x_display)
    require_xcb(env)
    data = tmp_path / "data"
    SettingsStore(app_paths(data).settings_file).save(replace(TEST_SETTINGS, drafter="model", max_tokens=64))
    report_path = tmp_path / "xvfb_main_window.json"
    env.update({smoke.SMOKE_ENV: str(report_path), smoke.MAIN_ENV: str(gui_models.main),
                smoke.DRAFT_ENV: str(gui_models.same), smoke.TIMEOUT_ENV: str(APP_TIMEOUT_S - 30)})
    app = subprocess.run([sys.executable, str(REPO / "main.py"), "--data-dir", str(data)], env=env, cwd=REPO,
                         capture_output=True, text=True, timeout=APP_TIMEOUT_S)

    assert report_path.exists(), f"the app wrote no report (exit {app.returncode}): {app.stderr[-2000:]}"
    report = json.loads(report_path.read_text(encoding="utf-8"))
    assert app.returncode == 0 and report["ok"], (report.get("problems"), app.stderr[-2000:])
    assert report["answer"].strip() and int(report["stats"]["accepted"]) > 0
    ARTIFACTS.mkdir(exist_ok=True)
    shutil.copyfile(report["screenshot"], SCREENSHOT)

    image = QImage(str(SCREENSHOT))
    assert 0 < image.width() <= SCREEN[0] and 0 < image.height() <= SCREEN[1], "the window is larger than the screen"
    colours = {image.pixel(x, y) for x in range(0, image.width(), 7) for y in range(0, image.height(), 7)}
    assert len(colours) > 50, "the window rendered as more than a blank surface"
