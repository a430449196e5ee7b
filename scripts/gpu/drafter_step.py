"""Print, as JSON, what a drafter over the main model's hidden states costs beside its main model on this
machine. Medians over 16 rounds after a 64-token prompt.

- ``eagle3``: the main model decoding one token; the EAGLE-3 drafter taking in one accepted token (its
  encoder over the main model's states and a pair: ``start``) and chaining one drafted token (``step``).
- ``dflash``: the main model decoding one token and verifying a batch of a block's size; the DFlash
  drafter taking in one decoded token's states (the injection: ``start``) and proposing a whole block in
  one pass (``block``). The policy's prior for a block (BLOCK_PRIOR_STEPS) is checked against
  ``block_over_main``.

Beside the times, ``values`` says whether what each part computed is a number, and its largest size: the
main model's logits, its hidden states the drafter reads, and the drafter's logits. A drafter whose
answers stop as not a number on a GPU but not on the CPU is found here, part by part.

    python scripts/gpu/drafter_step.py eagle3|dflash MAIN.gguf DRAFTER.gguf GPU_LAYERS > step.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.llama.binding import LlamaModel, LlamaSession  # noqa: E402
from app.core.llama.dflash import DFlashHead  # noqa: E402
from app.core.llama.eagle3 import Eagle3Head  # noqa: E402
from app.core.params import ModelParams  # noqa: E402

PROMPT_TOKENS = 64
ROUNDS = 16
HEADS = {"eagle3": Eagle3Head, "dflash": DFlashHead}


def timed(times: list[float], call):
    start = time.perf_counter()
    result = call()
    times.append(time.perf_counter() - start)
    return result


def eagle3_round(session, head, context: list[int], times: dict) -> None:
    logits = timed(times["start"], lambda: head.start(context))
    timed(times["step"], lambda: head.step(int(logits.argmax())))


def dflash_round(session, head, context: list[int], times: dict) -> None:
    timed(times["start"], lambda: head.start(context))
    timed(times["block"], lambda: head.block(context, head.max_block))   # logits and any confidence


def looked_at(array) -> dict:
    """How many values are NaN or +inf (the engine's NonFiniteLogits rule: -inf is a token ruled out, as
    an EAGLE-3 drafter's outside its own vocabulary are), and the largest size among the finite ones."""
    a = np.asarray(array, dtype=np.float32)
    bad = np.isnan(a) | (a == np.inf)
    finite = np.isfinite(a)
    return {"not_a_number": int(bad.sum()), "max_abs": float(np.abs(a[finite]).max()) if finite.any() else None}


def values(session, head, context: list[int]) -> dict:
    """The main model's last logits, its hidden states at every decoded position and the drafter's first
    logits, each looked at."""
    main_logits = session.eval(context[-1:])
    session.truncate(len(context) - 1)
    hidden = head.hidden.rows(0, min(head.hidden.valid, len(session.cached)))
    drafted = head.start(context)
    if isinstance(head, DFlashHead):
        drafted, _ = head.block(context, head.max_block)
    return {"main_logits": looked_at(main_logits), "hidden_states": looked_at(hidden),
            "drafter_logits": looked_at(drafted)}


def main() -> int:
    kind, main_path, drafter_path, layers = sys.argv[1:5]
    main_model = LlamaModel(ModelParams(main_path, n_gpu_layers=layers))
    drafter = LlamaModel(ModelParams(drafter_path, n_gpu_layers=layers))
    session = LlamaSession(main_model, 1024)
    head = HEADS[kind](session, drafter)
    batch = head.max_block + 1 if kind == "dflash" else 0
    filler = main_model.tokenize("The quick brown fox jumps over the lazy dog. " * 40, add_special=False)
    context = filler[:PROMPT_TOKENS]
    session.eval(context[:-1])
    head.start(context)
    times: dict[str, list[float]] = {"main": [], "verify": [], "start": [], "step": [], "block": []}
    for i in range(ROUNDS):
        if batch:   # a verify batch of a block's size, taken back
            kept = len(session.cached)
            timed(times["verify"], lambda: session.eval(filler[kept:kept + batch], all_logits=True))
            session.truncate(kept)
        timed(times["main"], lambda: session.eval(context[-1:]))
        context = context + [filler[(PROMPT_TOKENS + i) % len(filler)]]
        (dflash_round if kind == "dflash" else eagle3_round)(session, head, context, times)
    result = {f"{name}_ms": 1000 * statistics.median(t) for name, t in times.items() if t}
    if kind == "dflash":
        result["block"] = head.max_block
        result["block_over_main"] = result["block_ms"] / result["main_ms"]
    else:
        result["step_over_main"] = result["step_ms"] / result["main_ms"]
    result["values"] = values(session, head, context)
    print(json.dumps(result))
    head.close()
    session.close()
    drafter.close()
    main_model.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
