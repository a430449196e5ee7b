"""Decoding speed on a busy machine (issue 29): Quickdraft's defaults against llama.cpp's own
`llama-completion` on the same file, quiet and under load.

    .venv/bin/python scripts/load_bench.py -m MAIN.gguf [-md DRAFT.gguf] \\
        --prompts ../shared/prompts/code.jsonl ../shared/prompts/chat.jsonl --limit 2 -n 128 \\
        --repeat 2 [--llama-completion PATH] --json load.json

Scenarios (a scenario's load is other processes, each a CPU-bound loop this script starts and stops):

quiet     nothing else runs;
one-busy  one core kept busy;
all-busy  every core kept busy;
halfway   one core becomes busy half-way through each run (after the run's own quiet start-up and
          half its quiet generation time, measured in the quiet scenario).

Runs, each a fresh process answering one prompt greedily (so the thread count is learned from nothing,
as on a first answer):

plain        `quickdraft generate --drafter none`: the main model alone, threads learned (the default);
plain-fixed  the same with `-t` at the default count: Quickdraft before threads were learned;
auto         `quickdraft generate` with the draft (`-md`): the default drafter and policy, threads learned;
llama-tN     `llama-completion -t N` on the same file and prompt text, for N = 1 .. cores; "llama-best"
             is the fastest N in each scenario (by median), the count a user who tuned llama.cpp would pick.

In each scenario, per prompt and repeat, the runs take turns (their order rotating), so every ratio
is paired in time: the table gives each run's median tokens/s and the median of the paired ratios
that the issue's targets name. On a shared machine read a ratio within ~10% of 1.0 as noise.
Without `llama-completion` (build it from the llama.cpp sources llama-cpp-python vendors: README,
"Busy machines"), its columns are left out.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.cli.bench import load_prompts  # noqa: E402
from app.core.chat.prompt import render_prompt  # noqa: E402
from app.core.gguf.info import read_gguf_info  # noqa: E402
from app.core.llama.binding import default_threads  # noqa: E402
from app.core.llama.threads import machine_threads  # noqa: E402

SCENARIOS = ("quiet", "one-busy", "all-busy", "halfway")
EVAL_TPS = re.compile(r"(?<!prompt )eval time\s*=.*?([\d.]+) tokens per second")   # llama.cpp's perf line


# --- load ---------------------------------------------------------------------------------------

def start_busy(n: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def stop_busy(processes: list[subprocess.Popen]) -> None:
    for p in processes:
        p.kill()
    for p in processes:
        p.wait()


@contextmanager
def load(scenario: str, halfway_after_s: float | None = None):
    """The scenario's other programs while the block runs; "halfway" starts one after a delay."""
    busy: list[subprocess.Popen] = []
    timer = None
    if scenario == "one-busy":
        busy = start_busy(1)
    elif scenario == "all-busy":
        busy = start_busy(machine_threads())
    elif scenario == "halfway" and halfway_after_s is not None:
        timer = threading.Timer(halfway_after_s, lambda: busy.extend(start_busy(1)))
        timer.start()
    if busy:
        time.sleep(0.3)   # the loops are running before the run starts
    try:
        yield
    finally:
        if timer is not None:
            timer.cancel()
        stop_busy(busy)


# --- one run --------------------------------------------------------------------------------------

def quickdraft(args, prompt: str, extra: list[str], data_dir: Path) -> dict:
    cmd = [sys.executable, "-m", "app.cli", "--data-dir", str(data_dir), "generate", "-m", args.main,
           "--messages", prompt, "-n", str(args.n_predict), "--temp", "0", "--json", "--suffix-index", "off", *extra]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=900)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"quickdraft failed: {r.stderr[-2000:]}")
    s = json.loads(r.stdout)
    return dict(tps=s["generation_tps"], tokens=s["generated_tokens"], threads=s.get("threads"),
                draft_threads=s.get("draft_threads"), drafted=s["drafted"], accepted=s["accepted"],
                startup_s=wall - s["generation_s"], generation_s=s["generation_s"], text=s["text"])


def llama_completion(args, prompt_text: str, threads: int) -> dict:
    cmd = [args.llama_completion, "-m", args.main, "-p", prompt_text, "-n", str(args.n_predict), "-t", str(threads),
           "--temp", "0", "-no-cnv", "-c", "4096", "--no-warmup", "--simple-io", "--no-escape"]   # the text as is
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=900)
    wall = time.perf_counter() - t0
    match = EVAL_TPS.search(r.stderr)
    if r.returncode != 0 or not match:
        raise SystemExit(f"llama-completion failed: {r.stderr[-2000:]}")
    return dict(tps=float(match.group(1)), threads=threads, startup_s=wall - args.n_predict / float(match.group(1)))


# --- the bench ------------------------------------------------------------------------------------

def runners(args, messages_file: Path, prompt_text: str, data_dir: Path) -> dict:
    """name -> a function that runs it once."""
    runs = {
        "plain": lambda: quickdraft(args, str(messages_file), ["--drafter", "none"], data_dir),
        "plain-fixed": lambda: quickdraft(args, str(messages_file),
                                          ["--drafter", "none", "-t", str(default_threads())], data_dir),
    }
    if args.draft:
        runs["auto"] = lambda: quickdraft(args, str(messages_file), ["-md", args.draft], data_dir)
    if args.llama_completion:
        for n in args.llama_threads or range(1, machine_threads() + 1):
            runs[f"llama-t{n}"] = lambda n=n: llama_completion(args, prompt_text, n)
    return runs


def rotated(names: list[str], turn: int) -> list[str]:
    k = turn % len(names)
    return names[k:] + names[:k]


