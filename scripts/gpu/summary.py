"""The short table measure.sh prints last: cost profiles, ours vs llama.cpp, projected speedups.

    python scripts/gpu/summary.py RESULTS_DIR
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path


def main() -> int:
    results = Path(sys.argv[1])
    for profile_file in sorted(results.glob("profile-*.json")):
        profile = json.loads(profile_file.read_text())
        batch = profile["main_batch_s"]
        ratios = " ".join(f"{t / batch[0]:.2f}" for t in batch[:16])
        print(f"{profile_file.stem}: main step {1000 * batch[0]:.2f} ms, draft step "
              f"{1000 * profile['draft_step_s']:.2f} ms; T(n)/T(1) for n=1..16: {ratios}")
    speed = results / "speed.json"
    if speed.exists():
        rows = json.loads(speed.read_text())["identical_draft"]
        ratios = [r["ratio"] for r in rows if r["ratio"]]
        if ratios:
            print(f"identical draft, ours / llama-speculative-simple: min {min(ratios):.2f}x, "
                  f"median {sorted(ratios)[len(ratios) // 2]:.2f}x over draft-max {rows[0]['draft_max']}..{rows[-1]['draft_max']}")
    replay = results / "replay.txt"
    if replay.exists():
        print("projected speedup of the real Qwen pair's recorded acceptance on these profiles:")
        block = None
        for line in replay.read_text().splitlines():
            if line.startswith("== "):
                block = line[3:]
            elif re.match(r"^(median|  \w+: median)", line) and block:
                print(f"  {block:<38} {line.strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
