"""Drafting from the context, side by side (issue 43): Quickdraft's prompt lookup and its default
against llama.cpp's n-gram drafters in `llama-speculative-simple`, on the same rendered prompts.

    .venv/bin/python scripts/ngram_bench.py -m MAIN.gguf [-md DRAFT.gguf] \\
        --prompts scripts/data/edit_prompts.jsonl ../shared/prompts/edit.jsonl --limit 3 \\
        -n 128 -t 2 --repeat 2 [--llama-bin DIR] --json ngram.json

Runs, each a fresh process answering one prompt greedily with the same thread count:

plain     `quickdraft generate --drafter none`: our main model alone;
plain-aa  the same again: plain-aa / plain is the A/A noise of this machine, measured in the same run;
lookup    `quickdraft generate --drafter lookup`;
default   `quickdraft generate -md DRAFT` (lookup, then the draft model), left out without -md;
llama     llama.cpp's main model alone, in the same program: `llama-speculative-simple` refuses
          `--spec-type none`, so ngram-mod with a key of 1,024 tokens, longer than any context here,
          which never drafts (checked: a run that drafted stops the bench);
ngram-mod, ngram-map-k, ngram-simple: `llama-speculative-simple --spec-type ...`, its defaults.

Each side's speedup is over its own plain decoding in the same repeat (ours over plain, llama.cpp's
over llama), so a ratio is paired in time; per prompt and repeat the runs take turns, their order
rotating. The chat template is rendered by Quickdraft (`render_prompt`, what `generate --messages`
sends) and given to llama.cpp as the same text. Acceptance: accepted / drafted tokens of each run.
Every run's answer is kept: a drafting run's must be its side's plain run's (greedy), and a prompt
whose llama.cpp answer is not ours is marked (‡): the same model and prompt, but a near-tie that
llama.cpp's batch numerics settle otherwise (it reads the prompt's last token apart from the rest)
starts another answer, and speedups on other answers do not compare.
Our runs keep the suffix index off: this compares drafting from the context, and the index would
draft a prompt's answer back from the runs before it.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.cli.bench import load_prompts  # noqa: E402
from app.core.chat.prompt import render_prompt  # noqa: E402
from app.core.gguf.info import read_gguf_info  # noqa: E402

LLAMA_BIN = Path.home() / ".cache/quickdraft/llama-tools/7b12712fe9ef6fdc/build/bin"
LLAMA_MODES = ("ngram-mod", "ngram-map-k", "ngram-simple")
# llama-speculative-simple's closing lines
DECODED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds")
DRAFTED, ACCEPTED = re.compile(r"n_drafted\s*=\s*(\d+)"), re.compile(r"n_accept\s*=\s*(\d+)")


def quickdraft(args, messages: Path, extra: list[str], data_dir: Path, tree: Path = ROOT) -> dict:
    """One greedy ``quickdraft generate`` of the version in ``tree`` (the suffix index off): its numbers."""
    cmd = [sys.executable, "-m", "app.cli", "--data-dir", str(data_dir), "generate", "-m", args.main,
           "--messages", str(messages), "-n", str(args.n_predict), "-t", str(args.threads), "--temp", "0",
           "--json", "--suffix-index", "off", *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=tree, timeout=1800)
    if r.returncode != 0:
        raise SystemExit(f"quickdraft failed in {tree}: {r.stderr[-2000:]}")
    s = json.loads(r.stdout)
    # who drafted and what drafting took: a slow run with every drafted token accepted is told apart
    # from the machine's noise by its draft model's time
    return dict(tps=s["generation_tps"], tokens=s["generated_tokens"], drafted=s["drafted"],
                accepted=s["accepted"], text=s["text"], by_drafter=s.get("by_drafter", {}),
                rounds=s.get("rounds"), draft_s=s.get("draft_s"))


def calibrate(args, data_dir: Path) -> None:
    """``quickdraft calibrate`` into our runs' data folder, for lookup alone and for the default: they
    then start from this machine's measured costs, as after the command, not from the prior the
    policy learns from as the runs go."""
    for extra in [[]] + ([["-md", args.draft]] if args.draft else []):
        cmd = [sys.executable, "-m", "app.cli", "--data-dir", str(data_dir), "calibrate", "-m", args.main,
               "-t", str(args.threads), *extra]
        r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=1800)
        if r.returncode != 0:
            raise SystemExit(f"quickdraft calibrate failed: {r.stderr[-2000:]}")


def llama(args, prompt_file: Path, mode: str) -> dict:
    """One run of llama-speculative-simple on the rendered prompt, read as it is: by default llama.cpp
    turns a prompt's "\\n" into a newline, which fed code with "\\n" in a string another prompt than
    ours (edit-1: another answer, copied where ours was re-indented). Its answer is kept (``text``)."""
    spec = ["--spec-type", "ngram-mod", "--spec-ngram-mod-n-match", "1024"] if mode == "none" else ["--spec-type", mode]
    cmd = [str(Path(args.llama_bin) / "llama-speculative-simple"), "-m", args.main, "-f", str(prompt_file),
           "-n", str(args.n_predict), "-t", str(args.threads), "--temp", "0", "-c", "4096", "--no-escape", *spec]
    r = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=1800)
    decoded = DECODED.search(r.stderr)
    if r.returncode != 0 or not decoded:
        raise SystemExit(f"llama-speculative-simple failed: {r.stderr[-2000:]}")
    drafted, accepted = DRAFTED.search(r.stderr), ACCEPTED.search(r.stderr)
    tokens, seconds = int(decoded.group(1)), float(decoded.group(2))
    if mode == "none" and drafted and int(drafted.group(1)):
        raise SystemExit("llama.cpp's plain run drafted: its context reached the 1,024-token key")
    return dict(tps=tokens / seconds if seconds else 0.0, tokens=tokens,
                drafted=int(drafted.group(1)) if drafted else 0, accepted=int(accepted.group(1)) if accepted else 0,
                text=llama_answer(r.stdout, llama_prompt(prompt_file)))


def write_llama_prompt(prompt_file: Path, prompt: str) -> None:
    """The rendered prompt as llama.cpp's -f reads it: llama.cpp drops a file's last newline
    (common/arg.cpp), and a rendered chat prompt ends with one ("<|im_start|>assistant\\n"), so the file
    holds one more. Without it llama.cpp answered a prompt without that newline: on edit-4 it went
    straight to the code, 89 of 96 drafted tokens accepted, where ours explains the change first."""
    prompt_file.write_text(prompt + "\n")


def llama_prompt(prompt_file: Path) -> str:
    """The prompt llama.cpp reads from ``prompt_file`` (``write_llama_prompt``)."""
    text = prompt_file.read_text()
    return text[:-1] if text.endswith("\n") else text


def llama_answer(stdout: str, prompt: str) -> str | None:
    """llama-speculative-simple's answer: what it prints after the prompt ("\\n\\n" and the prompt's
    pieces, then the answer's, then blank lines); None where the prompt is not printed as given."""
    printed = "\n\n" + prompt
    return stdout[len(printed):].rstrip("\n") if stdout.startswith(printed) else None


