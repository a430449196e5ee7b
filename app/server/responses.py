"""Response bodies and stream chunks in the OpenAI shape, with llama-server's ``timings`` object.

``timings`` holds llama-server's fields (cache_n, prompt_n, prompt_ms, prompt_per_token_ms,
prompt_per_second, predicted_n, predicted_ms, predicted_per_token_ms, predicted_per_second) and, as
llama-server does whenever it serves with a draft, ``draft_n`` and ``draft_n_accepted`` whenever the
server speculates (someone drafts with the loaded pair: ``JobQueue.drafting``), 0 when nothing
was drafted; with ``--drafter none`` (or nobody able to draft) they are left out.

Quickdraft's extension, in a finished generation's timings only (the final chunk, or the response):
``estimated_speedup``, how many times faster than the main model alone the answer's tokens after
the first came, as the cost model estimates it (``Summary.estimated_speedup``); left out when there
is no estimate (no cost model to say, e.g. the fixed policy, or one token). Where the server
speculates, also ``drafting_rounds`` (verifications that had a draft: accepted per round is
``draft_n_accepted / drafting_rounds``) and each drafter's counts, ``draft_n_<drafter>`` and
``draft_n_accepted_<drafter>`` (the CLI's ``--json`` ``by_drafter``, as numbers, since every timing
llama-server reports is one), which llama-server does not report.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from typing import Sequence

from app.core.speculation import rates
from app.core.speculation.events import StopReason, Summary, TokenProb
from app.core.speculation.stats import GenerationStats
from app.server import logprobs

FINISH_REASONS = {StopReason.EOG: "stop", StopReason.STOP_STRING: "stop", StopReason.CANCEL: "stop",
                  StopReason.LENGTH: "length", StopReason.CONTEXT: "length"}


def finish_reason(s: Summary, calls: bool = False) -> str:
    """OpenAI's finish_reason: "tool_calls" for an answer that ended with calls, as llama-server says."""
    reason = FINISH_REASONS.get(s.stop_reason, "stop")
    return "tool_calls" if calls and reason == "stop" else reason


def summary_timings(s: Summary, speculative: bool) -> dict:
    """llama-server's ``timings`` for a finished generation (draft counts when the server speculates),
    and the estimated speedup when there is one."""
    timings = _timings(s.prompt_tokens - s.prompt_tokens_evaluated, s.prompt_tokens_evaluated, s.prompt_s,
                       s.generated_tokens, s.generation_s, s.generation_tps, s.drafted, s.accepted, speculative)
    if s.estimated_speedup is not None:
        timings["estimated_speedup"] = s.estimated_speedup
    if speculative:
        timings["drafting_rounds"] = s.drafting_rounds
        # each drafter's counts as numbers of their own: llama-server's timings are all numbers, and its
        # clients compare each to 0 (llama.cpp's test_metrics did, and broke on an object here)
        for name, drafted, accepted in s.by_drafter:
            key = re.sub(r"\W+", "_", str(name)).strip("_")
            timings[f"draft_n_{key}"], timings[f"draft_n_accepted_{key}"] = drafted, accepted
    return timings


def _timings(cached: int, prompt_n: int, prompt_s: float, predicted_n: int, predicted_s: float,
             predicted_tps: float, drafted: int, accepted: int, speculative: bool) -> dict:
    timings = {
        "cache_n": cached,
        "prompt_n": prompt_n,
        "prompt_ms": 1000 * prompt_s,
        "prompt_per_token_ms": 1000 * rates.ratio(prompt_s, prompt_n),
        "prompt_per_second": rates.per_second(prompt_n, prompt_s),
        "predicted_n": predicted_n,
        "predicted_ms": 1000 * predicted_s,
        "predicted_per_token_ms": 1000 * rates.ratio(1.0, predicted_tps),
        "predicted_per_second": predicted_tps,
    }
    if speculative:
        timings["draft_n"] = drafted
        timings["draft_n_accepted"] = accepted
    return timings


