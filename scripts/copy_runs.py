"""How far an answer's copies of its prompt run once they have run a while, and what drafting them in
fixed long drafts would make of them on a machine's costs (issue 43: llama.cpp's ngram-map-k drafts 48
tokens once the context's last 12 occur earlier).

    .venv/bin/python scripts/copy_runs.py [--traces T.json ...] [--profiles P.json ...] [--key 12] \\
        [--drafts 16 24 32 48] [--json out.json]

Each recorded answer (`policy_replay.py record`'s traces: the main model's greedy answers) is cut into its
longest runs found in its prompt, left to right: from each position, the longest stretch of the answer
that occurs in the prompt, then on from where it ends. For the runs of at least ``--key`` tokens, the
first table counts how many went on for 16 and for 48 more (or to the answer's end). The second prices
drafting each such run from its key-th token in drafts of D tokens (capped by what is left of the
answer), round after round until a draft holds a wrong token, on each cost profile: tokens per main-model
step over all those runs (1.0: as fast as decoding them one by one). A round that verifies a draft of d
tokens costs a batch of d + 1 and yields the tokens accepted and the main model's own one after them.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from app.core.speculation.costmodel import CostProfile  # noqa: E402

TRACES = ("scripts/data/copy-set-traces.json", "scripts/gpu/data/qwen2.5-coder-1.5b+0.5b-traces.json",
          "scripts/data/agent-rewrites-traces.json")
PROFILES = tuple(f"scripts/data/profile-zen4-1-thread-{name}.json" for name in
                 ("calibrated-s14", "learned-3", "server", "every-size")) + ("scripts/gpu/data/h100-2026-11-27/profile-7b.json",)


def prompt_runs(prompt: list[int], answer: list[int]) -> list[tuple[int, int]]:
    """(start, length) of the answer's runs in the prompt, left to right: from each start, the longest
    stretch of the answer that occurs in the prompt (0 where the token does not), then on after it."""
    p = np.asarray(prompt)
    common = np.zeros(len(p) + 1, dtype=np.int64)   # [j]: tokens answer[i:] and prompt[j:] share
    longest = [0] * len(answer)
    for i in range(len(answer) - 1, -1, -1):
        common = np.append((p == answer[i]) * (1 + common[1:]), 0)
        longest[i] = int(common.max())
    runs, i = [], 0
    while i < len(answer):
        runs.append((i, longest[i]))
        i += max(1, longest[i])
    return runs


def long_runs(trace: dict, key: int) -> list[tuple[int, int]]:
    """(more, left) for each run of at least ``key`` tokens: how many tokens it went on after its key-th,
    and how many the answer had left there."""
    prompt, answer = _tokens(trace["prompt"]), _tokens(trace["tokens"])
    return [(length - key, len(answer) - (start + key)) for start, length in prompt_runs(prompt, answer)
            if length >= key]


def _tokens(value) -> list[int]:
    return json.loads(value) if isinstance(value, str) else list(value)


def fixed_drafts(more: int, left: int, draft: int, profile: CostProfile) -> tuple[int, float]:
    """(tokens, main steps) of drafting a run that goes on ``more`` tokens, with ``left`` left in the answer,
    in drafts of ``draft`` until one holds a wrong token or the answer ends."""
    step, tokens, steps = profile.main_batch(1), 0, 0.0
    while (length := min(draft, left - tokens)) > 0:
        accepted = min(max(0, more - tokens), length)
        steps += profile.main_batch(length + 1) / step
        tokens += accepted + 1   # the main model's own token after the accepted ones
        if accepted < length or tokens > more:
            break
    return tokens, steps


def went_on(runs: list[tuple[int, int]], at_least: int) -> int:
    """Runs that went on ``at_least`` more tokens after their key, or to the answer's end."""
    return sum(1 for more, left in runs if more >= min(at_least, left))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--traces", nargs="+", default=[str(ROOT / t) for t in TRACES])
    p.add_argument("--profiles", nargs="+", default=[str(ROOT / f) for f in PROFILES])
    p.add_argument("--key", type=int, default=12, help="a run's length before it is drafted (ngram-map-k's key)")
    p.add_argument("--drafts", nargs="+", type=int, default=[16, 24, 32, 48])
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    runs = {Path(f).stem: [r for t in json.loads(Path(f).read_text())["traces"] for r in long_runs(t, args.key)]
            for f in args.traces}
    print(f"| recording | runs reaching {args.key} tokens | went on 16 more, or to the end | 48 more, or to the end |")
    print("|---|---|---|---|")
    for name, rr in runs.items():
        print(f"| {name} | {len(rr)} | {went_on(rr, 16)} | {went_on(rr, 48)} |")
    prices: dict[str, dict[str, dict[int, float]]] = {}
    print(f"\ntokens per main step, drafts of {' / '.join(map(str, args.drafts))} from a run's {args.key}th token:\n")
    print("| profile | " + " | ".join(runs) + " |")
    print("|---|" + "---|" * len(runs))
    for path in args.profiles:
        profile = CostProfile(**json.loads(Path(path).read_text()))
        row = prices[Path(path).name] = {}
        for name, rr in runs.items():
            row[name] = {}
            for draft in args.drafts:
                made = [fixed_drafts(more, left, draft, profile) for more, left in rr]
                row[name][draft] = sum(t for t, _ in made) / max(1e-9, sum(s for _, s in made))
        print(f"| {Path(path).name} | " + " | ".join(" / ".join(f"{row[n][d]:.2f}" for d in args.drafts)
                                                     for n in runs) + " |")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "key": args.key, "drafts": args.drafts, "traces": [Path(t).name for t in args.traces],
            "runs": {n: [list(r) for r in rr] for n, rr in runs.items()}, "tokens_per_step": prices}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
