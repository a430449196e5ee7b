"""Prometheus text for /metrics, named like llama-server's (``llamacpp:`` prefix), so dashboards and
scrapers made for llama-server read Quickdraft unchanged. Every number comes from Summary events."""

from __future__ import annotations

import threading
import time
from collections import Counter

from app.core.speculation.events import Summary

PREFIX = "llamacpp:"
OWN_PREFIX = "quickdraft:"   # counters llama-server does not have


class ServerMetrics:
    """Counters over every generation the server finished (any thread may record or render)."""

    def __init__(self):
        self._lock = threading.Lock()
        self.prompt_tokens = 0
        self.prompt_tokens_cached = 0
        self.prompt_s = 0.0
        self.predicted_tokens = 0
        self.predicted_s = 0.0
        self.main_passes = 0
        self.drafted = 0
        self.accepted = 0
        self.drafts = 0
        self.accepted_by_position: list[int] = []
        self.stops: Counter[str] = Counter()
        self.rejected = 0
        self.last_prompt_tps = 0.0
        self.last_predicted_tps = 0.0
        self.started = int(time.time())   # llama-server's Process-Start-Time-Unix header
        self.decodes = 0                  # verify decodes, and the busy slots and tokens they held
        self.decode_slots = 0
        self.tokens_max = 0

    def record_decode(self, slots: int, tokens: int) -> None:
        """A turn's verify decode: ``slots`` busy slots' batches, ``tokens`` in all (one slot's alone where
        the slots do not share a context)."""
        with self._lock:
            self.decodes += 1
            self.decode_slots += slots
            self.tokens_max = max(self.tokens_max, tokens)

    def record(self, s: Summary) -> None:
        with self._lock:
            self.prompt_tokens += s.prompt_tokens_evaluated
            self.prompt_tokens_cached += s.prompt_tokens - s.prompt_tokens_evaluated
            self.prompt_s += s.prompt_s
            self.predicted_tokens += s.generated_tokens
            self.predicted_s += s.generation_s
            self.main_passes += s.rounds + 1  # the prompt's pass, then one verify pass per round
            self.drafted += s.drafted
            self.accepted += s.accepted
            self.drafts += s.drafting_rounds
            by_position = self.accepted_by_position
            by_position.extend([0] * (len(s.drafted_by_position) - len(by_position)))
            for i, n in enumerate(s.accepted_by_position):
                by_position[i] += n
            self.stops[s.stop_reason.value] += 1
            self.last_prompt_tps, self.last_predicted_tps = s.prompt_tps, s.generation_tps

    def count_rejected(self) -> None:
        with self._lock:
            self.rejected += 1

    def render(self, processing: int, deferred: int, slots: list[dict] = ()) -> str:
        """The counters, and each slot (``/slots``' entries) as gauges labelled by its id."""
        with self._lock:
            counters = [
                ("prompt_tokens_total", "Number of prompt tokens processed, excluding cached tokens",
                 self.prompt_tokens),
                ("prompt_tokens_cached_total", "Number of prompt tokens reused from the cache",
                 self.prompt_tokens_cached),
                ("prompt_seconds_total", "Total time spent processing prompts", self.prompt_s),
                ("tokens_predicted_total", "Number of generation tokens processed", self.predicted_tokens),
                ("tokens_predicted_seconds_total", "Total time spent generating tokens", self.predicted_s),
                ("n_decode_total", "Main-model passes: one per prompt, one per speculative round", self.main_passes),
                ("spec_decode_num_draft_tokens_total", "Speculative: Total draft tokens generated", self.drafted),
                ("spec_decode_num_accepted_tokens_total",
                 "Speculative: Total draft tokens accepted by the target model", self.accepted),
                ("spec_decode_num_drafts_total", "Speculative: Total speculative decoding verification steps",
                 self.drafts),
                ("n_tokens_max", "Largest observed n_tokens (of a verify decode)", self.tokens_max),
            ]
            gauges = [
                ("prompt_tokens_seconds", "Prompt throughput of the last request in tokens/s", self.last_prompt_tps),
                ("predicted_tokens_seconds", "Generation throughput of the last request in tokens/s",
                 self.last_predicted_tps),
                ("requests_processing", "Number of requests processing", processing),
                ("requests_deferred", "Number of requests waiting in the queue", deferred),
                ("n_busy_slots_per_decode", "Average number of busy slots per llama_decode() call (of a verify)",
                 self.decode_slots / self.decodes if self.decodes else 0.0),
            ]
            lines = _family("counter", counters) + _family("gauge", gauges)
            lines += _labelled("spec_decode_num_accepted_tokens_per_pos_total", "Accepted tokens per draft position",
                               "position", dict(enumerate(self.accepted_by_position)))
            lines += _family("counter", [("requests_rejected_total", "Requests refused with 429: the queue was full",
                                          self.rejected)], OWN_PREFIX)
            lines += _labelled("requests_finished_total", "Finished requests by why they stopped", "reason",
                               dict(sorted(self.stops.items())), OWN_PREFIX)
        lines += _labelled("slot_processing", "Whether the slot is answering a request (1) or idle (0)", "slot",
                           {s["id"]: int(s["is_processing"]) for s in slots}, OWN_PREFIX, "gauge")
        lines += _labelled("slot_decoded_tokens", "Tokens of the slot's current answer so far", "slot",
                           {s["id"]: s["next_token"][0]["n_decoded"] for s in slots if "next_token" in s}, OWN_PREFIX, "gauge")
        lines += _labelled("slot_cached_tokens", "Tokens the slot's cache holds", "slot",
                           {s["id"]: s["n_cached"] for s in slots if "n_cached" in s}, OWN_PREFIX, "gauge")
        return "\n".join(lines) + "\n"


def _family(kind: str, items: list, prefix: str = PREFIX) -> list[str]:
    lines = []
    for name, help_text, value in items:
        lines += [f"# HELP {prefix}{name} {help_text}", f"# TYPE {prefix}{name} {kind}",
                  f"{prefix}{name} {_number(value)}"]
    return lines


def _labelled(name: str, help_text: str, label: str, values: dict, prefix: str = PREFIX,
              kind: str = "counter") -> list[str]:
    if not values:
        return []
    lines = [f"# HELP {prefix}{name} {help_text}", f"# TYPE {prefix}{name} {kind}"]
    return lines + [f'{prefix}{name}{{{label}="{key}"}} {_number(value)}' for key, value in values.items()]


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))