def runners(args, messages: Path, prompt_file: Path, data_dir: Path) -> dict:
    """name -> a function that runs it once."""
    runs = {
        "plain": lambda: quickdraft(args, messages, ["--drafter", "none"], data_dir),
        "plain-aa": lambda: quickdraft(args, messages, ["--drafter", "none"], data_dir),
        "lookup": lambda: quickdraft(args, messages, ["--drafter", "lookup"], data_dir),
    }
    if args.draft:
        runs["default"] = lambda: quickdraft(args, messages, ["-md", args.draft], data_dir)
    runs["llama"] = lambda: llama(args, prompt_file, "none")
    for mode in args.modes:
        runs[mode] = lambda mode=mode: llama(args, prompt_file, mode)
    return runs


def baseline(name: str) -> str:
    """The plain run a run's speedup is paired with: its own side's."""
    return "llama" if name == "llama" or name.startswith("ngram") else "plain"


def rotated(names: list[str], turn: int) -> list[str]:
    k = turn % len(names)
    return names[k:] + names[:k]


def bench(args) -> dict:
    """Every prompt's repeats, in turn; with ``--json``, the file is rewritten after every finished
    repeat (its runs all done, so its pairs stay whole), and ``--resume`` goes on from it."""
    prompts = [p for name in args.prompts for p in load_prompts([name])[:args.limit]]
    template = read_gguf_info(args.main).chat_template
    work = Path(tempfile.mkdtemp(prefix="ngram-bench-"))
    if args.calibrate:
        calibrate(args, work / "data")
    result = resumed(args)
    results = result["results"]
    turn = sum(len(rows["plain"]) for rows in results.values())
    for prompt_id, messages in prompts:
        messages_file, prompt_file = work / f"{prompt_id}.json", work / f"{prompt_id}.txt"
        messages_file.write_text(json.dumps(messages))
        write_llama_prompt(prompt_file, render_prompt(messages, template).text)
        runs = runners(args, messages_file, prompt_file, work / "data")
        rows = results.setdefault(prompt_id, {name: [] for name in runs})
        while len(rows["plain"]) < args.repeat:
            repeat = {}
            for name in rotated(list(runs), turn):
                repeat[name] = out = runs[name]()
                print(f"{prompt_id:10} {name:12} {out['tps']:6.2f} t/s  drafted {out['drafted']:3}"
                      f"  accepted {out['accepted']:3}", file=sys.stderr, flush=True)
            for name, out in repeat.items():
                rows[name].append(out)
            turn += 1
            save(args, result)
    return result


