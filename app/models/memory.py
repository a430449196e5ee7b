"""How much memory a model needs (weights + KV cache + buffers) and whether this machine has it."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from app.core.gguf.info import GGUFInfo
from app.core.llama.placement import footprint, usable_bytes
from app.core.llama.ram import ram
from app.models.diskspace import format_bytes
from app.models.speed import decoding_cores

FITS_FRACTION = 0.6                         # of total RAM: comfortable next to the OS and other apps
TIGHT_FRACTION = 0.9


@dataclass(frozen=True)
class MachineMemory:
    ram_total: int | None
    ram_available: int | None
    gpu_offload: bool            # llama.cpp found a GPU it can offload to
    vram_total: int | None       # None: no GPU visible, or its memory is unknown
    vram_free: int | None
    gpu_name: str = ""
    cpu_cores: int | None = None   # the cores decoding uses (app/models/speed.py); None: unknown

    def describe(self) -> str:
        ram = f"RAM {format_bytes(self.ram_total)}" if self.ram_total else "RAM unknown"
        if self.ram_available:
            ram += f" ({format_bytes(self.ram_available)} available)"
        if not self.gpu_offload:
            return f"{ram}; llama.cpp runs on the CPU"
        vram = f"VRAM {format_bytes(self.vram_total)}" if self.vram_total else "VRAM unknown"
        if self.vram_free is not None:
            vram += f" ({format_bytes(self.vram_free)} free)"
        return f"{ram}; {self.gpu_name or 'GPU'}: {vram}"


@dataclass(frozen=True)
class MemoryEstimate:
    weights: int
    kv_cache: int
    buffers: int
    n_ctx: int

    @property
    def total(self) -> int:
        return self.weights + self.kv_cache + self.buffers

    def __add__(self, other: "MemoryEstimate") -> "MemoryEstimate":
        return MemoryEstimate(self.weights + other.weights, self.kv_cache + other.kv_cache,
                              self.buffers + other.buffers, self.n_ctx)

    def describe(self) -> str:
        return (f"{format_bytes(self.total)} (weights {format_bytes(self.weights)}, "
                f"KV cache {format_bytes(self.kv_cache)} at {self.n_ctx:,} tokens)")


@dataclass(frozen=True)
class Fit:
    verdict: str      # fits | tight | too large | unknown
    detail: str


def estimate_memory(info: GGUFInfo, n_ctx: int, weights_bytes: int | None = None) -> MemoryEstimate:
    """Memory to run ``info`` with ``n_ctx`` tokens of context (F16 KV cache), with the compute buffer
    the engine's GPU-layer planner counts (app.core.llama.placement)."""
    ctx = min(n_ctx, info.context_length) if info.context_length else n_ctx
    weights = weights_bytes if weights_bytes is not None else info.file_size
    return MemoryEstimate(weights, info.kv_bytes_per_token() * ctx, footprint(info, ctx).compute_bytes, ctx)


def judge_fit(needed: int, machine: MachineMemory) -> Fit:
    """Fits, tight or too large. With a GPU, "fits" means every layer goes on it (what auto GPU layers
    would do, keeping the same safety margin); a model that fits only partly runs with its other layers
    in RAM, slower: "tight". Without a GPU, against RAM."""
    if machine.gpu_offload and machine.vram_total:
        free = machine.vram_free if machine.vram_free is not None else machine.vram_total
        if needed <= usable_bytes(free):
            return Fit("fits", f"needs {format_bytes(needed)}: all layers on the GPU "
                               f"({format_bytes(free)} VRAM free)")
        if machine.ram_total and needed <= usable_bytes(free) + machine.ram_total * FITS_FRACTION:
            return Fit("tight", f"needs {format_bytes(needed)}, more than the {format_bytes(free)} of VRAM free: "
                                f"partial GPU offload, the other layers run on the CPU (slower)")
        return Fit("too large", f"needs {format_bytes(needed)}: more than VRAM and RAM can hold; choose a smaller "
                                f"quantization or model")
    if not machine.ram_total:
        return Fit("unknown", f"needs {format_bytes(needed)}; this machine's memory is unknown")
    return _judge(needed, machine.ram_total, machine.ram_available, "RAM")


def _judge(needed: int, total: int, free: int | None, kind: str) -> Fit:
    base = f"needs {format_bytes(needed)} of {format_bytes(total)} {kind}"
    if needed <= total * FITS_FRACTION and (free is None or needed <= free):
        return Fit("fits", base)
    if needed <= total * TIGHT_FRACTION:
        note = f", {format_bytes(free)} free now" if free is not None else ""
        return Fit("tight", f"{base}{note}: close other programs or lower the context")
    return Fit("too large", f"{base}: choose a smaller quantization or model")


@lru_cache(maxsize=1)
def machine_memory() -> MachineMemory:
    """This machine's RAM and the memory of the GPU the models go on (as llama.cpp's device registry
    reports it)."""
    total, available = ram()
    gpus = _gpus()
    if not gpus:
        return MachineMemory(total, available, False, None, None, cpu_cores=decoding_cores())
    return MachineMemory(total, available, True, sum(d.total_bytes for d in gpus) or None,
                         sum(d.free_bytes for d in gpus), " + ".join(d.description for d in gpus), decoding_cores())


def _gpus() -> tuple:
    """The GPU the models would go on (auto): the pair runs on one device, and one card seen by two
    backends (CUDA0 and Vulkan0) must not count twice."""
    try:
        from app.core.llama.devices import preferred_gpu, system_info

        best = preferred_gpu(system_info().gpus)
    except Exception:  # llama.cpp missing or its library failed to load: no GPU to count on
        return ()
    return (best,) if best else ()


__all__ = ["Fit", "MachineMemory", "MemoryEstimate", "estimate_memory", "judge_fit", "machine_memory"]
