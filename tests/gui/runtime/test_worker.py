"""The engine worker, called on the test's thread: it forwards the engine's own events and stamps."""

from __future__ import annotations

import pytest

from app.core.compare import CompareResult
from app.core.engine import read_pair
from app.core.errors import IncompatibleDraftError
from app.core.frontdoor import GenerationRequest, LoadedPair
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams
from app.core.speculation.events import Round, Started, Summary, TokenPiece
from app.gui.runtime.worker import Batch, EngineWorker, LoadFailure, LoadRequest

MESSAGES = ({"role": "user", "content": "write a long story"},)


def record(worker: EngineWorker) -> dict[str, list]:
    seen: dict[str, list] = {name: [] for name in ("loaded", "load_failed", "started", "batch", "finished",
                                                   "compared", "failed")}
    for name, items in seen.items():
        getattr(worker, name).connect(items.append)
    return seen


@pytest.fixture
def worker(gui_models):
    worker = EngineWorker()
    seen = record(worker)
    worker.load(LoadRequest(ModelParams(str(gui_models.main), n_ctx=512, n_threads=1),
                            ModelParams(str(gui_models.same), n_ctx=512, n_threads=1)))
    assert isinstance(seen["loaded"][0], LoadedPair), seen["load_failed"]
    yield worker, seen
    worker._close_engine()


def request(drafter=DrafterKind.MODEL, max_tokens=200) -> GenerationRequest:
    return GenerationRequest(MESSAGES, sampling=SamplingParams(max_tokens=max_tokens),
                             speculation=SpeculationParams(policy="fixed", draft_max=4), drafter=drafter)


def test_the_stream_carries_the_engines_start_and_stamps(worker, monkeypatch):
    worker, seen = worker
    worker.generate(request())
    [started], [summary] = seen["started"], seen["finished"]
    assert isinstance(started, Started) and isinstance(summary, Summary) and not seen["failed"]
    assert (started.prompt_tokens, started.evaluated_tokens) == (summary.prompt_tokens, summary.prompt_tokens_evaluated)
    events = [e for batch in seen["batch"] for e in batch.events]
    assert all(isinstance(b, Batch) for b in seen["batch"])
    stamps = [e.at_s for e in events]
    assert stamps == sorted(stamps) and 0 < stamps[0] and stamps[-1] <= summary.at_s
    assert sum(len(e.token_ids) for e in events if isinstance(e, TokenPiece)) == summary.generated_tokens
    assert [e.index for e in events if isinstance(e, Round)] == list(range(summary.rounds))


def test_compare_runs_greedy_with_the_draft_and_alone(worker):
    worker, seen = worker
    worker.compare(request(max_tokens=40))
    [result] = seen["compared"]
    assert isinstance(result, CompareResult) and not seen["failed"]
    assert result.identical and result.first_difference is None
    assert result.speculative.drafted > 0 and result.baseline.drafted == 0
    assert result.baseline.generated_tokens == result.speculative.generated_tokens == 40
    assert not seen["started"] and not seen["batch"]   # a compare streams nothing


def test_an_incompatible_pair_is_refused_with_the_engines_own_message(gui_models):
    worker = EngineWorker()
    seen = record(worker)
    worker.load(LoadRequest(ModelParams(str(gui_models.main)), ModelParams(str(gui_models.incompatible))))
    [failure] = seen["load_failed"]
    with pytest.raises(IncompatibleDraftError) as refused:
        read_pair(str(gui_models.main), str(gui_models.incompatible))
    assert isinstance(failure, LoadFailure) and failure.message == str(refused.value)
    assert not failure.previous_kept
