"""What the tiny-model tests check of any architecture: it decodes a prompt and generates."""

from __future__ import annotations

import numpy as np


def assert_generates_varied_tokens(session, prompt: list[int], n: int = 16) -> None:
    """Greedy decoding after ``prompt`` gives finite logits and more than one distinct token, and the
    session's cache holds exactly what was decoded."""
    row = session.eval(prompt)[-1]
    generated = []
    for _ in range(n):
        assert np.isfinite(row).all()
        token = int(np.argmax(row))
        generated.append(token)
        row = session.eval([token])[-1]
    assert np.isfinite(row).all()
    assert len(set(generated)) > 1, f"greedy decoding repeats one token: {generated}"
    assert session.cached == prompt + generated
