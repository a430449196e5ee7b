"""Settings: defaults merged with a JSON file. A corrupt file is kept aside and defaults are used."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from app.core.params import AUTO, ModelParams, SamplingParams, SpeculationParams, parse_gpu_layers

log = logging.getLogger(__name__)
RECENT_LIMIT = 10
DRAFT_POLICIES = ("auto", "fixed", "pmin")
DRAFTERS = ("lookup+model", "model", "lookup", "none")


@dataclass(frozen=True)
class Settings:
    main_model: str = ""
    draft_model: str = ""               # "" = no draft model loaded
    drafter: str = "lookup+model"       # who drafts: see DRAFTERS; "none" = the main model alone
    recent_main: tuple[str, ...] = ()
    recent_drafts: tuple[str, ...] = ()
    temperature: float = 0.7
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    seed: int = -1                      # -1 = a fresh random seed each generation
    max_tokens: int = 1024
    draft_max: int = 16
    draft_min: int = 0
    p_min: float = 0.0
    draft_policy: str = "auto"          # "auto" (the machine's cost model) | "fixed" | "pmin"
    n_ctx: int = 4096
    main_gpu_layers: int | str = AUTO   # "auto": the draft wholly on the GPU first, then what fits; -1 = all
    draft_gpu_layers: int | str = AUTO
    threads: int = 0                    # 0 = the engine's default for this machine
    colour_tokens: bool = False
    default_system_prompt: str = "You are a helpful assistant."

    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                              min_p=self.min_p, seed=None if self.seed < 0 else self.seed,
                              max_tokens=self.max_tokens)

    def speculation(self) -> SpeculationParams:
        return SpeculationParams(draft_max=self.draft_max, draft_min=min(self.draft_min, self.draft_max),
                                 p_min=self.p_min, policy=self.draft_policy)

    def main_params(self, path: str) -> ModelParams:
        return ModelParams(path=path, n_gpu_layers=self.main_gpu_layers, n_ctx=self.n_ctx,
                           n_threads=self.threads or None)

    def draft_params(self, path: str) -> ModelParams:
        return ModelParams(path=path, n_gpu_layers=self.draft_gpu_layers, n_ctx=self.n_ctx,
                           n_threads=self.threads or None)

    def with_recent_main(self, path: str) -> "Settings":
        return replace(self, recent_main=_push_recent(self.recent_main, path))

    def with_recent_draft(self, path: str) -> "Settings":
        return replace(self, recent_drafts=_push_recent(self.recent_drafts, path))


def _push_recent(items: tuple[str, ...], path: str) -> tuple[str, ...]:
    return tuple([path] + [p for p in items if p != path])[:RECENT_LIMIT]


class SettingsStore:
    """Reads and writes one JSON settings file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.problem: str | None = None  # set when the file was unreadable and defaults were used

    def load(self) -> Settings:
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return Settings()
        except OSError as exc:
            self.problem = f"Could not read the settings file ({exc}); using defaults."
            return Settings()
        try:
            data = json.loads(raw)
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            return _from_dict(data)
        except (ValueError, TypeError) as exc:
            kept = self._keep_aside()
            self.problem = f"The settings file was damaged ({exc}); it was kept as {kept.name} and defaults are used."
            log.warning(self.problem)
            return Settings()

    def save(self, settings: Settings) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(settings), indent=2), encoding="utf-8")
        tmp.replace(self.path)  # atomic: a crash mid-write never leaves half a file

    def _keep_aside(self) -> Path:
        target = self.path.with_name(f"{self.path.name}.corrupt-{time.strftime('%Y%m%d-%H%M%S')}")
        self.path.replace(target)
        return target


def _from_dict(data: dict[str, Any]) -> Settings:
    """Known keys with the right type override the defaults; anything else is ignored."""
    defaults = Settings()
    values: dict[str, Any] = {}
    for f in fields(Settings):
        if f.name not in data:
            continue
        if f.name in GPU_LAYER_FIELDS:
            value = _gpu_layers_or_none(data[f.name])
        else:
            value = _coerce(data[f.name], getattr(defaults, f.name))
        if value is not None:
            values[f.name] = value
    if values.get("draft_policy") not in (None, *DRAFT_POLICIES):
        del values["draft_policy"]
    if values.get("drafter") not in (None, *DRAFTERS):
        del values["drafter"]
    return replace(defaults, **values)


GPU_LAYER_FIELDS = ("main_gpu_layers", "draft_gpu_layers")


def _gpu_layers_or_none(value: Any) -> int | str | None:
    try:
        return parse_gpu_layers(value)
    except ValueError:
        return None


def _coerce(value: Any, default: Any) -> Any:
    if isinstance(default, bool):
        return value if isinstance(value, bool) else None
    if isinstance(default, int):
        return value if isinstance(value, int) and not isinstance(value, bool) else None
    if isinstance(default, float):
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(default, str):
        return value if isinstance(value, str) else None
    if isinstance(default, tuple):
        return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else None
    return None
