"""What a main-model batch of n tokens costs against one token's step, before any batch is timed.

This is a prior: the shape ``CostModel`` starts from without a stored profile. The rounds' timings
rule as soon as they are measured (see ``CostModel``); the prior only has to be right enough that the
policy does not bet on batches being cheap where they are not.

Decoding at small batch sizes is bound by reading the weights from memory, and how much a batch reads
depends on the model and on where it runs:

- a dense model on a GPU reads its weights once per batch whatever n is, and each token adds a little
  arithmetic: GPU_TOKEN_COST of a step per token after the first (a guess: llama.cpp's quantized
  matrix-vector kernels take several columns at once, and what a column adds is dequantizing and
  multiplying, a few percent of reading the weights);
- a mixture of experts (MoE) reads its shared weights (attention, router, shared experts, output
  layer) once per batch, and of each MoE layer's ``E`` routed experts those its tokens are routed to.
  One token reads ``u`` of them; n tokens routed independently and uniformly reach
  ``D(n) = E * (1 - (1 - u/E)**n)`` distinct experts on average (each expert is missed by a token
  with chance 1 - u/E). With ``f`` the fraction of the weights in routed experts
  (``GGUFInfo.expert_weight_fraction``), a batch of n reads

      (1 - f) + f * D(n) / E      of the weights, against      (1 - f) + f * u / E      for one token.

  Real routing is not uniform (adjacent tokens of a text share experts more often than chance), so
  this is the most a batch is likely to read; the per-token arithmetic is added as for a dense model;
- on a CPU the arithmetic is no longer small: a dense batch costs half a step more per token
  (CPU_TOKEN_COST: ``1 + 0.5 (n - 1)``, the shape CostModel always assumed; on this project's 2-core
  machines a batch of 17 of Qwen2.5-Coder 1.5B cost 5 to 14.5 steps, 0.25 to 0.85 per token, by
  load and threads). An MoE on a CPU takes, size by size, the dearer of that and its expert reads;
- a model split between the GPU and the CPU spends most of its time in the CPU's layers (RAM is read
  about GPU_SPEEDUP times slower than a GPU's memory: 50-100 GB/s against 0.5-3 TB/s): the two shapes
  are weighed by the time each part takes for one token, so with a tenth of the layers on the CPU
  the shape is already halfway to a CPU's.

For a 256-expert model with 8 used per token and 90% of its weights in experts (Qwen3.6-35B-A3B) on
a GPU this gives 1, 1.24, 1.71, 2.57, 4.03 for n = 1, 2, 4, 8, 16; for a dense model 1, 1.03, 1.09,
1.21, 1.45 on a GPU and 1, 1.5, 2.5, 4.5, 8.5 on a CPU.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.core.gguf.info import GGUFInfo

GPU_TOKEN_COST = 0.03   # a GPU: each token after the first adds this much of a step (arithmetic)
CPU_TOKEN_COST = 0.5    # a CPU: each token after the first adds half a step
GPU_SPEEDUP = 10.0      # a GPU reads weights about this many times faster than a CPU reads RAM


def expected_experts(n: int, n_expert: int, n_expert_used: int) -> float:
    """The distinct experts of one MoE layer that ``n`` tokens reach, each routed to ``n_expert_used``
    of ``n_expert`` independently and uniformly."""
    return n_expert * (1.0 - (1.0 - n_expert_used / n_expert) ** n)


def batch_cost_shape(n_max: int, gpu_fraction: float = 0.0, n_expert: int = 0, n_expert_used: int = 0,
                     expert_fraction: float = 0.0) -> list[float]:
    """[n - 1]: what a batch of n tokens costs in single-token steps, n = 1 .. n_max (the first is 1).
    ``gpu_fraction``: the share of the main model's layers on a GPU (0: the CPU, 1: all of them);
    ``n_expert``, ``n_expert_used``, ``expert_fraction``: an MoE's routed experts per layer, those a
    token uses, and the share of its weights they hold (any of them 0: a dense model)."""
    sizes = range(1, n_max + 1)
    moe = 0 < n_expert_used <= n_expert and 0.0 < expert_fraction <= 1.0
    if moe:
        shared = 1.0 - expert_fraction
        one = shared + expert_fraction * n_expert_used / n_expert
        reads = [(shared + expert_fraction * expected_experts(n, n_expert, n_expert_used) / n_expert) / one
                 for n in sizes]
    else:
        reads = [1.0] * n_max
    gpu = [r + GPU_TOKEN_COST * (n - 1) for r, n in zip(reads, sizes)]
    cpu = [max(r, 1.0 + CPU_TOKEN_COST * (n - 1)) for r, n in zip(reads, sizes)]
    g = min(1.0, max(0.0, gpu_fraction))
    gpu_share = g / GPU_SPEEDUP / (g / GPU_SPEEDUP + (1.0 - g))   # of one token's time
    return [gpu_share * a + (1.0 - gpu_share) * b for a, b in zip(gpu, cpu)]


def main_batch_shape(info: "GGUFInfo", gpu_fraction: float, n_max: int) -> list[float]:
    """``batch_cost_shape`` for the main model read from its GGUF metadata."""
    return batch_cost_shape(n_max, gpu_fraction, info.n_expert, info.n_expert_used, info.expert_weight_fraction)
