"""A draft of another vocabulary against one of the main model's own, on real models, greedy.

For each prompt, on one engine per draft (the main model loaded with it), the main model alone and then
speculative, from an empty cache each (app.core.compare's way, so each ratio is measured side by side):
tokens/s, the ratio to the main model alone, acceptance overall and by draft position, and whether the
answer is token for token the main model's own (greedy decoding promises it; quantized CPU builds can
flip a near-tie, as `quickdraft bench`'s "same" column shows: "tie" where an answer parts where the main
model's two best logits are within NEAR_TIE; the script exits 1 if one parts anywhere else).

    .venv/bin/python scripts/crossvocab_bench.py -m qwen2.5-coder-1.5b-instruct-q4_k_m.gguf \\
        --same qwen2.5-coder-0.5b-instruct-q4_k_m.gguf --cross gemma-3-270m-q4_k_m.gguf \\
        --prompts ../shared/prompts/{code,chat,edit}.jsonl -n 256 --json crossvocab.json

The JSON holds the settings, each prompt's numbers per draft, every round (drafted, accepted, draft and
verify seconds, drafter), and, for the draft of another vocabulary, what scripts/policy_replay.py
`record` writes (``traces``: per answer position the main model's top probability and the draft's first
proposed main token with its score, reading the main model's answer; ``draft_batch_s``: the draft's
catch-up times), so that `policy_replay.py replay crossvocab.json PROFILE.json --drafter model` replays
the policy with it. `--policy fixed --draft-max 8` shows the acceptance at every length; the default
(auto) is what the app does, and may keep a draft that does not pay on this machine from drafting.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli.bench import load_prompts  # noqa: E402
from app.core.compare import first_difference, logit_margin  # noqa: E402
from app.core.engine import Engine  # noqa: E402
from app.core.frontdoor import GenerationRequest  # noqa: E402
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams  # noqa: E402
from app.core.speculation.calibration import round_robin_medians  # noqa: E402
from app.core.speculation.crossvocab import CrossVocabDrafter, draft_prompt  # noqa: E402
from app.core.speculation.events import Round, run_to_summary  # noqa: E402
from app.core.speculation.policy_base import FixedPolicy  # noqa: E402
from app.core.speculation.sampling import Sampler, top_probability  # noqa: E402

GREEDY = Sampler(SamplingParams(temperature=0.0))
NEAR_TIE = 0.5   # a logit margin under which batching can flip the main model's choice (tests/real)
NO_GUESS_P = 0.01


def greedy(engine: Engine, tokens: list[int], drafter: DrafterKind, n: int, speculation: SpeculationParams):
    """One greedy answer from an empty cache: its Summary and its rounds."""
    rounds: list[dict] = []

    def note(event) -> None:
        if isinstance(event, Round):
            rounds.append({"drafted": event.drafted, "accepted": event.accepted, "draft_s": event.draft_s,
                           "verify_s": event.verify_s, "drafter": event.drafter})

    request = GenerationRequest(prompt=tokens, sampling=SamplingParams(temperature=0.0, max_tokens=n),
                                speculation=speculation, drafter=drafter, empty_cache=True)
    summary = run_to_summary(engine.generate(request), note)
    if summary.error:
        raise SystemExit(f"error: {summary.error}")
    return summary, rounds


def measure(engine: Engine, prompt_id: str, tokens: list[int], args, speculation: SpeculationParams) -> dict:
    alone, _ = greedy(engine, tokens, DrafterKind.NONE, args.n_predict, speculation)
    spec, rounds = greedy(engine, tokens, args.drafter, args.n_predict, speculation)
    diff = first_difference(alone.token_ids, spec.token_ids)
    margin = None if diff is None or diff >= len(alone.token_ids) else \
        logit_margin(engine, tokens + list(alone.token_ids[:diff])).margin
    return {"prompt_id": prompt_id, "prompt_tokens": len(tokens), "alone_tps": alone.generation_tps,
            "tps": spec.generation_tps, "ratio": spec.generation_tps / alone.generation_tps if alone.generation_tps else 0.0,
            "identical": spec.token_ids == alone.token_ids,
            "first_difference": diff, "difference_margin": margin,
            "drafted": spec.drafted, "accepted": spec.accepted, "acceptance": spec.acceptance_rate,
            "drafted_by_position": list(spec.drafted_by_position),
            "accepted_by_position": list(spec.accepted_by_position),
            "by_drafter": {name: [d, a] for name, d, a in spec.by_drafter}, "rounds": rounds,
            "answer": list(alone.token_ids)}


def main_confidence(engine: Engine, prompt: list[int], answer: list[int]) -> list[float]:
    """The main model's top probability at each answer position, reading its own answer."""
    engine.forget_cache()
    engine.main.eval(prompt[:-1])
    sequence, out = [prompt[-1], *answer[:-1]], []
    for i in range(0, len(sequence), 64):
        out += [top_probability(row) for row in engine.main.eval(sequence[i:i + 64], all_logits=True)]
    engine.forget_cache()
    return out


