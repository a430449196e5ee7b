"""How far a round's draft may go in this answer: the auto policy's ramps (policy.py asks them each
round). How long a drafter's drafts hold is the answer's, and the acceptance learned over earlier
answers cannot tell which answer this is, so where a failed draft costs much (a CPU) an answer's
drafts start short and grow as they hold, and where it costs little (a GPU) they run long at once.
"""

from __future__ import annotations

from app.core.speculation.acceptance import COPIERS, DRAFT_MODELS, LookupMatch, Score
from app.core.speculation.costmodel import CostProfile


class AnswerReach:
    """The most tokens a round of this answer accepted, per kind of drafter, and how far past that a
    draft may go on the machine's costs. One per answer (the policy's)."""

    COPY_RISK_STEPS = 3.0    # main steps a copy may risk past what this answer's copies held
    LONG_RUN = 12            # an in-prompt run longer than this may reach RUN_REACH times itself
    RUN_REACH = 1.5
    MODEL_RISK_STEPS = 8.0   # main steps a draft model's draft may risk past what this answer's held

    def __init__(self, copy_len: int, max_len: int):
        self.copy_len = copy_len   # the longest copy (lookup, the suffix index)
        self.max_len = max_len     # the longest draft of a draft model
        self.copy_held = 0         # the most copied tokens a round of this answer accepted
        self.model_held = 0        # the most drafted tokens a draft model's round of this answer accepted

    def observe(self, source: str, accepted: int) -> None:
        """A round's first drafter and the tokens of its draft accepted."""
        if source in COPIERS:
            self.copy_held = max(self.copy_held, accepted)
        elif source in DRAFT_MODELS:
            self.model_held = max(self.model_held, accepted)

    def copy(self, profile: CostProfile, score: Score) -> int:
        """How far a copy may go this round: past the most copied tokens a round of this answer had
        accepted, only as far as verifying the extra tokens for nothing would cost COPY_RISK_STEPS main
        steps. A rewrite in British spelling copies its prompt between rare changes, a rename breaks
        every copy within a few tokens. On one thread of this project's CPU an answer's copies start at
        3-6 tokens; on a GPU, where a batch costs little more than a step, they run long at once.
        Replayed (policy_replay.py, the copy set and both shared recordings, four cost profiles): 1.2%
        faster than copies of 16, with 3 prompt runs of 832 under 0.95x instead of 25
        (docs/architecture.md, section 4).

        A copy whose answer has followed the prompt for more than LONG_RUN tokens (its run: the match's
        length, measured on past the longest match looked up by ``PromptLookupDrafter._run``) may also
        draft up to RUN_REACH times its run: in the recorded answers a run of 24 or more in the prompt
        went on 98-100% of the time, token by token, against 91-95% for runs of 9-23. Since lookup
        copies the prompt as the answer rewrites it (rewrites.py), a rename no longer breaks such a copy
        after its second sighting, and a run of 13 may reach 19. Replayed over 1,120 prompt runs, the
        geometric mean went 1.2440x -> 1.2509x and the runs under 0.95x of plain from 14 to 11; from 12
        tokens 19 runs fell under, and twice the run put 29 under. An answer drafting from the priors (a
        one-shot ``generate``) meets copy-5's next typo fix at 13 tokens (0.88-0.93x); from 14 tokens
        copy-1, edit-3 and copy-9 gave back 9-11% (docs/architecture.md, section 4)."""
        reach = _ramp(profile, self.copy_held, self.copy_len, self.COPY_RISK_STEPS, 0.0)
        if isinstance(score, LookupMatch) and score.in_prompt and score.length > self.LONG_RUN:
            reach = max(reach, min(self.copy_len, int(self.RUN_REACH * score.length)))
        return reach

    def model(self, profile: CostProfile, step_s: float) -> int:
        """How far a draft model's draft may go this round, its tokens costing ``step_s`` each: past the
        most drafted tokens a round of the model had accepted in this answer, only as far as drafting
        and verifying the extra tokens for nothing would cost MODEL_RISK_STEPS main steps. In an edit the
        draft model copies the prompt as confidently where the main model changes it as where it
        copies: on copy-12 (a text put in the past tense) it drafted 15 tokens at 0.996, one was
        accepted, and the answer read 0.84x of plain, replayed. On one thread of this CPU (a draft
        token 0.4 of a main step, a verified one 0.85) an answer's first model draft is 6 tokens long;
        on a GPU (a 0.5B draft for a 7B main) it is not held back. Replayed over 1,120 prompt runs, the
        runs under 0.95x went 11 -> 6 and the geometric mean 1.2509x -> 1.2527x; risking 3 steps cost
        the H100 profile's lookup+model 0.5%, 16 changed nothing (docs/architecture.md, section 4)."""
        return max(1, _ramp(profile, self.model_held, self.max_len, self.MODEL_RISK_STEPS, step_s))


def _ramp(profile: CostProfile, held: int, longest: int, risk_steps: float, step_s: float) -> int:
    """The longest draft, ``held`` or more but at most ``longest``, whose tokens past ``held`` cost at most
    ``risk_steps`` main steps if all of them are wrong: drafting them (``step_s`` each; a copy's are
    free) and verifying them beyond a batch of ``held`` + 1."""
    reach = held = min(held, longest)
    base, risk = profile.main_batch(held + 1), risk_steps * profile.main_batch(1)
    while reach < longest and (reach + 1 - held) * step_s + profile.main_batch(reach + 2) - base <= risk:
        reach += 1
    return reach
