"""Where a pair's layers go: how many of each model's layers fit in free GPU memory.

llama.cpp offloads layers from the output end: with ``n_gpu_layers = k`` the output layer and the
last ``k - 1`` repeating layers (each with its share of the KV cache) live on the GPU, and the token
embeddings always stay in RAM. The estimate adds the weights of those layers (from the GGUF's tensor
sizes), their KV cache at the chosen context and the device's compute buffer.

"auto" puts the draft model wholly on the GPU first: a draft left on the CPU makes every drafted
token cost more than the main model's verification saves. Then as many main-model layers as fit.

``parse_placement`` reads back, from llama.cpp's load log, where the layers went.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Sequence

from app.core.errors import ModelLoadError
from app.core.gguf.info import GGUFInfo
from app.core.params import AUTO, ModelParams

MIB = 2**20
SAFETY_MARGIN_BYTES = 512 * MIB   # other programs, the driver, fragmentation
SAFETY_MARGIN_FRACTION = 0.05     # of the free memory, on top of the fixed margin
_BLOCK = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class Footprint:
    """The bytes one model needs, split as llama.cpp places them."""

    block_bytes: tuple[int, ...]   # weights of each repeating layer
    output_bytes: int              # the output layer (its own matrix, or a copy of tied embeddings)
    input_bytes: int               # token embeddings: always in RAM
    kv_bytes_per_layer: int        # K and V of one layer at the chosen context
    compute_bytes: int             # the graph's scratch buffer on the device that runs it
    tied_bytes: int = 0            # of output_bytes, the copy of tied embeddings (made only for a GPU)

    @property
    def n_layers(self) -> int:
        """What llama.cpp counts as layers: the repeating ones plus the output layer."""
        return len(self.block_bytes) + 1

    def gpu_bytes(self, n_gpu_layers: int) -> int:
        n = self.n_layers if n_gpu_layers < 0 else min(n_gpu_layers, self.n_layers)
        if n == 0:
            return 0
        blocks = self.block_bytes[len(self.block_bytes) - (n - 1):] if n > 1 else ()
        return self.output_bytes + sum(blocks) + self.kv_bytes_per_layer * (n - 1) + self.compute_bytes

    def cpu_bytes(self, n_gpu_layers: int) -> int:
        """What stays in RAM: the token embeddings, the layers not offloaded with their KV cache, and a
        compute buffer (the output layer too when nothing is offloaded)."""
        n = self.n_layers if n_gpu_layers < 0 else min(n_gpu_layers, self.n_layers)
        kept = len(self.block_bytes) - max(0, n - 1)
        output = self.output_bytes - self.tied_bytes if n == 0 else 0
        return (self.input_bytes + output + sum(self.block_bytes[:kept]) + self.kv_bytes_per_layer * kept
                + self.compute_bytes)

    def most_layers_within(self, budget: int) -> int:
        """The most layers whose GPU share fits in ``budget`` bytes."""
        best = 0
        for n in range(1, self.n_layers + 1):
            if self.gpu_bytes(n) > budget:
                break
            best = n
        return best


def footprint(info: GGUFInfo, n_ctx: int, n_batch: int = 512) -> Footprint:
    ctx = n_ctx or info.context_length or 4096
    # llama.cpp counts a model's MTP (nextn) layers among its blocks and offloads them from the output end
    # like the rest: left out here, "all layers" (an explicit count, or auto) stopped one short and left
    # the trunk's first layer on the CPU (the 2026-11-27 H100 run's Qwen3.5 shape: 33/34 offloaded)
    n_blocks = (info.n_layers or 0) + info.mtp_layers
    blocks = [0] * n_blocks
    output = input_ = 0
    has_output = False
    for name, size in info.tensor_bytes:
        match = _BLOCK.match(name)
        if match and int(match.group(1)) < n_blocks:
            blocks[int(match.group(1))] += size
        elif name.startswith("token_embd."):
            input_ += size
        else:  # output.weight, output_norm.*, rope tables and other per-model tensors
            output += size
            has_output |= name == "output.weight"
    tied = 0 if has_output else input_  # tied embeddings: llama.cpp copies them for an offloaded output layer
    kv_per_layer = info.kv_bytes_per_token() * ctx // max(1, n_blocks)
    return Footprint(tuple(blocks), output + tied, input_, kv_per_layer, _compute_bytes(info, ctx, n_batch), tied)


def _compute_bytes(info: GGUFInfo, n_ctx: int, n_batch: int) -> int:
    """A generous estimate of llama.cpp's compute buffer: a batch's logits and activations, and the
    attention scores of a batch over the whole context."""
    n_embd, n_head = info.n_embd or 0, info.n_head or 0
    activations = 4 * n_batch * (info.vocab_size + 8 * n_embd)
    attention = 4 * n_batch * n_ctx * n_head
    return activations + attention + 64 * MIB


@dataclass(frozen=True)
class Placement:
    main_layers: int
    draft_layers: int | None
    free_bytes: int
    main_gpu_bytes: int
    draft_gpu_bytes: int
    notes: tuple[str, ...] = ()


def usable_bytes(free_bytes: int) -> int:
    return max(0, int(free_bytes * (1 - SAFETY_MARGIN_FRACTION)) - SAFETY_MARGIN_BYTES)


def plan_gpu_layers(main: ModelParams, main_info: GGUFInfo, draft: ModelParams | None,
                    draft_info: GGUFInfo | None, free_bytes: int) -> Placement:
    """Resolve "auto" GPU layers for a pair given the GPUs' free memory (0 without a usable GPU).
    Numbers given by the user are kept; a pair that cannot fit that way is refused before loading."""
    budget = usable_bytes(free_bytes)
    notes: list[str] = []
    draft_layers, draft_bytes = None, 0
    if draft is not None and draft_info is not None:
        draft_fp = footprint(draft_info, draft.n_ctx, draft.n_batch)
        draft_layers = _resolve(draft.n_gpu_layers, draft_fp, budget)
        draft_bytes = draft_fp.gpu_bytes(draft_layers)
        notes += _draft_notes(draft.n_gpu_layers, draft_layers, draft_fp.n_layers, free_bytes)
    main_fp = footprint(main_info, main.n_ctx, main.n_batch)
    main_layers = _resolve(main.n_gpu_layers, main_fp, max(0, budget - draft_bytes))
    main_bytes = main_fp.gpu_bytes(main_layers)
    if free_bytes and main.n_gpu_layers == AUTO and main_layers < main_fp.n_layers:
        notes.append(f"{main_layers} of {main_fp.n_layers} main-model layers fit on the GPU; the rest run on the CPU")
    chosen_by_hand = (main_bytes if main.n_gpu_layers != AUTO else 0) + \
        (draft_bytes if draft is not None and draft.n_gpu_layers != AUTO else 0)
    if free_bytes and chosen_by_hand > free_bytes:
        raise ModelLoadError(
            f"{main_info.display_name}{' and its draft' if draft else ''} need about "
            f"{(main_bytes + draft_bytes) / 2**30:.1f} GiB of GPU memory with the GPU layers chosen, but the GPU "
            f"has {free_bytes / 2**30:.1f} GiB free. Use auto GPU layers (-ngl auto) or offload fewer layers.")
    return Placement(main_layers, draft_layers, free_bytes, main_bytes, draft_bytes, tuple(notes))


def _draft_notes(requested: int | str, layers: int, n_layers: int, free_bytes: int) -> list[str]:
    """A draft model left (partly) on the CPU is the commonest reason speculation loses: say so."""
    if not free_bytes or layers >= n_layers:
        return []
    if requested == AUTO:
        fits = f"fits only {layers} of {n_layers} layers on the GPU" if layers else "does not fit on the GPU"
        return [f"the draft model {fits}: speculation will likely not pay; choose a smaller draft or free GPU "
                f"memory"]
    return [f"the draft model has {layers} of {n_layers} layers on the GPU: a draft on the CPU makes "
            f"speculation slower than the main model alone (use auto or -1)"]


def _resolve(requested: int | str, fp: Footprint, budget: int) -> int:
    if requested == AUTO:
        return fp.most_layers_within(budget) if budget > 0 else 0
    return fp.n_layers if int(requested) < 0 else min(int(requested), fp.n_layers)


def resolved(params: ModelParams, layers: int) -> ModelParams:
    return replace(params, n_gpu_layers=layers)


# --- where llama.cpp said it put a model's layers ----------------------------------------------------

@dataclass(frozen=True)
class LayerPlacement:
    """Where llama.cpp put one model: layers offloaded (of all, the output layer counted) and the
    size of each weight buffer by device ("CUDA0", "Vulkan0", "CPU_Mapped", ...)."""

    offloaded: int
    total: int
    buffers_mib: tuple[tuple[str, float], ...] = ()
    device: str = ""       # the GPU it was given (CUDA0, Vulkan0); "" for the CPU alone

    def describe(self) -> str:
        where = ", ".join(f"{name} {_mib_text(mib)}" for name, mib in self.buffers_mib)
        gpu = f"the GPU {self.device}" if self.device else "the GPU"
        layers = f"{self.offloaded}/{self.total} layers on {gpu}" if self.offloaded else "all layers on the CPU"
        return f"{layers} ({where})" if where else layers


def _mib_text(mib: float) -> str:
    if mib >= 1024:
        return f"{mib / 1024:.2f} GiB"
    return f"{mib:.1f} MiB" if mib < 10 else f"{mib:.0f} MiB"


_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_BUFFER = re.compile(r"(\S+) model buffer size =\s*([\d.]+) MiB")


def parse_placement(lines: Sequence[str]) -> LayerPlacement:
    """Read llama.cpp's load log (a CPU-only build logs no offload line: nothing was offloaded)."""
    offloaded = total = 0
    buffers = []
    for line in lines:
        if m := _OFFLOADED.search(line):
            offloaded, total = int(m.group(1)), int(m.group(2))
        elif m := _BUFFER.search(line):
            buffers.append((m.group(1), float(m.group(2))))
    return LayerPlacement(offloaded, total, tuple(buffers))
