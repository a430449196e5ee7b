"""The settings a generation runs with, as plain values the CLI, the GUI and tests share.

Each dataclass checks its own values when built: the one place where ranges live. A value out of
range raises InvalidParameterError, which names the parameter so a front end can name its control.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from app.core.errors import InvalidParameterError

DRAFT_MAX_LIMIT = 256        # more than any useful draft; each round's batch holds draft_max + 1 tokens
COPY_MAX = 64                # the longest copy the auto policy drafts, as llama.cpp's ngram-mod
SEED_LIMIT = 2**64           # numpy's generator takes seeds in [0, 2**64)


class Choice(StrEnum):
    """One of a fixed set of names, with a label for people. The value is what settings files, JSON
    and command-line flags hold; CLI choices, settings validation and combo boxes come from here."""

    def __new__(cls, value: str, label: str):
        member = str.__new__(cls, value)
        member._value_ = value
        member.label = label
        return member

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)

    @classmethod
    def parse(cls, value: object) -> "Choice | None":
        """The member named ``value``, or None when it names none."""
        return next((member for member in cls if member.value == value), None)


class DrafterKind(Choice):
    """Who drafts."""

    LOOKUP_MODEL = "lookup+model", "Lookup + draft"   # prompt lookup, else the draft model
    MODEL = "model", "Draft model"
    LOOKUP = "lookup", "Prompt lookup"                # copies text that repeats, free
    SUFFIX = "suffix", "Suffix index"                 # what followed the context's end in past answers and prompts
    MTP = "mtp", "MTP heads"                          # the main model's own MTP (nextn) layers
    EAGLE3 = "eagle3", "EAGLE-3"                      # an EAGLE-3 drafter file on the main model's hidden states
    DFLASH = "dflash", "DFlash"                       # a DFlash (or DSpark) drafter file: a block in one pass
    NONE = "none", "Off"                              # the main model alone

    @property
    def uses_model(self) -> bool:
        return self in (DrafterKind.MODEL, DrafterKind.LOOKUP_MODEL)

    def without_model(self) -> "DrafterKind":
        """What this choice becomes with no draft model loaded: lookup still works."""
        return {DrafterKind.LOOKUP_MODEL: DrafterKind.LOOKUP, DrafterKind.MODEL: DrafterKind.NONE}.get(self, self)

    def for_pair(self, draft_model: bool, drafter_file: "DrafterKind | None" = None) -> "DrafterKind":
        """Who drafts with the pair as loaded: a drafter file (Gemma 4's MTP assistant, an EAGLE-3
        drafter) is the pair's draft model, so the choices with the model draft with it (``drafter_file``:
        the kind it drafts as); with no draft, lookup still works."""
        if drafter_file is not None and self.uses_model:
            return drafter_file
        return self if draft_model or drafter_file is not None else self.without_model()


# Who drafts when nobody says: the CLI, the server, the window's first start, Engine.generate. Without a
# draft model it is prompt lookup (``without_model``); with an MTP drafter file, MTP (the engine's rule).
# Where the engine keeps a suffix index, the default asks it after prompt lookup and before the model.
DEFAULT_DRAFTER = DrafterKind.LOOKUP_MODEL


class PolicyName(Choice):
    """How many tokens to draft each round (app/core/speculation/policy.py)."""

    AUTO = "auto", "auto (measured cost model)"       # what the machine's cost profile says pays best
    FIXED = "fixed", "fixed: draft max"
    PMIN = "pmin", "fixed, until draft p < p-min"      # fixed, with p_min set (any policy stops below p_min)


# the samplers a chain may name: those Sampler runs, and those that leave the distribution as it is with
# the neutral settings Quickdraft runs (their own settings are refused otherwise: app/server/fields.py)
SAMPLERS_RUN = ("top_k", "top_p", "min_p", "temperature", "infill")
SAMPLERS_NEUTRAL = ("penalties", "dry", "top_n_sigma", "typ_p", "xtc")
SAMPLER_NAMES = SAMPLERS_RUN + SAMPLERS_NEUTRAL
MAX_LOGPROBS = 100   # alternatives a token's log-probability may list (OpenAI's chat allows 20)
DEFAULT_CHAIN = ("top_k", "top_p", "min_p", "temperature")   # SamplingParams.samplers None runs this


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
    # (token id, bias) pairs added to the main model's logits before any filter; -inf bans the token
    logit_bias: tuple[tuple[int, float], ...] = ()
    # llama-server's FIM limits: a line after the first indented less than n_indent ends the answer
    # there; past max_predict_ms since the first token, the next line break ends it (0: no limit)
    n_indent: int = 0
    max_predict_ms: int = 0
    # llama-server's sampler chain, in order (SAMPLER_NAMES); None: top-k, top-p, min-p, temperature.
    # A chain without "temperature" samples at temperature 1 and is never greedy, as llama.cpp's.
    samplers: tuple[str, ...] | None = None
    # the main model's log-probability of each answer token and of its ``logprobs`` likeliest tokens
    # (OpenAI's logprobs/top_logprobs, llama-server's n_probs), from its raw distribution; None: none
    logprobs: int | None = None
    # llama-server's post_sampling_probs: those of the distribution the token was drawn from instead
    # (bias, grammar, filters, temperature applied; greedy: the chosen token's is 1)
    post_sampling_probs: bool = False

    def __post_init__(self) -> None:
        _require("temperature", self.temperature, _finite(self.temperature) and self.temperature >= 0,
                 "must be 0 (greedy) or more")
        _require("top_k", self.top_k, _integer(self.top_k) and self.top_k >= 0, "must be 0 (off) or more")
        _require("top_p", self.top_p, _finite(self.top_p) and 0.0 <= self.top_p <= 1.0, "must be between 0 and 1")
        _require("min_p", self.min_p, _finite(self.min_p) and 0.0 <= self.min_p <= 1.0, "must be between 0 and 1")
        _require("seed", self.seed, self.seed is None or (_integer(self.seed) and 0 <= self.seed < SEED_LIMIT),
                 "must be 0 or more (or left out for a random seed)")
        _require("max_tokens", self.max_tokens, _integer(self.max_tokens) and self.max_tokens >= 1,
                 "must be at least 1")
        _require("n_indent", self.n_indent, _integer(self.n_indent) and self.n_indent >= 0, "must be 0 (off) or more")
        _require("max_predict_ms", self.max_predict_ms, _integer(self.max_predict_ms) and self.max_predict_ms >= 0,
                 "must be 0 (no limit) or more")
        _require("samplers", self.samplers, self.samplers is None or all(n in SAMPLER_NAMES for n in self.samplers),
                 f"must name samplers among {', '.join(SAMPLER_NAMES)}")
        _require("logprobs", self.logprobs, self.logprobs is None or (_integer(self.logprobs) and 0 <= self.logprobs <= MAX_LOGPROBS),
                 f"must be between 0 and {MAX_LOGPROBS} (or left out for none)")
        _require("logit_bias", self.logit_bias, all(_integer(t) and t >= 0 and _bias(b) for t, b in self.logit_bias),
                 "must pair token ids (0 or more) with finite biases or -inf")

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0 and (self.samplers is None or "temperature" in self.samplers)


@dataclass(frozen=True)
class SpeculationParams:
    """How much to draft each round.

    "auto" drafts what the machine's cost profile says pays best, up to ``draft_max``; "fixed"
    drafts ``draft_max``; "pmin" is "fixed" named for its ``p_min``. Under every policy a draft-model
    or MTP token whose top probability is below ``p_min`` (0: off) ends the draft, as llama.cpp's
    --draft-p-min does. A draft shorter than ``draft_min`` is dropped and the main model decodes alone
    that round.
    """

    draft_max: int = 16
    draft_min: int = 0
    p_min: float = 0.0
    policy: PolicyName = PolicyName.AUTO

    @property
    def copy_max(self) -> int:
        """The most tokens a copy (prompt lookup, the suffix index: drafting costs nothing) may draft
        under the auto policy: COPY_MAX, or ``draft_max`` if that is more, but at most four times
        ``draft_max`` (short drafts asked for, short copies given). Where an edit leaves a long stretch
        untouched, llama.cpp's 48-token n-gram copies won against ours at 16 (issue 43); how far a copy
        may go in an answer is the policy's (``AnswerReach.copy``)."""
        return max(self.draft_max, min(COPY_MAX, 4 * self.draft_max))

    @property
    def batch_max(self) -> int:
        """The largest batch a round verifies (the draft and the main model's own token): the sizes the
        cost model learns."""
        return max(self.draft_max, self.copy_max) + 1

    def __post_init__(self) -> None:
        _require("draft_max", self.draft_max, _integer(self.draft_max) and 0 <= self.draft_max <= DRAFT_MAX_LIMIT,
                 f"must be between 0 and {DRAFT_MAX_LIMIT}")
        _require("draft_min", self.draft_min, _integer(self.draft_min) and self.draft_min >= 0,
                 "must be 0 or more")
        _require("p_min", self.p_min, _finite(self.p_min) and 0.0 <= self.p_min <= 1.0, "must be between 0 and 1")
        policy = PolicyName.parse(self.policy)
        _require("policy", self.policy, policy is not None, f"must be one of {', '.join(PolicyName.values())}")
        object.__setattr__(self, "policy", policy)


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
    device: str = AUTO        # AUTO (the GPU a user would pick), "cpu" (none), or a device name: CUDA0, Vulkan1
    load_mtp: bool = False    # also load the model's MTP (nextn) layers, so that it can draft for itself
    chat_template: str | None = None   # a Jinja chat template used instead of the file's own (None: the file's)
    chat_template_name: str | None = None   # or one of llama.cpp's built-in templates by name (chatml, llama3, ...)

    def __post_init__(self) -> None:
        _require("n_gpu_layers", self.n_gpu_layers, _gpu_layers_ok(self.n_gpu_layers),
                 "must be 'auto', -1 (all layers) or a number of layers")
        object.__setattr__(self, "n_gpu_layers", parse_gpu_layers(self.n_gpu_layers))
        _require("n_ctx", self.n_ctx, _integer(self.n_ctx) and 0 <= self.n_ctx < 2**31,
                 "must be 0 (the model's own) or a positive token count")
        _require("n_threads", self.n_threads,
                 self.n_threads is None or (_integer(self.n_threads) and 1 <= self.n_threads <= 4096),
                 "must be at least 1 (or left out for the default)")
        _require("n_batch", self.n_batch, _integer(self.n_batch) and 1 <= self.n_batch < 2**31, "must be at least 1")
        _require("chat_template", self.chat_template, self.chat_template is None or isinstance(self.chat_template, str),
                 "must be a template's text")
        _require("device", self.device, isinstance(self.device, str) and bool(self.device.strip()),
                 "must be 'auto', 'cpu' or a device name such as CUDA0 or Vulkan0")


