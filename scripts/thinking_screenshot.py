"""Make docs/images/thinking.png: the chat window with a thinking model's answers, one reasoning block
folded ("Thought for 6.4 s") and one opened, the "Think" switch, and the Speculation panel and the
footer splitting speed and acceptance between thinking and answer.

    xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python scripts/thinking_screenshot.py

The model loaded is the test suite's tiny thinking model (app/core/gguf/tiny.py THINKING_SPEC: a
Qwen3.5-style template that opens a <think> block and has an ``enable_thinking`` switch), so the
window reads its reasoning markers and its switch from a real GGUF. Its random weights write noise,
so the answers' words are scripted (SCRIPT below): ``Engine.generate`` is replaced by one that
streams them as the engine's events, tagged by the engine's own part tracker
(app/core/chat/reasoning.py PartTracker, as app/core/speculation/loop.py tags its rounds), with scripted
clock stamps. Everything from there on is the window's own path: the controller, the live numbers
splitting reasoning from answer, the stored conversation, the fold, the footer, the panel.

    --out DIR        where the PNG goes (docs/images)
    --size WxH       the window's size (1280x800)
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scripts.readme_screenshots import SETTLE_S, Driver, save  # noqa: E402

DATA_DIR = Path(tempfile.gettempdir()) / "quickdraft-thinking"
# (question, reasoning, answer, seconds per token while thinking, per token while answering, acceptance)
SCRIPT = [
    ("Is 3599 a prime number?",
     "3599 is just below 3600, which is 60 squared. So 3599 = 60² − 1² = (60 − 1)(60 + 1) = 59 × 61. "
     "Both factors are greater than 1, so 3599 is not prime.\n\nCheck: 59 × 61 = 59 × 60 + 59 = 3540 + 59 = 3599. "
     "Right.",
     "No. 3599 = 59 × 61, because 3599 = 60² − 1 = (60 − 1)(60 + 1).", 0.062, 0.045, 0.55),
    ("Write a Python function that checks whether a number is prime.",
     "Trial division up to the square root is enough for a short answer. Numbers below 2 are not prime; "
     "2 and 3 are. After that, every prime is of the form 6k ± 1, so test 5, 7, 11, 13, … while i² ≤ n. "
     "Keep it short, with a docstring.",
     "```python\ndef is_prime(n: int) -> bool:\n    \"\"\"Whether n is a prime number (trial division).\"\"\"\n"
     "    if n < 2:\n        return False\n    if n < 4:\n        return True\n    if n % 2 == 0 or n % 3 == 0:\n"
     "        return False\n    i = 5\n    while i * i <= n:\n        if n % i == 0 or n % (i + 2) == 0:\n"
     "            return False\n        i += 6\n    return True\n```\n\n`is_prime(3599)` is `False` (59 × 61); "
     "`is_prime(3607)` is `True`.", 0.058, 0.032, 0.8),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="where the PNG goes")
    parser.add_argument("--size", default="1280x800", help="the window's size, WxH")
    return parser.parse_args(argv)


def _chunks(text: str, rng: random.Random) -> list[str]:
    """``text`` in token-sized pieces (2 to 5 characters, as a BPE vocabulary cuts English)."""
    out, at = [], 0
    while at < len(text):
        step = rng.randint(2, 5)
        out.append(text[at:at + step])
        at += step
    return out


def scripted_events(reasoning: str, answer: str, think_s: float, answer_s: float, acceptance: float, parts):
    """A thinking answer as the loop yields it: Started, pieces and rounds (drafts of 4 accepted with
    ``acceptance`` per token, less while thinking) each naming its part as ``parts`` (a PartTracker)
    reads the pieces, a Summary; stamped on a scripted clock."""
    from app.core.speculation.events import Origin, Round, Started, StopReason, TokenPiece
    from app.core.speculation.stats import GenerationStats

    rng = random.Random(len(reasoning))
    pieces = [(c, think_s) for c in _chunks(reasoning + "\n</think>\n\n", rng)] + \
             [(c, answer_s) for c in _chunks(answer, rng)]
    stats, events, at, generated = GenerationStats(), [Started(42, 0)], 0.35, 1
    events.append(TokenPiece(pieces[0][0], (1,), Origin.MAIN, at_s=at))
    parts.piece(pieces[0][0], 1)
    i, index = 1, 0
    while i < len(pieces):
        step_s = pieces[i][1]
        rate = acceptance * (0.75 if step_s == think_s else 1.0)
        accepted = next((k for k in range(4) if rng.random() > rate), 4)
        batch = pieces[i:i + accepted + 1]
        at += step_s * (1 + 0.25 * accepted)   # a batch of drafted tokens costs a little more than one step
        for k, (text, _) in enumerate(batch):
            events.append(TokenPiece(text, (k + 2,), Origin.DRAFT if k < accepted else Origin.MAIN, at_s=at))
            parts.piece(text, 1)
        generated += len(batch)
        events.append(Round(index, 4, min(accepted, len(batch)), 0.004, step_s, generated, at_s=at, drafter="model",
                            part=parts.take()))
        i, index = i + len(batch), index + 1
    for event in events:
        stats.add(event)
    text = "".join(t for t, _ in pieces)
    return events + [stats.to_summary(generated_tokens=generated, end_s=at, stop_reason=StopReason.EOG, text=text,
                                      main_step_s=answer_s * 1.6)]


def scripted_generate(self, request):
    """Engine.generate for the screenshot: the scripted answer to the last question, tagged by part."""
    from app.core.chat.reasoning import PartTracker

    question = request.messages[-1]["content"]
    _, reasoning, answer, think_s, answer_s, acceptance = next(s for s in SCRIPT if s[0] == question)
    thinking = self.thinking_format(request.template_variables)
    yield from scripted_events(reasoning, answer, think_s, answer_s, acceptance, PartTracker(thinking))


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    width, height = (int(n) for n in args.size.lower().split("x"))
    if not os.environ.get("DISPLAY"):
        raise SystemExit("thinking_screenshot: no X display; run it under Xvfb:\n"
                         '  xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python scripts/thinking_screenshot.py')
    os.environ["QT_QPA_PLATFORM"] = "xcb"
    shutil.rmtree(DATA_DIR, ignore_errors=True)
    os.environ["QUICKDRAFT_DATA_DIR"] = str(DATA_DIR)

    from PySide6.QtCore import QPoint
    from PySide6.QtWidgets import QApplication

    from app.core.engine import Engine
    from app.core.gguf.tiny import THINKING_SPEC, write_tiny_model
    from app.gui.main_window import MainWindow
    from app.gui.widgets.theme import STYLE_SHEET
    from app.paths import app_paths
    from app.storage.settings import Settings, SettingsStore

    Engine.generate = scripted_generate
    app = QApplication(sys.argv[:1])
    app.setApplicationName("Quickdraft")
    app.setStyle("Fusion")
    app.setStyleSheet(STYLE_SHEET)
    try:
        paths = app_paths(DATA_DIR)
        model = write_tiny_model(DATA_DIR / "models" / "qwen3.5-thinking-tiny.gguf",
                                 replace(THINKING_SPEC, name="Qwen3.5 (tiny, thinking)"))
        store = SettingsStore(paths.settings_file)
        store.save(replace(Settings(), temperature=0.0, drafter="model", default_system_prompt=""))
        window = MainWindow(paths, store, autoload=False)
        window.resize(width, height)
        window.move(0, 0)
        window.show()
        driver = Driver()
        window.set_model_pair(str(model), None)
        driver.wait_until(lambda: window.controller.loaded is not None, 120, "the model to load")
        for question, *_ in SCRIPT:
            window.composer.input.setPlainText(question)
            window.composer.send_button.click()
            driver.wait_until(lambda: not window.controller.is_busy, 60, "the answer")
            driver.spin(SETTLE_S)
        first, second = [m for m in window.chat_view.messages() if m.role == "assistant"]
        second.reasoning.set_open(True)   # the first stays folded, the second is opened
        driver.spin(SETTLE_S)
        question = window.chat_view.messages()[0]   # from the first question down
        window.chat_view.verticalScrollBar().setValue(question.mapTo(window.chat_view.widget(), QPoint(0, 0)).y() - 8)
        driver.spin(SETTLE_S)
        print("folded:", first.reasoning.button.text(), "| opened:", second.reasoning.button.text())
        print("footer:", second.footer.text().replace("\n", " | "))
        print("panel parts:", window.stats_panel.parts.text().replace("\n", " | "))
        written = save(window, args.out / "thinking.png")
        window.close()
        driver.spin(0.2)
    finally:
        shutil.rmtree(DATA_DIR, ignore_errors=True)
    print("wrote", written)
    return 0


if __name__ == "__main__":
    sys.exit(main())
