"""Drafters: prompt lookup, and which drafter each DrafterKind makes."""

from __future__ import annotations

import random

import pytest

from app.core.engine import Engine
from app.core.params import COPY_MAX, DrafterKind, ModelParams, SpeculationParams
from app.core.speculation.acceptance import LookupMatch
from app.core.speculation.drafters import DraftModelDrafter, LookupThenModelDrafter, PromptLookupDrafter
from app.core.speculation.policy_base import FixedPolicy

FIXED = FixedPolicy(SpeculationParams(policy="fixed", draft_max=8))


def test_lookup_tells_a_match_in_the_prompt_from_one_in_the_answer():
    prompt = [5, 6, 7, 8, 9]
    lookup = PromptLookupDrafter(ngram_max=3)
    lookup.prepare(prompt, FIXED)
    draft = lookup.draft(prompt + [1, 5, 6], 4, FIXED, None)
    assert draft.tokens[:1] == [7] and draft.scores[0] == LookupMatch(2, in_prompt=True)
    draft = lookup.draft(prompt + [1, 2, 3, 1, 2], 4, FIXED, None)
    assert draft.tokens[:1] == [3] and draft.scores[0] == LookupMatch(2, in_prompt=False)


def test_lookup_copies_the_prompt_where_the_answer_repeats_a_passage_it_has_changed():
    """An edit's answer copied the passage 5 6 7 8 and changed what followed it (9 -> 2); where the
    passage comes again, the prompt's text is the one to copy, and the match counts as the prompt's."""
    prompt = [1, 5, 6, 7, 8, 9, 10, 11]
    lookup = PromptLookupDrafter(ngram_max=4)
    lookup.prepare(prompt, FIXED)
    draft = lookup.draft(prompt + [5, 6, 7, 8, 2, 3, 5, 6, 7, 8], 3, FIXED, None)
    assert draft.tokens == [9, 10, 11] and draft.scores[0] == LookupMatch(4, in_prompt=True)
    draft = lookup.draft(prompt + [4, 2, 3, 4, 2], 2, FIXED, None)  # only in the answer: its latest
    assert draft.tokens == [3, 4] and draft.scores[0] == LookupMatch(2, in_prompt=False)


def test_lookup_reads_each_prompt_afresh():
    """A drafter given a longer prompt (the next turn holds the last answer) counts all of it as the prompt."""
    lookup = PromptLookupDrafter(ngram_max=2)
    lookup.prepare([1, 2, 3], FIXED)
    lookup.draft([1, 2, 3, 7, 8, 9, 4], 2, FIXED, None)
    lookup.prepare([1, 2, 3, 7, 8, 9, 4, 5], FIXED)
    draft = lookup.draft([1, 2, 3, 7, 8, 9, 4, 5, 7, 8, 6, 7, 8], 1, FIXED, None)
    assert draft.tokens == [9] and draft.scores[0] == LookupMatch(2, in_prompt=True)


def test_lookup_starts_its_index_over_for_a_context_that_does_not_extend_the_last():
    lookup = PromptLookupDrafter(ngram_max=2)
    assert lookup.find([1, 2, 3, 4, 1, 2], 2) == (2, [3, 4])
    assert lookup.find([1, 2, 5, 6, 7, 4, 1, 2], 2) == (2, [5, 6])   # changed inside, as long or longer
    assert lookup.find([9, 2, 5, 6, 7, 4, 1, 2, 9, 2], 1) == (2, [5])  # changed at the start
    assert lookup.find([9, 2, 5, 6, 7, 4, 1, 2, 9, 2, 5, 8, 1, 2], 2) == (2, [9, 2])  # extended: the latest


def test_lookup_finds_the_continuation_of_a_repeated_text():
    text = [5, 6, 7, 8, 9, 10, 11, 3, 4, 5, 6, 7]
    lookup = PromptLookupDrafter(ngram_max=3)
    n, continuation = lookup.find(text, 4)
    assert (n, continuation) == (3, [8, 9, 10, 11])
    n, continuation = lookup.find(text + [8, 9], 2)   # the index grows with the context
    assert (n, continuation) == (3, [10, 11])
    assert lookup.find([1, 2, 3], 4) == (0, [])       # nothing repeats
    assert lookup.find([9, 9, 1, 2], 3)[0] == 0
    n, continuation = lookup.find([1, 2, 1, 9, 1], 3)  # the latest match wins
    assert (n, continuation) == (1, [9, 1])


