"""What the auto policy reads of the cost model, and what it teaches it (policy.py decides lengths).

The readings are taken at the current context and kept until a round's times move the estimates: a
round reads at most three profiles of the model, however many tokens it drafts, since reading them
costs a fraction of a percent of a main step each time (the numbers: docs/architecture.md, section 4).
"""

from __future__ import annotations

from app.core.speculation.acceptance import BLOCKS, DRAFT_MODELS, HEADS
from app.core.speculation.costmodel import CostModel, CostProfile


class CostReadings:
    """The cost model as the auto policy sees it: its estimates at the current context, three ways
    (a batch size never measured read off its neighbours, at the most, or at the least it can cost),
    and a round's times fed back. Given a CostProfile instead of a CostModel, the costs are fixed
    (a replay, a test) and nothing is learned."""

    HEAD_STEP_DECAY = 0.8   # a head's token cost follows the last few rounds that timed one

    def __init__(self, costs: "CostModel | CostProfile", pads: bool = False):
        self.learns = isinstance(costs, CostModel)
        self.pads = pads   # the loop pads each verify batch to the cheapest measured size at or above it
        self.costs = costs if self.learns else CostModel.from_profile(costs)
        self.context = 0
        self.head_step_s: float | None = None   # one head token (MTP, EAGLE-3), learned from this answer's rounds
        self.block_s: float | None = None       # one block (DFlash), learned from this answer's rounds
        self.cost_rounds_observed = 0          # rounds whose times the cost model learned from
        self._read: dict[str, CostProfile] = {}      # by how unmeasured sizes are read: as the loop pays them
        self._by_size: dict[str, CostProfile] = {}   # and each size decoded as it is

    @property
    def learning(self) -> bool:
        return self.learns and self.costs.learning

    def _reading(self, unmeasured: str) -> CostProfile:
        """The estimates as the loop pays them: padded where it pads."""
        if unmeasured not in self._read:
            decoded = self._size_by_size(unmeasured)
            self._read[unmeasured] = decoded.padded() if self.pads else decoded
        return self._read[unmeasured]

    def _size_by_size(self, unmeasured: str) -> CostProfile:
        """The cost model's estimate of each batch size decoded as it is."""
        if unmeasured not in self._by_size:
            self._by_size[unmeasured] = self.costs.profile(self.context, unmeasured=unmeasured)
        return self._by_size[unmeasured]

    def verify_size(self, n: int, most: int) -> int:
        """The batch a verify batch of ``n`` tokens is decoded as: padded to a cheaper bigger size, at
        most ``most`` (``CostProfile.cheapest_batch``), where the loop pads; else ``n``."""
        return self._size_by_size("estimate").cheapest_batch(n, most) if self.pads else n

    @property
    def profile(self) -> CostProfile:
        """The cost model's estimates at the current context."""
        return self._reading("estimate")

    @property
    def bounded(self) -> CostProfile:
        """The estimates, with a size never measured at the most it can cost (``AutoPolicy._may_verify``)."""
        return self._reading("most")

    @property
    def hopeful(self) -> CostProfile:
        """The estimates, with a size never measured at the least it can cost (``AutoPolicy._batch_costs``)."""
        return self._reading("least")

    def catch_up_ratio(self) -> float:
        """What reading one skipped token costs the draft model, in its steps: it reads them in one
        batch, assumed to batch as well as the main model does."""
        return self.profile.main_batch(self.profile.n_max) / self.profile.n_max / self.profile.main_batch(1)

    def learn(self, batch: int, verify_s: float, context: int, draft_s: float | None, source: str | None,
              behind: int, more: int) -> None:
        """Teach the cost model one round's times: the verify batch, and the drafter's work when it
        drafted (a draft model's catch-up on ``behind`` skipped tokens, then a step per token after
        the first; a head's steps; a block's one pass). The readings are taken again at the new context."""
        self.costs.observe_main(batch, context, verify_s)
        self.cost_rounds_observed += 1
        if source in DRAFT_MODELS and draft_s is not None:
            steps = 1 + max(0, behind - 1) * self.catch_up_ratio() + more
            self.costs.observe_draft(steps, draft_s)
        if source in HEADS and draft_s is not None:
            per_token = draft_s / (1 + more)
            previous = per_token if self.head_step_s is None else self.head_step_s
            self.head_step_s = self.HEAD_STEP_DECAY * previous + (1 - self.HEAD_STEP_DECAY) * per_token
        if source in BLOCKS and draft_s is not None:
            previous = draft_s if self.block_s is None else self.block_s
            self.block_s = self.HEAD_STEP_DECAY * previous + (1 - self.HEAD_STEP_DECAY) * draft_s
        self.context = context + batch
        self._read, self._by_size = {}, {}
