"""What a verify batch of every size costs the main model on this machine, and which sizes a batch
would be padded to (``CostProfile.cheapest_batch``): each size from 1 to ``--max`` decoded with every
row's logits after ``--context`` cached tokens, ``--repeat`` times round-robin, the least time kept.
llama.cpp's CPU kernels work on tiles of tokens, so a size just past a tile's end can cost more than a
bigger one (on one thread of this project's zen4 CPU, 15 tokens 9.3 steps and 16 tokens 6.9).

    .venv/bin/python scripts/batch_sizes.py -m MAIN.gguf -t 1 --json sizes.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.llama.binding import LlamaModel, LlamaSession  # noqa: E402
from app.core.params import ModelParams  # noqa: E402
from app.core.speculation.costmodel import CostProfile  # noqa: E402


def time_sizes(session: LlamaSession, context: int, largest: int, repeat: int) -> list[float]:
    """[n - 1]: the least seconds over ``repeat`` decodes of a batch of n after ``context`` tokens."""
    filler = [(7 * i) % 1000 + 10 for i in range(context + largest)]
    session.eval(filler[:context])
    best = [float("inf")] * largest
    for _ in range(repeat):
        for n in range(1, largest + 1):
            started = time.perf_counter()
            session.eval(filler[context:context + n], all_logits=True)
            best[n - 1] = min(best[n - 1], time.perf_counter() - started)
            session.truncate(context)
    return best


def table(times: list[float]) -> str:
    """Each size's time, in steps of one token, per token, and the size it would be padded to."""
    profile = CostProfile(key={}, main_batch_s=times)
    lines = [f"{'batch':>5}  {'ms':>8}  {'steps':>6}  {'per token':>9}  padded to"]
    for n, t in enumerate(times, 1):
        to = profile.cheapest_batch(n)
        lines.append(f"{n:>5}  {1000 * t:8.1f}  {t / times[0]:6.2f}  {t / times[0] / n:9.2f}  {to if to != n else ''}")
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-m", "--main", required=True)
    p.add_argument("-t", "--threads", type=int, default=1)
    p.add_argument("--max", type=int, default=65, help="the largest batch timed")
    p.add_argument("--context", type=int, default=150, help="tokens cached before each batch")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--json")
    args = p.parse_args()
    model = LlamaModel(ModelParams(path=args.main, n_gpu_layers=0, device="cpu"))
    session = LlamaSession(model, n_ctx=args.context + args.max + 1, n_threads=args.threads)
    try:
        times = time_sizes(session, args.context, args.max, args.repeat)
    finally:
        model.close()
    print(table(times))
    if args.json:
        Path(args.json).write_text(json.dumps({"main": args.main, "threads": args.threads, "context": args.context,
                                               "repeat": args.repeat, "main_batch_s": times}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
