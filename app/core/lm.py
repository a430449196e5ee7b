"""What the speculative loop needs from a model, so it runs on llama.cpp and on test models alike."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np


class Session(Protocol):
    """A model with its own KV cache holding the tokens in ``cached``."""

    n_ctx: int
    n_vocab: int

    @property
    def cached(self) -> Sequence[int]:
        """The tokens whose keys and values are in the cache, in order."""

    def eval(self, tokens: Sequence[int], all_logits: bool = False) -> np.ndarray:
        """Append ``tokens`` to the cache; return logits rows, one per token or just the last one.
        The rows may be a view that is only valid until the next ``eval``."""

    def truncate(self, n_keep: int) -> None:
        """Drop every cached position from ``n_keep`` on."""


class Vocabulary(Protocol):
    def is_eog(self, token: int) -> bool: ...

    def piece(self, token: int) -> bytes: ...


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading tokens ``a`` and ``b`` share. Runs every round on whole contexts, so it compares
    list slices (in C) and bisects to the first difference instead of stepping token by token."""
    n = min(len(a), len(b))
    a, b = list(a[:n]), list(b[:n])
    if a == b:  # the usual case: one cache holds a prefix of the other
        return n
    low, high = 0, n  # a[:low] == b[:low], a[:high] != b[:high]
    while high - low > 1:
        mid = (low + high) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid
    return low


def prefill(session: Session, tokens: Sequence[int]) -> np.ndarray:
    """Bring ``session``'s cache to ``tokens`` reusing the longest cached prefix; return the logits of
    the last token. At least the last token is decoded, since its logits are needed."""
    keep = min(common_prefix_length(session.cached, tokens), len(tokens) - 1)
    session.truncate(keep)
    return session.eval(tokens[keep:], all_logits=False)[-1]


FIM_ROLES = ("prefix", "suffix", "middle")   # the three a model must have to fill in the middle


@dataclass(frozen=True)
class FimTokens:
    """A model's fill-in-the-middle tokens; ``repo`` and ``sep`` (repository-level FIM, as
    Qwen2.5-Coder's <|repo_name|> and <|file_sep|>) are None where the model has none."""

    prefix: int | None
    suffix: int | None
    middle: int | None
    repo: int | None = None
    sep: int | None = None

    @property
    def missing(self) -> tuple[str, ...]:
        """The roles of FIM_ROLES this model has no token for (empty: it can fill in the middle)."""
        return tuple(role for role in FIM_ROLES if getattr(self, role) is None)
