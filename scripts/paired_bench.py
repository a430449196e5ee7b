"""Two versions of Quickdraft side by side, paired on the same prompts: what a change to the engine does.

Each prompt is answered by every arm in turn (the order rotated each repeat): plain decoding twice (the
A/A control: how far two plain runs read apart here), and the default drafting (lookup, then the draft
model) of the version before and after; with ``--lookup``, lookup alone of both too. Each answer is one
``quickdraft generate`` of that version's tree (a process of its own, greedy, the suffix index off),
and each arm keeps one data folder, so its cost profile is learned across the prompts as the app
learns it. A drafting run is read against the plain run of the same repeat.

    .venv/bin/python scripts/paired_bench.py --before ../old --after . -m MAIN.gguf -md DRAFT.gguf \\
        --prompts scripts/data/edit_prompts.jsonl --only copy-1,copy-5 --repeat 3 --json pairs.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

sys.path.insert(0, str(Path(__file__).resolve().parent))

from app.cli.bench import load_prompts  # noqa: E402
from ngram_bench import quickdraft  # noqa: E402


def arms(before: str, after: str, draft: str, lookup: bool) -> dict[str, tuple[str, list[str]]]:
    """name: (the tree that answers, its drafting flags)."""
    named = {"plain": (before, ["--drafter", "none"]), "plain-aa": (before, ["--drafter", "none"]),
             "before": (before, ["-md", draft]), "after": (after, ["-md", draft])}
    if lookup:
        named |= {"before-lookup": (before, ["--drafter", "lookup"]), "after-lookup": (after, ["--drafter", "lookup"])}
    return named


def summarize(results: dict) -> dict:
    """Per prompt and drafting arm: each repeat's speed over the plain run's, their median, the
    accepted and drafted tokens, and how many answers were the plain run's."""
    out = {}
    for prompt, runs in results.items():
        n = min(len(v) for v in runs.values())
        plain = runs["plain"][:n]
        out[prompt] = {arm: {"ratios": [r["tps"] / p["tps"] for r, p in zip(v[:n], plain)],
                             "median": statistics.median(r["tps"] / p["tps"] for r, p in zip(v[:n], plain)),
                             "accepted": sum(r["accepted"] for r in v[:n]), "drafted": sum(r["drafted"] for r in v[:n]),
                             "same": sum(r["text"] == p["text"] for r, p in zip(v[:n], plain)), "runs": n}
                       for arm, v in runs.items() if arm != "plain"}
    return out


def table(summary: dict) -> str:
    names = list(next(iter(summary.values())))
    lines = ["| prompt | " + " | ".join(names) + " |", "|---|" + "---|" * len(names)]
    for prompt, by_arm in summary.items():
        lines.append(f"| {prompt} | " + " | ".join(_cell(by_arm[a]) for a in names) + " |")
    medians = [statistics.median(by_arm[a]["median"] for by_arm in summary.values()) for a in names]
    lines.append("| median | " + " | ".join(f"{m:.2f}x" for m in medians) + " |")
    return "\n".join(lines)


def _cell(s: dict) -> str:
    ratios = " ".join(f"{r:.2f}" for r in s["ratios"])
    drafted = f", {s['accepted']} of {s['drafted']}" if s["drafted"] else ""
    same = "" if s["same"] == s["runs"] else f", {s['same']}/{s['runs']} same"
    return f"{s['median']:.2f}x ({ratios}){drafted}{same}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="the tree of the version before (a git worktree)")
    p.add_argument("--after", required=True)
    p.add_argument("-m", "--main", required=True)
    p.add_argument("-md", "--draft", required=True)
    p.add_argument("--prompts", nargs="+", required=True)
    p.add_argument("--only", help="prompt ids, comma-separated (default: all)")
    p.add_argument("-n", "--n-predict", type=int, default=128)
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--lookup", action="store_true", help="also lookup alone, before and after")
    p.add_argument("--json", required=True, help="every run, rewritten after each prompt")
    args = p.parse_args()
    prompts = load_prompts(args.prompts)
    if args.only:
        wanted = args.only.split(",")
        prompts = sorted((x for x in prompts if x[0] in wanted), key=lambda x: wanted.index(x[0]))
    named = arms(str(Path(args.before).resolve()), str(Path(args.after).resolve()), args.draft, args.lookup)
    work = Path(tempfile.mkdtemp(prefix="paired-bench-"))
    results: dict = {}
    for rep in range(args.repeat):
        for pid, messages in prompts:
            file = work / f"{pid}.json"
            file.write_text(json.dumps(messages))
            order = list(named)[rep % len(named):] + list(named)[:rep % len(named)]
            for arm in order:
                tree, flags = named[arm]
                run = quickdraft(args, file, flags, work / f"data-{arm}", Path(tree))
                results.setdefault(pid, {}).setdefault(arm, []).append(run)
            Path(args.json).write_text(json.dumps({"settings": vars(args), "results": results}, indent=1))
            print(f"repeat {rep + 1}, {pid}: " + ", ".join(f"{a} {results[pid][a][-1]['tps']:.1f}" for a in named),
                  flush=True)
    print(table(summarize(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
