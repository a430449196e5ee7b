"""Drafters propose the tokens the main model verifies."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from .lm import Session, common_prefix_length, prefill
from .policy import DraftPolicy
from .sampling import Sampler


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    q: list[np.ndarray | None] = field(default_factory=list)  # per token; None = chosen greedily

    def __len__(self) -> int:
        return len(self.tokens)

    def cut(self, n: int) -> "Draft":
        return Draft(self.tokens[:n], self.q[:n])


class Drafter(Protocol):
    name: str

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        """Propose up to ``max_len`` tokens to follow ``context`` (the whole accepted sequence)."""

    def sync(self, context: Sequence[int]) -> None:
        """After verification: forget anything that is not a prefix of ``context``."""


class DraftModelDrafter:
    """A second, smaller model drafts a chain of its own most likely tokens (sampled from its
    distribution when the main model samples, so the acceptance rule can use its probabilities)."""

    name = "model"

    def __init__(self, session: Session):
        self.session = session

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        max_len = min(max_len, self.session.n_ctx - len(context))
        out = Draft()
        if max_len <= 0:
            return out
        logits = prefill(self.session, context)
        while True:
            pick = sampler.draft_pick(logits)
            if not policy.keep_drafting(len(out), pick.p_top):
                break
            out.tokens.append(pick.token)
            out.q.append(pick.q)
            if len(out) >= max_len:
                break
            logits = self.session.eval([pick.token])[-1]
        return out

    def sync(self, context: Sequence[int]) -> None:
        self.session.truncate(common_prefix_length(self.session.cached, context))
