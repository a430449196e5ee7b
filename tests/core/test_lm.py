"""Helpers the loop runs every round: the shared prefix of two token lists, the top probability."""

from __future__ import annotations

import random

import numpy as np
import pytest

from app.core.lm import common_prefix_length
from app.core.speculation.sampling import softmax, top_probability


def naive_prefix(a, b) -> int:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return min(len(a), len(b))


def test_common_prefix_length_matches_a_token_by_token_walk():
    rng = random.Random(0)
    for _ in range(3000):
        a = [rng.randint(0, 3) for _ in range(rng.randint(0, 40))]
        b = a[:rng.randint(0, len(a))] + [rng.randint(0, 3) for _ in range(rng.randint(0, 6))]
        assert common_prefix_length(a, b) == naive_prefix(a, b) == common_prefix_length(tuple(b), a)


@pytest.mark.parametrize("vocab, scale", [(270, 1.0), (151_936, 3.0), (151_936, 12.0), (151_936, 40.0)])
def test_top_probability_is_the_softmax_maximum(vocab, scale):
    """Exact where most of the row is near its best (the whole row is summed); within the far logits'
    bound where few are (scale 12 and 40: a peaked row, as real ones are, summed over the near ones)."""
    from app.core.speculation.sampling import TAIL_GAP

    rng = np.random.default_rng(vocab)
    for dtype in (np.float32, np.float64):
        row = (rng.standard_normal(vocab) * scale).astype(dtype)
        exact = softmax(row).max()
        far = int(np.count_nonzero(row <= row.max() - TAIL_GAP))
        assert top_probability(row) == pytest.approx(exact, rel=2e-6 + far * np.exp(-TAIL_GAP))
        assert top_probability(row, float(row.max())) == top_probability(row)


def test_a_peaked_row_is_summed_over_its_near_logits_alone():
    """Every far logit just past TAIL_GAP: the sum leaves them out, which moves the answer by their
    share, within the bound (the whole row's sum would be the exact softmax)."""
    from app.core.speculation.sampling import TAIL_GAP

    row = np.full(151_936, 10.0 - TAIL_GAP - 0.5, dtype=np.float32)
    row[:4] = [10.0, 9.0, 8.0, 10.0 - TAIL_GAP + 1]
    near = np.exp(np.array([0.0, -1.0, -2.0, -TAIL_GAP + 1]))
    assert top_probability(row) == pytest.approx(1.0 / near.sum(), rel=1e-6)
    exact = softmax(row).max()
    assert top_probability(row) != pytest.approx(exact, rel=1e-6)
    assert top_probability(row) == pytest.approx(exact, rel=len(row) * np.exp(-TAIL_GAP))
