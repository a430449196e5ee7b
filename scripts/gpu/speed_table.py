"""Turn measure.sh's speed rows ("k ours_tps acceptance theirs_tps" on stdin) into a table and JSON.

    ... | python scripts/gpu/speed_table.py BASE_OURS BASE_THEIRS speed.json
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    base_ours, base_theirs, out = float(sys.argv[1]), float(sys.argv[2]), sys.argv[3]
    rows = []
    for line in sys.stdin:
        k, ours, acceptance, theirs = line.split()
        rows.append({"draft_max": int(k), "ours_tps": float(ours), "acceptance": float(acceptance),
                     "llama_tps": float(theirs), "ratio": float(ours) / float(theirs) if float(theirs) else None})
    data = {"main_alone_ours_tps": base_ours, "main_alone_llama_bench_tps": base_theirs, "identical_draft": rows}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(data, f, indent=2)
    print(f"main model alone: ours {base_ours:.1f} t/s, llama-bench tg {base_theirs:.1f} t/s "
          f"({base_ours / base_theirs:.2f}x)")
    print(f"{'draft max':>9} {'ours t/s':>9} {'llama t/s':>10} {'ours/llama':>10} {'accepted':>9}")
    for r in rows:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] else "-"
        print(f"{r['draft_max']:>9} {r['ours_tps']:>9.1f} {r['llama_tps']:>10.1f} {ratio:>10} {100 * r['acceptance']:>8.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
