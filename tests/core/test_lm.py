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


@pytest.mark.parametrize("vocab, scale", [(270, 1.0), (151_936, 3.0), (151_936, 12.0)])
def test_top_probability_is_the_softmax_maximum(vocab, scale):
    rng = np.random.default_rng(vocab)
    for dtype in (np.float32, np.float64):
        row = (rng.standard_normal(vocab) * scale).astype(dtype)
        assert top_probability(row) == pytest.approx(softmax(row).max(), rel=2e-6)
        assert top_probability(row, float(row.max())) == top_probability(row)
