"""Make the README's screenshots from the running app, so that they show the app as it is.

    xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python scripts/readme_screenshots.py

Writes, and prints the paths of:

- docs/images/chat.png: the chat window at 1280x800 after one answer to a code-editing prompt, the
  Speculation tab showing that answer's numbers (tiles and charts), its tokens coloured by origin;
- docs/images/chat-1000x700.png: the same window and answer at 1000x700, the window's minimum size
  (each further size of --size gives chat-WxH.png);
- docs/images/model-manager.png: the model manager with the pair installed, the main model selected.

The models: Qwen2.5-Coder 1.5B Instruct as main and its 0.5B as draft (Q4_K_M), from --models,
$QUICKDRAFT_BENCH_MODELS or ~/.cache/quickdraft-bench when they are there; else (or with --tiny) the
test suite's tiny random-weight models, whose answers are noise. Everything happens in a fresh data
folder, $TMPDIR/quickdraft-readme (settings, conversations, the cost profile the auto policy learns,
links to the models), emptied first and deleted at the end unless --keep-data. The settings are the
app's defaults but greedy (temperature 0, so the answer is the same each time) and with tokens
coloured by origin. The answer shown is the app's first: the auto policy learns this machine's costs
during it, as on a first use; --warmup N answers N other prompts first (in a conversation deleted
afterwards) to show a later use instead.

The numbers are this machine's: on a CPU-only machine a draft model may pay little or nothing (the
auto policy then drafts little, and the estimated speedup says so).

    --out DIR        where the PNGs go (docs/images)
    --size WxH,...   the chat window's sizes, the first for chat.png (1280x800,1000x700)
    --tiny           the tiny models even when the real ones are there
    --keep-data      keep the data folder (the conversation, the learned cost profile)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MAIN_FILE = "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
DRAFT_FILE = "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
FUNCTION = '''def summarize_orders(orders):
    x = 0
    skipped = 0
    for order in orders:
        if order.cancelled:
            skipped += 1
            continue
        for line in order.lines:
            if line.quantity <= 0:
                continue
            x += line.price * line.quantity
            if line.discount:
                x -= line.discount
    if x > 1000:
        x = x * 0.95
    log.info("summed %s orders", len(orders))
    log.info("skipped %s", skipped)
    if x < 0:
        raise ValueError("negative sum")
    return x'''
PROMPT = f"Rename the variable x to count in this function:\n\n```python\n{FUNCTION}\n```"
WARMUP_PROMPT = f"Add a docstring to this function:\n\n```python\n{FUNCTION}\n```"
LOAD_TIMEOUT_S = 300
ANSWER_TIMEOUT_S = 600
QUESTION_TAIL_PX = 70   # how much of the question shows above the answer
DATA_DIR = Path(tempfile.gettempdir()) / "quickdraft-readme"
SETTLE_S = 0.6          # a few repaint ticks after the answer, so the panel shows the final numbers


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images", help="where the PNGs go")
    parser.add_argument("--size", default="1280x800,1000x700",
                        help="the chat window's sizes, WxH, comma-separated; the first gives chat.png")
    parser.add_argument("--models", type=Path, help=f"a folder with {MAIN_FILE} and {DRAFT_FILE}")
    parser.add_argument("--tiny", action="store_true", help="use the tiny test models")
    parser.add_argument("--warmup", type=int, default=0, help="answers before the one shown (0)")
    parser.add_argument("--max-tokens", type=int, default=400, help="the answer's token limit (400)")
    parser.add_argument("--keep-data", action="store_true", help="keep the data folder, print where")
    return parser.parse_args(argv)


def real_models(folder: Path | None) -> tuple[Path, Path] | None:
    candidates = [folder] if folder else [os.environ.get("QUICKDRAFT_BENCH_MODELS"),
                                          os.environ.get("QUICKDRAFT_TEST_MODELS"),
                                          Path.home() / ".cache" / "quickdraft-bench"]
    for candidate in filter(None, candidates):
        main, draft = Path(candidate) / MAIN_FILE, Path(candidate) / DRAFT_FILE
        if main.exists() and draft.exists():
            return main, draft
    return None


def tiny_models(folder: Path) -> tuple[Path, Path]:
    from app.core.gguf.tiny import TinySpec, write_tiny_model

    folder.mkdir(parents=True, exist_ok=True)
    main = write_tiny_model(folder / "tiny-main.gguf", TinySpec(seed=0, name="Tiny main"))
    draft = write_tiny_model(folder / "tiny-draft.gguf", TinySpec(seed=0, name="Tiny draft"))
    return main, draft


def install(paths, models: tuple[Path, Path]) -> tuple[str, str]:
    """Link the pair into the data folder's models folder, as "Import GGUF…" with "Link" does."""
    from app.models.registry import ModelRegistry

    registry = ModelRegistry(paths.models_dir)
    main, draft = (registry.import_file(model, mode="link") for model in models)
    return str(main.path), str(draft.path)