def cross_guesses(engine: Engine, prompt: list[int], answer: list[int], draft_tokens: int) -> tuple[list, list]:
    """At each answer position, reading the main model's answer before it: the first main token the
    draft of another vocabulary proposes (from ``draft_tokens`` of its own) and its score; -1 where it
    proposes none (and at the first position, which the prompt phase answers), with NO_GUESS_P: policy_replay
    then replays a guess that is never right and that the draft is unsure of."""
    engine.forget_cache()
    drafter = CrossVocabDrafter(engine.draft, engine.main.model, engine.draft.model, engine.shared_vocab)
    policy = FixedPolicy(SpeculationParams(policy="fixed", draft_max=draft_tokens))
    drafter.prepare(prompt, policy)
    guesses, scores = [-1], [NO_GUESS_P]
    for i in range(1, len(answer)):
        draft = drafter.draft(prompt + answer[:i], draft_tokens, policy, GREEDY)
        guesses.append(int(draft.tokens[0]) if len(draft) else -1)
        scores.append(float(draft.scores[0]) if len(draft) else NO_GUESS_P)
    engine.forget_cache()
    return guesses, scores


def draft_batch_times(engine: Engine, prompt: list[int]) -> dict[int, float]:
    """What the draft model takes to read n tokens in one batch (its catch-up), in its own tokens."""
    filler = (draft_prompt(engine.main.model, engine.draft.model, prompt) * 64)[:320]
    sizes = (1, 2, 4, 8, 16, 32, 64)
    times = round_robin_medians(engine.draft, filler[:256], [filler[256:256 + n] for n in sizes], 5, None, "draft")
    engine.forget_cache()
    return dict(zip(sizes, times))


def _same(r: dict) -> str:
    if r["identical"]:
        return "same"
    margin = r["difference_margin"]
    return f"differs at {r['first_difference']}" + (f" (logit margin {margin:.2f})" if margin is not None else "")


def _explained(r: dict) -> bool:
    """The same answer, or one that parts at a near-tie the batch shape can flip."""
    return r["identical"] or (r["difference_margin"] is not None and r["difference_margin"] < NEAR_TIE)


def positions(results: list[dict]) -> list[float]:
    drafted = np.zeros(max((len(r["drafted_by_position"]) for r in results), default=0))
    accepted = np.zeros_like(drafted)
    for r in results:
        drafted[:len(r["drafted_by_position"])] += r["drafted_by_position"]
        accepted[:len(r["accepted_by_position"])] += r["accepted_by_position"]
    return [float(a / d) if d else 0.0 for a, d in zip(accepted, drafted)]


def table(report: dict) -> str:
    names = list(report["drafts"])
    head = f"{'prompt':12s} {'alone t/s':>9s}" + "".join(f" | {n + ' t/s':>12s} {'ratio':>6s} {'accept':>6s} {'same':>4s}"
                                                          for n in names)
    lines = [head, "-" * len(head)]
    for i, prompt_id in enumerate(report["prompts"]):
        rows = [report["drafts"][n]["results"][i] for n in names]
        lines.append(f"{prompt_id:12s} {rows[0]['alone_tps']:9.2f}" + "".join(
            f" | {r['tps']:12.2f} {r['ratio']:5.2f}x {100 * r['acceptance']:5.0f}% "
            f"{'yes' if r['identical'] else 'tie' if _explained(r) else 'NO':>4s}"
            for r in rows))
    lines.append("-" * len(head))
    for n in names:
        d = report["drafts"][n]
        lines.append(f"{n}: median ratio {d['median_ratio']:.2f}x, acceptance {100 * d['acceptance']:.0f}%, "
                     f"identical {d['identical']}/{len(d['results'])}; by draft position: "
                     + " ".join(f"{100 * p:.0f}%" for p in d["acceptance_by_position"]))
    if "shared_vocab" in report:
        lines.append(f"cross: {report['shared_vocab']['describe']}")
    return "\n".join(lines)


