"""A small pure-numpy language model for testing the speculative loop.

Its logits depend only on the last two tokens of the prefix (a fixed random table), never on how
tokens were batched, so speculative and plain decoding must agree exactly.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


class ReferenceModel:
    def __init__(self, n_vocab: int = 12, seed: int = 0, sharpness: float = 3.0, eog: int | None = None):
        rng = np.random.default_rng(seed)
        self.n_vocab = n_vocab
        self.table = (rng.standard_normal((n_vocab, n_vocab, n_vocab)) * sharpness).astype(np.float32)
        self.eog = eog

    def logits(self, prefix: Sequence[int]) -> np.ndarray:
        a = prefix[-2] if len(prefix) >= 2 else 0
        b = prefix[-1] if prefix else 0
        return self.table[a, b]

    # Vocabulary
    def is_eog(self, token: int) -> bool:
        return token == self.eog

    def piece(self, token: int) -> bytes:
        return chr(ord("a") + token % 26).encode() if token < 26 else f"<{token}>".encode()


class ReferenceSession:
    """A Session over a ReferenceModel that records what it was asked to decode."""

    def __init__(self, model: ReferenceModel, n_ctx: int = 4096):
        self.model = model
        self.n_ctx = n_ctx
        self.n_vocab = model.n_vocab
        self._cached: list[int] = []
        self.batches: list[int] = []   # size of every eval call

    @property
    def cached(self) -> list[int]:
        return self._cached

    def eval(self, tokens: Sequence[int], all_logits: bool = False) -> np.ndarray:
        assert len(self._cached) + len(tokens) <= self.n_ctx, "context overflow"
        rows = []
        for t in tokens:
            self._cached.append(int(t))
            rows.append(self.model.logits(self._cached))
        self.batches.append(len(tokens))
        return np.stack(rows if all_logits else rows[-1:])

    def truncate(self, n_keep: int) -> None:
        del self._cached[n_keep:]