def bench(args) -> dict:
    prompts = [p for name in args.prompts for p in load_prompts([name])[:args.limit]]
    info = read_gguf_info(args.main)
    work = Path(tempfile.mkdtemp(prefix="load-bench-"))
    results: dict = {s: {} for s in args.scenarios}
    quiet_times: dict[str, dict[str, float]] = {}   # prompt -> run -> seconds to half-way
    turn = 0
    for scenario in args.scenarios:
        for prompt_id, messages in prompts:
            messages_file = work / f"{prompt_id}.json"
            messages_file.write_text(json.dumps(messages))
            text = render_prompt(messages, info.chat_template).text
            runs = runners(args, messages_file, text, work / "data")
            rows = results[scenario].setdefault(prompt_id, {name: [] for name in runs})
            for _ in range(args.repeat):
                for name in rotated(list(runs), turn):
                    halfway = quiet_times.get(prompt_id, {}).get(name) if scenario == "halfway" else None
                    with load(scenario, halfway):
                        out = runs[name]()
                    rows[name].append(out)
                    if scenario == "quiet":
                        quiet_times.setdefault(prompt_id, {})[name] = out["startup_s"] + out.get("generation_s", 0) / 2
                    print(f"{scenario:9} {prompt_id:8} {name:12} {out['tps']:6.1f} t/s"
                          f"{'  threads ' + str(out['threads']) if out.get('threads') else ''}", file=sys.stderr, flush=True)
                turn += 1
    return dict(main=args.main, draft=args.draft, n_predict=args.n_predict, repeat=args.repeat,
                cores=machine_threads(), default_threads=default_threads(), llama_completion=args.llama_completion,
                results=results, summary=summarize(results))


def paired(rows: dict[str, list[dict]], a: str, b: str) -> list[float]:
    return [x["tps"] / y["tps"] for x, y in zip(rows[a], rows[b]) if y["tps"] > 0]


def best_llama(per_prompt: dict) -> str | None:
    names = {n for rows in per_prompt.values() for n in rows if n.startswith("llama-t")}
    if not names:
        return None
    return max(names, key=lambda n: statistics.median(r["tps"] for rows in per_prompt.values() for r in rows[n]))


def summarize(results: dict) -> dict:
    """Per scenario: each run's median t/s, and the medians of the paired ratios the targets name."""
    summary = {}
    quiet_plain = [r["tps"] for rows in results.get("quiet", {}).values() for r in rows.get("plain", [])]
    for scenario, per_prompt in results.items():
        names = sorted({n for rows in per_prompt.values() for n in rows})
        best = best_llama(per_prompt)
        row = {"median_tps": {n: statistics.median(r["tps"] for rows in per_prompt.values() for r in rows[n])
                              for n in names}, "llama_best": best}
        ratios = {"plain / plain-fixed": ("plain", "plain-fixed"), "auto / plain": ("auto", "plain")}
        if best:
            ratios["plain / llama-best"] = ("plain", best)
            ratios["auto / llama-best"] = ("auto", best)
        for label, (a, b) in ratios.items():
            values = [v for rows in per_prompt.values() if a in rows and b in rows for v in paired(rows, a, b)]
            row[label] = statistics.median(values) if values else None
        if quiet_plain and "plain" in names:
            row["plain / quiet plain"] = row["median_tps"]["plain"] / statistics.median(quiet_plain)
        summary[scenario] = row
    return summary


def table(summary: dict) -> str:
    columns = ["plain", "plain-fixed", "auto", "llama-best"]
    ratios = ["plain / plain-fixed", "plain / llama-best", "auto / plain", "auto / llama-best", "plain / quiet plain"]
    lines = ["| scenario | " + " | ".join(f"{c} t/s" for c in columns) + " | " + " | ".join(ratios) + " |",
             "|" + "---|" * (1 + len(columns) + len(ratios))]
    for scenario, row in summary.items():
        tps = dict(row["median_tps"])
        if row["llama_best"]:
            tps["llama-best"] = tps[row["llama_best"]]
        cells = [f"{tps[c]:.1f}" if c in tps else "–" for c in columns]
        if row["llama_best"]:
            cells[3] += f" (-t {row['llama_best'][len('llama-t'):]})"
        cells += [f"{row[r]:.2f}x" if row.get(r) is not None else "–" for r in ratios]
        lines.append(f"| {scenario} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def find_llama_completion() -> str | None:
    for candidate in (os.environ.get("LLAMA_COMPLETION"), shutil.which("llama-completion"),
                      str(ROOT.parent / "build" / "llama-tools" / "bin" / "llama-completion")):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--main", required=True)
    p.add_argument("-md", "--draft", default=None)
    p.add_argument("--prompts", nargs="+", required=True)
    p.add_argument("--limit", type=int, default=2, help="prompts taken from each file")
    p.add_argument("-n", "--n-predict", type=int, default=128)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--scenarios", nargs="+", default=list(SCENARIOS), choices=SCENARIOS)
    p.add_argument("--llama-completion", default=None, help="llama.cpp's llama-completion (found on PATH, "
                   "in $LLAMA_COMPLETION or ../build/llama-tools/bin when not given)")
    p.add_argument("--llama-threads", type=int, nargs="+", default=None,
                   help="llama-completion's thread counts to try (default: 1 to every core; with every core busy "
                        "more than one thread can take minutes an answer)")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    args.llama_completion = args.llama_completion or find_llama_completion()
    if "halfway" in args.scenarios and "quiet" in args.scenarios:
        args.scenarios = [s for s in SCENARIOS if s in args.scenarios]   # quiet first: halfway needs its times
    result = bench(args)
    print(table(result["summary"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
