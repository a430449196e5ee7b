"""Compare says how far it is (issue 41, fault 5): which of its two runs, the prompt read of its
length while it is read, then the tokens written of the most allowed; the result is the same as
without anyone listening."""

from __future__ import annotations

import pytest

from app.core.compare import CompareProgress, compare_greedy
from app.core.engine import Engine
from app.core.params import DrafterKind, ModelParams


@pytest.fixture(scope="module")
def engine(tiny_models):
    e = Engine.load(ModelParams(str(tiny_models.main), n_gpu_layers=0, n_ctx=2048, n_threads=1),
                    ModelParams(str(tiny_models.same), n_gpu_layers=0, n_ctx=2048, n_threads=1))
    yield e
    e.close()


def test_each_run_reports_its_reading_and_its_tokens_in_order(engine):
    prompt = (engine.main.model.tokenize("the cat is on the mat and the dog sat by the door ") * 90)[:700]
    heard: list[CompareProgress] = []
    result = compare_greedy(engine, prompt, DrafterKind.MODEL, 24, progress=heard.append)
    assert [p.run for p in heard] == sorted(p.run for p in heard) and {p.run for p in heard} == {1, 2}
    for run, drafter in ((1, DrafterKind.NONE), (2, DrafterKind.MODEL)):
        mine = [p for p in heard if p.run == run]
        assert {p.drafter for p in mine} == {drafter}
        readings = [p.reading for p in mine if p.reading is not None]
        assert readings == [(512, 700), (700, 700)]   # each run reads the prompt from an empty cache
        written = [p.generated for p in mine if p.reading is None]
        assert written == sorted(written) and written[-1] == 24 and all(p.max_tokens == 24 for p in mine)
    assert heard[-1].describe() == "Comparing (greedy), run 2 of 2 (drafter: Draft model): 24 of at most 24 tokens…"
    reading = next(p for p in heard if p.reading is not None)
    assert reading.describe() == ("Comparing (greedy), run 1 of 2 (main model alone): reading the prompt, "
                                  "512 of 700 tokens…")
    quiet = compare_greedy(engine, prompt, DrafterKind.MODEL, 24)
    assert quiet.speculative.token_ids == result.speculative.token_ids == result.baseline.token_ids
