"""Time to the first token after switching back to a long conversation, with and without cache states
kept between conversations (app/core/llama/state_cache.py), paired, on the real pair: answer
conversation A (a history of about --history tokens), then B (another of the same length), then A again
with one more message, and time that last answer's first token. Runs alternate without and with the
states (a fresh engine each), so a burst of load hits both alike; the table gives each pair and the
medians, and the JSON every run.

    .venv/bin/python scripts/switch_bench.py MAIN.gguf [-md DRAFT.gguf] [--history 2000] [--pairs 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.engine import Engine  # noqa: E402
from app.core.frontdoor import GenerationRequest  # noqa: E402
from app.core.params import DrafterKind, ModelParams, SamplingParams, StatesConfig  # noqa: E402
from app.core.speculation.events import TokenPiece  # noqa: E402

TOPIC_A = "Here is the module we are refactoring, one function at a time:\n\n"
TOPIC_B = "Here are the meeting notes we are summarising, one section at a time:\n\n"


def history(engine: Engine, topic: str, filler: str, n_tokens: int) -> list[dict]:
    """A conversation whose rendered prompt is about ``n_tokens`` long: one long user message and a reply."""
    text, reply = topic, "Understood. Which part first?"
    while len(engine.main.model.tokenize(text)) < n_tokens:
        text += filler
    return [{"role": "user", "content": text}, {"role": "assistant", "content": reply}]


def first_token_s(engine: Engine, messages: list[dict], drafter: DrafterKind) -> float:
    start = time.perf_counter()
    for event in engine.generate(GenerationRequest(messages, sampling=SamplingParams(max_tokens=8, temperature=0),
                                                   drafter=drafter)):
        if isinstance(event, TokenPiece):
            return time.perf_counter() - start
    return time.perf_counter() - start


def one_run(args, states: StatesConfig | None) -> float:
    params = dict(n_ctx=4096, n_threads=args.threads)
    engine = Engine.load(ModelParams(args.main, **params), ModelParams(args.draft, **params) if args.draft else None,
                         states=states)
    try:
        filler = Path(__file__).read_text(encoding="utf-8")[:1500]
        a = history(engine, TOPIC_A, filler, args.history)
        b = history(engine, TOPIC_B, filler[::-1], args.history)
        drafter = DrafterKind.LOOKUP_MODEL if args.draft else DrafterKind.LOOKUP
        first_token_s(engine, a + [{"role": "user", "content": "Start with the first function."}], drafter)
        first_token_s(engine, b + [{"role": "user", "content": "Start with the first section."}], drafter)
        return first_token_s(engine, a + [{"role": "user", "content": "Now the second function."}], drafter)
    finally:
        engine.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("main")
    ap.add_argument("-md", "--draft")
    ap.add_argument("--history", type=int, default=2000)
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json")
    args = ap.parse_args()
    rows = []
    for i in range(args.pairs):
        without = one_run(args, None)
        with tempfile.TemporaryDirectory() as folder:
            kept = one_run(args, StatesConfig(Path(folder), 4 << 30))
        rows.append({"without_s": without, "with_s": kept, "ratio": without / kept})
        print(f"pair {i + 1}: first token after the switch {without:.2f} s without, {kept:.2f} s with "
              f"kept states ({without / kept:.1f}x)", flush=True)
    medians = {k: statistics.median(r[k] for r in rows) for k in ("without_s", "with_s", "ratio")}
    print(f"\nmedian of {args.pairs} pairs: {medians['without_s']:.2f} s without, {medians['with_s']:.2f} s with "
          f"({medians['ratio']:.1f}x), a history of about {args.history} tokens")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "pairs": rows, "medians": medians}, indent=1),
                                   encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
