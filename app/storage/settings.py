"""Settings: defaults merged with a JSON file. A corrupt file is kept aside and defaults are used;
a value of the wrong type or out of its range falls back to its default. Either is reported in
``SettingsStore.problem``."""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

from app.core.errors import QuickdraftError
from app.core.params import (AUTO, DEFAULT_DRAFTER, Choice, DrafterKind, ModelParams, PolicyName, SamplingParams,
                             SpeculationParams, SuffixConfig, parse_gpu_layers, read_chat_template)
from app.storage.files import keep_aside

log = logging.getLogger(__name__)
RECENT_LIMIT = 10
# the range of each number a user can set; the settings panel's editors use the same
LIMITS: dict[str, tuple[float, float]] = {
    "temperature": (0.0, 2.0),
    "top_k": (0, 1000),
    "top_p": (0.0, 1.0),
    "min_p": (0.0, 1.0),
    "seed": (-1, 2**31 - 1),
    "max_tokens": (1, 131072),
    "draft_max": (0, 64),
    "draft_min": (0, 64),
    "p_min": (0.0, 1.0),
    "n_ctx": (0, 262144),
    "main_gpu_layers": (-1, 999),
    "draft_gpu_layers": (-1, 999),
    "threads": (0, 512),
    "conversation_cache_mb": (0, 1_048_576),
    "suffix_index_mb": (1, 65536),
    "server_port": (1, 65535),
    "conversations_width": (0, 10000),
    "side_panel_width": (0, 10000),
}


@dataclass(frozen=True)
class Settings:
    main_model: str = ""
    draft_model: str = ""               # "" = no draft model loaded
    drafter: DrafterKind = DEFAULT_DRAFTER
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
    draft_policy: PolicyName = PolicyName.AUTO
    n_ctx: int = 4096
    main_gpu_layers: int | str = AUTO   # "auto": the draft wholly on the GPU first, then what fits; -1 = all
    draft_gpu_layers: int | str = AUTO
    device: str = AUTO                  # the GPU both models run on: auto, cpu, or a name (CUDA0, Vulkan1)
    threads: int = 0                    # 0 = the engine's default for this machine
    conversation_cache_mb: int = 2048   # disk for cache states kept between conversations; 0 = none
    suffix_index: bool = True           # draft from past answers and prompts (app/core/speculation/suffix_store.py)
    suffix_index_mb: int = 64           # the most each main model's suffix index may take on disk
    # per main model file, the chat template used instead of its own: a llama.cpp built-in name, or a Jinja file's path
    chat_templates: tuple[tuple[str, str], ...] = ()
    colour_tokens: bool = False
    default_system_prompt: str = "You are a helpful assistant."
    server_host: str = "127.0.0.1"      # the window's "Local server"; another address needs an API key
    server_port: int = 8080
    server_api_key: str = ""
    recent_remotes: tuple[str, ...] = ()  # OpenAI-compatible servers chatted through, newest first
    remote_api_key: str = ""
    # the window's columns (app/gui/widgets/columns.py): each side's width as the user last set it, and shown
    conversations_width: int = 240
    side_panel_width: int = 440
    conversations_shown: bool = True
    side_panel_shown: bool = True

    def sampling(self) -> SamplingParams:
        return SamplingParams(temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                              min_p=self.min_p, seed=None if self.seed < 0 else self.seed,
                              max_tokens=self.max_tokens)

    def speculation(self) -> SpeculationParams:
        return SpeculationParams(draft_max=self.draft_max, draft_min=min(self.draft_min, self.draft_max),
                                 p_min=self.p_min, policy=self.draft_policy)

    def suffix_config(self, folder: Path) -> SuffixConfig | None:
        """Where the suffix index is kept and how large, or None when it is off."""
        return SuffixConfig(folder, self.suffix_index_mb << 20) if self.suffix_index else None

    def main_params(self, path: str) -> ModelParams:
        """The main model's parameters, with the chat template chosen for it (InvalidParameterError: its
        template file cannot be read)."""
        choice = self.chat_template_for(path)
        by_file = bool(choice) and Path(choice).is_absolute()   # a built-in name is never an absolute path
        return ModelParams(path=path, n_gpu_layers=self.main_gpu_layers, n_ctx=self.n_ctx,
                           n_threads=self.threads or None, device=self.device or AUTO,
                           chat_template=read_chat_template(choice, "The chat template file", "; choose another in "
                                                            "Settings.") if by_file else None,
                           chat_template_name=choice if choice and not by_file else None)

    def chat_template_for(self, main: str) -> str:
        """The chat template chosen for main model ``main``: "" for its own."""
        return dict(self.chat_templates).get(main, "")

    def with_chat_template(self, main: str, choice: str) -> "Settings":
        """``choice`` (a built-in name, a Jinja file's path, "" for the model's own) for main model ``main``."""
        kept = tuple((path, chosen) for path, chosen in self.chat_templates if path != main)
        return replace(self, chat_templates=kept + (((main, choice),) if choice else ()))

    def draft_params(self, path: str) -> ModelParams:
        return ModelParams(path=path, n_gpu_layers=self.draft_gpu_layers, n_ctx=self.n_ctx,
                           n_threads=self.threads or None, device=self.device or AUTO)

    def generation_problem(self) -> str:
        """Why no generation can start with these settings; "" when one can."""
        try:
            self.sampling()
            self.speculation()
        except (ValueError, QuickdraftError) as exc:
            return f"The generation settings cannot be used ({exc}). Change them in the Settings tab."
        return ""

    def saved_pair(self) -> tuple[str, str | None] | None:
        """The pair these settings name, when its main model file is still there."""
        main = self.main_model
        return (main, self.draft_model or None) if main and Path(main).is_file() else None

    def with_recent_main(self, path: str) -> "Settings":
        return replace(self, recent_main=_push_recent(self.recent_main, path))

    def with_recent_draft(self, path: str) -> "Settings":
        return replace(self, recent_drafts=_push_recent(self.recent_drafts, path))

    def with_recent_remote(self, url: str) -> "Settings":
        return replace(self, recent_remotes=_push_recent(self.recent_remotes, url))


