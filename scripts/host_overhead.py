"""How much of a speculative round is Python, not llama.cpp: the host overhead per drafted and per
verified token.

On a GPU a 0.5B draft step takes about 2 ms, so the work the loop does around llama_decode (sampling,
the confidence the policy reads, logits views, bookkeeping) must stay a small fraction of that. Each
round is split into: drafting minus the draft model's llama_decode time, verification minus the main
model's llama_decode time, and everything else in the round (accepting, text, events, the policy's
bookkeeping). The draft length is fixed so that every round drafts, whatever this machine's costs.

    .venv/bin/python scripts/host_overhead.py --tiny                      # tiny models, 270 and 152k vocabularies
    .venv/bin/python scripts/host_overhead.py MAIN.gguf DRAFT.gguf        # a real pair
    .venv/bin/python scripts/host_overhead.py --tiny MAIN DRAFT --json out.json

It also times the per-token pieces on a 152k-token logits row (argmax, the draft's top probability,
greedy verification of a 5-token draft, the logits view), the costs that grow with the vocabulary.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.engine import Engine  # noqa: E402
from app.core.frontdoor import GenerationRequest  # noqa: E402
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams  # noqa: E402
from app.core.speculation.events import Round, run_to_summary  # noqa: E402
from app.core.speculation.sampling import Sampler, top_probability  # noqa: E402

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "Explain in three sentences why the sky is blue.",
    "Rename the variable x to count in: def f(x):\n    for i in range(x):\n        print(i, x)\n    return x\n",
]
QWEN_VOCAB = 151_936


@dataclass
class Overhead:
    model: str
    drafter: str
    vocab: int
    rounds: int
    drafted: int
    verified: int
    draft_host_ms_per_drafted: float
    verify_host_ms_per_verified: float
    other_ms_per_round: float
    host_ms_per_round: float
    decode_ms_per_round: float
    host_fraction: float


class _RoundSplit:
    """Every round's time split into host work and llama.cpp's decoding (see the module docstring),
    summed over the rounds that drafted; fed each event of a generation."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.draft_host = self.verify_host = self.other = self.decode = 0.0
        self.rounds = self.drafted = self.verified = 0

    def start(self) -> None:
        """Before a generation: the decode clocks as they stand."""
        self.sessions = [s for s in (self.engine.main, self.engine.draft) if s is not None]
        self.last_decode = {id(s): s.decode_s for s in self.sessions}
        self.last_time = None

    def __call__(self, event) -> None:
        if not isinstance(event, Round):
            return
        engine, now = self.engine, time.perf_counter()
        main_d = engine.main.decode_s - self.last_decode[id(engine.main)]
        draft_d = (engine.draft.decode_s - self.last_decode[id(engine.draft)]) if engine.draft else 0.0
        self.last_decode = {id(s): s.decode_s for s in self.sessions}
        if self.last_time is not None and event.drafted:  # the first round's wall time includes the prompt
            self.rounds += 1
            self.drafted += event.drafted
            self.verified += event.drafted + 1
            self.draft_host += event.draft_s - draft_d
            self.verify_host += event.verify_s - main_d
            self.other += (now - self.last_time) - event.draft_s - event.verify_s
            self.decode += main_d + draft_d
        self.last_time = now


def measure(engine: Engine, label: str, drafter: str, n_predict: int, draft_max: int, repeat: int) -> Overhead:
    """Run the prompts ``repeat`` times and split every round's time (see the module docstring)."""
    sampling = SamplingParams(temperature=0.0, max_tokens=n_predict)
    speculation = SpeculationParams(draft_max=draft_max, policy="fixed")
    split = _RoundSplit(engine)
    for _ in range(repeat):
        for prompt in PROMPTS:
            request = GenerationRequest([{"role": "user", "content": prompt}], sampling=sampling,
                                        speculation=speculation, drafter=DrafterKind(drafter), empty_cache=True)
            generation = engine.generate(request)   # empties the caches: the clocks are read after
            split.start()
            run_to_summary(generation, split)
    s = split
    host = s.draft_host + s.verify_host + s.other
    return Overhead(label, drafter, engine.main.n_vocab, s.rounds, s.drafted, s.verified,
                    1000 * s.draft_host / max(s.drafted, 1), 1000 * s.verify_host / max(s.verified, 1),
                    1000 * s.other / max(s.rounds, 1), 1000 * host / max(s.rounds, 1),
                    1000 * s.decode / max(s.rounds, 1), host / max(host + s.decode, 1e-12))


