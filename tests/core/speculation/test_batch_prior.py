"""A mixture-of-experts main: verifying k tokens reads the experts each of them is routed to, so a batch
costs more than one token's step even on a GPU. The cost model's prior knows it (app/core/speculation/batch_prior.py)
before any round is timed, and the rounds' timings still rule once measured. No timed assertions."""

from __future__ import annotations

import pytest

from app.core.gguf.info import read_gguf_info
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.params import SpeculationParams
from app.core.speculation.acceptance import AcceptanceModel
from app.core.speculation.acceptance import LOOKUP, MTP, LookupMatch
from app.core.speculation.batch_prior import batch_cost_shape, expected_experts, main_batch_shape
from app.core.speculation.costmodel import CostModel, CostProfile, ProfileStore
from app.core.speculation.drafters import Draft
from app.core.speculation.policy import AutoPolicy
from app.core.speculation.policy_base import Decision

N_MAX = 9
STEP = 0.02
AUTO = SpeculationParams(draft_max=N_MAX - 1, policy="auto")


@pytest.fixture(scope="module")
def moe(tmp_path_factory):
    """Tiny Qwen3-MoE mains: the suite's default (4 experts, 2 per token), one with 64 experts and 4 per
    token (most weights in experts, as in a real MoE), and one with 8 experts, 2 per token and wide
    experts (Mixtral's ratio: a token reads a quarter of them)."""
    d = tmp_path_factory.mktemp("moe")
    return {
        "4/2": write_tiny_model(d / "moe-4.gguf", TinySpec(architecture="qwen3moe")),
        "64/4": write_tiny_model(d / "moe-64.gguf", TinySpec(architecture="qwen3moe", n_expert=64, n_expert_used=4)),
        "8/2": write_tiny_model(d / "moe-8.gguf", TinySpec(architecture="qwen3moe", n_expert=8, n_expert_used=2,
                                                           n_ff=1024)),
    }


def prior_ratios(costs: CostModel) -> list[float]:
    """What the cost model says a batch of n costs against one step (n = 1 .. n_max), at no context."""
    times = costs.profile(0).main_batch_s
    return [t / times[0] for t in times]


# -- the prior ---------------------------------------------------------------------------------------

def test_a_batch_of_an_moe_on_a_gpu_costs_more_than_a_step_a_dense_one_about_one(moe, tiny_models):
    dense = read_gguf_info(tiny_models.main)
    assert main_batch_shape(dense, 1.0, N_MAX)[3] < 1.15                  # a dense GPU batch of 4: about a step
    for name, least in (("4/2", 1.4), ("64/4", 2.0)):
        shape = main_batch_shape(read_gguf_info(moe[name]), 1.0, N_MAX)
        assert shape[0] == 1.0 and shape[3] > least                        # a batch of 4: clearly more
        assert all(b > a for a, b in zip(shape, shape[1:]))                # and more with every token
        ratios = prior_ratios(CostModel({}, N_MAX, prior_shape=shape))
        assert ratios == pytest.approx(shape)                              # the cost model starts from it


def test_the_prior_for_real_shapes():
    """batch_prior.py's documented examples: a 256-expert model with 8 used and 90% of its weights in
    experts (Qwen3.6-35B-A3B) on a GPU; a dense model on a GPU and on a CPU; n = 1, 2, 4, 8, 16."""
    at = [0, 1, 3, 7, 15]
    moe_gpu = batch_cost_shape(16, 1.0, 256, 8, 0.9)
    assert [moe_gpu[i] for i in at] == pytest.approx([1, 1.24, 1.71, 2.57, 4.03], abs=0.01)
    assert [batch_cost_shape(16, 1.0)[i] for i in at] == pytest.approx([1, 1.03, 1.09, 1.21, 1.45])
    cpu = batch_cost_shape(16, 0.0)
    assert [cpu[i] for i in at] == pytest.approx([1, 1.5, 2.5, 4.5, 8.5])
    assert prior_ratios(CostModel({}, 16)) == pytest.approx(cpu)          # the default: as it always was
    assert expected_experts(1, 256, 8) == pytest.approx(8) and expected_experts(10**4, 256, 8) == pytest.approx(256)
    # on a CPU an MoE costs the dearer of the CPU's arithmetic and its expert reads, size by size
    mixtral_cpu = batch_cost_shape(16, 0.0, 8, 2, 0.96)
    assert all(m >= max(c, g - 0.03 * n) - 1e-9
               for n, (m, c, g) in enumerate(zip(mixtral_cpu, cpu, batch_cost_shape(16, 1.0, 8, 2, 0.96))))
    assert mixtral_cpu[1] > cpu[1]
    # a model split between GPU and CPU is nearer the CPU's shape: RAM is read about 10 times slower
    half = batch_cost_shape(16, 0.5)
    assert batch_cost_shape(16, 1.0)[15] < batch_cost_shape(16, 0.99)[15] < half[15] < cpu[15]
    assert half[15] > 0.9 * cpu[15]


# -- the policy --------------------------------------------------------------------------------------

def _policy(shape: list[float], acceptance: AcceptanceModel) -> AutoPolicy:
    """The auto policy deciding on what the cost model believes before any round is timed: its prior."""
    costs = CostModel({}, N_MAX, prior_shape=shape).profile()
    return AutoPolicy(AUTO, CostProfile(key={}, main_batch_s=costs.main_batch_s), acceptance)


def _history() -> AcceptanceModel:
    """The same acceptance history for every policy: MTP tokens drafted at 80% confidence were
    accepted 4 times in 5, lookup matches of 2 tokens 3 times in 5."""
    acceptance = AcceptanceModel()
    for i in range(50):
        acceptance.update(MTP, 0, 0.8, i % 5 != 0)
        acceptance.update(LOOKUP, 0, LookupMatch(2), i % 5 < 3)
    return acceptance


