"""Keyed randomness (app/core/speculation/keyed.py): the same draw for the same key, an exact draw
from the distribution over keys, and drafts that agree with the main model where q and p are close."""

from __future__ import annotations

import numpy as np

from app.core.speculation.keyed import keyed_choice, keyed_uniforms


def test_the_same_key_gives_the_same_numbers_and_another_key_others():
    ids = np.arange(1000)
    a = keyed_uniforms(7, 12, ids)
    assert np.array_equal(a, keyed_uniforms(7, 12, ids)) and np.all((a > 0) & (a < 1))
    assert not np.array_equal(a, keyed_uniforms(7, 13, ids)) and not np.array_equal(a, keyed_uniforms(8, 12, ids))
    assert abs(a.mean() - 0.5) < 0.03 and abs(np.corrcoef(a[:-1], a[1:])[0, 1]) < 0.1


def test_over_seeds_a_keyed_choice_is_a_draw_from_p():
    """Five standard errors over 20,000 seeds, for each candidate."""
    ids = np.array([3, 9, 14, 200])
    p = np.array([0.5, 0.3, 0.15, 0.05])
    n = 20_000
    counts = np.zeros(len(ids))
    for seed in range(n):
        counts[list(ids).index(keyed_choice(ids, p, seed, position=41))] += 1
    se = np.sqrt(p * (1 - p) / n)
    assert np.all(np.abs(counts / n - p) < 5 * se), counts / n


def test_a_draft_keyed_alike_agrees_with_the_main_model_where_their_distributions_are_close():
    ids = np.arange(5)
    p = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    q = np.array([0.38, 0.32, 0.15, 0.1, 0.05])   # total variation 0.02
    agree = sum(keyed_choice(ids, p, seed, 5) == keyed_choice(ids, q, seed, 5) for seed in range(5000)) / 5000
    assert agree > 0.95   # Gumbel coupling: at least (1 - TV) / (1 + TV) = 0.96, less noise