def live_timings(live: GenerationStats, speculative: bool) -> dict:
    """The timings of a generation still running, from the same numbers its Summary will hold."""
    return _timings(live.cached_tokens, live.evaluated_tokens, live.ttft_s or 0.0, live.generated_tokens,
                    live.generation_s, live.generation_tps, live.drafted, live.accepted, speculative)


def progress_timings(progress, speculative: bool) -> dict:
    """The timings of a prompt still being read (a PromptProgress): its tokens read so far, nothing yet
    predicted, as llama-server's progress chunks carry them."""
    return _timings(progress.cache, progress.processed - progress.cache, progress.seconds, 0, 0.0, 0.0, 0, 0,
                    speculative)


def usage(s: Summary) -> dict:
    """OpenAI's usage, with the prompt tokens read from the cache as llama-server reports them."""
    return {"prompt_tokens": s.prompt_tokens, "completion_tokens": s.generated_tokens,
            "total_tokens": s.prompt_tokens + s.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": s.prompt_tokens - s.prompt_tokens_evaluated}}


class ResponseShape:
    """Bodies of one answer, chat or completion, sharing an id and a creation time, naming the model
    that answered (``speculative``: whether its timings carry draft counts)."""

    def __init__(self, kind: str, model_id: str, speculative: bool, logprobs: bool = False):
        self.chat = kind == "chat"
        self.logprobs = logprobs   # the request asked for them: every choice carries its tokens'
        self._offset = 0           # a streamed completion's text so far (its tokens' text_offset)
        self.id = ("chatcmpl-" if self.chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.model_id = model_id
        self.speculative = speculative

    def _envelope(self, obj: str, choices: list) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model_id,
                "system_fingerprint": "quickdraft", "choices": choices}

    def complete(self, s: Summary, message: dict | None = None, calls: bool = False) -> dict:
        """The whole answer; ``message``: the chat answer read into its parts (else its text is the
        content), ``calls``: whether it calls tools."""
        finish = finish_reason(s, calls)
        if self.chat:
            choice = {"index": 0, "message": message or {"role": "assistant", "content": s.text},
                      "logprobs": self._logprobs(s.token_probs), "finish_reason": finish}
            body = self._envelope("chat.completion", [choice])
        else:
            body = self._envelope("text_completion", [{"index": 0, "text": s.text,
                                                       "logprobs": self._logprobs(s.token_probs),
                                                       "finish_reason": finish}])
        return body | {"usage": usage(s), "timings": summary_timings(s, self.speculative)}

    def chunk(self, text: str | None, finish_reason: str | None = None, timings: dict | None = None,
              role: bool = False, probs: Sequence[TokenProb] = ()) -> dict:
        """``probs``: the log-probabilities of the tokens whose text this chunk carries."""
        logprobs = self._logprobs(probs) if probs else None
        if self.chat:
            # the role chunk's content is null, as llama-server sends it
            delta = {"role": "assistant", "content": None} if role else ({"content": text} if text is not None else {})
            body = self._envelope("chat.completion.chunk",
                                  [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}])
        else:
            body = self._envelope("text_completion", [{"index": 0, "text": text or "", "logprobs": logprobs,
                                                       "finish_reason": finish_reason}])
        return body | ({"timings": timings} if timings is not None else {})

    def delta_chunk(self, delta: dict, finish_reason: str | None = None, timings: dict | None = None,
                    probs: Sequence[TokenProb] = ()) -> dict:
        """A chat chunk carrying ``delta`` (content, reasoning_content or tool_calls)."""
        logprobs = self._logprobs(probs) if probs else None
        body = self._envelope("chat.completion.chunk",
                              [{"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish_reason}])
        return body | ({"timings": timings} if timings is not None else {})

    def _logprobs(self, probs: Sequence[TokenProb]) -> dict | None:
        if not self.logprobs:
            return None
        if self.chat:
            return logprobs.chat(probs)
        body = logprobs.legacy(probs, self._offset)
        self._offset += sum(len(token) for token in body["tokens"])
        return body

    def usage_chunk(self, s: Summary) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return self._envelope(obj, []) | {"usage": usage(s)}


def sse(data: dict | str) -> bytes:
    """One server-sent event."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    return f"data: {text}\n\n".encode("utf-8")