def load(args, draft: str) -> Engine:
    params = dict(n_ctx=args.ctx, n_threads=args.threads, device=args.device)
    return Engine.load(ModelParams(args.main, n_gpu_layers=args.gpu_layers, **params),
                       ModelParams(draft, n_gpu_layers=args.gpu_layers_draft, **params))


def run(args) -> dict:
    prompts = load_prompts(args.prompts)[: args.limit]
    speculation = SpeculationParams(draft_max=args.draft_max, policy=args.policy)
    report = {"settings": {k: v for k, v in vars(args).items()}, "prompts": [p for p, _ in prompts], "drafts": {}}
    drafts = [("same", args.same), ("cross", args.cross)] if args.same else [("cross", args.cross)]
    for name, path in drafts:
        engine = load(args, path)
        try:
            if name == "cross" and engine.shared_vocab is None:
                raise SystemExit(f"error: {path} shares the main model's vocabulary: give it as --same")
            results = []
            for prompt_id, messages in prompts:
                tokens = list(engine.prompt(messages).tokens)
                results.append(measure(engine, prompt_id, tokens, args, speculation))
                r = results[-1]
                print(f"{name:5s} {prompt_id}: {r['alone_tps']:.2f} -> {r['tps']:.2f} t/s ({r['ratio']:.2f}x), "
                      f"accepted {r['accepted']}/{r['drafted']}, {_same(r)}", file=sys.stderr, flush=True)
                if name == "cross" and not args.no_traces:
                    started = time.perf_counter()
                    answer = r["answer"]
                    guesses, scores = cross_guesses(engine, tokens, answer, args.trace_draft)
                    report.setdefault("traces", []).append(dict(
                        id=prompt_id, prompt=tokens, tokens=answer, main_p=main_confidence(engine, tokens, answer),
                        draft_tokens=guesses, draft_p=scores))
                    print(f"      traced in {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
            if name == "cross":
                shared = engine.shared_vocab
                report["shared_vocab"] = {"shared": shared.shared, "draft_tokens": len(shared.draft_to_main),
                                          "seconds": shared.seconds, "describe": shared.describe()}
                if not args.no_traces:
                    report["draft_batch_s"] = draft_batch_times(engine, list(engine.prompt(prompts[0][1]).tokens))
        finally:
            engine.close()
        drafted, accepted = sum(r["drafted"] for r in results), sum(r["accepted"] for r in results)
        report["drafts"][name] = {"path": path, "results": results,
                                  "median_ratio": statistics.median(r["ratio"] for r in results),
                                  "acceptance": accepted / drafted if drafted else 0.0,
                                  "identical": sum(r["identical"] for r in results),
                                  "acceptance_by_position": positions(results)}
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--main", required=True, help="the main model (GGUF)")
    ap.add_argument("--cross", required=True, help="a draft of another vocabulary")
    ap.add_argument("--same", help="a draft of the main model's own vocabulary, for comparison")
    ap.add_argument("--prompts", nargs="+", required=True, help="JSONL prompt files (as `quickdraft bench`)")
    ap.add_argument("-n", "--n-predict", type=int, default=256)
    ap.add_argument("--limit", type=int, default=None, help="the first N prompts only")
    ap.add_argument("--drafter", type=DrafterKind, default=DrafterKind.MODEL, choices=["model", "lookup+model"])
    ap.add_argument("--policy", default="auto", choices=["auto", "fixed", "pmin"])
    ap.add_argument("--draft-max", type=int, default=16)
    ap.add_argument("-c", "--ctx", type=int, default=4096)
    ap.add_argument("-t", "--threads", type=int, default=None)
    ap.add_argument("-ngl", "--gpu-layers", default="auto")
    ap.add_argument("-ngld", "--gpu-layers-draft", default="auto")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--trace-draft", type=int, default=4, help="draft tokens behind each traced guess (4)")
    ap.add_argument("--no-traces", action="store_true", help="skip the policy_replay traces")
    ap.add_argument("--json", dest="json_out", help="write everything to this file")
    args = ap.parse_args(argv)
    report = run(args)
    print(table(report))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(report, indent=1))
        print(f"wrote {args.json_out}", file=sys.stderr)
    return 0 if all(_explained(r) for d in report["drafts"].values() for r in d["results"]) else 1


if __name__ == "__main__":
    sys.exit(main())
