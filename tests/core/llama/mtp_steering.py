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


def run_steered(engine, answer, right: int):
    """Answer once without drafting, then with the engine's MTP head steered (``steer``) at draft 4:
    the steered answer is the plain one, with some drafts accepted and, unless ``right`` covers the
    whole draft, some rejected. ``answer(engine, drafter, draft_max)`` gives (prompt, Summary).
    Returns (prompt, the plain Summary, the head)."""
    prompt, plain = answer(engine, "none")
    answer(engine, "mtp", 1)   # the MTP context exists
    head = engine._mtp
    steer(head, list(prompt) + list(plain.token_ids) + [0] * 8, right, engine.main.n_vocab)
    try:
        _, steered = answer(engine, "mtp", 4)
    finally:
        del head.start, head.step
    assert steered.token_ids == plain.token_ids
    assert steered.accepted > 0 and (right >= 4 or steered.accepted < steered.drafted)
    return prompt, plain, head
