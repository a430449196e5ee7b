"""OpenAI request bodies, checked and turned into generation settings; OpenAI-style errors.

``model`` may name anything, or be left out: the server serves one pair, so, as llama-server does,
it answers every name with that pair (editors and scripts send fixed names such as "gpt-4o-mini"),
and the answer's ``model`` names the pair that answered. Only its type is checked (a string).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from app.core.errors import InvalidParameterError
from app.core.params import SamplingParams

# llama-server's defaults for what a request leaves out (the OpenAI API has no top_k or min_p)
DEFAULT_SAMPLING = SamplingParams(temperature=0.8, top_k=40, top_p=0.95, min_p=0.05)
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}
MAX_STOP_STRINGS = 4
RANDOM_SEED = -1                  # llama-server's "seed": -1: a fresh random seed
MAX_TOKENS_LIMIT = 2**31 - 1      # llama-server's n_predict is a 32-bit integer


class ApiError(Exception):
    """An error a client gets as an OpenAI error object with an HTTP status."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}


@dataclass(frozen=True)
class GenerationRequest:
    """What one request asks the engine for: chat messages, or a completion prompt (text or ids)."""

    kind: str                                  # "chat" | "completion"
    sampling: SamplingParams
    messages: tuple[dict, ...] = ()
    prompt_text: str | None = None
    prompt_ids: tuple[int, ...] | None = None
    stream: bool = False
    include_usage: bool = False
    timings_per_token: bool = False


def parse_chat(body: Any) -> GenerationRequest:
    body = _object(body)
    _check_model(body)
    messages = _messages(body.get("messages"))
    return GenerationRequest("chat", _sampling(body), messages=messages, **_delivery(body))


def parse_completion(body: Any) -> GenerationRequest:
    body = _object(body)
    _check_model(body)
    text, ids = _prompt(body.get("prompt"))
    return GenerationRequest("completion", _sampling(body), prompt_text=text, prompt_ids=ids, **_delivery(body))


def _object(body: Any) -> dict:
    if not isinstance(body, dict):
        raise ApiError(400, "The request body must be a JSON object.")
    return body


def _check_model(body: dict) -> None:
    """Any name is the loaded pair (see the module docstring); a name that is not a string is a 400."""
    _field(body, "model", str, "a string")


def _sampling(body: dict) -> SamplingParams:
    d = DEFAULT_SAMPLING
    n = _field(body, "n", int, "an integer")
    if n is not None and n != 1:
        raise ApiError(400, "Only n = 1 is supported.", param="n")
    max_tokens = _field(body, "max_completion_tokens", int, "an integer")
    max_tokens = _field(body, "max_tokens", int, "an integer", max_tokens)
    if max_tokens is not None and max_tokens > MAX_TOKENS_LIMIT:
        raise ApiError(400, f"'max_tokens' must be at most {MAX_TOKENS_LIMIT}; got {max_tokens}.", param="max_tokens")
    seed = _field(body, "seed", int, "an integer")
    try:
        return SamplingParams(
            temperature=_ranged(body, "temperature", d.temperature, 0.0, 2.0),
            top_p=_ranged(body, "top_p", d.top_p, 0.0, 1.0),
            min_p=_ranged(body, "min_p", d.min_p, 0.0, 1.0),
            top_k=_counted(body, "top_k", d.top_k, minimum=0),
            seed=None if seed == RANDOM_SEED else seed,
            max_tokens=_positive(max_tokens, "max_tokens") if max_tokens is not None else 1 << 30,
            stop=_stop(body.get("stop")),
        )
    except InvalidParameterError as exc:   # a value out of the engine's range is the client's error
        raise ApiError(400, f"'{exc.name}' {exc.problem}.", param=exc.name) from None


def _delivery(body: dict) -> dict:
    options = _field(body, "stream_options", dict, "an object") or {}
    return {
        "stream": bool(_field(body, "stream", bool, "true or false", False)),
        "include_usage": bool(_field(options, "include_usage", bool, "true or false", False)),
        "timings_per_token": bool(_field(body, "timings_per_token", bool, "true or false", False)),
    }


def _messages(value: Any) -> tuple[dict, ...]:
    if not isinstance(value, list) or not value:
        raise ApiError(400, "'messages' must be a non-empty array of messages.", param="messages")
    return tuple(_message(m, i) for i, m in enumerate(value))


def _message(message: Any, index: int) -> dict:
    param = f"messages[{index}]"
    if not isinstance(message, dict):
        raise ApiError(400, f"'{param}' must be an object with 'role' and 'content'.", param=param)
    role = message.get("role")
    if role not in ROLES:
        raise ApiError(400, f"'{param}.role' must be one of {', '.join(ROLES)}; got {role!r}.", param=f"{param}.role")
    return {"role": ROLES[role], "content": _content(message.get("content"), f"{param}.content")}


def _content(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise ApiError(400, f"'{param}' must be a string or an array of text parts.", param=param)


def _prompt(value: Any) -> tuple[str | None, tuple[int, ...] | None]:
    if isinstance(value, list) and len(value) == 1 and isinstance(value[0], (str, list)):
        value = value[0]  # a batch of one prompt
    if isinstance(value, str):
        if not value:
            raise ApiError(400, "'prompt' is empty.", param="prompt")
        return value, None
    if isinstance(value, list) and value and all(isinstance(t, int) and not isinstance(t, bool) for t in value):
        return None, tuple(value)
    raise ApiError(400, "'prompt' must be a string or an array of token ids (one prompt per request).",
                   param="prompt")


def _stop(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list) and len(value) <= MAX_STOP_STRINGS and all(isinstance(s, str) for s in value):
        return tuple(value)
    raise ApiError(400, f"'stop' must be a string or an array of at most {MAX_STOP_STRINGS} strings.", param="stop")


def _field(body: dict, name: str, kind: type, described: str, default: Any = None) -> Any:
    """``body[name]`` if it has the right JSON type (null counts as absent), else a 400."""
    value = body.get(name)
    if value is None:
        return default
    wrong_bool = isinstance(value, bool) and kind is not bool
    if wrong_bool or not isinstance(value, kind):
        raise ApiError(400, f"'{name}' must be {described}; got {type(value).__name__} {value!r:.40}.", param=name)
    return value


def _ranged(body: dict, name: str, default: float, low: float, high: float) -> float:
    value = _field(body, name, (int, float), "a number", default)
    if not low <= value <= high:
        raise ApiError(400, f"'{name}' must be between {low:g} and {high:g}; got {value}.", param=name)
    return float(value)


def _counted(body: dict, name: str, default: int, minimum: int) -> int:
    value = _field(body, name, int, "an integer", default)
    if value < minimum:
        raise ApiError(400, f"'{name}' must be at least {minimum}; got {value}.", param=name)
    return value


def _positive(value: int, name: str) -> int:
    if value < 1:
        raise ApiError(400, f"'{name}' must be at least 1; got {value}.", param=name)
    return value