UNRECORDED = {"calibrated": False}   # settings a run's JSON from before them does not hold, as they were


def resumed(args) -> dict:
    """The run so far: read from ``--json`` with ``--resume`` (its settings must be these), else new."""
    settings = dict(main=args.main, draft=args.draft, n_predict=args.n_predict, threads=args.threads,
                    calibrated=getattr(args, "calibrate", False))
    if args.resume and args.json and Path(args.json).exists():
        result = json.loads(Path(args.json).read_text())
        differing = [k for k, v in settings.items() if result.get(k, UNRECORDED.get(k)) != v]
        if differing:
            raise SystemExit(f"--resume: {args.json} was run with other {', '.join(differing)}")
        result["repeat"] = args.repeat
        return result
    return dict(settings, repeat=args.repeat, started=args.started, results={})


def save(args, result: dict) -> None:
    if not args.json:
        return
    result["summary"] = summarize(result["results"])
    write_whole(args.json, result)


def write_whole(path: str, data: dict) -> None:
    """``data`` as JSON at ``path``, through a temporary file: a run stopped mid-write keeps the last
    whole file."""
    temp = Path(path + ".tmp")
    temp.write_text(json.dumps(data, indent=1))
    temp.replace(path)


def summarize(results: dict) -> dict:
    """Per prompt and run: the median paired speedup over its own side's plain run, and acceptance;
    and the A/A noise (plain-aa / plain) over every prompt and repeat."""
    summary: dict = {"prompts": {}}
    for prompt_id, rows in results.items():
        row = {}
        for name, runs in rows.items():
            base = rows[baseline(name)]
            speedups = [r["tps"] / b["tps"] for r, b in zip(runs, base) if b["tps"] > 0]
            drafted = sum(r["drafted"] for r in runs)
            row[name] = dict(speedup=statistics.median(speedups), runs=speedups,
                             acceptance=sum(r["accepted"] for r in runs) / drafted if drafted else None,
                             drafted=drafted / len(runs))
            if "text" in runs[0]:   # greedy: a drafting run's answer must be the plain run's
                row[name]["same_text"] = sum(same_answer(r["text"], b["text"]) for r, b in zip(runs, base))
        if "text" in rows.get("llama", [{}])[0]:   # whether the two sides did the same work
            row["llama"]["as_ours"] = sum(begins_as(l["text"], p["text"]) for l, p in zip(rows["llama"], rows["plain"]))
        summary["prompts"][prompt_id] = row
    aa = [x for row in summary["prompts"].values() for x in row["plain-aa"]["runs"]]
    summary["aa_noise"] = dict(median=statistics.median(aa), worst=max(abs(x - 1) for x in aa), n=len(aa))
    return summary


