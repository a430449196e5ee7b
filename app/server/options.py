"""What a server tells of its model and which of llama-server's optional parts it opens: the options
`quickdraft serve` takes as llama-server takes them, and the window's server tab with its defaults."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from app.server.errors import ApiError

# serve's flags that set a request's sampling unless it sets its own (llama-server's), by body field
DEFAULT_FLAGS = {"temperature": "--temp", "top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p",
                 "seed": "--seed", "n_predict": "--n-predict"}
LENGTH_FIELDS = ("n_predict", "max_tokens", "max_completion_tokens")


def comma_separated(text: str | None) -> tuple[str, ...]:
    """llama-server's reading of --alias and --tags: split at commas, stripped, empty ones dropped, each
    once, in sorted order (it keeps them in a std::set)."""
    return tuple(sorted({name.strip() for name in (text or "").split(",") if name.strip()}))


@dataclass(frozen=True)
class ServerOptions:
    api_key: str | None = None
    aliases: str | None = None       # --alias: the model's names, comma-separated
    tags: str | None = None          # --tags: informational, listed in /models
    cors_origins: str | None = None  # access.py's reading; None: its default
    slots_endpoint: bool = True      # --no-slots: GET /slots answers 501, as llama-server's
    metrics_endpoint: bool = True    # --no-metrics: GET /metrics answers 501 (llama-server's default)
    web_ui: bool = True              # --no-ui: no chat page at /
    request_defaults: Mapping = field(default_factory=dict)   # body fields a request that sets none gets (--temp ...)
    slot_save_path: str | None = None   # --slot-save-path: the folder of POST /slots/{id}'s files (None: 501)

    @property
    def model_id(self) -> str | None:
        """The model's id in answers and /v1/models: the first alias in llama-server's order (None: the
        main file's name)."""
        names = comma_separated(self.aliases)
        return names[0] if names else None


def switched_off(endpoint: str) -> ApiError:
    """llama-server's answer to an endpoint it was started without (--no-slots, --no-metrics)."""
    return ApiError(501, f"This server does not support {endpoint} endpoint (it was started with --no-{endpoint}).",
                    type="not_supported_error")


def request_defaults(args) -> dict:
    """The body fields serve's sampling flags give every request (``DEFAULT_FLAGS``), those given only."""
    return {name: value for name in DEFAULT_FLAGS if (value := getattr(args, name, None)) is not None}


def with_request_defaults(body: object, defaults: Mapping) -> object:
    """``body`` with the server's defaults under its own fields (llama-server's rule: a request's field
    wins). The answer's length default applies only where the body sets no length of its own, since
    n_predict would otherwise win over the body's max_tokens."""
    if not defaults or not isinstance(body, dict):
        return body
    merged = {name: value for name, value in defaults.items() if name != "n_predict"} | body
    if "n_predict" in defaults and not any(name in body for name in LENGTH_FIELDS):
        merged["n_predict"] = defaults["n_predict"]
    return merged
