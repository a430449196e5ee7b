"""The prompt as an edit's answer rewrites it (rewrites.py), and prompt lookup copying from it."""

from __future__ import annotations

from app.core.params import SpeculationParams
from app.core.speculation.acceptance import LOOKUP, AcceptanceModel, LookupMatch
from app.core.speculation.drafters import PromptLookupDrafter
from app.core.speculation.policy_base import FixedPolicy
from app.core.speculation.rewrites import PromptRewrites

TMP, TOTAL = 1, 2
FIXED = FixedPolicy(SpeculationParams(policy="fixed", draft_max=8))


def line(i: int, name: int = TMP) -> list[int]:
    """A line of code that uses the variable ``name``: distinct tokens around it."""
    return [100 + 10 * i, name] + [101 + 10 * i + k for k in range(5)]


PROMPT = [7, 8, 9] + line(0) + line(1) + line(2) + line(3) + [99]


def answered(lookup: PromptLookupDrafter, answer: list[int]) -> list[tuple[int, LookupMatch]]:
    """Lookup asked at every token of ``answer``, as the loop asks it each round; its last proposal."""
    lookup.prepare(PROMPT, FIXED)
    for k in range(len(answer)):
        lookup.propose(PROMPT + answer[:k], 8)
    return lookup.propose(PROMPT + answer, 8)


def test_a_substitution_the_answer_makes_twice_rewrites_the_prompt():
    rewrites = PromptRewrites(PROMPT)
    rewrites.start_following(3)                    # the answer copies from the prompt's first line
    renamed = [t for i in range(3) for t in line(i, TOTAL)]
    rewrites.follow(PROMPT + renamed[:7])          # one line renamed: once is not a rename yet
    assert rewrites.text is None
    rewrites.follow(PROMPT + renamed)              # twice: every `tmp` of the prompt is `total`
    assert rewrites.substitutions == {(TMP,): (TOTAL,)}
    assert rewrites.text == [7, 8, 9] + line(0, TOTAL) + line(1, TOTAL) + line(2, TOTAL) + line(3, TOTAL) + [99]


def test_an_answer_that_leaves_the_prompt_teaches_nothing():
    rewrites = PromptRewrites(PROMPT)
    rewrites.start_following(3)
    elsewhere = line(0)[:3] + list(range(500, 530))   # it stops copying and writes its own text
    rewrites.follow(PROMPT + elsewhere + line(1)[2:])
    assert rewrites.substitutions == {} and rewrites.text is None


def test_lookup_copies_across_a_rename_from_the_rewritten_prompt():
    """After two renamed lines the copy of the third goes on through `total`, where the prompt's copy
    would draft `tmp` (and break at it); scored apart, its acceptance learned on its own."""
    renamed = line(0, TOTAL) + line(1, TOTAL) + line(2, TOTAL) + [130]
    proposed = answered(PromptLookupDrafter(), renamed)
    assert [t for t, _ in proposed[:4]] == [TOTAL, 131, 132, 133]
    assert proposed[0][1].rewritten and proposed[0][1].in_prompt
    once = line(0) + line(1, TOTAL) + line(2) + [130]   # renamed once: the prompt's own copy
    assert [t for t, _ in answered(PromptLookupDrafter(), once)[:2]] == [TMP, 131]
    buckets = {AcceptanceModel.bucket(LOOKUP, 0, LookupMatch(16, in_prompt=True, rewritten=r)) for r in (False, True)}
    assert len(buckets) == 2


def test_a_rewritten_copy_is_measured_as_far_back_as_the_prompts():
    """Past a stretch of more than 16 tokens without the renamed token, the prompt's copy agrees with the
    answer back to the last rename (its run, up to 64) and the rewritten copy back further; measured to
    16 tokens only, the rewritten copy lost to the prompt's, which breaks at the next `tmp`."""
    stretch = list(range(300, 330))
    prompt = [7, 8, 9] + line(0) + line(1) + line(2) + stretch + line(3) + [99]
    answer = line(0, TOTAL) + line(1, TOTAL) + line(2, TOTAL) + stretch + line(3, TOTAL)[:1]
    lookup = PromptLookupDrafter()
    lookup.prepare(prompt, FIXED)
    for k in range(len(answer)):
        lookup.propose(prompt + answer[:k], 8)
    proposed = lookup.propose(prompt + answer, 8)
    assert proposed[0][0] == TOTAL and proposed[0][1].rewritten
    assert proposed[0][1].length == len(answer)   # the prompt's copy agrees back to line 2's `tmp`: 36
    assert lookup.peek(prompt + answer) == (proposed[0][1].length, TOTAL)


def test_peek_names_the_token_lookup_drafts_where_both_copies_match_as_long():
    """The answer re-joins the prompt after text of its own: the prompt's copy and the rewritten one match
    6 tokens alike; lookup drafts the rewritten copy (`total`), and its peek names that token too."""
    answer = line(0, TOTAL) + line(1, TOTAL) + line(2, TOTAL) + [999, 998] + line(2)[2:] + line(3)[:1]
    lookup = PromptLookupDrafter()
    proposed = answered(lookup, answer)
    assert proposed[0] == (TOTAL, LookupMatch(6, in_prompt=True, rewritten=True))
    assert lookup.peek(PROMPT + answer) == (6, TOTAL)


def test_of_two_occurrences_the_rewritten_copy_takes_the_one_agreeing_furthest():
    """Two methods that end alike share 16 tokens: the rewritten copy continues the one the answer has
    been copying (agreeing back through its own start), not the latest, as lookup's own copy does."""
    shared = list(range(400, 416))
    first, second = [200, 201, 202], [210, 211, 212]
    prompt = [7, 8, 9] + line(0) + line(1) + line(2) + first + shared + [250] + second + shared + [260]
    rewrites = PromptRewrites(prompt)
    rewrites.start_following(3)
    answer = line(0, TOTAL) + line(1, TOTAL) + line(2, TOTAL) + first + shared
    rewrites.follow(prompt + answer)
    assert rewrites.substitutions == {(TMP,): (TOTAL,)}
    assert rewrites.copy(prompt + answer, 1) == (len(answer), [250])
