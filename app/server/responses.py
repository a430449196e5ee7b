"""Response bodies and stream chunks in the OpenAI shape, with llama-server's ``timings`` object."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from app.core.events import Round, StopReason, Summary, TokenPiece

FINISH_REASONS = {StopReason.EOG: "stop", StopReason.STOP_STRING: "stop", StopReason.CANCEL: "stop",
                  StopReason.LENGTH: "length", StopReason.CONTEXT: "length"}


def summary_timings(s: Summary) -> dict:
    """llama-server's ``timings`` for a finished generation (draft counts only when it drafted)."""
    return _timings(s.prompt_tokens - s.prompt_tokens_evaluated, s.prompt_tokens_evaluated, s.prompt_s,
                    s.generated_tokens, s.generation_s, s.generation_tps, s.drafted, s.accepted)


def _timings(cached: int, prompt_n: int, prompt_s: float, predicted_n: int, predicted_s: float,
             predicted_tps: float, drafted: int, accepted: int) -> dict:
    timings = {
        "cache_n": cached,
        "prompt_n": prompt_n,
        "prompt_ms": 1000 * prompt_s,
        "prompt_per_token_ms": 1000 * prompt_s / prompt_n if prompt_n else 0.0,
        "prompt_per_second": prompt_n / prompt_s if prompt_s > 0 else 0.0,
        "predicted_n": predicted_n,
        "predicted_ms": 1000 * predicted_s,
        "predicted_per_token_ms": 1000 / predicted_tps if predicted_tps > 0 else 0.0,
        "predicted_per_second": predicted_tps,
    }
    if drafted > 0:
        timings["draft_n"] = drafted
        timings["draft_n_accepted"] = accepted
    return timings


@dataclass
class LiveTimings:
    """The timings of a generation still running, from its events and the worker's time stamps.

    Rates follow Summary's definitions (tokens after the first, over the time since the first), so
    the last chunk's numbers continue the earlier ones."""

    prompt_tokens: int
    cached: int
    ttft_s: float | None = None
    generated: int = 0
    drafted: int = 0
    accepted: int = 0
    last_s: float = 0.0

    def add(self, event, at_s: float) -> None:
        self.last_s = at_s
        if isinstance(event, TokenPiece) and event.token_ids:
            self.ttft_s = at_s if self.ttft_s is None else self.ttft_s
            self.generated += len(event.token_ids)
        elif isinstance(event, Round):
            self.generated = event.generated_total
            self.drafted += event.drafted
            self.accepted += event.accepted

    def snapshot(self) -> dict:
        ttft = self.ttft_s or 0.0
        generation_s = max(0.0, self.last_s - ttft)
        tps = (self.generated - 1) / generation_s if self.generated > 1 and generation_s > 0 else 0.0
        return _timings(self.cached, self.prompt_tokens - self.cached, ttft, self.generated, generation_s, tps,
                        self.drafted, self.accepted)


def usage(s: Summary) -> dict:
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated_tokens,
            "total_tokens": s.prompt_tokens + s.generated_tokens}


class ResponseShape:
    """Bodies of one answer, chat or completion, sharing an id and a creation time."""

    def __init__(self, kind: str, model_id: str):
        self.chat = kind == "chat"
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model_id = model_id

    def _envelope(self, obj: str, choices: list) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_id,
                "system_fingerprint": "quickdraft", "choices": choices}

    def complete(self, s: Summary) -> dict:
        finish = FINISH_REASONS.get(s.stop_reason, "stop")
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": s.text}, "logprobs": None,
                      "finish_reason": finish}
            body = self._envelope("chat.completion", [choice])
        else:
            body = self._envelope("text_completion", [{"index": 0, "text": s.text, "logprobs": None,
                                                       "finish_reason": finish}])
        return body | {"usage": usage(s), "timings": summary_timings(s)}

    def chunk(self, text: str | None, finish_reason: str | None = None, timings: dict | None = None,
              role: bool = False) -> dict:
        if self.chat:
            delta = ({"role": "assistant"} if role else {}) | ({"content": text} if text is not None else {})
            body = self._envelope("chat.completion.chunk",
                                  [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}])
        else:
            body = self._envelope("text_completion", [{"index": 0, "text": text or "", "logprobs": None,
                                                       "finish_reason": finish_reason}])
        return body | ({"timings": timings} if timings is not None else {})

    def usage_chunk(self, s: Summary) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return self._envelope(obj, []) | {"usage": usage(s)}


def sse(data: dict | str) -> bytes:
    """One server-sent event."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"data: {text}\n\n".encode("utf-8")
