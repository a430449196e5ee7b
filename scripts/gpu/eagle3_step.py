"""Print, as JSON, what one step of an EAGLE-3 drafter costs beside one step of its main model on this
machine: the main model decoding one token, the drafter taking in one accepted token (the encoder over
the main model's states and a pair; ``start``), and one drafted token chained (``step``). Medians.

    python scripts/gpu/eagle3_step.py MAIN.gguf EAGLE3.gguf GPU_LAYERS > eagle3-step.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.llama.binding import LlamaModel, LlamaSession  # noqa: E402
from app.core.llama.eagle3 import Eagle3Head  # noqa: E402
from app.core.params import ModelParams  # noqa: E402

PROMPT_TOKENS = 64
STEPS = 16


def timed(call) -> tuple[float, object]:
    start = time.perf_counter()
    result = call()
    return time.perf_counter() - start, result


def main() -> int:
    main_path, drafter_path, layers = sys.argv[1], sys.argv[2], sys.argv[3]
    main_model = LlamaModel(ModelParams(main_path, n_gpu_layers=layers))
    drafter = LlamaModel(ModelParams(drafter_path, n_gpu_layers=layers))
    session = LlamaSession(main_model, 1024)
    head = Eagle3Head(session, drafter)
    filler = main_model.tokenize("The quick brown fox jumps over the lazy dog. " * 20, add_special=False)
    context = filler[:PROMPT_TOKENS]
    session.eval(context[:-1])
    head.start(context)
    main_s, start_s, step_s = [], [], []
    for i in range(STEPS):
        seconds, _ = timed(lambda: session.eval(context[-1:]))
        main_s.append(seconds)
        context = context + [filler[(PROMPT_TOKENS + i) % len(filler)]]
        seconds, logits = timed(lambda: head.start(context))
        start_s.append(seconds)
        seconds, _ = timed(lambda: head.step(int(logits.argmax())))
        step_s.append(seconds)
    result = {"main_step_ms": 1000 * statistics.median(main_s), "eagle3_start_ms": 1000 * statistics.median(start_s),
              "eagle3_step_ms": 1000 * statistics.median(step_s)}
    result["step_over_main"] = result["eagle3_step_ms"] / result["main_step_ms"]
    print(json.dumps(result))
    head.close()
    session.close()
    drafter.close()
    main_model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
