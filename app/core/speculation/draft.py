"""A draft: the tokens a drafter proposes for the main model to verify, with where each came from."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from app.core.speculation.acceptance import Score


@dataclass
class Draft:
    tokens: list[int] = field(default_factory=list)
    q: list[np.ndarray | None] = field(default_factory=list)  # per token; None = a deterministic proposal
    sources: list[str] = field(default_factory=list)          # which drafter proposed each token
    scores: list[Score] = field(default_factory=list)          # its confidence (see DraftPolicy.step)

    def __len__(self) -> int:
        return len(self.tokens)

    def add(self, token: int, q: np.ndarray | None, source: str, score: Score) -> None:
        self.tokens.append(token)
        self.q.append(q)
        self.sources.append(source)
        self.scores.append(score)

    def cut(self, n: int) -> "Draft":
        return Draft(self.tokens[:n], self.q[:n], self.sources[:n], self.scores[:n])
