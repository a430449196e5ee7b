"""A grammar over the main model's distribution at every verified position, kept lossless.

The target of speculation becomes the main model's distribution masked by the grammar (tokens it
forbids get probability 0) and renormalised, then filtered as usual (Sampler.probs): llama.cpp's
grammar applied before its sampler chain. Drafters propose from their own, unconstrained
distributions; the rules that keep the answer the target's own:

* The grammar's state advances only over tokens the answer keeps (``settle``), never over a draft
  before it is verified: each round walks the draft on copies of the state (``follow``).
* A drafted token the grammar forbids ends the draft there. Verification would reject it with
  certainty (its target probability is 0), so dropping it and what follows changes nothing, except
  the replacement's distribution: a rejected token drawn from q is replaced from norm(max(0, p - q)),
  not from p. So the forbidden token's q travels to verification (``follow`` returns it), which
  draws the token after a fully accepted, cut draft from that residual. A deterministic proposal
  (prompt lookup: q one-hot) needs none: p with the forbidden token removed is p.
* Masking is exact without scanning the whole vocabulary each time: the filters keep at most top-k
  tokens, and every one of them is among the top-k allowed by logit, so ``restrict`` checks
  candidates in order of logit until it has that many allowed (1 when greedy); only top-k = 0 asks
  the grammar about every token. A full scan of a 152k vocabulary costs about 25 ms.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from app.core.errors import QuickdraftError
from app.core.lm import Vocabulary
from app.core.speculation.draft import Draft

# how many candidates, highest logit first, are asked about at a time before the next, larger batch
CANDIDATE_STEPS = (64, 1024, 16384)


class GrammarState(Protocol):
    """One state of a grammar over the main model's vocabulary (app/core/llama/grammar.py's TokenGrammar)."""

    def allowed(self, ids: np.ndarray) -> np.ndarray:
        """Which of ``ids`` the grammar allows next, as booleans."""

    def allows(self, token: int) -> bool: ...

    def accept(self, token: int) -> None:
        """The state after ``token``, which the grammar must allow."""

    def clone(self) -> "GrammarState": ...

    def close(self) -> None: ...


class DeadEndError(QuickdraftError):
    """The grammar allows no token the main model can write: the answer cannot go on."""


class GrammarConstraint:
    """The grammar's state over one answer and the states along the draft being verified."""

    def __init__(self, state: GrammarState, vocab: Vocabulary):
        self.vocab = vocab
        self._states: list[GrammarState] = [state]   # [0]: after the answer so far; [i]: after draft[:i]

    def follow(self, draft: Draft) -> tuple[Draft, np.ndarray | None]:
        """The longest head of ``draft`` the grammar allows, and the q of the forbidden token that
        ended it (None: none did, or it was proposed deterministically)."""
        self._drop_walk(keep=0)
        for i, token in enumerate(draft.tokens):
            state = self._states[-1]
            if not state.allows(token):
                return draft.cut(i), draft.q[i] if i < len(draft.q) else None
            after = state.clone()
            if self.vocab.is_eog(token):   # the answer ends here: nothing after it is kept
                self._states.append(after)
                return draft.cut(i + 1), None
            after.accept(token)
            self._states.append(after)
        return draft, None

    def restrict(self, i: int, row: np.ndarray, keep: int) -> np.ndarray:
        """``row`` (the logits after draft[:i]) with every token but the ``keep`` best the grammar
        allows set to -inf (``keep`` 0: all it allows). Tokens at -inf already (banned by logit_bias)
        are never taken. Raises DeadEndError when no token is left."""
        state = self._states[i]
        n = row.shape[-1]
        for step in CANDIDATE_STEPS:
            if keep == 0 or step >= n:
                break
            top = np.argpartition(row, -step)[-step:]
            top = top[np.argsort(-row[top], kind="stable")]
            top = top[np.isfinite(row[top])]
            allowed = top[state.allowed(top.astype(np.int32))]
            if len(allowed) >= keep:
                return _only(row, allowed[:keep])
            if len(top) < step:   # every token that can be written was asked about
                return _only(row, allowed)
        ids = np.flatnonzero(np.isfinite(row)).astype(np.int32)
        allowed = ids[state.allowed(ids)]
        if keep:
            allowed = allowed[np.argsort(-row[allowed], kind="stable")[:keep]]
        return _only(row, allowed)

    def settle(self, accepted: int, token: int) -> None:
        """The answer kept draft[:accepted] and then ``token``: the state follows them."""
        self._drop_walk(keep=accepted)
        if not self.vocab.is_eog(token):  # the answer ends at an end-of-generation token
            self._states[0].accept(token)

    def close(self) -> None:
        for state in self._states:
            state.close()
        self._states = []

    def _drop_walk(self, keep: int) -> None:
        """Keep only the state after draft[:keep] as the state of the answer."""
        kept = self._states[keep]
        for i, state in enumerate(self._states):
            if i != keep:
                state.close()
        self._states = [kept]


def _only(row: np.ndarray, ids: np.ndarray) -> np.ndarray:
    if not len(ids):
        raise DeadEndError("The grammar allows no token here, so the answer cannot go on: check that every "
                           "text it requires can be written with the model's tokens, and that logit_bias or "
                           "ignore_eos does not ban the ones it allows (at its end, the end-of-generation token).")
    out = np.full(row.shape, -np.inf, dtype=np.float32)
    out[ids] = row[ids]
    return out


def cut_to_grammar(constraint: GrammarConstraint | None, draft: Draft) -> tuple[Draft, np.ndarray | None]:
    """``draft`` as the grammar lets it be verified (see ``GrammarConstraint.follow``)."""
    return (draft, None) if constraint is None else constraint.follow(draft)


def settle(constraint: GrammarConstraint | None, accepted: int, token: int) -> None:
    if constraint is not None:
        constraint.settle(accepted, token)

