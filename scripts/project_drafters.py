"""Project what EAGLE-3 and DFlash drafting would give on a GPU, from stated assumptions: a GPU-like
cost profile, each drafter's cost relative to a main step, and per-token acceptance. No GPU and no
real EAGLE-3 or DFlash GGUF was reachable from this machine, so this is a projection, not a
measurement; every assumption is a flag, and the table says which it used.

The expected speed of a round that verifies k drafted tokens is the auto policy's own formula
(``AutoPolicy.expected_speeds``): E[accepted + 1] / (drafting time + T_main(k + 1)), with each token
accepted with chance ``alpha`` given the ones before it were. The best k is taken, as the policy
would, and the speedup is that speed times a main step's time.

- EAGLE-3 drafts a chain: ``--eagle3-step`` main steps per drafted token (0.05 measured on this CPU
  for Llama 3.1 8B's shapes, scripts/gpu/drafter_step.py; a GPU's small kernels cost relatively more).
- DFlash drafts a block of ``--block`` tokens in one pass: ``--dflash-block`` main steps whatever is
  verified (its few layers and the head over a block's rows).
- The GPU-like profile: verifying n tokens costs ``1 + slope * (n - 1)`` main steps (a memory-bound
  8B model on a big GPU: the weights are read once for the whole batch).

    python scripts/project_drafters.py [--alpha 0.6 0.7 0.8 0.9] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.core.speculation.costmodel import CostProfile  # noqa: E402
from app.core.speculation.policy import AutoPolicy  # noqa: E402


def gpu_profile(slope: float, n_max: int) -> CostProfile:
    """Batch times in main steps (a main step is 1.0)."""
    return CostProfile(key={"projection": "gpu-like"}, main_batch_s=[1.0 + slope * i for i in range(n_max)])


def best_speedup(alpha: float, max_len: int, token_cost: float, block_cost: float,
                 profile: CostProfile) -> tuple[float, int]:
    """(tokens per main step at the best verify length, that length; 0: not drafting pays best). A
    block's cost is paid whatever is verified; a chain's tokens each cost their step."""
    chances, costs = [alpha] * max_len, [token_cost] * max_len
    speeds = AutoPolicy.expected_speeds(chances, costs, block_cost or None, profile)
    speeds[0] = 1.0 / profile.main_batch(1)   # verifying none: no draft is asked for, nothing is paid
    k = max(range(len(speeds)), key=speeds.__getitem__)
    return speeds[k] * profile.main_batch(1), k


def project(args) -> list[dict]:
    profile = gpu_profile(args.slope, args.block + 2)
    rows = []
    for alpha in args.alpha:
        eagle3, k3 = best_speedup(alpha, args.eagle3_max, args.eagle3_step, 0.0, profile)
        dflash, kd = best_speedup(alpha, args.block, 0.0, args.dflash_block, profile)
        rows.append({"alpha": alpha, "eagle3_speedup": eagle3, "eagle3_k": k3, "dflash_speedup": dflash, "dflash_k": kd})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--alpha", type=float, nargs="+", default=[0.6, 0.7, 0.8, 0.9],
                    help="per-token acceptance, given the tokens before were accepted")
    ap.add_argument("--slope", type=float, default=0.02, help="extra main steps per verified token (0.02)")
    ap.add_argument("--eagle3-step", type=float, default=0.08, help="an EAGLE-3 token, in main steps (0.08)")
    ap.add_argument("--eagle3-max", type=int, default=8, help="longest EAGLE-3 chain (8)")
    ap.add_argument("--dflash-block", type=float, default=0.3, help="a DFlash block, in main steps (0.3)")
    ap.add_argument("--block", type=int, default=15, help="tokens a DFlash block proposes (15: a block of 16)")
    ap.add_argument("--json", help="write the rows and the assumptions here")
    args = ap.parse_args()
    rows = project(args)
    print(f"GPU-like profile: verifying n tokens costs 1 + {args.slope} (n - 1) main steps; an EAGLE-3 token "
          f"{args.eagle3_step} of a step (chains up to {args.eagle3_max}); a DFlash block of {args.block} "
          f"{args.dflash_block} of a step. Projected, not measured.\n")
    print("| per-token acceptance | EAGLE-3 speedup (best k) | DFlash speedup (best k) |")
    print("|---|---|---|")
    for r in rows:
        print(f"| {r['alpha']:.2f} | {r['eagle3_speedup']:.2f}x ({r['eagle3_k']}) | {r['dflash_speedup']:.2f}x ({r['dflash_k']}) |")
    if args.json:
        Path(args.json).write_text(json.dumps({"assumptions": vars(args), "rows": rows}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
