"""A headless self-test of the running app, used by packaging/smoke_test.py on frozen builds.

A frozen app is a separate process, so the smoke test drives it through the environment:

    QUICKDRAFT_SMOKE=/tmp/x/smoke.json     turn the self-test on; the report goes here
    QUICKDRAFT_SMOKE_MAIN=main.gguf        the main model to load
    QUICKDRAFT_SMOKE_DRAFT=draft.gguf      its draft model (optional)
    QUICKDRAFT_SMOKE_PROMPT=...            the message to send (default: SMOKE_PROMPT)
    QUICKDRAFT_SMOKE_TIMEOUT=120           seconds before the self-test gives up
    QUICKDRAFT_SMOKE_T0=1700000000.0       the launcher's time.time() when it started the process

Once the window is shown and the event loop runs, the app loads the pair through
``MainWindow.set_model_pair``, types the prompt into the composer and clicks Send (what a user does),
waits until the answer is finished, writes what the window shows (the answer, the statistics tiles,
the message footer, any error) to the JSON, saves a screenshot next to it (``.png``) and quits with
exit code 0 when an answer and its statistics are on screen, 1 otherwise.
"""

from __future__ import annotations

import json
import os
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QObject, QTimer

SMOKE_ENV = "QUICKDRAFT_SMOKE"
MAIN_ENV = "QUICKDRAFT_SMOKE_MAIN"
DRAFT_ENV = "QUICKDRAFT_SMOKE_DRAFT"
PROMPT_ENV = "QUICKDRAFT_SMOKE_PROMPT"
TIMEOUT_ENV = "QUICKDRAFT_SMOKE_TIMEOUT"
T0_ENV = "QUICKDRAFT_SMOKE_T0"
SMOKE_PROMPT = "Write a short story about a fast fox."
DEFAULT_TIMEOUT_S = 120.0
POLL_MS = 50
SETTLE_MS = 300           # two repaint ticks after the answer, so the screenshot shows final numbers
NO_VALUE = "–"            # what a statistics tile shows before it has a value


@dataclass(frozen=True)
class SmokeConfig:
    out: Path
    main: str
    draft: str | None
    prompt: str = SMOKE_PROMPT
    timeout_s: float = DEFAULT_TIMEOUT_S
    launched_at: float | None = None   # time.time() when the process was started, if known

    @property
    def screenshot(self) -> Path:
        return self.out.with_suffix(".png")


def config_from_env(env: Mapping[str, str]) -> SmokeConfig | None:
    """The self-test's settings, or None when QUICKDRAFT_SMOKE is not set."""
    out = env.get(SMOKE_ENV, "").strip()
    if not out:
        return None
    t0 = env.get(T0_ENV, "").strip()
    return SmokeConfig(
        out=Path(out).expanduser().resolve(),
        main=env.get(MAIN_ENV, "").strip(),
        draft=env.get(DRAFT_ENV, "").strip() or None,
        prompt=env.get(PROMPT_ENV, "").strip() or SMOKE_PROMPT,
        timeout_s=float(env.get(TIMEOUT_ENV, "") or DEFAULT_TIMEOUT_S),
        launched_at=float(t0) if t0 else None,
    )