class Driver:
    """Waits on the Qt event loop (the window stays live: the engine's thread reports through it)."""

    def spin(self, seconds: float) -> None:
        from PySide6.QtCore import QEventLoop, QTimer

        loop = QEventLoop()
        QTimer.singleShot(int(seconds * 1000), loop.quit)
        loop.exec()

    def wait_until(self, done, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not done():
            if time.monotonic() > deadline:
                raise SystemExit(f"readme_screenshots: timed out after {timeout_s:.0f} s waiting for {what}")
            self.spin(0.05)


def answer(driver: Driver, window, prompt: str) -> None:
    """Type ``prompt`` and press Send, as a user does; wait for the answer to finish."""
    driver.wait_until(lambda: window.composer.send_button.isEnabled(), LOAD_TIMEOUT_S, "the Send button")
    window.composer.input.setPlainText(prompt)
    window.composer.send_button.click()
    if not window.controller.is_generating:
        raise SystemExit(f"readme_screenshots: Send started no answer: {window.error_text()}")
    driver.wait_until(lambda: not window.controller.is_busy, ANSWER_TIMEOUT_S, "the answer")
    driver.spin(SETTLE_S)
    if window.error_text():
        raise SystemExit(f"readme_screenshots: the window shows an error: {window.error_text()}")


def save(widget, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if not widget.grab().save(str(path)):
        raise SystemExit(f"readme_screenshots: could not write {path}")
    return path


def sizes(text: str) -> list[tuple[int, int]]:
    """"1280x800,1000x700" -> [(1280, 800), (1000, 700)]."""
    return [tuple(int(n) for n in size.lower().split("x")) for size in text.split(",") if size.strip()]


def chat_screenshots(driver: Driver, window, args: argparse.Namespace, pair: tuple[str, str]) -> list[Path]:
    """The answer, then the window grabbed at each size: chat.png at the first, chat-WxH.png at the others."""
    reply = chat_answer(driver, window, args, pair)
    written = []
    for i, (width, height) in enumerate(sizes(args.size)):
        window.resize(width, height)
        driver.spin(SETTLE_S)
        show_answer(driver, window, reply)
        if (window.width(), window.height()) != (width, height):
            raise SystemExit(f"readme_screenshots: the window is {window.width()}x{window.height()}, not "
                             f"{width}x{height}: run Xvfb with a screen at least that large")
        written.append(save(window, args.out / ("chat.png" if i == 0 else f"chat-{width}x{height}.png")))
    return written


def show_answer(driver: Driver, window, reply) -> None:
    """The answer from its top, under the last lines of the question."""
    from PySide6.QtCore import QPoint

    top = reply.mapTo(window.chat_view.widget(), QPoint(0, 0)).y()
    window.chat_view.verticalScrollBar().setValue(max(0, top - QUESTION_TAIL_PX))
    driver.spin(SETTLE_S)


def chat_answer(driver: Driver, window, args: argparse.Namespace, pair: tuple[str, str]):
    """Load the pair, answer the prompt (after --warmup others); the answer's message widget."""
    if not window.set_model_pair(*pair):
        raise SystemExit(f"readme_screenshots: the window refused the pair: {window.error_text()}")
    driver.wait_until(lambda: not window.controller.loading, LOAD_TIMEOUT_S, "the models to load")
    if window.controller.loaded is None:
        raise SystemExit(f"readme_screenshots: the models did not load: {window.error_text()}")
    controller = window.controller
    for _ in range(args.warmup):
        answer(driver, window, WARMUP_PROMPT)
    if args.warmup:
        controller.delete_conversation(controller.conversation_id)
        controller.new_conversation()
        driver.spin(SETTLE_S)
    answer(driver, window, PROMPT)
    reply = [m for m in window.chat_view.messages() if m.role == "assistant"][-1]
    print("answer:", " ".join(reply.body.toPlainText().split())[:160], "…")
    print("footer:", reply.footer.text())
    print("speculation panel:", ", ".join(f"{k}={v}" for k, v in window.stats_panel.values().items()))
    return reply


def manager_screenshot(driver: Driver, window, args: argparse.Namespace, main_model: str) -> Path:
    window.open_model_manager()
    dialog = window.model_manager
    if dialog is None:
        raise SystemExit(f"readme_screenshots: the model manager did not open: {window.error_text()}")
    driver.spin(SETTLE_S)
    table = dialog.installed_tab.table
    for row in range(table.rowCount()):   # the main model selected: its details under the table
        if table.item(row, 0).text() == Path(main_model).name:
            table.selectRow(row)
            break
    driver.spin(SETTLE_S)
    return save(dialog, args.out / "model-manager.png")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    width, height = sizes(args.size)[0]
    if not os.environ.get("DISPLAY"):
        raise SystemExit("readme_screenshots: no X display; run it under Xvfb:\n"
                         '  xvfb-run -a -s "-screen 0 1280x800x24" .venv/bin/python scripts/readme_screenshots.py')
    os.environ["QT_QPA_PLATFORM"] = "xcb"   # real fonts and screen, as on a Linux desktop
    data = DATA_DIR   # one fixed place, so the model manager's footer reads the same every time
    shutil.rmtree(data, ignore_errors=True)
    os.environ["QUICKDRAFT_DATA_DIR"] = str(data)

    from PySide6.QtGui import QIcon
    from PySide6.QtWidgets import QApplication

    from app.gui.main_window import MainWindow
    from app.gui.widgets.theme import STYLE_SHEET
    from app.paths import app_paths, resources_dir
    from app.storage.settings import Settings, SettingsStore

    app = QApplication(sys.argv[:1])
    app.setApplicationName("Quickdraft")
    app.setWindowIcon(QIcon(str(resources_dir() / "icons" / "quickdraft.svg")))
    app.setStyle("Fusion")
    app.setStyleSheet(STYLE_SHEET)
    try:
        paths = app_paths(data)
        found = None if args.tiny else real_models(args.models)
        models = found or tiny_models(data / "tiny")
        print("models:", *(str(m) for m in models), "(real)" if found else "(tiny test models)")
        pair = install(paths, models)
        store = SettingsStore(paths.settings_file)
        # greedy, so the answer is the same each time; tokens coloured by who proposed them
        store.save(replace(Settings(), temperature=0.0, max_tokens=args.max_tokens, colour_tokens=True))
        window = MainWindow(paths, store, autoload=False)
        window.resize(width, height)
        window.move(0, 0)
        window.show()
        driver = Driver()
        driver.spin(SETTLE_S)
        written = chat_screenshots(driver, window, args, pair) + [manager_screenshot(driver, window, args, pair[0])]
        if window.model_manager is not None:
            window.model_manager.close()
        window.close()
        driver.spin(0.2)
    finally:
        if args.keep_data:
            print("data folder:", data)
        else:
            shutil.rmtree(data, ignore_errors=True)
    for path in written:
        print("wrote", path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
