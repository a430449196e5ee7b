"""The settings a generation runs with, as plain values the CLI, the GUI and tests share."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    """How the main model's next token is chosen. ``temperature == 0`` means greedy."""

    temperature: float = 0.0
    top_k: int = 40          # 0 = off
    top_p: float = 0.95      # 1.0 = off
    min_p: float = 0.05      # 0.0 = off
    seed: int | None = None  # None = a fresh random seed each generation
    max_tokens: int = 512
    stop: tuple[str, ...] = ()

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass(frozen=True)
class SpeculationParams:
    """How much to draft each round.

    "auto" drafts what the machine's cost profile says pays best, up to ``draft_max``; "fixed"
    always drafts ``draft_max``; "pmin" stops where the draft's confidence falls below ``p_min``.
    A draft shorter than ``draft_min`` is dropped and the main model decodes alone that round;
    drafting stops early when the draft's top probability falls below ``p_min``.
    """

    draft_max: int = 16
    draft_min: int = 0
    p_min: float = 0.0
    policy: str = "auto"      # "auto" (cost model) | "fixed" | "pmin"

    def __post_init__(self) -> None:
        if self.draft_max < 0 or self.draft_min < 0:
            raise ValueError("draft lengths must not be negative")
        if not 0.0 <= self.p_min <= 1.0:
            raise ValueError("p_min must be between 0 and 1")


AUTO = "auto"  # GPU layers: the draft wholly on the GPU first, then what fits of the main model


def parse_gpu_layers(value: int | str) -> int | str:
    """"auto", -1 (all layers) or a number of layers; raises ValueError for anything else."""
    if isinstance(value, str) and value.strip().lower() == AUTO:
        return AUTO
    if isinstance(value, bool):
        raise ValueError(f"GPU layers must be 'auto', -1 (all) or a number of layers, not {value!r}")
    try:
        layers = int(value)
    except (TypeError, ValueError):
        raise ValueError(f"GPU layers must be 'auto', -1 (all) or a number of layers, not {value!r}") from None
    if layers < -1:
        raise ValueError(f"GPU layers must be 'auto', -1 (all) or a number of layers, not {layers}")
    return layers


@dataclass(frozen=True)
class ModelParams:
    """How one model is loaded: GPU layers, context size and threads are per model."""

    path: str
    n_gpu_layers: int | str = AUTO  # AUTO, -1 = all layers, or a number of layers
    n_ctx: int = 4096         # 0 = the model's training context
    n_threads: int | None = None  # None = a sensible default for this machine
    n_batch: int = 512
    use_mmap: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "n_gpu_layers", parse_gpu_layers(self.n_gpu_layers))


@dataclass(frozen=True)
class EngineConfig:
    main: ModelParams
    draft: ModelParams | None = None
    extra: dict = field(default_factory=dict)
