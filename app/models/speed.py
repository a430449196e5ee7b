"""How fast a model can be expected to write on this machine, so that recommendations judge speed as
well as memory: on two cores without a GPU a 12B model fits 16 GB of RAM and writes about one token a
second, which no one would choose knowingly.

Writing a token reads every weight once (of a mixture of experts, the active experts'), so a
decoder streams the model's bytes per token: tokens/s ~ bytes per second the machine streams through
llama.cpp's matrix-vector products / the model's bytes. On a CPU that rate is each decoding core's
share (CPU_BYTES_PER_CORE: a Q4_K matrix-vector product unpacked and multiplied on one AVX2 core)
up to the memory's bandwidth (RAM_BYTES_S); on a GPU, its memory's (GPU_BYTES_S, the low end of
discrete cards). Layers that do not fit in VRAM run on the CPU, and per token both parts' times add.
Rough on purpose (a factor of two either way): it ranks pairs and says which would crawl, and is
shown as "about", never promised. Drafting speeds a pair up from there.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from app.core.llama.placement import usable_bytes

CPU_BYTES_PER_CORE = 4e9
RAM_BYTES_S = 40e9          # dual-channel DDR4/DDR5 as llama.cpp reaches it
GPU_BYTES_S = 250e9
QUICK_TPS = 5.0             # faster than most people read: a pair at least this quick is recommended first
SLOW_TPS = 1.5              # slower than this, a 300-token answer takes over 3 minutes: not recommended
ACTIVE_RE = re.compile(r"^(?P<total>\d+(?:\.\d+)?)B-A(?P<active>\d+(?:\.\d+)?)B$", re.IGNORECASE)


@dataclass(frozen=True)
class Speed:
    tokens_per_s: float

    @property
    def verdict(self) -> str:
        """quick, usable or too slow."""
        if self.tokens_per_s >= QUICK_TPS:
            return "quick"
        return "usable" if self.tokens_per_s >= SLOW_TPS else "too slow"

    def describe(self) -> str:
        figure = f"{self.tokens_per_s:.0f}" if self.tokens_per_s >= 3 else f"{self.tokens_per_s:.1f}"
        return f"about {figure} tokens/s here before drafting"


def decoding_cores() -> int:
    """The cores llama.cpp decodes with by default: physical ones (app.core.llama.binding.default_threads's
    rule: up to four logical CPUs taken as cores, beyond that half of them, hyper-threads)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return n if n <= 4 else max(4, n // 2)


def active_fraction(params: str) -> float:
    """Of a mixture of experts named "35B-A3B", the share of weights read per token (3/35); 1 otherwise."""
    match = ACTIVE_RE.match(params.strip())
    if not match or float(match["total"]) <= 0:
        return 1.0
    return min(1.0, float(match["active"]) / float(match["total"]))


def expected_speed(model_bytes: int, cpu_cores: int | None, gpu_offload: bool = False,
                   vram_free: int | None = None, fraction: float = 1.0) -> Speed | None:
    """The writing speed to expect of a model of ``model_bytes`` (``fraction`` of them read per token);
    None when the cores are unknown (and there is no GPU to hold it all)."""
    read = model_bytes * fraction
    held = min(1.0, usable_bytes(vram_free) / model_bytes) if gpu_offload and vram_free and model_bytes else 0.0
    on_gpu = read * held   # the share of the layers in VRAM (auto GPU layers fill it)
    seconds = on_gpu / GPU_BYTES_S
    if read > on_gpu:
        if not cpu_cores:
            return None
        seconds += (read - on_gpu) / min(RAM_BYTES_S, cpu_cores * CPU_BYTES_PER_CORE)
    return Speed(1.0 / seconds) if seconds > 0 else None
