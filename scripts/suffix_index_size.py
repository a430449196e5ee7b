"""How the suffix index grows with use: a simulated month of heavy agent use written as the engine writes
it, then, per size, the log's bytes, the time to load it (read the log, build the index), the memory the
index takes, and what drafting costs per token (a chain over a context that repeats past work, and a
lookup that finds nothing).

The documents are agent-like: a pool of files (random token ids of a 151,936-token vocabulary, as
Qwen2.5's) rewritten with a few changed tokens, tool calls of a few JSON shapes with varying arguments,
and new text. A day of heavy use is DAY_TOKENS new tokens (200 requests of about 2,700 new tokens);
the index is bounded by the limit (64 MB, the default: about 16 million tokens), so a month of such
days reaches the bound and stays there.

    .venv/bin/python scripts/suffix_index_size.py [--days 1 7 30 90] [--limit-mb 64] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.speculation.suffix_index import SuffixIndex  # noqa: E402
from app.core.speculation.suffix_store import HEADER, SuffixStore, record  # noqa: E402

VOCAB = 151_936
DAY_TOKENS = 200 * 2_700


class Workload:
    """Agent-like documents, drawn reproducibly."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.files = [self._text(int(self.rng.integers(200, 1500))) for _ in range(300)]
        self.shapes = [self._text(int(self.rng.integers(10, 40))) for _ in range(20)]

    def _text(self, n: int) -> np.ndarray:
        return self.rng.integers(0, VOCAB, size=n).astype(np.int32)

    def document(self) -> np.ndarray:
        """A request's new tokens: a file rewritten with a few changes, a tool call or two, new words."""
        parts = []
        file = self.files[int(self.rng.integers(len(self.files)))].copy()
        changed = self.rng.integers(0, len(file), size=int(self.rng.integers(1, 6)))
        file[changed] = self._text(len(changed))
        parts.append(file)
        for _ in range(int(self.rng.integers(1, 3))):
            shape = self.shapes[int(self.rng.integers(len(self.shapes)))]
            parts += [shape, self._text(int(self.rng.integers(3, 12)))]
        parts.append(self._text(int(self.rng.integers(50, 1000))))
        return np.concatenate(parts)

    def query(self) -> list[int]:
        """A context that is repeating past work: the start of a file, as an agent writes it again."""
        file = self.files[int(self.rng.integers(len(self.files)))]
        cut = int(self.rng.integers(40, len(file) - 40))
        return [int(t) for t in file[:cut]]


def write_days(folder: Path, days: int, limit_bytes: int, workload: Workload) -> tuple[int, int]:
    """The log after ``days`` of use, compacted as the store compacts it: (documents, tokens)."""
    docs, size, written = [], 0, 0
    while written < days * DAY_TOKENS:
        doc = workload.document()
        docs.append(doc)
        written += len(doc)
        size += HEADER.size + 4 * len(doc)
        if size > limit_bytes:   # the store's rule: keep the newest that fit in 3/4 of the limit
            kept, size = [], 0
            for d in reversed(docs):
                if size + HEADER.size + 4 * len(d) > 0.75 * limit_bytes:
                    break
                kept.append(d)
                size += HEADER.size + 4 * len(d)
            docs = kept[::-1]
    folder.mkdir(parents=True, exist_ok=True)
    SuffixStore(folder, "fp", "simulated", limit_bytes).open()   # the meta file
    (folder / "tokens.log").write_bytes(b"".join(record(d) for d in docs))
    return len(docs), sum(len(d) for d in docs)


def measure(folder: Path, limit_bytes: int, workload: Workload, lookups: int) -> dict:
    start = time.perf_counter()
    docs = SuffixStore(folder, "fp", "simulated", limit_bytes).open()
    read_s = time.perf_counter() - start
    index = SuffixIndex(docs)
    load_s = time.perf_counter() - start
    memory = sum(s.text.nbytes + s.order.nbytes + s.first_tokens.nbytes + s.first_starts.nbytes
                 for s in index._segments)
    drafted, spent = 0, 0.0
    for _ in range(lookups):
        context = workload.query()
        start = time.perf_counter()
        drafted += len(list(index.chain(context, 16)))
        spent += time.perf_counter() - start
    misses = [[int(t) for t in workload.rng.integers(0, VOCAB, size=32)] for _ in range(lookups)]
    start = time.perf_counter()
    for context in misses:
        index.continuation(context)
    miss_s = (time.perf_counter() - start) / lookups
    return dict(documents=index.documents, tokens=index.tokens, segments=len(index._segments),
                log_bytes=(folder / "tokens.log").stat().st_size, read_s=read_s, load_s=load_s,
                memory_bytes=memory, drafted=drafted, per_drafted_token_s=spent / max(1, drafted),
                per_lookup_miss_s=miss_s)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--days", type=int, nargs="+", default=[1, 7, 30, 90])
    ap.add_argument("--limit-mb", type=int, default=64)
    ap.add_argument("--lookups", type=int, default=200, help="contexts drafted from, per size")
    ap.add_argument("--json", help="write the rows to this JSON file")
    args = ap.parse_args(argv)
    limit = args.limit_mb << 20
    rows = []
    print(f"{'days':>5} {'documents':>10} {'tokens':>11} {'log MB':>7} {'load s':>7} {'memory MB':>10} "
          f"{'us/drafted':>11} {'us/miss':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for days in args.days:
            workload = Workload()
            folder = Path(tmp) / f"days-{days}"
            write_days(folder, days, limit, workload)
            row = dict(days=days, **measure(folder, limit, workload, args.lookups))
            rows.append(row)
            print(f"{days:5d} {row['documents']:10d} {row['tokens']:11d} {row['log_bytes'] / 2**20:7.1f} "
                  f"{row['load_s']:7.2f} {row['memory_bytes'] / 2**20:10.1f} {row['per_drafted_token_s'] * 1e6:11.0f} "
                  f"{row['per_lookup_miss_s'] * 1e6:8.0f}")
    if args.json:
        Path(args.json).write_text(json.dumps(dict(limit_mb=args.limit_mb, day_tokens=DAY_TOKENS, rows=rows),
                                              indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
