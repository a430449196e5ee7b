import itertools

import numpy as np
import pytest

from app.core.params import SamplingParams
from app.core.speculation.sampling import Sampler


def reference_probs(logits, temperature, top_k, top_p, min_p):
    """llama.cpp's chain written plainly: top-k, top-p, min-p on temperature-1 probabilities,
    then the temperature over what is left."""
    logits = logits.astype(np.float64)
    order = np.argsort(-logits, kind="stable")
    if top_k > 0:
        order = order[:top_k]
    p = np.exp(logits[order] - logits[order].max())
    p /= p.sum()
    if top_p < 1.0:
        cut = int(np.searchsorted(np.cumsum(p), top_p)) + 1
        order, p = order[:cut], p[:cut]
    if min_p > 0:
        order = order[p >= min_p * p[0]]
    out = np.zeros_like(logits, dtype=np.float64)
    z = logits[order] / temperature
    e = np.exp(z - z.max())
    out[order] = e / e.sum()
    return out


@pytest.mark.parametrize("top_k,top_p,min_p", list(itertools.product([0, 1, 5, 40], [1.0, 0.9, 0.5], [0.0, 0.05, 0.3])))
def test_filters_match_a_plain_implementation(top_k, top_p, min_p):
    rng = np.random.default_rng(top_k * 100 + int(top_p * 10) + int(min_p * 100))
    for scale in (0.5, 3.0):
        logits = (rng.standard_normal(6000) * scale).astype(np.float32)
        sampler = Sampler(SamplingParams(temperature=0.7, top_k=top_k, top_p=top_p, min_p=min_p))
        np.testing.assert_allclose(sampler.probs(logits), reference_probs(logits, 0.7, top_k, top_p, min_p),
                                   atol=1e-6)


def test_greedy_picks_the_argmax_and_a_seed_replays():
    logits = np.array([0.1, 2.0, 1.9, -1.0], dtype=np.float32)
    assert Sampler(SamplingParams(temperature=0)).sample(logits) == 1
    draws = [Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0, seed=5)).sample(logits)
             for _ in range(3)]
    assert len(set(draws)) == 1


def test_logit_bias_shapes_the_main_models_choice():
    logits = np.array([0.1, 2.0, 1.9, -1.0], dtype=np.float32)
    assert Sampler(SamplingParams(temperature=0, logit_bias=((1, -np.inf),))).sample(logits) == 2
    assert Sampler(SamplingParams(temperature=0, logit_bias=((3, 5.0),))).sample(logits) == 3
    rows = np.stack([logits, logits])
    # a greedy draft of the unbiased argmax is rejected where the bias bans it
    assert Sampler(SamplingParams(temperature=0, logit_bias=((1, -np.inf),))).verify(rows, [1], [None]) == (0, 2)


def test_verification_keeps_the_biased_distribution_exactly():
    """Drafts drawn from the draft's own, unbiased distribution q; the tokens verification lets out
    follow the main model's biased distribution p, within five standard errors, over 40,000 draws."""
    main = np.array([1.0, 0.5, 0.0, -0.5, 1.5, 0.2], dtype=np.float32)
    draft = np.array([0.2, 1.5, 0.0, 0.5, -1.0, 0.3], dtype=np.float32)
    bias = ((4, -np.inf), (2, 1.2))
    sampler = Sampler(SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, logit_bias=bias))
    sampler.rng = np.random.default_rng(11)   # unseeded: speculative sampling's rule (a seed keys by position)
    q = Sampler(SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)).probs(draft)
    biased = main.copy()
    biased[4] = -np.inf
    biased[2] += 1.2
    p = Sampler(SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0)).probs(biased)
    rng, n = np.random.default_rng(3), 40_000
    counts = np.zeros(len(main))
    rows = np.stack([main, main])
    for _ in range(n):
        x = int(rng.choice(len(q), p=q))
        accepted, token = sampler.verify(rows, [x], [q])
        counts[x if accepted else token] += 1
    assert counts[4] == 0
    np.testing.assert_array_less(np.abs(counts / n - p), 5 * np.sqrt(p * (1 - p) / n) + 1e-9)


