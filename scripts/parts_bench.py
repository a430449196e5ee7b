"""What speculation does to each part of an answer (issue 28): reasoning, answer text and tool-call
JSON, on real models.

    .venv/bin/python scripts/parts_bench.py -m MAIN.gguf -md DRAFT.gguf \\
        --prompts scripts/data/tool_prompts.jsonl ../shared/prompts/chat.jsonl -n 160 --json parts.json

Each prompt (a JSON line with "messages", and "tools" for a tool-calling prompt: they reach the chat
template as the server passes them) is answered greedily with the default drafter and policy, after
one warm-up answer so the auto policy starts from this machine's costs. The engine tags every round
with the part most of its tokens belong to (`Summary.by_part`); the table sums the parts over all
prompts: tokens, drafted, accepted, acceptance, mean accepted per drafting round and tokens/s, and the
share of the part's tokens that came from accepted drafts.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.chat.tools import CALL_SPANS, tool_format  # noqa: E402
from app.core.engine import Engine  # noqa: E402
from app.core.frontdoor import GenerationRequest  # noqa: E402
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams  # noqa: E402
from app.core.speculation.events import run_to_summary  # noqa: E402


def read_prompts(files: list[str]) -> list[dict]:
    prompts = []
    for name in files:
        with open(name, encoding="utf-8") as f:
            prompts += [json.loads(line) for line in f if line.strip()]
    return prompts


def answer(engine: Engine, prompt: dict, n_predict: int, drafter: str):
    """The greedy answer, with the prompt's tools in the template and its calls read as the server reads them."""
    variables = {"tools": prompt["tools"]} if prompt.get("tools") else {}
    fmt = tool_format(engine.pair.chat_template) if variables else None
    request = GenerationRequest(prompt["messages"], sampling=SamplingParams(temperature=0.0, max_tokens=n_predict),
                                speculation=SpeculationParams(), drafter=DrafterKind(drafter),
                                template_variables=variables, tool_spans=CALL_SPANS[fmt] if fmt else None)
    return run_to_summary(engine.generate(request))


def add_parts(totals: dict, summary) -> None:
    for part, drafted, accepted, tokens, seconds in summary.by_part:
        row = totals.setdefault(part, dict(tokens=0, drafted=0, accepted=0, seconds=0.0, prompts=0))
        row["tokens"] += tokens
        row["drafted"] += drafted
        row["accepted"] += accepted
        row["seconds"] += seconds
        row["prompts"] += 1


def table(totals: dict) -> str:
    lines = ["| part | prompts | tokens | drafted | accepted | acceptance | from drafts | tok/s |",
             "|---|---|---|---|---|---|---|---|"]
    for part, r in sorted(totals.items()):
        acceptance = f"{100 * r['accepted'] / r['drafted']:.0f}%" if r["drafted"] else "–"
        share = f"{100 * r['accepted'] / r['tokens']:.0f}%" if r["tokens"] else "–"
        tps = f"{r['tokens'] / r['seconds']:.1f}" if r["seconds"] > 0 else "–"
        lines.append(f"| {part} | {r['prompts']} | {r['tokens']} | {r['drafted']} | {r['accepted']} | {acceptance} | "
                     f"{share} | {tps} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-m", "--main", required=True)
    p.add_argument("-md", "--draft", default=None)
    p.add_argument("--prompts", nargs="+", required=True)
    p.add_argument("-n", "--n-predict", type=int, default=160)
    p.add_argument("--drafter", default="lookup+model")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    engine = Engine.load(ModelParams(args.main), ModelParams(args.draft) if args.draft else None)
    prompts = read_prompts(args.prompts)
    answer(engine, prompts[0], 32, args.drafter)   # warm-up: the policy learns this machine's costs
    totals: dict = {}
    rows = []
    for prompt in prompts:
        summary = answer(engine, prompt, args.n_predict, args.drafter)
        add_parts(totals, summary)
        rows.append(dict(id=prompt["id"], text=summary.text, by_part=summary.to_dict()["by_part"]))
        parts = ", ".join(f"{part} {tokens} tokens {accepted}/{drafted}" for part, drafted, accepted, tokens, _
                          in summary.by_part)
        print(f"{prompt['id']:10} {parts}", file=sys.stderr, flush=True)
    print(table(totals))
    if args.json:
        Path(args.json).write_text(json.dumps(dict(main=args.main, draft=args.draft, n_predict=args.n_predict,
                                                   drafter=args.drafter, totals=totals, prompts=rows), indent=1))
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
