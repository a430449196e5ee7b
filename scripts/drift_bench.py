"""The auto policy learning the machine, measured on real models (issue 11): three scenarios, a table
each, and one JSON file.

    PYTHONPATH=. .venv/bin/python scripts/drift_bench.py -m MAIN.gguf -md DRAFT.gguf \\
        --prompts ../shared/prompts/code.jsonl ../shared/prompts/chat.jsonl ../shared/prompts/edit.jsonl \\
        --drafter lookup+model --repeat 2 --json drift.json

fresh  A fresh data dir (no stored profile), per prompt: the wall-clock time to the first token of the
       first speculative answer (from the call to generate) over the main model alone's. Each prompt
       starts from an empty profile store and a new cost model. Target: at most 1.1x (before: the
       calibration's 25 s on top).
stale  A profile calibrated while another process keeps one core busy, then, on the quiet machine, a
       bench started from it against a bench started from a profile calibrated quietly (a correct one).
       The two take turns on one engine, each with its own cost model that goes on learning from prompt
       to prompt as a bench started from it would: per prompt and repeat, the main model alone, then
       the speculative runs back to back (their order rotating), so the ratio of the two is
       paired in time (on a shared machine the speed of separate benches minutes apart differs by more
       than 3%). A third start from the correct profile is the A/A control: its ratio to the second
       is what the machine's noise alone reads in the same run. Target: the median ratio over prompts
       within 3% (>= 0.97).
load   A bench during which a CPU-bound process starts half-way through the prompts: the median
       speedup before and after it starts. Per prompt and repeat the main model alone, the speculative
       run and the main model alone again take turns (the order rotating); the last is the A/A control,
       whose paired ratio to the first is what the machine's noise alone reads (under the busy process
       a run of the main model alone differs from the next by 10-15%). Target: no slower than the main
       model alone (>= 1.0x) in both halves.

Every scenario keeps its stores under a temporary directory; nothing touches the real data dir. The
busy process is a Python loop this script starts and stops (by its process id).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli.bench import load_prompts  # noqa: E402
from app.core.compare import greedy_run  # noqa: E402
from app.core.engine import Engine  # noqa: E402
from app.core.frontdoor import GenerationRequest  # noqa: E402
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams  # noqa: E402
from app.core.speculation.costmodel import CostModel, ProfileStore  # noqa: E402
from app.core.speculation.events import Summary, TokenPiece, run_to_summary  # noqa: E402

SCENARIOS = ("fresh", "stale", "load")


@contextmanager
def busy_core():
    """Another program keeps one core busy while the block runs."""
    process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        yield
    finally:
        process.terminate()
        process.wait()


def first_token(engine: Engine, tokens: list[int], drafter: DrafterKind, n_predict: int,
                speculation: SpeculationParams) -> tuple[float, Summary]:
    """Wall-clock seconds from calling generate to the first token, and the answer's summary."""
    request = GenerationRequest(prompt=tokens, sampling=SamplingParams(max_tokens=n_predict), speculation=speculation,
                                drafter=drafter, empty_cache=True)
    started, first = time.perf_counter(), []

    def note_first_token(event) -> None:
        if not first and isinstance(event, TokenPiece) and event.token_ids:
            first.append(time.perf_counter() - started)

    summary = run_to_summary(engine.generate(request), note_first_token)
    return (first[0] if first else summary.ttft_s), summary


def use_store(engine: Engine, directory: Path) -> ProfileStore:
    engine.costs.store = ProfileStore(directory)
    engine.costs.forget()
    return engine.costs.store


