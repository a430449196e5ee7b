"""Logits to probabilities, token choice, and the speculative acceptance rule.

The filters follow llama.cpp's default sampler chain: top-k, top-p and min-p cut the candidates by
their probabilities at temperature 1, then the temperature reshapes what is left.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

from app.core.errors import QuickdraftError
from app.core.params import SamplingParams
from app.core.speculation.events import TokenProb
from app.core.speculation.keyed import keyed_choice

if TYPE_CHECKING:
    from app.core.speculation.constraint import GrammarConstraint


class NonFiniteLogits(QuickdraftError):
    """The model's logits hold NaN or +inf: its weights or the backend's arithmetic overflowed (a GPU's
    half-precision sums can where the CPU's float ones do not). Every choice would then be garbage that
    looks like an answer, so the generation stops with this instead."""

    def __init__(self) -> None:
        super().__init__("the model's output at this step is not a number (NaN or infinity): its weights or "
                         "the backend's arithmetic overflowed, so the answer stops here rather than go on with "
                         "garbage; try the CPU (--device cpu) or another quantization of the model")


def _finite(value: float) -> None:
    """np.argmax and np.max return NaN where a row holds any, and +inf is never a real logit (a bias or
    a grammar only ever sets -inf): one look at the chosen value covers the whole row."""
    if value != value or value == np.inf:
        raise NonFiniteLogits()


@dataclass(frozen=True)
class DraftPick:
    token: int
    q: np.ndarray | None   # the distribution the token was sampled from; None when chosen greedily
    p_top: float           # the drafter's top probability: its confidence


class InfillFilter(Protocol):
    """llama.cpp's infill sampler (app/core/llama/infill.py): which candidates it keeps, or the one
    token it ends with (an end of text when no text candidate is likely enough)."""

    def __call__(self, ids: np.ndarray, logits: np.ndarray) -> tuple[np.ndarray, int | None]: ...


def _tempered(logits: np.ndarray, ids: np.ndarray, temperature: float) -> np.ndarray:
    """llama.cpp's temperature: logits divided by it; at 0 or below only the best candidate is left."""
    if temperature > 0.0:
        return logits.astype(np.float64) / temperature
    out = np.full(logits.shape[-1], -np.inf, dtype=np.float64)
    best = ids[int(np.argmax(logits[ids]))]
    out[best] = logits[best]
    return out


def softmax(logits: np.ndarray, temperature: float = 1.0) -> np.ndarray:
    # the temperature divides only after the maximum is subtracted: a tiny temperature then sends
    # the other logits to -inf (probability 0) instead of overflowing them all to inf (NaN)
    top = float(np.max(logits))
    _finite(top)
    with np.errstate(over="ignore"):
        z = (logits.astype(np.float64) - top) / temperature
    e = np.exp(z)
    return e / e.sum()


def _argmax(logits: np.ndarray) -> int:
    best = int(np.argmax(logits))
    _finite(float(logits[best]))
    return best


_scratch = threading.local()


# Logits further than this below the best add at most exp(-18) = 1.5e-8 each to a softmax sum of at least
# 1: over a 152k vocabulary, at most 2.3e-3 of it, and 1e-5 on real rows (Qwen2.5-Coder 0.5B's).
TAIL_GAP = 18.0


def top_probability(logits: np.ndarray, best: float | None = None) -> float:
    """max(softmax(logits)) = 1 / sum(exp(logits - max)), the sum over the logits within TAIL_GAP of the
    best (relative error under (vocabulary - near) * exp(-TAIL_GAP), the far ones' most). It runs on every
    drafted token and every token the draft model's gate reads, and a real row has about 2,000 of 152k
    logits that near: a median 190 us instead of 427 for the whole row (the Qwen2.5-Coder 0.5B's rows,
    paired, on this project's CPU), where the host's work per drafted token (0.70 ms with the real pair)
    was half an H100's 0.5B draft step (1.24 ms). A flat row (most logits near)
    is summed whole, in a buffer kept per thread: one pass each to subtract, exponentiate and add, in
    float32, and no allocation. ``best``: the max, when known."""
    row = logits if logits.dtype == np.float32 else logits.astype(np.float32)
    top = float(row.max()) if best is None else best
    near = row > top - TAIL_GAP
    if np.count_nonzero(near) <= row.shape[-1] // 4:
        return float(1.0 / np.exp(row[near] - top).sum(dtype=np.float64))
    buf = _buffer(row)
    np.subtract(row, top, out=buf)
    np.exp(buf, out=buf)
    return float(1.0 / buf.sum(dtype=np.float64))


def token_prob(row: np.ndarray, token: int, n_top: int, piece, target: np.ndarray | None = None) -> TokenProb:
    """``token``'s log-probability under ``row``'s raw softmax (the whole row, float32 terms summed in
    float64), and the ``n_top`` likeliest tokens with theirs, best first (ties by id), looked for among
    the logits within TAIL_GAP of the best where there are enough; ``piece(id)``: a token's bytes. 0.46 ms
    a token (0.63 with 5 alternatives) on the Qwen2.5-Coder 0.5B's real 152k-token rows here; a float64
    copy and a partition of the whole row took 2.5-5 ms."""
    if target is not None:
        return _target_prob(target, token, n_top, piece)
    row = np.asarray(row, dtype=np.float32).reshape(-1)
    top = float(row.max())
    _finite(top)
    buf = _buffer(row)
    np.subtract(row, top, out=buf)
    np.exp(buf, out=buf)
    log_sum = top + float(np.log(buf.sum(dtype=np.float64)))
    best: tuple = ()
    if n_top > 0:
        near = np.flatnonzero(row > top - TAIL_GAP)
        pool = near if len(near) >= n_top else np.arange(row.shape[0])
        ids = pool[np.argpartition(-row[pool], n_top - 1)[:n_top]] if n_top < len(pool) else pool
        ids = ids[np.lexsort((ids, -row[ids]))]
        best = tuple((int(i), piece(int(i)), float(row[i]) - log_sum) for i in ids)
    return TokenProb(token, piece(token), float(row[token]) - log_sum, best)


def _target_prob(p: np.ndarray, token: int, n_top: int, piece) -> TokenProb:
    """llama-server's post_sampling_probs: ``token``'s probability under the distribution it was drawn
    from (``Sampler.target``), and the likeliest of the tokens that distribution can draw."""
    with np.errstate(divide="ignore"):
        nonzero = np.flatnonzero(p)
        ids = nonzero[np.lexsort((nonzero, -p[nonzero]))][:n_top]
        return TokenProb(token, piece(token), float(np.log(p[token])),
                         tuple((int(i), piece(int(i)), float(np.log(p[i]))) for i in ids))


def _buffer(row: np.ndarray) -> np.ndarray:
    """A float32 buffer the size of ``row``, kept per thread (no allocation per token)."""
    buf = getattr(_scratch, "buf", None)
    if buf is None or buf.shape != row.shape:
        buf = _scratch.buf = np.empty_like(row)
    return buf


class Sampler:
    """Chooses tokens for one generation. Owns the random generator, so a seed replays a run.

    ``logit_bias`` shapes the main model's distribution only (``sample`` and ``verify``): the target
    that verification keeps is then the biased one, exactly, whatever the drafter proposed from its own
    unbiased logits (a draft of another vocabulary has other ids, so biasing it would be wrong)."""

    def __init__(self, params: SamplingParams, infill: InfillFilter | None = None):
        self.params = params
        # a seeded sampled answer draws with randomness keyed by position (keyed.py), so it replays
        # whatever is drafted; the loop says where the next token goes (``at``)
        self.keyed = params.seed is not None and not params.greedy
        self.position = 0
        self._draft_position = 0
        self._infill = infill   # llama.cpp's infill sampler over the main model's vocabulary, for chains naming it
        self.rng = np.random.default_rng(params.seed)
        self._bias_ids = np.array([t for t, _ in params.logit_bias], dtype=np.int64)
        self._bias = np.array([b for _, b in params.logit_bias], dtype=np.float32)

    def _biased(self, logits: np.ndarray) -> np.ndarray:
        """The main model's logits (one row, or rows) with the request's bias added, as a copy."""
        if not len(self._bias_ids):
            return logits
        out = np.array(logits, dtype=np.float32)
        out[..., self._bias_ids] += self._bias
        return out

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def target(self, row: np.ndarray, constraint: GrammarConstraint | None = None, i: int = 0) -> np.ndarray:
        """The distribution the main model's token is drawn from at ``row`` (the i-th of a round, under
        ``constraint``'s grammar there): biased, masked, filtered and tempered; one-hot at the argmax
        when greedy. What llama-server's post_sampling_probs reports."""
        row = self._biased(row)
        if constraint is not None:
            row = constraint.restrict(i, row, self.keeps)
        if not self.greedy:
            return self.probs(row)
        out = np.zeros(row.shape[-1], dtype=np.float64)
        out[_argmax(row)] = 1.0
        return out

    def probs(self, logits: np.ndarray) -> np.ndarray:
        """The distribution tokens are drawn from: filtered, tempered, over the whole vocabulary."""
        ids, p = self._filtered(logits)
        out = np.zeros(logits.shape[-1], dtype=np.float64)
        out[ids] = p
        return out

    def _filtered(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        _finite(float(np.max(logits)))   # the filters' comparisons would drop a NaN quietly
        params = self.params
        if params.samplers is not None:
            return self._chain(logits)
        if params.top_p < 1.0:
            ids = self._top_p(self._top_k(logits), logits)
            ids = self._min_p(ids, logits)
        else:  # top-k and min-p both keep the highest logits: their order does not matter
            ids = self._top_k(self._min_p(np.arange(logits.shape[-1]), logits), logits)
        return ids, softmax(logits[ids], params.temperature)

    def _chain(self, logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """llama-server's ``samplers``: each one in the order given, as llama.cpp's chain runs them (a
        filter after "temperature" reads the tempered probabilities; samplers of SAMPLERS_NEUTRAL leave
        the candidates as they are)."""
        ids, z = np.arange(logits.shape[-1]), logits
        for name in self.params.samplers:
            if name == "top_k":
                ids = self._top_k(ids, z)
            elif name == "top_p" and self.params.top_p < 1.0:
                ids = self._top_p(ids, z)
            elif name == "min_p":
                ids = self._min_p(ids, z)
            elif name == "temperature":
                z = _tempered(z, ids, self.params.temperature)
            elif name == "infill":
                ids, z = self._infill_step(ids, z)
        return ids, softmax(z[ids])

    def _infill_step(self, ids: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if self._infill is None:
            raise ValueError("the 'infill' sampler needs the main model's vocabulary (Sampler(..., infill=...))")
        kept, forced = self._infill(ids, z)
        if forced is None:
            return kept, z
        one = np.full(z.shape[-1], -np.inf, dtype=np.float64)   # llama.cpp's end: one token, certain
        one[forced] = 0.0
        return np.array([forced]), one

    def _top_k(self, ids: np.ndarray, logits: np.ndarray | None = None) -> np.ndarray:
        if logits is None:
            logits, ids = ids, np.arange(ids.shape[-1])
        k = self.params.top_k
        return ids[np.argpartition(logits[ids], -k)[-k:]] if 0 < k < len(ids) else ids

    def _min_p(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        if self.params.min_p <= 0.0:
            return ids
        # p(x) >= min_p * p(best)  <=>  logit(x) >= logit(best) + ln(min_p)
        return ids[logits[ids] >= logits[ids].max() + np.log(self.params.min_p)]

    def _top_p(self, ids: np.ndarray, logits: np.ndarray) -> np.ndarray:
        """The smallest prefix of ``ids`` (by probability among ``ids``) whose mass reaches top_p."""
        top = float(logits[ids].max())
        weights = np.exp(logits[ids].astype(np.float64) - top)
        total = weights.sum()
        if len(ids) > 4096:  # sort only the head when it holds enough mass, as it nearly always does
            head = np.argpartition(weights, -4096)[-4096:]
            if weights[head].sum() >= self.params.top_p * total:
                ids, weights = ids[head], weights[head]
        order = np.argsort(-weights, kind="stable")
        cut = int(np.searchsorted(np.cumsum(weights[order]) / total, self.params.top_p)) + 1
        return ids[order[:cut]]

    def at(self, position: int) -> None:
        """The next token the main model chooses, and the first one a drafter proposes, go at ``position``."""
        self.position = self._draft_position = position

    def sample(self, logits: np.ndarray, constraint: GrammarConstraint | None = None) -> int:
        """The main model's next token (at ``position``; under ``constraint``'s grammar, from its state now)."""
        logits = self._biased(logits)
        return self._choose(constraint.restrict(0, logits, self.keeps) if constraint is not None else logits,
                            self.position)

    @property
    def keeps(self) -> int:
        """How many of the best tokens a grammar must say it allows for this sampler's choice to be
        exact (Sampler.probs keeps at most top-k, where the chain runs top-k); 0: all."""
        if self.greedy:
            return 1
        runs_top_k = self.params.samplers is None or "top_k" in self.params.samplers
        return max(self.params.top_k, 0) if runs_top_k else 0

    def _choose(self, logits: np.ndarray, position: int) -> int:
        """A token from logits the bias has already shaped, for ``position``."""
        if self.greedy:
            return _argmax(logits)
        ids, p = self._filtered(logits)
        if self.keyed:
            return keyed_choice(ids, p, self.params.seed, position)
        return int(ids[self._draw(p)])

    def draft_pick(self, logits: np.ndarray) -> DraftPick:
        """A drafter's next token: the argmax when greedy, else a sample from the draft's own
        distribution q, kept for the acceptance rule."""
        if self.greedy:
            token = _argmax(logits)
            return DraftPick(token, None, top_probability(logits, float(logits[token])))
        q = self.probs(logits)
        if self.keyed:   # the main model's keyed noise at the same position: drafts agree where q and p do
            ids = np.flatnonzero(q)
            token = keyed_choice(ids, q[ids], self.params.seed, self._draft_position)
            self._draft_position += 1
        else:
            token = self._draw(q)
        return DraftPick(token, q, float(q.max()))

    def pick(self, p: np.ndarray) -> int:
        """An index drawn from ``p`` (a drafter's own distribution, sums to 1), with this generation's generator."""
        return self._draw(p)

    def verify(self, rows: np.ndarray, draft_tokens: Sequence[int], draft_q: Sequence[np.ndarray | None],
               constraint: GrammarConstraint | None = None, refused_q: np.ndarray | None = None) -> tuple[int, int]:
        """Check a draft against the main model's logits rows (row i predicts the token after
        draft position i-1; there are len(draft)+1 rows). Returns (accepted count, next token).
        ``constraint``: a grammar masks every row (app/core/speculation/constraint.py); ``refused_q``:
        the q of the drafted token after the draft that the grammar refused (rejected for certain)."""
        rows = self._biased(rows)
        if constraint is not None:
            rows = _Restricted(rows, constraint, self.keeps)
        if self.greedy:
            return self._verify_greedy(rows, draft_tokens)
        if self.keyed:
            return self._verify_keyed(rows, draft_tokens)
        return self._verify_sampled(rows, draft_tokens, draft_q, refused_q)

    def _verify_keyed(self, rows, draft_tokens: Sequence[int]) -> tuple[int, int]:
        # Seeded: the main model's token at each position is its keyed draw (keyed.py), exact and the
        # same whatever was drafted; a drafted token is kept while it is that token, as greedy keeps
        # the argmax. The answer replays for the seed and is drawn exactly from p over seeds (a draft
        # a grammar cut changes nothing: the next token is the keyed draw there too).
        n = len(draft_tokens)
        for i in range(n + 1):
            token = self._choose(rows[i], self.position + i)
            if i == n or token != draft_tokens[i]:
                return i, token

    def _verify_greedy(self, rows, draft_tokens: Sequence[int]) -> tuple[int, int]:
        # Greedy: keep drafted tokens while they are the main model's own argmax; the first
        # disagreement is replaced by the main model's token, and a fully accepted draft earns
        # the main model's next token for free. The output is exactly greedy main-model decoding.
        n = len(draft_tokens)
        if isinstance(rows, _Restricted):   # row by row: a grammar's mask costs, and rows past a miss are never read
            for i in range(n + 1):
                b = _argmax(rows[i])
                if i == n or b != draft_tokens[i]:
                    return i, b
        best = np.argmax(rows, axis=1)
        for value in rows[np.arange(n + 1), best]:
            _finite(float(value))
        for i in range(n):
            if best[i] != draft_tokens[i]:
                return i, int(best[i])
        return n, int(best[n])

    def _verify_sampled(self, rows, draft_tokens: Sequence[int], draft_q: Sequence[np.ndarray | None],
                        refused_q: np.ndarray | None) -> tuple[int, int]:
        # Speculative sampling (Leviathan et al. 2023): accept drafted x with probability
        # min(1, p(x)/q(x)); on rejection draw from norm(max(0, p - q)). Together these draw
        # exactly from p, whatever q is. A drafter that proposes deterministically has q = one-hot.
        # A drafted token a grammar refused after the draft was rejected for certain: the token
        # after a fully accepted draft is then its replacement, from norm(max(0, p - q)).
        for i, x in enumerate(draft_tokens):
            p = self.probs(rows[i])
            q = draft_q[i] if i < len(draft_q) else None
            q_x = float(q[x]) if q is not None else 1.0
            if self.rng.random() * q_x < p[x]:
                continue
            residual = p.copy()
            if q is not None:
                residual = np.maximum(residual - q, 0.0)
            else:
                residual[x] = 0.0
            total = residual.sum()
            if total <= 0.0:  # p == q: a rejection cannot happen, but guard rounding
                return i, self._draw_full(p)
            return i, self._draw_full(residual / total)
        n = len(draft_tokens)
        if refused_q is not None:
            p = self.probs(rows[n])
            residual = np.maximum(p - refused_q, 0.0)
            total = residual.sum()
            return n, self._draw_full(residual / total if total > 0.0 else p)
        return n, self._choose(rows[n], self.position + n)

    def _draw(self, p: np.ndarray) -> int:
        cdf = np.cumsum(p)
        return int(min(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right"), len(p) - 1))

    def _draw_full(self, p: np.ndarray) -> int:
        nz = np.flatnonzero(p)
        return int(nz[self._draw(p[nz])])


class _Restricted:
    """Verification's rows under a grammar, each masked when first read (``GrammarConstraint.restrict``)."""

    def __init__(self, rows: np.ndarray, constraint: GrammarConstraint, keep: int):
        self._rows, self._constraint, self._keep = rows, constraint, keep
        self._done: dict[int, np.ndarray] = {}

    def __getitem__(self, i: int) -> np.ndarray:
        if i not in self._done:
            self._done[i] = self._constraint.restrict(i, self._rows[i], self._keep)
        return self._done[i]