class SmokeRun(QObject):
    """Load -> send -> wait -> report, polled on a timer so the window stays live throughout."""

    def __init__(self, window, config: SmokeConfig, on_exit: Callable[[int], None] | None = None):
        super().__init__(window)
        self.window = window
        self.config = config
        self.on_exit = on_exit or QCoreApplication.exit
        self.report: dict = {"main": config.main, "draft": config.draft, "prompt": config.prompt}
        self.exit_code: int | None = None
        self._hooked_at = time.time()
        self._phase_started = time.monotonic()
        self._deadline = self._phase_started + config.timeout_s
        self._step: Callable[[], None] = self._start
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._tick)

    def start(self) -> None:
        QTimer.singleShot(0, self._first_tick)

    # --- the steps -----------------------------------------------------------------------------

    def _first_tick(self) -> None:
        """The event loop runs and the window is shown: this is the 'ready window' moment."""
        ready = time.time()
        self.report["window_visible"] = self.window.isVisible()
        self.report["hook_to_ready_s"] = round(ready - self._hooked_at, 3)
        if self.config.launched_at is not None:
            self.report["startup_s"] = round(ready - self.config.launched_at, 3)
        self._timer.start()
        self._tick()

    def _tick(self) -> None:
        try:
            if time.monotonic() > self._deadline:
                self._fail(f"timed out after {self.config.timeout_s:.0f} s in step {self._step.__name__}")
                return
            self._step()
        except Exception:  # the report must say what broke; nothing may escape into Qt's event loop
            self._fail(traceback.format_exc())

    def _start(self) -> None:
        if not self.config.main:
            self._fail(f"{MAIN_ENV} is not set")
            return
        if not self.window.set_model_pair(self.config.main, self.config.draft):
            self._fail(self.window.error_text() or "the window refused the model pair")
            return
        self._next(self._wait_loaded)

    def _wait_loaded(self) -> None:
        if self.window.controller.loading:
            return
        if self.window.controller.loaded is None:
            self._fail(self.window.error_text() or "the models did not load")
            return
        self.report["load_s"] = self._phase_seconds()
        self._next(self._send)

    def _send(self) -> None:
        composer = self.window.composer
        if not composer.send_button.isEnabled():
            return
        composer.input.setPlainText(self.config.prompt)
        composer.send_button.click()
        if not self.window.controller.is_generating:
            self._fail(self.window.error_text() or "clicking Send started no answer")
            return
        self._next(self._wait_answered)

    def _wait_answered(self) -> None:
        if self.window.controller.is_busy:
            return
        self.report["answer_s"] = self._phase_seconds()
        self._timer.stop()
        QTimer.singleShot(SETTLE_MS, self._finish_report)

    def _finish_report(self) -> None:
        try:
            self.report.update(shown(self.window))
            self.report["screenshot"] = str(self.config.screenshot) if self._screenshot() else None
            problems = check_shown(self.report)
            self.report["problems"] = problems
            self._end(0 if not problems else 1)
        except Exception:
            self._fail(traceback.format_exc())

    # --- helpers -------------------------------------------------------------------------------

    def _next(self, step: Callable[[], None]) -> None:
        self._step = step
        self._phase_started = time.monotonic()

    def _phase_seconds(self) -> float:
        return round(time.monotonic() - self._phase_started, 3)

    def _screenshot(self) -> bool:
        self.config.screenshot.parent.mkdir(parents=True, exist_ok=True)
        return bool(self.window.grab().save(str(self.config.screenshot)))

    def _fail(self, message: str) -> None:
        self._timer.stop()
        self.report["problems"] = [message]
        try:
            self.report.update(shown(self.window))
            self._screenshot()
        except Exception:
            self.report["problems"].append(traceback.format_exc())
        self._end(1)

    def _end(self, code: int) -> None:
        if self.exit_code is not None:
            return
        self.exit_code = code
        self.report["ok"] = code == 0
        self.config.out.parent.mkdir(parents=True, exist_ok=True)
        self.config.out.write_text(json.dumps(self.report, indent=2, ensure_ascii=False), encoding="utf-8")
        self.window.close()
        self.on_exit(code)


def shown(window) -> dict:
    """What the window shows: the last answer, its footer, the statistics tiles, the banner."""
    answers = [m for m in window.chat_view.messages() if m.role == "assistant"]
    last = answers[-1] if answers else None
    return {
        "window_title": window.windowTitle(),
        "answer": last.body.toPlainText() if last is not None else "",
        "footer": last.footer.text() if last is not None else "",
        "stats": window.stats_panel.values(),
        "error": window.error_text(),
        "messages_shown": len(window.chat_view.messages()),
    }


def check_shown(report: Mapping) -> list[str]:
    """Why the shown state is not a finished, measured answer (empty when it is)."""
    problems = []
    if not str(report.get("answer", "")).strip():
        problems.append("no answer text is shown")
    if not str(report.get("footer", "")).strip():
        problems.append("the answer has no statistics footer")
    stats = report.get("stats", {})
    if stats.get("tps_message", NO_VALUE) == NO_VALUE:
        problems.append("the statistics panel shows no tokens/second")
    if report.get("draft") and stats.get("drafted", NO_VALUE) in (NO_VALUE, "0"):
        problems.append("a draft model was loaded but the statistics show nothing drafted")
    if report.get("error"):
        problems.append(f"the window shows an error: {report['error']}")
    return problems


def maybe_start_smoke(window, env: Mapping[str, str] | None = None,
                      on_exit: Callable[[int], None] | None = None) -> bool:
    """Start the self-test on ``window`` when QUICKDRAFT_SMOKE is set; True if it started."""
    config = config_from_env(os.environ if env is None else env)
    if config is None:
        return False
    SmokeRun(window, config, on_exit).start()  # parented to the window, which keeps it alive
    return True
