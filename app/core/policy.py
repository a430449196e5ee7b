"""How many tokens to draft next."""

from __future__ import annotations

from typing import Protocol

from .params import SpeculationParams


class DraftPolicy(Protocol):
    def draft_length(self) -> int:
        """The most tokens to draft this round (0: the main model decodes alone)."""

    def keep_drafting(self, n_drafted: int, p_top: float) -> bool:
        """Whether to add a token the drafter is ``p_top`` sure of, after ``n_drafted`` tokens."""

    def observe(self, drafted: int, accepted: int) -> None:
        """What verification made of the last draft."""


class FixedPolicy:
    """Always draft ``draft_max`` tokens (llama.cpp's --draft-max), p_min ignored."""

    def __init__(self, params: SpeculationParams):
        self.params = params

    def draft_length(self) -> int:
        return self.params.draft_max

    def keep_drafting(self, n_drafted: int, p_top: float) -> bool:
        return True

    def observe(self, drafted: int, accepted: int) -> None:
        pass


class ConfidencePolicy(FixedPolicy):
    """Draft up to ``draft_max`` tokens, stopping where the drafter's top probability falls below
    ``p_min`` (llama.cpp's --draft-p-min)."""

    def keep_drafting(self, n_drafted: int, p_top: float) -> bool:
        return p_top >= self.params.p_min


def make_policy(params: SpeculationParams) -> DraftPolicy:
    if params.policy == "fixed":
        return FixedPolicy(params) if params.p_min <= 0 else ConfidencePolicy(params)
    if params.policy == "pmin":
        return ConfidencePolicy(params)
    raise ValueError(f"unknown draft policy {params.policy!r} (choose fixed or pmin)")