def _verified(policy: AutoPolicy, score, source: str) -> int:
    """The tokens of one round's draft the policy sends for verification, every one with ``score``."""
    if policy.draft_length(source) == 0:
        return 0
    n = 0
    while True:
        decision = policy.step(n, score, source)
        if decision is Decision.STOP:
            break
        n += 1
        if decision is Decision.LAST:
            break
    return policy.cut(Draft([5] * n, [None] * n, [source] * n, [score] * n)) if n else 0


def test_auto_drafts_less_on_an_moe_main_s_prior_than_on_a_dense_one(moe, tiny_models):
    """On a GPU, with the same acceptance history: on a dense main's prior auto drafts MTP chains and
    copies short lookup matches; on the MoE main's, where a batch of 4 costs more than two steps, it
    verifies at most one of those tokens, and none of a 1-token match."""
    dense = main_batch_shape(read_gguf_info(tiny_models.main), 1.0, N_MAX)
    expert = main_batch_shape(read_gguf_info(moe["64/4"]), 1.0, N_MAX)
    assert _verified(_policy(dense, _history()), 0.8, MTP) >= 3
    assert _verified(_policy(expert, _history()), 0.8, MTP) <= 1
    assert _verified(_policy(dense, _history()), LookupMatch(2), LOOKUP) >= 4
    assert _verified(_policy(expert, _history()), LookupMatch(2), LOOKUP) <= 1
    assert _verified(_policy(dense, _history()), LookupMatch(1), LOOKUP) >= 2
    assert _verified(_policy(expert, _history()), LookupMatch(1), LOOKUP) == 0


def test_timed_rounds_overrule_the_prior(moe):
    """The prior is where learning starts: batches timed at about one step on an MoE (its tokens
    routed to the same experts) bring the estimates there and auto drafts long MTP chains; batches
    timed dearer than a dense prior said raise its estimates."""
    expert = main_batch_shape(read_gguf_info(moe["64/4"]), 1.0, N_MAX)
    costs = CostModel({}, N_MAX, prior_shape=expert)
    policy = AutoPolicy(AUTO, costs, _history())
    assert prior_ratios(costs)[3] > 2.0
    flat = [STEP * (1 + 0.03 * (n - 1)) for n in range(1, N_MAX + 1)]
    for _ in range(3):
        for n in range(1, N_MAX + 1):
            costs.observe_main(n, 100, flat[n - 1])
    assert all(costs.main_batch(n, 100) == pytest.approx(flat[n - 1], rel=0.1) for n in range(1, N_MAX + 1))
    assert _verified(policy, 0.8, MTP) >= 3

    dense = CostModel({}, N_MAX, prior_shape=batch_cost_shape(N_MAX, 1.0))
    for n in (1, 4, 1, 4, 1, 4):
        dense.observe_main(n, 100, STEP * expert[n - 1])
    assert dense.main_batch(4, 100) / dense.main_batch(1, 100) == pytest.approx(expert[3], rel=0.1)


def test_a_stale_profile_starts_over_from_the_model_s_prior(moe):
    """A stored profile the first rounds contradict is dropped; learning starts over from the main
    model's prior (an MoE's), not from a CPU's."""
    expert = main_batch_shape(read_gguf_info(moe["64/4"]), 1.0, N_MAX)
    stored = CostProfile(key={}, main_batch_s=[3 * STEP] * N_MAX)
    costs = CostModel.from_profile(stored, prior_shape=expert)
    for _ in range(CostModel.STALE_ROUNDS):
        costs.observe_main(1, 0, STEP)
    assert costs.stale and not costs.warm
    assert prior_ratios(costs) == pytest.approx(expert, rel=0.05)             # a step timed: the shape stays
    assert prior_ratios(costs)[-1] < 0.9 * batch_cost_shape(N_MAX, 0.0)[-1]   # not a CPU's


# -- the engine --------------------------------------------------------------------------------------

def test_the_engine_starts_from_its_main_model_s_prior(moe, tiny_models, tmp_path):
    """An engine on the CPU: an MoE main's cold cost model has the MoE-on-CPU shape (here, its
    expert reads make a batch of 2 dearer than a CPU's half a step more), a dense main's the CPU's;
    a stored profile still wins."""
    from app.core.engine import Engine
    from app.core.params import ModelParams

    cpu = batch_cost_shape(N_MAX, 0.0)
    engine = Engine.load(ModelParams(str(moe["8/2"]), n_gpu_layers=0, n_ctx=256, n_threads=1))
    try:
        assert engine.main.model.placement.offloaded == 0
        shape = main_batch_shape(engine.main_info, 0.0, N_MAX)
        costs = engine.costs.model(N_MAX)
        assert not costs.warm and prior_ratios(costs) == pytest.approx(shape)
        assert shape[1] > cpu[1] + 0.1 and all(s >= c for s, c in zip(shape, cpu))
        stored = CostProfile(key=engine.costs.key(N_MAX), main_batch_s=[STEP] * N_MAX)
        engine.costs.store = ProfileStore(tmp_path)
        engine.costs.store.save(stored)
        engine.costs.forget()
        assert engine.costs.model(N_MAX).warm and prior_ratios(engine.costs.model(N_MAX)) == pytest.approx([1.0] * N_MAX)
    finally:
        engine.close()
    dense = Engine.load(ModelParams(str(tiny_models.main), n_gpu_layers=0, n_ctx=256, n_threads=1))
    try:
        assert prior_ratios(dense.costs.model(N_MAX)) == pytest.approx(cpu)
    finally:
        dense.close()