def _longest_match_by_scanning(context: list[int], prompt_length: int, ngram_max: int, ngram_min: int):
    """What the lookup drafter is specified to copy, found the slow way: the longest n-gram ending
    the context that occurs earlier, and of its occurrences the latest whose continuation starts in
    the prompt, else the latest in the answer."""
    for n in range(min(ngram_max, len(context) - 1), ngram_min - 1, -1):
        ends = [end for end in range(n, len(context)) if context[end - n:end] == context[-n:]]
        if ends:
            in_prompt = [end for end in ends if end < prompt_length]
            return n, max(in_prompt) if in_prompt else max(ends)
    return 0, 0


@pytest.mark.parametrize("seed", range(6))
def test_lookup_finds_the_longest_match_it_is_specified_to_find(seed):
    """The drafter bisects for the longest match over an index that grows with the answer; on random
    texts over small vocabularies (many repeats, of every length) it agrees with a scan of the text."""
    rng = random.Random(seed)
    for _ in range(20):
        ngram_max, ngram_min = rng.choice([2, 4, 16]), rng.choice([1, 1, 2])
        vocabulary = rng.choice([2, 3, 6])
        prompt = [rng.randrange(vocabulary) for _ in range(rng.randrange(0, 30))]
        lookup = PromptLookupDrafter(ngram_max, ngram_min)
        lookup.prepare(prompt, FIXED)
        context = list(prompt)
        for _ in range(30):
            context.append(rng.randrange(vocabulary))
            n, end = _longest_match_by_scanning(context, len(prompt), ngram_max, ngram_min)
            assert lookup.find(context, 3) == (n, context[end:end + 3] if n else [])


@pytest.fixture(scope="module")
def pair_and_main(tiny_models):
    pair = Engine.load(ModelParams(str(tiny_models.main), n_ctx=128), ModelParams(str(tiny_models.same), n_ctx=128))
    alone = Engine.load(ModelParams(str(tiny_models.main), n_ctx=128))
    yield pair, alone
    pair.close()
    alone.close()


@pytest.mark.parametrize("kind,with_draft,without_draft", [
    (DrafterKind.LOOKUP_MODEL, LookupThenModelDrafter, PromptLookupDrafter),
    (DrafterKind.MODEL, DraftModelDrafter, type(None)),
    (DrafterKind.LOOKUP, PromptLookupDrafter, PromptLookupDrafter),
    (DrafterKind.NONE, type(None), type(None)),
])
def test_each_kind_makes_its_drafter_and_falls_back_without_a_draft_model(pair_and_main, kind, with_draft,
                                                                          without_draft):
    pair, alone = pair_and_main
    assert type(pair._drafter(kind)) is with_draft
    assert type(alone._drafter(kind)) is without_draft
    assert kind.without_model().uses_model is False


def test_a_drafter_names_its_kind():
    assert PromptLookupDrafter.name == DrafterKind.LOOKUP
    assert DraftModelDrafter.name == DrafterKind.MODEL
    assert LookupThenModelDrafter.name == DrafterKind.LOOKUP_MODEL


def test_lookup_copies_on_from_its_occurrence_where_another_went_otherwise():
    """An edit's answer copied the first of two similar passages of the prompt and is at the second:
    the copy goes on as the second did, though the passage's start went the first one's way twice
    (in the prompt and in the answer's copy; looked up again token by token, it drafted 9)."""
    prompt = [1, 2, 3, 4, 9, 5, 1, 2, 3, 4, 8, 6]
    lookup = PromptLookupDrafter(ngram_max=4)
    lookup.prepare(prompt, FIXED)
    context = prompt + [1, 2, 3, 4, 9, 5, 1, 2, 3]
    assert [t for t, _ in lookup.propose(context, 3)] == [4, 8, 6]


def test_lookup_copies_the_prompts_occurrence_before_the_answers():
    prompt = [7, 1, 2, 3]
    lookup = PromptLookupDrafter(ngram_max=2)
    lookup.prepare(prompt, FIXED)
    context = prompt + [1, 2, 5, 1, 2]        # 1 2 went on 3 in the prompt, 5 in the answer: the prompt's
    assert lookup.propose(context, 1) == [(3, LookupMatch(2, in_prompt=True))]


