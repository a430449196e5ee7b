"""Speculation counters from a server's Prometheus /metrics: vLLM's (``vllm:spec_decode_*``) and
llama-server's (``llamacpp:spec_decode_*``, which Quickdraft's own server exposes too)."""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIXES = ("vllm:", "llamacpp:")
DRAFTS = "spec_decode_num_drafts_total"
DRAFT_TOKENS = "spec_decode_num_draft_tokens_total"
ACCEPTED = "spec_decode_num_accepted_tokens_total"
ACCEPTED_PER_POS = "spec_decode_num_accepted_tokens_per_pos_total"

_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>[^}]*)\})?\s+(?P<value>\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class SpecCounters:
    """Cumulative speculation counters, summed over engines and models; per position by index."""

    drafts: float
    draft_tokens: float
    accepted: float
    accepted_per_pos: tuple[float, ...] = ()

    def __sub__(self, earlier: "SpecCounters") -> "SpecCounters":
        per_pos = [a - (earlier.accepted_per_pos[i] if i < len(earlier.accepted_per_pos) else 0.0)
                   for i, a in enumerate(self.accepted_per_pos)]
        return SpecCounters(self.drafts - earlier.drafts, self.draft_tokens - earlier.draft_tokens,
                            self.accepted - earlier.accepted, tuple(per_pos))


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    """(name, labels, value) of every sample line of Prometheus text; comments and junk skipped."""
    samples = []
    for line in text.splitlines():
        match = _SAMPLE.match(line.strip())
        if not match or line.lstrip().startswith("#"):
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        samples.append((match["name"], dict(_LABEL.findall(match["labels"] or "")), value))
    return samples


def spec_counters(text: str) -> SpecCounters | None:
    """The speculation counters in a /metrics text, or None when it has none (no speculation)."""
    totals: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    for name, labels, value in parse_samples(text):
        prefix = next((p for p in PREFIXES if name.startswith(p)), None)
        if prefix is None:
            continue
        base = name[len(prefix):]
        if base == ACCEPTED_PER_POS and labels.get("position", "").isdigit():
            position = int(labels["position"])
            per_pos[position] = per_pos.get(position, 0.0) + value
        elif base in (DRAFTS, DRAFT_TOKENS, ACCEPTED):
            totals[base] = totals.get(base, 0.0) + value
    if DRAFT_TOKENS not in totals or ACCEPTED not in totals:
        return None
    positions = tuple(per_pos.get(i, 0.0) for i in range(max(per_pos) + 1)) if per_pos else ()
    return SpecCounters(totals.get(DRAFTS, 0.0), totals[DRAFT_TOKENS], totals[ACCEPTED], positions)