def _push_recent(items: tuple[str, ...], path: str) -> tuple[str, ...]:
    return tuple([path] + [p for p in items if p != path])[:RECENT_LIMIT]


class SettingsStore:
    """Reads and writes one JSON settings file."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.problem: str | None = None  # set when the file was unreadable and defaults were used

    def load(self) -> Settings:
        self.problem = None
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return Settings()
        except OSError as exc:
            self.problem = f"Could not read the settings file ({exc}); using defaults."
            return Settings()
        try:
            data = json.loads(raw.decode("utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            self.problem = self._damaged(exc)
            log.warning(self.problem)
            return Settings()
        settings, rejected = _from_dict(data)
        if rejected:
            self.problem = (f"Some settings in {self.path.name} were invalid and their defaults are used: "
                            f"{'; '.join(rejected)}.")
            log.warning(self.problem)
        return settings

    def save(self, settings: Settings) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(asdict(settings), indent=2), encoding="utf-8")
        tmp.replace(self.path)  # atomic: a crash mid-write never leaves half a file

    def _damaged(self, exc: Exception) -> str:
        kept = keep_aside(self.path)
        where = (f"it was kept as {kept.name}" if kept else
                 "it could not be moved aside (is its folder read-only?) and is left as it is")
        return f"The settings file was damaged ({_short(exc)}); {where}, and defaults are used."


def _from_dict(data: dict[str, Any]) -> tuple[Settings, list[str]]:
    """Known keys with a valid value override the defaults; unknown keys are ignored. Also returns
    a description of each known key whose value was refused."""
    defaults = Settings()
    values: dict[str, Any] = {}
    rejected: list[str] = []
    for f in fields(Settings):
        if f.name not in data:
            continue
        if f.name in GPU_LAYER_FIELDS:
            value = _gpu_layers_or_none(data[f.name])
            value = value if value == AUTO else _valid(f.name, value)
        elif f.name in PAIR_FIELDS:
            value = _text_pairs(data[f.name])
        else:
            value = _valid(f.name, _coerce(data[f.name], getattr(defaults, f.name)))
        if value is None:
            rejected.append(f"{f.name} = {_short(json.dumps(data[f.name]))}{_expected(f.name)}")
        else:
            values[f.name] = value
    return replace(defaults, **values), rejected


def _valid(name: str, value: Any) -> Any:
    """``value`` if it is allowed for ``name``, else None."""
    if value is None:
        return None
    if name in LIMITS:
        low, high = LIMITS[name]
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return value if low <= value <= high else None
    choices = CHOICE_FIELDS.get(name)
    return value if choices is None else choices.parse(value)


def _expected(name: str) -> str:
    if name in GPU_LAYER_FIELDS:
        return f" (allowed: auto, or {LIMITS[name][0]} to {LIMITS[name][1]})"
    if name in LIMITS:
        low, high = LIMITS[name]
        return f" (allowed: {low} to {high})"
    choices = CHOICE_FIELDS.get(name)
    return f" (allowed: {', '.join(choices.values())})" if choices else ""


def _short(text: object, limit: int = 60) -> str:
    text = str(text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


GPU_LAYER_FIELDS = ("main_gpu_layers", "draft_gpu_layers")
CHOICE_FIELDS: dict[str, type[Choice]] = {"draft_policy": PolicyName, "drafter": DrafterKind}
PAIR_FIELDS = ("chat_templates",)   # lists of [text, text] pairs


def _text_pairs(value: Any) -> tuple[tuple[str, str], ...] | None:
    if not isinstance(value, list) or not all(isinstance(pair, list) and len(pair) == 2 and all(map(_is_text, pair))
                                              for pair in value):
        return None
    return tuple((key, text) for key, text in value)


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
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            return None
        try:
            return float(value)
        except OverflowError:  # an integer beyond any float
            return None
    if isinstance(default, str):
        return value if _is_text(value) else None
    if isinstance(default, tuple):
        return tuple(v for v in value if _is_text(v)) if isinstance(value, list) else None
    return None


def _is_text(value: Any) -> bool:
    """A string that can be shown and stored: JSON allows lone surrogates ("\\ud800"), UTF-8 does not."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
