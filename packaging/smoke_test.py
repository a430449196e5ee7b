"""Smoke-test a frozen Quickdraft: start it, chat through its window with a tiny model pair, check it.

    python packaging/smoke_test.py dist/quickdraft/quickdraft
    python packaging/smoke_test.py /usr/bin/quickdraft --keep smoke-out
    xvfb-run -a python packaging/smoke_test.py dist/quickdraft/quickdraft --platform xcb

Runs from the source tree's Python (it writes the tiny GGUF models with app.core.gguf.tiny); the
FROZEN app loads them. The app gets a fresh data dir (--data-dir) with fast settings (one thread,
greedy, a fixed draft of 4), and its self-test hook (app/gui/smoke.py, switched on by
QUICKDRAFT_SMOKE) loads the pair, sends a message through the window, and reports what the window
shows. This script then checks that report, the screenshot and the data dir, runs the bundled
command line once, prints a summary and exits 0 when everything holds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.gguf.tiny import TinySpec, write_tiny_model  # noqa: E402
from app.core.params import DrafterKind  # noqa: E402
from app.paths import DATA_DIR_ENV, app_paths  # noqa: E402
from app.storage.settings import Settings, SettingsStore  # noqa: E402

# The draft model alone drafts: prompt lookup's guesses depend on the text, which a GPU backend's
# rounding can change (a random-weight model has near ties), and would blur the acceptance check.
SMOKE_SETTINGS = Settings(threads=1, n_ctx=2048, temperature=0.0, max_tokens=48, draft_max=4,
                          draft_policy="fixed", drafter=DrafterKind.MODEL, default_system_prompt="You are terse.")
CLI_EXECUTABLE = "quickdraft-cli"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A same-weights draft is only rejected where max_tokens cuts the last round short.
MIN_ACCEPTANCE = 0.75


@dataclass(frozen=True)
class SmokeFiles:
    work: Path
    main: Path
    draft: Path
    data_dir: Path
    report: Path


def prepare(work: Path) -> SmokeFiles:
    """Tiny main + same-weights draft (every drafted token is accepted) and a data dir with settings."""
    models = work / "models"
    data_dir = work / "data"
    SettingsStore(app_paths(data_dir).ensure().settings_file).save(SMOKE_SETTINGS)
    return SmokeFiles(
        work=work,
        main=write_tiny_model(models / "smoke-main.gguf", TinySpec(seed=0, name="smoke-main")),
        draft=write_tiny_model(models / "smoke-draft.gguf", TinySpec(seed=0, name="smoke-draft")),
        data_dir=data_dir,
        report=work / "smoke.json",
    )


def child_environment(files: SmokeFiles, timeout_s: float, platform: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != DATA_DIR_ENV and not k.startswith("QUICKDRAFT_SMOKE")}
    env.update({
        "QT_QPA_PLATFORM": platform,
        "QUICKDRAFT_SMOKE": str(files.report),
        "QUICKDRAFT_SMOKE_MAIN": str(files.main),
        "QUICKDRAFT_SMOKE_DRAFT": str(files.draft),
        "QUICKDRAFT_SMOKE_TIMEOUT": str(timeout_s),
    })
    return env


def run_app(executable: Path, files: SmokeFiles, timeout_s: float, platform: str) -> subprocess.CompletedProcess:
    env = child_environment(files, timeout_s, platform)
    env["QUICKDRAFT_SMOKE_T0"] = repr(time.time())
    return subprocess.run([str(executable), "--data-dir", str(files.data_dir)], env=env, capture_output=True,
                          text=True, timeout=timeout_s + 60)


def check_report(report: dict, files: SmokeFiles) -> list[str]:
    """Everything that should hold after a drafted answer with a draft that always agrees."""
    problems = list(report.get("problems") or [])
    stats = report.get("stats", {})
    if not report.get("ok"):
        problems.append("the app's self-test did not report ok")
    if not report.get("window_visible"):
        problems.append("the window was not visible")
    drafted, accepted = _count(stats.get("drafted")), _count(stats.get("accepted"))
    if not accepted:
        problems.append(f"no drafted token was accepted (stats: {stats})")
    elif accepted < MIN_ACCEPTANCE * drafted:
        problems.append(f"a same-weights draft had only {accepted} of {drafted} drafted tokens accepted")
    screenshot = Path(report.get("screenshot") or files.report.with_suffix(".png"))
    if not screenshot.is_file() or not screenshot.read_bytes().startswith(PNG_SIGNATURE):
        problems.append(f"no PNG screenshot at {screenshot}")
    if not app_paths(files.data_dir).conversations_db.is_file():
        problems.append("the conversation was not saved under --data-dir")
    return problems


def _count(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def cli_commands(executable: Path) -> list[list[str]]:
    """The bundled command line every way in: `quickdraft --cli ...` (not on Windows, where the
    desktop executable has no console), and a quickdraft-cli next to the executable or its link
    target (quickdraft-cli.exe on Windows, /usr/bin/quickdraft-cli from the .deb)."""
    commands = [] if sys.platform == "win32" else [[str(executable), "--cli"]]
    name = CLI_EXECUTABLE + executable.suffix
    for folder in dict.fromkeys((executable.parent, executable.resolve().parent)):
        if (folder / name).is_file():
            commands.append([str(folder / name)])
    return commands


def check_cli(executable: Path, files: SmokeFiles) -> tuple[list[str], dict]:
    generate = ["generate", "-m", str(files.main), "-md", str(files.draft), "-p", "Hello", "-n", "16",
                "--policy", "fixed", "--draft-max", "4", "-t", "1", "--json"]
    commands = cli_commands(executable)
    problems, summary = ([] if commands else ["no command line found next to the executable"]), {}
    for command in commands:
        done = subprocess.run(command + generate, capture_output=True, text=True, timeout=120,
                              env={**os.environ, DATA_DIR_ENV: str(files.data_dir)})
        name = " ".join([Path(command[0]).name] + command[1:])
        if done.returncode != 0:
            problems.append(f"`{name} generate` exited {done.returncode}: {done.stderr.strip()[-500:]}")
            continue
        try:
            summary = json.loads(done.stdout)
        except json.JSONDecodeError:
            problems.append(f"`{name} generate --json` printed no JSON: {done.stdout[-300:]!r}")
            continue
        if not summary.get("generated_tokens"):
            problems.append(f"`{name} generate` generated nothing: {summary}")
        print(f"cli:            `{name} generate` -> {summary.get('generated_tokens')} tokens, "
              f"{summary.get('accepted')}/{summary.get('drafted')} drafted accepted")
    return problems, summary


def check_backends(executable: Path, files: SmokeFiles, expected: list[str]) -> list[str]:
    """The frozen app's llama.cpp backends, through `info --json`: the CPU always (in a build with
    dynamic backends, a CPU variant chosen for this CPU), and each backend in ``expected``."""
    commands = cli_commands(executable)
    if not commands:
        return []
    done = subprocess.run(commands[0] + ["info", "--json"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, DATA_DIR_ENV: str(files.data_dir)})
    if done.returncode != 0:
        return [f"`info --json` exited {done.returncode}: {done.stderr.strip()[-500:]}"]
    system = json.loads(done.stdout)["system"]
    loaded = [m["name"] for m in system.get("modules_loaded", [])]
    failed = [f"{m['name']} ({m['reason']})" for m in system.get("modules_failed", [])]
    print(f"backends:       {', '.join(system['backends'])}; modules {', '.join(loaded) or 'built in'}"
          f"{'; not loaded: ' + ', '.join(failed) if failed else ''}; models go on {system['device']}")
    print(f"MTP drafting:   {system.get('mtp')}")
    problems = []
    if "CPU" not in system["backends"]:
        problems.append(f"no CPU backend loaded: {system['backends']}")
    if system.get("dynamic_backends") and not system.get("cpu_variant"):
        problems.append(f"no CPU variant was chosen of {system.get('cpu_variants')}")
    problems += [f"the {name} backend did not load (loaded: {system['backends']}; not loaded: {failed})"
                 for name in expected if name not in system["backends"]]
    return problems


def print_summary(report: dict) -> None:
    answer = " ".join(str(report.get("answer", "")).split())
    lines = [
        f"window title:   {report.get('window_title')}",
        f"start-up:       {report.get('startup_s')} s from process start to a shown window with its event loop running",
        f"load:           {report.get('load_s')} s (main + draft)",
        f"answer:         {report.get('answer_s')} s: {answer[:100]!r}",
        f"statistics:     {json.dumps(report.get('stats'), ensure_ascii=False)}",
        f"footer:         {report.get('footer')}",
        f"screenshot:     {report.get('screenshot')}",
    ]
    print("\n".join(lines))


def smoke(executable: Path, work: Path, timeout_s: float, platform: str, backends: list[str] = ()) -> int:
    started = time.monotonic()
    files = prepare(work)
    done = run_app(executable, files, timeout_s, platform)
    if not files.report.is_file():
        print(f"FAIL: the app wrote no report (exit code {done.returncode})\n{done.stdout}\n{done.stderr}")
        return 1
    report = json.loads(files.report.read_text(encoding="utf-8"))
    problems = check_report(report, files)
    if done.returncode != 0:
        problems.append(f"the app exited with {done.returncode}")
    print_summary(report)
    problems += check_backends(executable, files, list(backends))
    problems += check_cli(executable, files)[0]
    print(f"total:          {time.monotonic() - started:.1f} s")
    if problems:
        print("FAIL:\n  " + "\n  ".join(problems))
        if done.stderr.strip():
            print("app stderr (tail):\n" + done.stderr[-2000:])
        return 1
    print("PASS")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Smoke-test a frozen Quickdraft executable.")
    parser.add_argument("executable", type=Path, help="the frozen app, e.g. dist/quickdraft/quickdraft")
    parser.add_argument("--keep", type=Path, help="keep the models, data dir, report and screenshot here")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds the app may take (180)")
    parser.add_argument("--platform", default="offscreen",
                        help="the Qt platform plugin the app runs on (offscreen; xcb under xvfb-run)")
    parser.add_argument("--expect-backend", action="append", default=[], metavar="NAME",
                        help="fail unless this llama.cpp backend loads (e.g. Vulkan, CUDA, Metal); repeatable")
    args = parser.parse_args(argv)
    if not args.executable.exists():
        parser.error(f"{args.executable} does not exist")
    if args.keep:
        shutil.rmtree(args.keep, ignore_errors=True)
        return smoke(args.executable, args.keep.resolve(), args.timeout, args.platform, args.expect_backend)
    with tempfile.TemporaryDirectory(prefix="quickdraft-smoke-") as tmp:
        return smoke(args.executable, Path(tmp), args.timeout, args.platform, args.expect_backend)


if __name__ == "__main__":
    sys.exit(main())