def _gpu_layers_ok(value) -> bool:
    try:
        parse_gpu_layers(value)
    except ValueError:
        return False
    return True


def read_chat_template(path: str, name: str, advice: str = "") -> str:
    """The text of a Jinja chat template file (ModelParams.chat_template); InvalidParameterError names
    ``name`` (the flag or setting that chose it), the file and why it cannot be read, then ``advice``."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidParameterError(name, f"{path} cannot be read ({exc}){advice}") from None


def _require(name: str, value, ok: bool, requirement: str) -> None:
    if not ok:
        raise InvalidParameterError(name, f"{requirement} (got {value!r})")


def _finite(value) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)


def _bias(value) -> bool:
    return _finite(value) or value == -math.inf


def _integer(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


@dataclass(frozen=True)
class SuffixConfig:
    """Where the suffix index of past documents is kept (app/core/speculation/suffix_store.py: a folder
    per main model under ``folder``) and how many bytes each model's log may take."""

    folder: Path
    limit_bytes: int

    def __post_init__(self) -> None:
        _require("suffix index limit", self.limit_bytes, _integer(self.limit_bytes) and self.limit_bytes >= 1 << 20,
                 "must be at least 1 MB")


@dataclass(frozen=True)
class StatesConfig:
    """Where cache states are kept between conversations (app/core/llama/state_cache.py) and how many
    bytes they may take (0: none kept)."""

    folder: Path
    max_bytes: int