def micro_benchmarks(n_vocab: int = QWEN_VOCAB, repeat: int = 300) -> dict[str, float]:
    """Milliseconds per call of the pieces whose cost grows with the vocabulary."""
    from app.core.llama.binding import logits_view

    rng = np.random.default_rng(0)
    rows = (rng.standard_normal((5, n_vocab)) * 3).astype(np.float32)
    pointer = rows.ctypes.data_as(ctypes.POINTER(ctypes.c_float))  # what llama_get_logits_ith returns
    sampler = Sampler(SamplingParams(temperature=0.0))
    draft = [int(np.argmax(r)) for r in rows[:4]]
    cases = {
        "argmax of one row": lambda: np.argmax(rows[0]),
        "top probability of one row": lambda: top_probability(rows[0]),
        "draft pick (greedy)": lambda: sampler.draft_pick(rows[0]),
        "verify a 4-token draft (greedy)": lambda: sampler.verify(rows, draft, [None] * 4),
        "logits view of 5 rows": lambda: logits_view(pointer, 5, n_vocab),
    }
    out = {}
    for name, fn in cases.items():
        fn()
        t0 = time.perf_counter()
        for _ in range(repeat):
            fn()
        out[name] = 1000 * (time.perf_counter() - t0) / repeat
    return out


def tiny_pairs(folder: Path) -> list[tuple[str, Path, Path]]:
    from app.core.gguf.tiny import TinySpec, write_tiny_model

    pairs = []
    for label, vocab in (("tiny, 270 tokens", 0), ("tiny, 152k tokens", QWEN_VOCAB)):
        main = write_tiny_model(folder / f"main-{vocab}.gguf", TinySpec(seed=0, vocab_size=vocab))
        draft = write_tiny_model(folder / f"draft-{vocab}.gguf", TinySpec(seed=0, vocab_size=vocab))
        pairs.append((label, main, draft))
    return pairs


def format_table(results: list[Overhead], micro: dict[str, float]) -> str:
    head = (f"{'model':<22} {'drafter':<7} {'rounds':>6} {'draft host':>11} {'verify host':>12} "
            f"{'other':>9} {'host/round':>11} {'decode/round':>13} {'host share':>10}")
    lines = [head, f"{'':<22} {'':<7} {'':>6} {'ms/drafted':>11} {'ms/verified':>12} {'ms/round':>9} "
                   f"{'ms':>11} {'ms':>13} {'':>10}"]
    for r in results:
        lines.append(f"{r.model:<22} {r.drafter:<7} {r.rounds:>6} {r.draft_host_ms_per_drafted:>11.3f} "
                     f"{r.verify_host_ms_per_verified:>12.3f} {r.other_ms_per_round:>9.3f} "
                     f"{r.host_ms_per_round:>11.3f} {r.decode_ms_per_round:>13.3f} {100 * r.host_fraction:>9.1f}%")
    lines.append("")
    lines.append(f"per call, {QWEN_VOCAB:,}-token logits rows:")
    lines += [f"  {name:<34} {ms:8.3f} ms" for name, ms in micro.items()]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("main", nargs="?", help="a real main model (GGUF)")
    parser.add_argument("draft", nargs="?", help="its draft model")
    parser.add_argument("--tiny", action="store_true", help="also measure tiny generated models")
    parser.add_argument("-n", "--n-predict", type=int, default=96)
    parser.add_argument("--draft-max", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("-t", "--threads", type=int, default=None)
    parser.add_argument("-ngl", "--gpu-layers", default="auto")
    parser.add_argument("--drafters", default="model,lookup", help="which drafters to measure (model,lookup)")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if not (args.tiny or (args.main and args.draft)):
        parser.error("give MAIN and DRAFT, or --tiny")

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        pairs = tiny_pairs(Path(tmp)) if args.tiny else []
        if args.main and args.draft:
            pairs.append((Path(args.main).stem[:22], Path(args.main), Path(args.draft)))
        for label, main_path, draft_path in pairs:
            engine = Engine.load(ModelParams(str(main_path), n_ctx=2048, n_threads=args.threads,
                                             n_gpu_layers=args.gpu_layers),
                                 ModelParams(str(draft_path), n_ctx=2048, n_threads=args.threads,
                                             n_gpu_layers=args.gpu_layers))
            try:
                for drafter in args.drafters.split(","):
                    results.append(measure(engine, label, drafter, args.n_predict, args.draft_max, args.repeat))
                    print(f"{label} / {drafter}: done", file=sys.stderr, flush=True)
            finally:
                engine.close()
    micro = micro_benchmarks()
    print(format_table(results, micro))
    if args.json:
        Path(args.json).write_text(json.dumps({"rounds": [asdict(r) for r in results], "micro_ms": micro,
                                               "draft_max": args.draft_max, "n_predict": args.n_predict},
                                              indent=2), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
