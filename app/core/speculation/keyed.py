"""Randomness keyed by (seed, position, token): a seeded answer that replays whatever was drafted.

A seeded request must give the same answer every time. The usual speculative-sampling rule draws its
random numbers in the order verification asks for them, and how many it asks for depends on how much
was drafted, which the auto policy decides from measured timings: the same seed then gives another
answer on another run. Keyed by position instead, the main model's token at position j is
``argmax over candidates x of log p_j(x) + G(seed, j, x)``, with G standard Gumbel noise made from a
hash of (seed, j, x): the Gumbel-max trick, an exact draw from p_j, and a function of p_j, the seed
and j alone. Verification keeps a drafted token exactly when it is that token, so the answer is the
same whatever was drafted, and the distribution over seeds is p's. A drafter that samples with the same
keyed noise at the same position (``keyed_choice`` on its own q) proposes the main model's token
whenever q and p are close enough to agree on it: the coupling keeps acceptance high.
"""

from __future__ import annotations

import numpy as np

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, on uint64 arrays (wrapping arithmetic): a well-mixed 64-bit hash."""
    with np.errstate(over="ignore"):
        x = (x + _GOLDEN) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return x ^ (x >> np.uint64(31))


def keyed_uniforms(seed: int, position: int, ids: np.ndarray) -> np.ndarray:
    """A uniform number in (0, 1) for each token id at ``position`` under ``seed``: the same every time."""
    with np.errstate(over="ignore"):
        key = _splitmix64(_splitmix64(np.array([seed], dtype=np.uint64)) ^ np.uint64(position))
        bits = _splitmix64(key ^ (ids.astype(np.uint64) * _GOLDEN & _MASK))
    # the top 53 bits as a double in [0, 1), moved off 0 by half a step
    return ((bits >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def keyed_choice(ids: np.ndarray, p: np.ndarray, seed: int, position: int) -> int:
    """The token drawn from the distribution ``p`` over candidates ``ids`` at ``position`` under ``seed``
    (Gumbel-max: an exact draw, the same every time)."""
    live = p > 0
    ids, p = ids[live], p[live]
    gumbel = -np.log(-np.log(keyed_uniforms(seed, position, ids)))
    return int(ids[int(np.argmax(np.log(p) + gumbel))])
