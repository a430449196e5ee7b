"""Steer a random MTP head (its own or a separate drafter's) so that rounds accept some of its drafts
and reject others: the tests of both MTP drafters use it to check what rolled-back rounds leave."""

from __future__ import annotations

import numpy as np


def steer(head, oracle: list[int], right: int, n_vocab: int):
    """Make ``head`` (a random one, which the main model never agrees with) propose the oracle's
    token for the first ``right`` drafted tokens of each round and a wrong one after, while it still
    decodes every token as usual: rounds then accept some drafts and reject others."""
    real_start, real_step, at = head.start, head.step, [0, 0]   # (position, index in the draft)

    def proposal() -> np.ndarray:
        position, i = at
        token = oracle[position] if i < right else (oracle[position] + 1) % n_vocab
        at[:] = [position + 1, i + 1]
        logits = np.zeros(n_vocab, dtype=np.float32)
        logits[token] = 10.0
        return logits

    def start(context):
        real_start(context)
        at[:] = [len(context), 0]
        return proposal()

    def step(token):
        real_step(token)
        return proposal()

    head.start, head.step = start, step
