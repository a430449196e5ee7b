"""Steer a random head (MTP, its own or a separate drafter's; EAGLE-3) so that rounds accept some of its
drafts and reject others: the tests of the head drafters use it to check what rolled-back rounds leave."""

from __future__ import annotations

import numpy as np

from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, SamplingParams, SpeculationParams


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


def run_steered(engine, answer, right: int, kind: str = "mtp"):
    """Answer once without drafting, then with the engine's ``kind`` head steered (``steer``) at draft 4:
    the steered answer is the plain one, with some drafts accepted and, unless ``right`` covers the
    whole draft, some rejected. ``answer(engine, drafter, draft_max)`` gives (prompt, Summary).
    Returns (prompt, the plain Summary, the head)."""
    prompt, plain = answer(engine, "none")
    answer(engine, kind, 1)   # the head's context exists
    head = engine._heads[DrafterKind(kind)]
    steer(head, list(prompt) + list(plain.token_ids) + [0] * 8, right, engine.main.n_vocab)
    try:
        _, steered = answer(engine, kind, 4)
    finally:
        del head.start, head.step
    assert steered.token_ids == plain.token_ids
    assert steered.accepted > 0 and (right >= 4 or steered.accepted < steered.drafted)
    return prompt, plain, head


def answer(engine, text: str, drafter: str, draft_max: int = 4, n: int = 32, policy: str = "fixed", **sampling):
    """(prompt tokens, Summary) of one answer to ``text``, drafted by ``drafter`` at most ``draft_max``
    tokens a round; the Summary has no error."""
    prompt = engine.main.model.tokenize(text)
    events = list(engine.generate(GenerationRequest(prompt=prompt, drafter=DrafterKind(drafter),
                                                    sampling=SamplingParams(max_tokens=n, **sampling),
                                                    speculation=SpeculationParams(draft_max=draft_max, policy=policy))))
    summary = events[-1]
    assert summary.error is None
    return prompt, summary


def fresh_start(load, kind: str, context: list[int]) -> np.ndarray:
    """The ``kind`` head's logits for ``context`` in a fresh engine (``load()``) that read it once."""
    fresh = load()
    try:
        head = fresh._head(DrafterKind(kind))
        fresh.main.eval(context[:-1])
        return head.start(context).copy()
    finally:
        fresh.close()
