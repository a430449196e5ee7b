"""What every draft policy answers, and the two that need no cost model.

A drafter asks the policy, token by token, whether to go on (``step``); after drafting the policy may
cut the draft (``cut``); after verification it learns what was accepted (``observe``). The fixed
policy always drafts the most it may. Under every policy a draft-model, head (MTP, EAGLE-3) or block
(DFlash) token less sure than p_min (when set) ends the draft. The auto policy, which weighs costs, is in policy.py.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol, Sequence

from app.core.params import SpeculationParams
from app.core.speculation.acceptance import BLOCKS, DRAFT_MODELS, HEADS, Score
from app.core.speculation.draft import Draft


class Decision(Enum):
    STOP = "stop"   # drop this token and stop drafting
    LAST = "last"   # keep this token, then stop (saves the draft step that would follow it)
    MORE = "more"   # keep this token and draft another


class DraftPolicy(Protocol):
    def may_draft(self, source: str) -> bool:
        """Whether a drafter of kind ``source`` may ever be asked (so it should read the prompt); the
        drafters in play ask it while the prompt is read."""
    def draft_length(self, source: str, behind: int = 0) -> int:
        """The most tokens a drafter of kind ``source`` may draft this round (0: do not draft);
        ``behind``: how many tokens it must read first (a draft model that sat out rounds)."""

    def step(self, n: int, score: Score, source: str) -> Decision:
        """Token ``n`` (0-based) of this round's draft has ``score``: the draft model's top
        probability, or the prompt-lookup match it continues."""

    def cut(self, draft: "Draft") -> int:
        """How many of the drafted tokens to send for verification."""

    def verify_size(self, n: int, most: int) -> int:
        """The size a verify batch of ``n`` tokens (the last accepted token and the draft) is decoded
        as: ``n``, or a bigger one, at most ``most`` (the room left in the context), that the loop pads
        it to because it costs less."""

    def main_step_s(self, context: int) -> float | None:
        """What one step of the main model alone costs at ``context``, as the policy's cost model
        has learned it; None when it has no cost model (the estimated speedup is then unknown)."""

    def wants_main_confidence(self) -> bool:
        """Whether ``observe`` should be given the main model's confidence in each new token."""

    def observe_undrafted(self, source: str, score: Score, right: bool, n: int = 0) -> None:
        """A copier's proposal with ``score`` was not drafted: the token after the ``n`` it drafted (all
        of them accepted) was ``right`` or not."""

    def observe(self, draft: "Draft", accepted: int, draft_s: float | None = None,
                main_confidence: Sequence[float] = (), verify_s: float | None = None,
                context: int | None = None) -> None:
        """Verification accepted the first ``accepted`` tokens of ``draft``; drafting took
        ``draft_s`` seconds (None: not measured); ``main_confidence``: the main model's top
        probability for each token it produced this round (when asked for); ``verify_s``: the
        main model's batch of ``len(draft) + 1`` tokens, padded to ``verify_size``'s answer, took that
        long, decoded after ``context`` tokens (None: not measured)."""

    @property
    def learning(self) -> bool:
        """Whether the policy is still learning what this machine's batches cost."""

    cost_rounds_observed: int   # rounds whose times its cost model learned from (0: it learns none)


def below_p_min(params: SpeculationParams, score: Score, source: str) -> bool:
    """Whether a draft-model, head or block token is less sure than ``p_min`` (llama.cpp's --draft-p-min): it
    ends the draft under every policy. Lookup's scores are match lengths, not probabilities."""
    return params.p_min > 0 and source in DRAFT_MODELS | HEADS | BLOCKS and score < params.p_min


class FixedPolicy:
    """Draft ``draft_max`` tokens (llama.cpp's --draft-max), stopping at a token less sure than
    ``p_min`` when one is set (llama.cpp's --draft-p-min): the "fixed" and "pmin" policies."""

    def __init__(self, params: SpeculationParams):
        self.params = params

    def may_draft(self, source: str) -> bool:
        return self.params.draft_max > 0

    def draft_length(self, source: str, behind: int = 0) -> int:
        return self.params.draft_max

    def step(self, n: int, score: Score, source: str) -> Decision:
        if below_p_min(self.params, score, source):
            return Decision.STOP
        return Decision.MORE if n + 1 < self.params.draft_max else Decision.LAST

    def cut(self, draft: "Draft") -> int:
        return len(draft)

    def verify_size(self, n: int, most: int) -> int:
        return n   # no cost model: what a size costs is not known

    def wants_main_confidence(self) -> bool:
        return False

    def observe_undrafted(self, source: str, score: Score, right: bool, n: int = 0) -> None:
        pass   # it drafts whatever the acceptance

    def observe(self, draft: "Draft", accepted: int, draft_s: float | None = None,
                main_confidence: Sequence[float] = (), verify_s: float | None = None,
                context: int | None = None) -> None:
        pass

    learning = False
    cost_rounds_observed = 0

    def main_step_s(self, context: int) -> float | None:
        return None
