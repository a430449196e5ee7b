"""llama-server's native response bodies: /completion and /infill (whole, or streamed as
``data: {...}`` events with no ``[DONE]``), /tokenize's pieces and GET /props, with the fields of
llama-server's server-task.cpp (``to_json_non_oaicompat``) filled from what Quickdraft truly knows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from app.core.params import DEFAULT_CHAIN, SamplingParams
from app.core.speculation.events import StopReason, Summary, TokenProb
from app.server import logprobs
from app.server.api import NO_LIMIT
from app.server.native_api import NativeOptions

STOP_TYPES = {StopReason.EOG: "eos", StopReason.STOP_STRING: "word", StopReason.LENGTH: "limit",
              StopReason.CONTEXT: "limit"}


@dataclass(frozen=True)
class NativeAnswer:
    """What one native answer's bodies share: the model's name, its prompt and how it was asked."""

    model: str
    n_prompt: int
    prompt_text: str
    sampling: SamplingParams
    stream: bool
    options: NativeOptions
    speculative: bool
    slot: int = 0             # the slot that answered

    def chunk(self, text: str, token_ids: list[int], predicted: int, timings: dict | None,
              probs: Sequence[TokenProb] = ()) -> dict:
        """A streamed piece of the answer, with its tokens (always, as llama-server sends them) and, with
        ``n_probs``, their probabilities."""
        body = {"index": 0, "content": text, "tokens": token_ids,
                "stop": False, "id_slot": self.slot, "tokens_predicted": predicted, "tokens_evaluated": self.n_prompt}
        if self._probs:
            body["completion_probabilities"] = logprobs.native(probs, self.sampling.post_sampling_probs)
        return self._only_asked(body | ({"timings": timings} if timings is not None else {}))

    @property
    def _probs(self) -> bool:
        return self.sampling.logprobs is not None

    def final(self, s: Summary, stopping_word: str, timings: dict) -> dict:
        """The whole answer (its tokens only with ``return_tokens``, as llama-server), or a stream's
        last event (its text and tokens already sent: empty here)."""
        tokens = list(s.token_ids) if self.options.return_tokens and not self.stream else []
        body = {
            "index": 0, "content": "" if self.stream else s.text, "tokens": tokens, "id_slot": self.slot, "stop": True, "model": self.model,
            "tokens_predicted": s.generated_tokens, "tokens_evaluated": s.prompt_tokens,
            "generation_settings": generation_settings(self.sampling, self.stream, self.speculative),
            "prompt": self.prompt_text, "has_new_line": "\n" in s.text,
            "truncated": s.stop_reason is StopReason.CONTEXT, "stop_type": STOP_TYPES.get(s.stop_reason, "none"),
            "stopping_word": stopping_word,
            # the main model's cache holds every token but the newest one (the loop's invariant)
            "tokens_cached": s.prompt_tokens + s.generated_tokens - 1, "timings": timings,
        }
        if self._probs and not self.stream:
            body["completion_probabilities"] = logprobs.native(s.token_probs, self.sampling.post_sampling_probs)
        return self._only_asked(body)

    def _only_asked(self, body: dict) -> dict:
        """llama-server's ``response_fields``: only the fields named, "a/b" for body["a"]["b"], under
        the name given; a name that is not there is left out."""
        if not self.options.response_fields:
            return body
        out = {}
        for name in self.options.response_fields:
            value: object = body
            for key in name.split("/"):
                value = value.get(key) if isinstance(value, dict) else None
            if value is not None:
                out[name] = value
        return out


def generation_settings(sampling: SamplingParams, stream: bool, speculative: bool) -> dict:
    """The settings an answer ran with, under llama-server's names (only those Quickdraft has)."""
    limit = sampling.max_tokens if sampling.max_tokens < NO_LIMIT else -1   # -1: no limit, as llama-server says
    return {"seed": sampling.seed if sampling.seed is not None else -1, "temperature": sampling.temperature,
            "top_k": sampling.top_k, "top_p": sampling.top_p, "min_p": sampling.min_p, "max_tokens": limit,
            "n_predict": limit, "stop": list(sampling.stop), "stream": stream,
            # as llama-server writes them: {"bias", "token"}, a ban (-inf, which JSON cannot hold) as null
            "logit_bias": [{"bias": bias if bias != float("-inf") else None, "token": token}
                           for token, bias in sampling.logit_bias],
            "samplers": list(sampling.samplers or DEFAULT_CHAIN), "n_indent": sampling.n_indent,
            "t_max_predict_ms": sampling.max_predict_ms, "speculative": speculative}


def token_entries(tokens: list[int], pieces: list[bytes]) -> list[dict]:
    """/tokenize's ``with_pieces``: each id with its text, or its bytes where they are not UTF-8."""
    return [{"id": token, "piece": _piece(piece)} for token, piece in zip(tokens, pieces)]


def _piece(piece: bytes) -> str | list[int]:
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return list(piece)
