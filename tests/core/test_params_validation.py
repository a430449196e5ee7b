"""Every parameter is range-checked where it is defined, and sampling stays a distribution at the edges."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from app.core.errors import InvalidParameterError, QuickdraftError
from app.core.params import DrafterKind, ModelParams, PolicyName, SamplingParams, SpeculationParams
from app.core.speculation.sampling import Sampler


@pytest.mark.parametrize("kwargs, name", [
    ({"temperature": -0.1}, "temperature"), ({"temperature": math.nan}, "temperature"),
    ({"temperature": math.inf}, "temperature"), ({"top_k": -1}, "top_k"), ({"top_p": 1.5}, "top_p"),
    ({"top_p": math.nan}, "top_p"), ({"min_p": 5.0}, "min_p"), ({"min_p": -0.1}, "min_p"),
    ({"seed": -1}, "seed"), ({"seed": 2**64}, "seed"), ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": -5}, "max_tokens"), ({"top_k": 2.5}, "top_k"),
])
def test_sampling_values_out_of_range(kwargs, name):
    with pytest.raises(InvalidParameterError) as caught:
        SamplingParams(**kwargs)
    assert caught.value.name == name and "got" in caught.value.problem
    assert isinstance(caught.value, QuickdraftError) and isinstance(caught.value, ValueError)


@pytest.mark.parametrize("kwargs, name", [
    ({"draft_max": -1}, "draft_max"), ({"draft_max": 10_000}, "draft_max"), ({"draft_min": -2}, "draft_min"),
    ({"p_min": 2.0}, "p_min"), ({"p_min": math.nan}, "p_min"), ({"policy": "fastest"}, "policy"),
])
def test_speculation_values_out_of_range(kwargs, name):
    with pytest.raises(InvalidParameterError) as caught:
        SpeculationParams(**kwargs)
    assert caught.value.name == name


@pytest.mark.parametrize("kwargs, name", [
    ({"n_ctx": -5}, "n_ctx"), ({"n_gpu_layers": -2}, "n_gpu_layers"), ({"n_threads": 0}, "n_threads"),
    ({"n_batch": 0}, "n_batch"),
])
def test_model_values_out_of_range(kwargs, name):
    with pytest.raises(InvalidParameterError) as caught:
        ModelParams("m.gguf", **kwargs)
    assert caught.value.name == name


def test_the_edges_of_each_range_are_allowed():
    SamplingParams(temperature=0.0, top_k=0, top_p=0.0, min_p=1.0, seed=0, max_tokens=1)
    SamplingParams(top_p=1.0, min_p=0.0, seed=2**64 - 1)
    SpeculationParams(draft_max=0, p_min=1.0)
    ModelParams("m.gguf", n_ctx=0, n_gpu_layers=-1, n_threads=1)


@pytest.mark.parametrize("temperature", [1e-300, 1e-30, 5e-324, 1e-3])
def test_a_tiny_temperature_samples_the_best_token_never_nan(temperature):
    logits = np.array([1.0, 3.5, 3.0, -2.0, 0.0], dtype=np.float32) * 10
    sampler = Sampler(SamplingParams(temperature=temperature, top_k=0, top_p=1.0, min_p=0.0, seed=1))
    p = sampler.probs(logits)
    assert np.all(np.isfinite(p)) and p.sum() == pytest.approx(1.0)
    assert p[1] == pytest.approx(1.0)
    assert {sampler.sample(logits) for _ in range(20)} == {1}


def test_min_p_one_keeps_the_best_token():
    sampler = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=1.0, seed=1))
    assert sampler.sample(np.array([0.0, 2.0, 1.0], dtype=np.float32)) == 1


def test_choices_keep_their_stored_names_and_have_labels():
    """The values are what settings files and JSON hold: they must not change."""
    assert DrafterKind.values() == ("lookup+model", "model", "lookup", "suffix", "mtp", "eagle3", "dflash", "none")
    assert PolicyName.values() == ("auto", "fixed", "pmin")
    assert all(kind.label and kind.label != kind.value for kind in DrafterKind)
    assert json.dumps({"drafter": DrafterKind.LOOKUP_MODEL}) == '{"drafter": "lookup+model"}'
    assert DrafterKind.parse("model") is DrafterKind.MODEL and DrafterKind.parse("telepathy") is None
    assert DrafterKind.parse(3) is None


def test_speculation_policy_is_parsed_into_its_name():
    assert SpeculationParams(policy="pmin").policy is PolicyName.PMIN
    with pytest.raises(InvalidParameterError, match="must be one of auto, fixed, pmin"):
        SpeculationParams(policy="fastest")


def test_one_default_drafter_for_every_front_end():
    """The CLI, the server, the window's first start and a GenerationRequest draft alike when nobody
    says who drafts: DEFAULT_DRAFTER, the one README documents."""
    import inspect

    from app.core.frontdoor import GenerationRequest
    from app.core.params import DEFAULT_DRAFTER, DrafterKind
    from app.server.slots import HostedJobs, ThreadedJobs
    from app.server.worker import JobQueue
    from app.storage.settings import Settings

    assert DEFAULT_DRAFTER is DrafterKind.LOOKUP_MODEL
    assert GenerationRequest().drafter is DEFAULT_DRAFTER
    for function in (JobQueue.__init__, ThreadedJobs.__init__, HostedJobs.__init__):
        assert inspect.signature(function).parameters["drafter"].default is DEFAULT_DRAFTER, function
    assert Settings().drafter is DEFAULT_DRAFTER


def test_who_drafts_with_the_pair_as_loaded():
    """One rule, for the engine, the window and the CLI: without a draft, lookup still works; a drafter
    file is the pair's draft model, so the choices with the model draft as its kind (MTP, EAGLE-3)."""
    from app.core.params import DrafterKind as K

    assert [k.for_pair(draft_model=True) for k in K] == list(K)
    assert [k.for_pair(draft_model=False) for k in K] == [K.LOOKUP, K.NONE, K.LOOKUP, K.SUFFIX, K.MTP, K.EAGLE3,
                                                          K.DFLASH, K.NONE]
    assert [k.for_pair(draft_model=False, drafter_file=K.MTP) for k in K] == [K.MTP, K.MTP, K.LOOKUP, K.SUFFIX, K.MTP,
                                                                              K.EAGLE3, K.DFLASH, K.NONE]
    assert [k.for_pair(draft_model=False, drafter_file=K.DFLASH) for k in K] == [K.DFLASH, K.DFLASH, K.LOOKUP,
                                                                                 K.SUFFIX, K.MTP, K.EAGLE3, K.DFLASH,
                                                                                 K.NONE]


def test_with_a_suffix_index_the_default_stays_itself_without_a_draft_model():
    """The engine then drafts with lookup, else the index (app/core/speculation/suffix_drafter.py); a
    drafter file still drafts as its kind, and lookup alone stays lookup alone."""
    from app.core.frontdoor import LoadedPair
    from app.core.params import DrafterKind as K

    pair = LoadedPair("m", "m.gguf", suffix_index=True)
    assert pair.who_drafts(K.LOOKUP_MODEL) is K.LOOKUP_MODEL and pair.who_drafts(K.LOOKUP) is K.LOOKUP
    assert LoadedPair("m", "m.gguf").who_drafts(K.LOOKUP_MODEL) is K.LOOKUP
    assert LoadedPair("m", "m.gguf", suffix_index=True, drafts_as=K.MTP).who_drafts(K.LOOKUP_MODEL) is K.MTP