def test_lookup_copies_to_the_end_of_the_text_then_looks_up_again():
    """The copy runs on from the match's occurrence, each token scored by that match; where it reaches
    the end of the text, the end with the copied tokens is looked up again and the draft goes on."""
    prompt = [10, 11, 12, 13, 20, 21, 22, 23, 24, 25, 12, 13, 30, 31]
    lookup = PromptLookupDrafter(ngram_max=4)
    lookup.prepare(prompt, FIXED)
    proposed = lookup.propose(prompt + [10, 11], 8)
    assert proposed == [(t, LookupMatch(2, in_prompt=True)) for t in [12, 13, 20, 21, 22, 23, 24, 25]]
    periodic = [1, 2, 3, 4, 1, 2, 3]
    lookup.prepare(periodic, FIXED)
    assert [t for t, _ in lookup.propose(periodic, 8)] == [4, 1, 2, 3, 4, 1, 2, 3]


def test_a_match_as_long_as_the_longest_looked_up_is_measured_as_far_as_the_text_agrees():
    """The run the policy reads (``AnswerReach.copy``): a copy that has followed the prompt for
    40 tokens scores 40, not the 16 looked up; at most COPY_MAX; a shorter match keeps its length,
    and the run ends where the answer changed the text."""
    rng = random.Random(5)
    prompt = rng.sample(range(1000), 200)             # no token repeats: one occurrence per n-gram
    lookup = PromptLookupDrafter()
    lookup.prepare(prompt, FIXED)
    assert lookup.propose(prompt + prompt[20:60], 1) == [(prompt[60], LookupMatch(40, in_prompt=True))]
    assert lookup.propose(prompt + prompt[0:150], 1) == [(prompt[150], LookupMatch(COPY_MAX, in_prompt=True))]
    assert lookup.propose(prompt + [1001] + prompt[50:60], 1) == [(prompt[60], LookupMatch(10, in_prompt=True))]
    changed = prompt + prompt[20:40] + [1001] + prompt[41:60]   # the answer changed one token of its copy
    assert lookup.propose(changed, 1) == [(prompt[60], LookupMatch(19, in_prompt=True))]


def test_lookup_copies_the_passage_the_answer_has_followed_longer():
    """Two methods of the prompt share 20 tokens and go on otherwise; an answer copying the first
    is at the end of the shared part, whose last 16 tokens occur in both: the copy goes on as the
    first did, the occurrence the answer has followed for 25 tokens (edit-3 copied the later one's
    line and lost 21 drafted tokens there)."""
    rng = random.Random(7)
    head1, head2, shared, then1, then2 = (rng.sample(range(k, k + 100), n) for k, n in
                                          ((0, 5), (100, 5), (200, 20), (300, 6), (400, 6)))
    prompt = [999] + head1 + shared + then1 + head2 + shared + then2

    def proposed(answer):
        lookup = PromptLookupDrafter()
        lookup.prepare(prompt, FIXED)
        return lookup.propose(prompt + answer, 6)

    assert proposed(head1 + shared) == [(t, LookupMatch(25, in_prompt=True)) for t in then1]
    assert proposed(head2 + shared) == [(t, LookupMatch(25, in_prompt=True)) for t in then2]
    assert [t for t, _ in proposed([998] + shared)] == then2   # equal runs: the latest


def test_lookup_drafts_what_find_copies_where_the_text_repeats_nothing_else():
    """Where the copy does not reach the end of the text the draft is find's contiguous copy."""
    rng = random.Random(3)
    prompt = rng.sample(range(1000), 200)            # no token repeats: one occurrence per n-gram
    lookup = PromptLookupDrafter()
    lookup.prepare(prompt, FIXED)
    context = prompt + prompt[50:60]
    n, copied = lookup.find(context, 16)
    assert n == 10 and [t for t, _ in lookup.propose(context, 16)] == copied == prompt[60:76]


def test_lookup_draft_asks_the_policy_token_by_token():
    prompt = [1, 2, 3, 4, 5, 6]
    lookup = PromptLookupDrafter(ngram_max=3)
    lookup.prepare(prompt, FIXED)
    draft = lookup.draft(prompt + [1, 2], 3, FIXED, None)
    assert draft.tokens == [3, 4, 5] and [m.length for m in draft.scores] == [2, 2, 2]