def fresh(engine: Engine, prompts, args, speculation, root: Path) -> dict:
    rows = []
    for i, (prompt_id, messages) in enumerate(prompts):
        tokens = list(engine.prompt(messages).tokens)
        alone, _ = first_token(engine, tokens, DrafterKind.NONE, args.n_predict, speculation)
        use_store(engine, root / f"fresh-{i}")
        spec, summary = first_token(engine, tokens, args.drafter, args.n_predict, speculation)
        rows.append(dict(prompt=prompt_id, prompt_tokens=len(tokens), alone_ttft_s=alone, spec_ttft_s=spec,
                         ratio=spec / alone, learning_at_end=summary.policy_learning,
                         cost_rounds=summary.cost_rounds_observed))
        print(f"fresh {prompt_id}: first token {1000 * alone:.0f} -> {1000 * spec:.0f} ms ({spec / alone:.2f}x)",
              file=sys.stderr, flush=True)
    return dict(rows=rows, median_ratio=statistics.median(r["ratio"] for r in rows))


def median_speedup(rows: list[dict]) -> float | None:
    return statistics.median(r["speedup"] for r in rows) if rows else None


def stale(engine: Engine, prompts, args, speculation, root: Path) -> dict:
    n_max = speculation.batch_max
    with busy_core():
        print("stale: calibrating while one core is busy...", file=sys.stderr, flush=True)
        use_store(engine, root / "busy")
        busy_profile = engine.costs.profile(n_max, recalibrate=True)
    print("stale: calibrating on the quiet machine...", file=sys.stderr, flush=True)
    use_store(engine, root / "quiet")
    quiet_profile = engine.costs.profile(n_max, recalibrate=True)
    engine.costs.store = None  # the two starts learn in memory, neither overwrites the other
    starts = {"busy": CostModel.from_profile(busy_profile, n_max), "quiet": CostModel.from_profile(quiet_profile, n_max),
              "control": CostModel.from_profile(quiet_profile, n_max)}
    rows = []
    for prompt_id, messages in prompts:
        row = take_turns(engine, prompt_id, list(engine.prompt(messages).tokens), starts, len(rows), args, speculation)
        rows.append(row)
        print(f"  {prompt_id}: from busy {row['from_busy']:.2f}x, from quiet {row['from_quiet']:.2f}x, "
              f"ratio {row['ratio']:.3f} (control {row['control_ratio']:.3f})", file=sys.stderr, flush=True)
    return dict(n_max=n_max, busy_step_s=busy_profile.main_batch_s[0], quiet_step_s=quiet_profile.main_batch_s[0],
                busy_shape=busy_profile.main_batch_s[-1] / busy_profile.main_batch_s[0],
                quiet_shape=quiet_profile.main_batch_s[-1] / quiet_profile.main_batch_s[0],
                busy_found_stale=starts["busy"].stale, quiet_found_stale=starts["quiet"].stale, rows=rows,
                median_from_busy=statistics.median(r["from_busy"] for r in rows),
                median_from_quiet=statistics.median(r["from_quiet"] for r in rows),
                ratio=statistics.median(r["ratio"] for r in rows),
                control_ratio=statistics.median(r["control_ratio"] for r in rows))


def rotated(names: tuple[str, ...], turn: int) -> tuple[str, ...]:
    """The order of the runs taking turns at ``turn``: each name runs first, second and third in
    turn, so none is always measured right after the main model alone or last."""
    k = turn % len(names)
    return names[k:] + names[:k]


def paired(tps: dict[str, list[float]], a: str, b: str) -> float:
    """The median over repeats of b's speed over a's, each pair measured back to back."""
    return statistics.median(y / x for x, y in zip(tps[a], tps[b]))


