"""llama.cpp's infill sampler through InfillFilter, on a tiny model's vocabulary: candidates whose text
begins another's merge into the likelier, unlikely ones go, and a likely end of text ends it."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.llama.binding import LlamaModel
from app.core.llama.infill import InfillFilter
from app.core.params import ModelParams


@pytest.fixture(scope="module")
def model(tiny_models):
    loaded = LlamaModel(ModelParams(str(tiny_models.main)))
    yield loaded
    loaded.close()


def prefix_pair(model) -> tuple[int, int]:
    """Two text tokens: the first's text begins the second's."""
    pieces = {t: model.piece(t) for t in range(model.n_vocab) if not model.is_eog(t) and not model.is_control(t)}
    for a, text_a in pieces.items():
        for b, text_b in pieces.items():
            if a != b and text_a and len(text_a) < len(text_b) and text_b.startswith(text_a):
                return a, b
    pytest.skip("the tiny vocabulary has no token that begins another")


def test_a_token_that_begins_another_is_merged_into_the_likelier(model):
    a, b = prefix_pair(model)
    other = next(t for t in range(model.n_vocab) if t not in (a, b) and not model.is_eog(t))
    logits = np.full(model.n_vocab, -30.0, dtype=np.float32)
    logits[[a, b, other]] = [2.0, 1.0, 2.0]   # a and b merge (0.58), other keeps 0.42: both stay
    kept, forced = InfillFilter(model)(np.array([a, b, other]), logits)
    assert sorted(kept.tolist()) == sorted([a, other]) and forced is None


def test_a_likely_end_of_text_ends_it(model):
    text = next(t for t in range(model.n_vocab) if not model.is_eog(t) and not model.is_control(t))
    logits = np.full(model.n_vocab, -30.0, dtype=np.float32)
    logits[[text, model.eos]] = [1.0, 1.0]   # an end as likely as the text: llama.cpp ends
    kept, forced = InfillFilter(model)(np.array([text, model.eos]), logits)
    assert forced == model.eos and kept.tolist() == [model.eos]
