"""Does batching alone change a model's greedy choice? (A diagnostic for `quickdraft bench`'s "same" column.)

For each prompt, decode greedily one token at a time, then read the same tokens again in batches of B
(as a verify batch does) and list the positions where the batched logits pick another token, with the
logit margin of that choice. On CPU builds llama.cpp uses other kernels for batches than for single
tokens, so their last bits differ; a speculative answer that parts from the plain one at such a
position is this rounding, not a fault of the speculative loop.

    .venv/bin/python scripts/batch_numerics.py MAIN.gguf --batch 8 -n 128 --prompts ../shared/prompts/chat.jsonl
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli.bench import load_prompts  # noqa: E402
from app.core.chat.prompt import prompt_tokens  # noqa: E402
from app.core.llama.binding import LlamaModel, LlamaSession  # noqa: E402
from app.core.params import ModelParams  # noqa: E402


def greedy_one_by_one(session: LlamaSession, model: LlamaModel, prompt: list[int], n: int) -> list[int]:
    logits = session.eval(prompt)[-1]
    tokens: list[int] = []
    for _ in range(n):
        token = int(np.argmax(logits))
        tokens.append(token)
        if model.is_eog(token):
            break
        logits = session.eval([token])[-1]
    return tokens


def batched_choices(session: LlamaSession, prompt: list[int], tokens: list[int], batch: int) -> np.ndarray:
    """Logits for each answer position when the answer is read back in batches of ``batch``."""
    session.truncate(len(prompt) - 1)
    sequence = [prompt[-1], *tokens[:-1]]
    rows = [session.eval(sequence[i:i + batch], all_logits=True).copy() for i in range(0, len(sequence), batch)]
    return np.concatenate(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--prompts", nargs="+", required=True)
    args = ap.parse_args(argv)

    model = LlamaModel(ModelParams(args.model))
    flips = positions = 0
    for prompt_id, messages in load_prompts(args.prompts):
        prompt = prompt_tokens(model, messages).tokens
        session = LlamaSession(model, n_ctx=len(prompt) + args.n_predict + 8, n_threads=args.threads)
        tokens = greedy_one_by_one(session, model, prompt, args.n_predict)
        rows = batched_choices(session, prompt, tokens, args.batch)
        for i, token in enumerate(tokens):
            choice = int(np.argmax(rows[i]))
            positions += 1
            if choice != token:
                flips += 1
                print(f"{prompt_id} @{i}: one by one {token}, in a batch of {args.batch} {choice} "
                      f"(by {rows[i][choice] - rows[i][token]:.3f} logits)")
        session.close()
    print(f"batches of {args.batch}: {flips} of {positions} positions choose another token")
    model.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