def take_turns(engine: Engine, prompt_id: str, tokens: list[int], starts: dict[str, CostModel], turn: int,
               args, speculation) -> dict:
    """One prompt of the stale scenario: per repeat the main model alone, then a run from each start
    (each start's cost model going on learning), in an order that rotates from prompt to prompt."""
    tps: dict[str, list[float]] = {"alone": [], **{name: [] for name in starts}}
    drafted = {name: 0 for name in starts}
    for rep in range(args.repeat):
        tps["alone"].append(greedy_run(engine, tokens, DrafterKind.NONE, args.n_predict, speculation).generation_tps)
        for name in rotated(("busy", "quiet", "control"), turn + rep):
            engine.costs.use(starts[name])
            summary = greedy_run(engine, tokens, args.drafter, args.n_predict, speculation)
            tps[name].append(summary.generation_tps)
            drafted[name] += summary.drafted
    return dict(prompt=prompt_id, tps=tps, drafted=drafted, ratio=paired(tps, "quiet", "busy"),
                control_ratio=paired(tps, "quiet", "control"), from_busy=paired(tps, "alone", "busy"),
                from_quiet=paired(tps, "alone", "quiet"))


def load(engine: Engine, prompts, args, speculation, root: Path) -> dict:
    use_store(engine, root / "load")
    half = max(1, len(prompts) // 2)
    print("load: quiet half", file=sys.stderr, flush=True)
    before = [with_control(engine, prompt_id, messages, i, args, speculation)
              for i, (prompt_id, messages) in enumerate(prompts[:half])]
    with busy_core():
        print("load: a CPU-bound process runs", file=sys.stderr, flush=True)
        after = [with_control(engine, prompt_id, messages, i, args, speculation)
                 for i, (prompt_id, messages) in enumerate(prompts[half:] or prompts[:half])]
    return dict(before=before, after=after, median_before=median_speedup(before), median_after=median_speedup(after),
                control_before=statistics.median(r["control"] for r in before),
                control_after=statistics.median(r["control"] for r in after))


def with_control(engine: Engine, prompt_id: str, messages, turn: int, args, speculation) -> dict:
    """One prompt of the load scenario: per repeat the main model alone, the speculative run and the
    main model alone again (the A/A control), in an order that rotates; the speedup and the
    control's ratio are medians of ratios paired in time, so the control reads what the machine's
    noise alone does to a speedup measured this way."""
    tokens = list(engine.prompt(messages).tokens)
    tps: dict[str, list[float]] = {"alone": [], "spec": [], "control": []}
    drafted = 0
    for rep in range(args.repeat):
        for name in rotated(("alone", "spec", "control"), turn + rep):
            summary = greedy_run(engine, tokens, args.drafter if name == "spec" else DrafterKind.NONE, args.n_predict,
                                 speculation)
            tps[name].append(summary.generation_tps)
            drafted += summary.drafted if name == "spec" else 0
    speedup, control = paired(tps, "alone", "spec"), paired(tps, "alone", "control")
    print(f"  {prompt_id}: {speedup:.2f}x (A/A {control:.2f}x), {drafted} drafted", file=sys.stderr, flush=True)
    return dict(prompt=prompt_id, tps=tps, speedup=speedup, control=control, drafted=drafted,
                costs_after=learned_costs(engine.costs.model(speculation.batch_max)))


def learned_costs(costs: CostModel) -> dict:
    """What the cost model believes after a prompt, for reading a run where the policy drafted less
    than expected: the main step, each batch size in steps, and the sizes timed so far."""
    profile = costs.profile()
    step = profile.main_batch_s[0]
    return dict(step_s=step, batch_steps=[round(t / step, 2) for t in profile.main_batch_s],
                measured=profile.measured, draft_step_s=profile.draft_step_s or None, stale=costs.stale)


def table(results: dict) -> str:
    lines = []
    if "fresh" in results:
        lines += ["fresh data dir: time to first token, first speculative answer vs the main model alone",
                  f"{'prompt':10s} {'tokens':>6s} {'alone ms':>9s} {'spec ms':>8s} {'ratio':>6s}"]
        for r in results["fresh"]["rows"]:
            lines.append(f"{r['prompt']:10s} {r['prompt_tokens']:6d} {1000 * r['alone_ttft_s']:9.0f} "
                         f"{1000 * r['spec_ttft_s']:8.0f} {r['ratio']:5.2f}x")
        lines += [f"median {results['fresh']['median_ratio']:.2f}x (target <= 1.10x)", ""]
    if "stale" in results:
        s = results["stale"]
        lines += ["stale profile (calibrated with one core busy) vs a correct one, on the quiet machine",
                  f"in the profiles: main step busy {1000 * s['busy_step_s']:.1f} ms, quiet {1000 * s['quiet_step_s']:.1f} ms; "
                  f"batch of {s['n_max']} busy {s['busy_shape']:.2f} steps, quiet {s['quiet_shape']:.2f}; "
                  f"found stale: busy {s['busy_found_stale']}, quiet {s['quiet_found_stale']}",
                  f"{'prompt':10s} {'from busy':>9s} {'from quiet':>10s} {'busy/quiet':>10s} {'A/A':>6s} {'drafted b/q/c':>14s}"]
        for r in s["rows"]:
            d = r["drafted"]
            lines.append(f"{r['prompt']:10s} {r['from_busy']:8.2f}x {r['from_quiet']:9.2f}x {r['ratio']:10.3f} "
                         f"{r['control_ratio']:6.3f} {d['busy']:>5d}/{d['quiet']}/{d['control']}")
        lines += [f"median {s['median_from_busy']:.2f}x vs {s['median_from_quiet']:.2f}x; median paired ratio "
                  f"{s['ratio']:.3f} (target >= 0.97); the A/A control reads {s['control_ratio']:.3f}", ""]
    if "load" in results:
        s = results["load"]
        lines += ["a CPU-bound process starts half-way (A/A: the main model alone against itself, paired alike)",
                  f"{'prompt':10s} {'speedup':>8s} {'A/A':>6s} {'drafted':>8s}"]
        for half in ("before", "after"):
            lines += [f"{r['prompt']:10s} {r['speedup']:7.2f}x {r['control']:5.2f}x {r['drafted']:8d}   {half}"
                      for r in s[half]]
        lines += [f"median before {s['median_before']:.2f}x (A/A {s['control_before']:.2f}x), after "
                  f"{s['median_after']:.2f}x (A/A {s['control_after']:.2f}x) (target >= 1.00x both)"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--main", required=True)
    ap.add_argument("-md", "--draft")
    ap.add_argument("--prompts", nargs="+", required=True)
    ap.add_argument("--drafter", type=DrafterKind, choices=["model", "lookup", "lookup+model"],
                    default=DrafterKind.LOOKUP_MODEL)
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("--limit", type=int, help="only the first N prompts of each file")
    ap.add_argument("--repeat", type=int, default=2, help="paired runs per prompt in the benches (2+: paired medians)")
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("-t", "--threads", type=int)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {', '.join(SCENARIOS)}")
    ap.add_argument("--json", dest="json_out", help="write the results here")
    args = ap.parse_args(argv)
    prompts = [p for path in args.prompts for p in load_prompts([path])[: args.limit]]
    speculation = SpeculationParams(draft_max=args.draft_max, policy="auto")
    main_params = ModelParams(args.main, n_ctx=args.ctx, n_threads=args.threads)
    draft_params = ModelParams(args.draft, n_ctx=args.ctx, n_threads=args.threads) if args.draft else None
    engine = Engine.load(main_params, draft_params)
    results: dict = {"settings": {k: v for k, v in vars(args).items() if k != "json_out"}}
    try:
        first_token(engine, list(engine.prompt(prompts[0][1]).tokens), DrafterKind.NONE, 8, speculation)  # warm up
        with tempfile.TemporaryDirectory(prefix="drift-bench-") as tmp:
            for name in args.scenarios.split(","):
                results[name] = {"fresh": fresh, "stale": stale, "load": load}[name](
                    engine, prompts, args, speculation, Path(tmp))
    finally:
        engine.close()
    print(table(results))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(results, indent=2), encoding="utf-8")
        print(f"wrote {args.json_out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
