"""Token log-probabilities (SamplingParams.logprobs): each answer token's, from the main model's raw
distribution at its position, the same whether it was drafted, and carried by the pieces that show it."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.params import SamplingParams, SpeculationParams
from app.core.speculation.drafters import DraftModelDrafter, PromptLookupDrafter
from app.core.speculation.events import TokenPiece
from app.core.speculation.loop import SpeculativeGeneration
from app.core.speculation.policy_base import FixedPolicy
from tests.core.speculation.reference_model import ReferenceModel, ReferenceSession

PROMPT = [0, 1, 2]


def run(drafter_kind: str, sampling: SamplingParams):
    main = ReferenceModel(n_vocab=6, seed=4, sharpness=4.0)
    drafter = {"none": None, "lookup": PromptLookupDrafter(),
               "model": DraftModelDrafter(ReferenceSession(ReferenceModel(n_vocab=6, seed=5, sharpness=4.0)))}[drafter_kind]
    gen = SpeculativeGeneration(ReferenceSession(main), main, drafter, FixedPolicy(SpeculationParams(draft_max=4)),
                                sampling)
    events = list(gen.run(PROMPT))
    return main, events[-1], [e for e in events if isinstance(e, TokenPiece)]


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    return x - x.max() - np.log(np.exp(x - x.max()).sum())


@pytest.mark.parametrize("drafter", ["none", "lookup", "model"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_each_tokens_logprob_is_the_main_models_at_its_position(drafter, temperature):
    main, summary, pieces = run(drafter, SamplingParams(temperature=temperature, seed=3, max_tokens=40, logprobs=3))
    context = list(PROMPT)
    assert len(summary.token_probs) == len(summary.token_ids) > 0
    for prob in summary.token_probs:
        expected = log_softmax(main.logits(context))
        assert prob.logprob == pytest.approx(expected[prob.token], abs=1e-5)   # float32 terms
        assert [t for t, _, _ in prob.top] == sorted(range(6), key=lambda t: (-expected[t], t))[:3]
        assert [lp for _, _, lp in prob.top] == pytest.approx(sorted(expected, reverse=True)[:3], abs=1e-5)
        assert prob.piece == main.piece(prob.token)
        context.append(prob.token)
    if temperature == 0.0:   # greedy: every token is its position's likeliest
        assert all(p.token == p.top[0][0] for p in summary.token_probs)
    assert [p for piece in pieces for p in piece.probs] == list(summary.token_probs)
    assert all(len(piece.probs) == len(piece.token_ids) for piece in pieces)


def test_without_logprobs_nothing_is_computed():
    _, summary, pieces = run("model", SamplingParams(max_tokens=20))
    assert summary.token_probs == () and all(piece.probs == () for piece in pieces)


def test_logprobs_past_the_limit_are_refused():
    from app.core.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="logprobs"):
        SamplingParams(logprobs=101)


def test_post_sampling_probs_are_those_of_the_distribution_drawn_from():
    main, summary, _ = run("model", SamplingParams(temperature=0.9, top_k=3, top_p=1.0, min_p=0.0, seed=3, max_tokens=30, logprobs=6,
                                                   post_sampling_probs=True))
    context = list(PROMPT)
    for prob in summary.token_probs:
        logits = main.logits(context)
        kept = sorted(range(6), key=lambda t: (-logits[t], t))[:3]
        z = np.exp((np.asarray(logits)[kept] - max(logits)) / 0.9)
        expected = dict(zip(kept, np.log(z / z.sum())))
        assert [t for t, _, _ in prob.top] == kept   # only what top-k 3 lets be drawn
        assert prob.logprob == pytest.approx(expected[prob.token], abs=1e-6)
        context.append(prob.token)