# --- llama-server's sampler chain (``samplers``) ---------------------------------------------------------

def test_the_default_chain_named_is_the_default_and_a_chain_without_temperature_is_never_greedy():
    rng = np.random.default_rng(7)
    logits = (rng.standard_normal(3000) * 2).astype(np.float32)
    params = dict(temperature=0.7, top_k=40, top_p=0.9, min_p=0.05)
    named = Sampler(SamplingParams(**params, samplers=("top_k", "top_p", "min_p", "temperature")))
    np.testing.assert_allclose(named.probs(logits), Sampler(SamplingParams(**params)).probs(logits), atol=1e-9)
    untempered = SamplingParams(temperature=0.0, top_k=40, top_p=0.9, min_p=0.0, samplers=("top_k", "top_p"))
    assert not untempered.greedy   # llama.cpp is greedy only through its temperature sampler
    np.testing.assert_allclose(Sampler(untempered).probs(logits),
                               reference_probs(logits, 1.0, 40, 0.9, 0.0), atol=1e-9)


def test_a_filter_after_the_temperature_reads_the_tempered_probabilities():
    logits = np.array([2.0, 1.0, 0.0, -1.0], dtype=np.float32)
    before = Sampler(SamplingParams(temperature=0.25, top_k=0, top_p=0.9, min_p=0, samplers=("top_p", "temperature")))
    after = Sampler(SamplingParams(temperature=0.25, top_k=0, top_p=0.9, min_p=0, samplers=("temperature", "top_p")))
    assert np.count_nonzero(before.probs(logits)) == 3   # at temperature 1 three tokens hold 90%
    assert np.count_nonzero(after.probs(logits)) == 1    # at 0.25 the best one alone does


def test_the_infill_sampler_keeps_what_llama_cpp_keeps_or_ends_with_one_token():
    logits = np.array([2.0, 1.5, 1.0, -3.0], dtype=np.float32)
    kept = Sampler(SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0, samplers=("infill",)),
                   infill=lambda ids, z: (ids[z[ids] >= 1.0], None))
    p = kept.probs(logits)
    assert np.count_nonzero(p) == 3 and p[3] == 0.0 and abs(p.sum() - 1.0) < 1e-12
    ends = Sampler(SamplingParams(temperature=0.0, top_k=0, top_p=1.0, min_p=0, samplers=("infill",)),
                   infill=lambda ids, z: (np.array([3]), 3))
    assert ends.probs(logits)[3] == 1.0 and ends.sample(logits) == 3
    with pytest.raises(ValueError):
        Sampler(SamplingParams(samplers=("infill",))).probs(logits)


def nan_row(n=50, at=7):
    row = np.linspace(-3, 3, n).astype(np.float32)
    row[at] = np.nan
    return row


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_row_holding_nan_stops_the_choice_instead_of_choosing_garbage(temperature):
    from app.core.speculation.sampling import NonFiniteLogits

    sampler = Sampler(SamplingParams(temperature=temperature, seed=1))
    with pytest.raises(NonFiniteLogits, match="not a number"):
        sampler.sample(nan_row())
    with pytest.raises(NonFiniteLogits):
        sampler.draft_pick(nan_row())
    rows = np.stack([nan_row(), np.linspace(-3, 3, 50).astype(np.float32)])
    with pytest.raises(NonFiniteLogits):
        sampler.verify(rows, [49], [None])


def test_minus_infinity_from_a_bias_is_an_ordinary_logit():
    row = np.linspace(-3, 3, 50).astype(np.float32)
    row[:10] = -np.inf
    assert Sampler(SamplingParams(temperature=0.0)).sample(row) == 49
    assert Sampler(SamplingParams(temperature=0.8, seed=3)).sample(row) >= 10