def same_answer(a: str | None, b: str | None) -> bool:
    """Whether two greedy answers are one (the blank lines llama.cpp prints after its answer aside)."""
    return a is not None and b is not None and a.rstrip("\n") == b.rstrip("\n")


def begins_as(llama_text: str | None, ours: str) -> bool:
    """Whether llama.cpp's answer is ours: it decodes one token more than asked (129 for -n 128)."""
    return llama_text is not None and llama_text.startswith(ours.rstrip("\n"))


def other_work(row: dict) -> bool:
    """Whether llama.cpp's plain answer was not ours in some repeat: its speedups are then another
    answer's (a near-tie its batch numerics settle otherwise can start a different answer)."""
    llama = row.get("llama", {})
    return "as_ours" in llama and llama["as_ours"] < len(llama["runs"])


def table(summary: dict, names: list[str]) -> str:
    shown = [n for n in names if n not in ("plain", "llama")]
    lines = ["| prompt | " + " | ".join(shown) + " |", "|" + "---|" * (1 + len(shown))]
    for prompt_id, row in summary["prompts"].items():
        cells = []
        for name in shown:
            cell = f"{row[name]['speedup']:.2f}x"
            if row[name]["acceptance"] is not None:
                cell += f" ({row[name]['acceptance']:.0%} of {row[name]['drafted']:.0f})"
            cells.append(cell)
        lines.append(f"| {prompt_id}{' ‡' if other_work(row) else ''} | " + " | ".join(cells) + " |")
    differ = [f"{prompt_id} {name}" for prompt_id, row in summary["prompts"].items()
              for name, cell in row.items() if cell.get("same_text", len(cell["runs"])) < len(cell["runs"])]
    lines.append("\nEvery drafting run's answer is its plain run's." if not differ else
                 "\nAnswers differing from their side's plain run: " + ", ".join(differ))
    other = [prompt_id for prompt_id, row in summary["prompts"].items() if other_work(row)]
    if other:
        lines.append("\n‡ llama.cpp's plain answer was not ours (another answer, not the same work): " + ", ".join(other))
    noise = summary["aa_noise"]
    lines.append(f"\nA/A noise (plain-aa / plain, {noise['n']} pairs): median {noise['median']:.2f}x, "
                 f"worst {noise['worst']:.0%} off 1.0")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--main", required=True)
    p.add_argument("-md", "--draft", default=None, help="the draft model of our default (lookup, then the model)")
    p.add_argument("--prompts", nargs="+", required=True)
    p.add_argument("--limit", type=int, default=3, help="prompts taken from each file")
    p.add_argument("-n", "--n-predict", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=2)
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--modes", nargs="+", default=list(LLAMA_MODES), choices=LLAMA_MODES)
    p.add_argument("--llama-bin", default=str(LLAMA_BIN), help="the folder holding llama-speculative-simple")
    p.add_argument("--json", default=None, help="rewritten after every finished repeat")
    p.add_argument("--resume", action="store_true", help="go on from the runs in --json")
    p.add_argument("--calibrate", action="store_true",
                   help="measure our cost profiles first (quickdraft calibrate), instead of learning them from the "
                        "prior as the runs go")
    args = p.parse_args(argv)
    args.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    result = bench(args)
    result["summary"] = summarize(result["results"])
    save(args, result)
    print(table(result["summary"], list(next(iter(result["results"].values())))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
