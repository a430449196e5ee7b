"""The chance that a drafted token is accepted: the draft model's and prompt lookup's scores, and
the acceptance model the auto policy learns online (app/core/speculation/policy.py decides with it)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from app.core.params import DrafterKind

# Which drafter proposed a token: DrafterKind's members (a draft's ``sources``, a Round's ``drafter``),
# by their short names here
MODEL, LOOKUP, MTP, EAGLE3, DFLASH, SUFFIX = (DrafterKind.MODEL, DrafterKind.LOOKUP, DrafterKind.MTP,
                                              DrafterKind.EAGLE3, DrafterKind.DFLASH, DrafterKind.SUFFIX)
# A draft model of another vocabulary (chosen as ``model``, drafting through text: crossvocab.py): named
# apart so that its acceptance is learned apart and the statistics show it by name
CROSS = "model (other vocabulary)"
DRAFT_MODELS = frozenset({MODEL, CROSS})   # the drafters that run a draft model: its step costs, its catch-up
# The drafters that chain a small head over the main model's hidden states (its MTP layers, an EAGLE-3
# drafter): a step per drafted token, timed by each answer's own rounds; nothing to catch up on
HEADS = frozenset({MTP, EAGLE3})
# The drafters that propose a whole block in one pass (DFlash, DSpark): one call whose cost hardly
# depends on the block's length, timed by each answer's rounds; only verifying grows with length
BLOCKS = frozenset({DFLASH})
# The drafters that copy: deterministic proposals (q None), free to make; only a failed verification costs
COPIERS = frozenset({LOOKUP, SUFFIX})
SOURCES = (MODEL, CROSS, LOOKUP, SUFFIX, MTP, EAGLE3, DFLASH)   # every drafter a round can name


@dataclass(frozen=True)
class LookupMatch:
    """The score of a prompt-lookup draft: the length of the match it continues, and whether that
    match was found in the prompt (the answer copies the user's text, as an edit does) or in the
    answer so far (more often a phrase said twice). A match as long as the longest looked up is
    measured on as far as the text agrees (``PromptLookupDrafter._run``), up to 64: its bucket stays 16."""

    length: int
    in_prompt: bool = False
    rewritten: bool = False   # copied from the prompt as the answer rewrites it (rewrites.py)


@dataclass(frozen=True)
class SuffixMatch:
    """The score of a suffix-index draft (suffix_index.py): how many tokens of the context's end matched
    in past documents, how often the drafted token followed them there and how often any token did."""

    length: int
    count: int
    total: int

    @property
    def confidence(self) -> float:
        """The drafted token's share of the continuations, shrunk by the evidence: 1 of 1 is 0.5, 9 of
        9 is 0.9 (as if one more continuation had been another token)."""
        return self.count / (self.total + 1)


Score = float | LookupMatch | SuffixMatch  # a drafted token's score: the draft model's top probability, or a match


class AcceptanceModel:
    """The chance that a drafted token is accepted, learned online.

    Draft-model tokens are bucketed by the draft's own top probability, which is the prior: a draft
    that is over-confident here is corrected by what verification actually accepts. Prompt-lookup
    tokens are bucketed by where the match was found and its length, the first token of a draft apart
    from the ones that follow an accepted one (a copy that has started tends to go on). Counts decay,
    so the model follows the conversation as the text changes; the engine keeps one model while its
    pair is loaded.

    The lookup priors are what the Qwen2.5-Coder 1.5B model's greedy answers to the code, chat and
    edit benchmark prompts did (1,360 positions with a match): a match of 9+ tokens found in the
    prompt went on for ~11 tokens (first token right 97-100%, each next one 97-98%), one found in
    the answer so far for ~3 (first 77-89%, next 67-80%). On a machine where a batch of 16 costs 8
    single steps, that difference decides whether a long draft pays, and a wrong guess costs 7.
    """

    PRIOR_WEIGHT = 6.0
    DECAY = 0.995
    LOOKUP_BUCKETS = (1, 2, 3, 4, 6, 9, 13, 16)  # match lengths (16: the longest the drafter tries)
    # prior chance of a draft's first copied token, then of each next one, by where the match is
    LOOKUP_PRIOR = {
        ("prompt", "first"): {1: 0.2, 2: 0.5, 3: 0.65, 4: 0.75, 6: 0.75, 9: 0.95, 13: 0.95, 16: 0.97},
        ("prompt", "next"): {1: 0.5, 2: 0.8, 3: 0.85, 4: 0.85, 6: 0.93, 9: 0.97, 13: 0.97, 16: 0.98},
        ("answer", "first"): {1: 0.2, 2: 0.35, 3: 0.5, 4: 0.65, 6: 0.65, 9: 0.8, 13: 0.75, 16: 0.75},
        ("answer", "next"): {1: 0.5, 2: 0.65, 3: 0.7, 4: 0.7, 6: 0.75, 9: 0.75, 13: 0.7, 16: 0.7},
    }
    # the prompt as the answer rewrites it (rewrites.py): learned apart, from the prompt's prior
    LOOKUP_PRIOR["rewritten", "first"] = LOOKUP_PRIOR["prompt", "first"]
    LOOKUP_PRIOR["rewritten", "next"] = LOOKUP_PRIOR["prompt", "next"]

    # a suffix-index token's prior (a guess, learned from there): by the match's length, the first token of
    # a draft apart, times a factor for the token's share of the match's continuations. A long match in
    # past documents is an agent's loop or a file written again: what followed it once mostly follows
    # again, so one continuation seen once (confidence 0.5) must be worth drafting after a 16-token match
    SUFFIX_CONFIDENCE_BUCKETS = (0.0, 0.4, 0.6, 0.8)
    SUFFIX_PRIOR = {"first": {1: 0.15, 2: 0.3, 3: 0.4, 4: 0.5, 6: 0.6, 9: 0.8, 13: 0.9, 16: 0.95},
                    "next": {1: 0.4, 2: 0.55, 3: 0.65, 4: 0.7, 6: 0.8, 9: 0.9, 13: 0.95, 16: 0.97}}
    SUFFIX_CONFIDENCE_FACTOR = {0.0: 0.6, 0.4: 0.9, 0.6: 0.95, 0.8: 1.0}

    def __init__(self) -> None:
        self._counts: dict[tuple, list[float]] = {}

    @staticmethod
    def bucket(source: str, n: int, score: Score) -> tuple:
        if source == LOOKUP:
            where = "rewritten" if score.rewritten else "prompt" if score.in_prompt else "answer"
            return (LOOKUP, where, "next" if n > 0 else "first", _length_bucket(score.length))
        if source == SUFFIX:
            confidence = max(b for b in AcceptanceModel.SUFFIX_CONFIDENCE_BUCKETS if b <= score.confidence)
            return (SUFFIX, "next" if n > 0 else "first", _length_bucket(score.length), confidence)
        return (source if source in HEADS | BLOCKS | {CROSS} else MODEL, min(9, int(score * 10)))

    def prior(self, key: tuple) -> float:
        if key[0] == LOOKUP:
            _, where, which, length = key
            return self.LOOKUP_PRIOR[where, which][length]
        if key[0] == SUFFIX:
            _, which, length, confidence = key
            return self.SUFFIX_PRIOR[which][length] * self.SUFFIX_CONFIDENCE_FACTOR[confidence]
        return (key[1] + 0.5) / 10

    def chance(self, source: str, n: int, score: Score) -> float:
        """The posterior mean. No optimism on top: where a batch costs nearly one step per token, a
        long draft that a hopeful estimate sends and verification rejects costs 7 steps."""
        key = self.bucket(source, n, score)
        accepted, tried = self._counts.get(key, (0.0, 0.0))
        return (accepted + self.PRIOR_WEIGHT * self.prior(key)) / (tried + self.PRIOR_WEIGHT)

    def update(self, source: str, n: int, score: Score, accepted: bool) -> None:
        counts = self._counts.setdefault(self.bucket(source, n, score), [0.0, 0.0])
        counts[0] = counts[0] * self.DECAY + accepted
        counts[1] = counts[1] * self.DECAY + 1.0


@functools.lru_cache(maxsize=None)
def _length_bucket(length: int) -> int:
    """The lookup match length a match of ``length`` tokens is counted with."""
    return max(b for b in AcceptanceModel.LOOKUP_BUCKETS if b <= max(1, length))
