"""The suffix index (app/core/speculation/suffix_index.py) against a brute-force count, and its drafter
in the loop: greedy output unchanged, the sampling rule's distribution kept."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from app.core.params import SamplingParams, SpeculationParams
from app.core.speculation import suffix_index
from app.core.speculation.acceptance import LOOKUP, SUFFIX, SuffixMatch
from app.core.speculation.policy import AutoPolicy
from app.core.speculation.policy_base import FixedPolicy
from app.core.speculation.suffix_drafter import SuffixDrafter, default_chain
from app.core.speculation.suffix_index import DEPTH, SuffixIndex
from tests.core.speculation.reference_model import ReferenceModel
from tests.core.speculation.test_loop import (MAIN, PROMPT, SAMPLING, SMALL, chi2, chi2_critical, exact_distribution,
                                              plain_greedy, run, sample_many)


def brute_force(docs, query):
    """(token, length, count, total) of the most frequent continuation of the longest match (at most RUN
    tokens; its length reported up to DEPTH), by counting every occurrence in every document (ties: the
    token that followed last, documents in the order added)."""
    for k in range(min(suffix_index.RUN, len(query)), 0, -1):
        gram, found, last = list(query[-k:]), Counter(), {}
        for d, doc in enumerate(docs):
            doc = list(doc)
            for end in range(k, len(doc)):
                if doc[end - k:end] == gram:
                    found[doc[end]] += 1
                    last[doc[end]] = (d, end)
        if found:
            top = max(found.values())
            token = max((t for t in found if found[t] == top), key=last.__getitem__)
            return token, min(k, DEPTH), top, sum(found.values())
    return None


@pytest.mark.parametrize("segment_tokens", [1 << 20, 50])
def test_the_longest_matchs_most_frequent_continuation_is_found_in_every_segment(monkeypatch, segment_tokens):
    monkeypatch.setattr(suffix_index, "SEGMENT_TOKENS", segment_tokens)   # 50: many segments, each asked
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 5, size=int(rng.integers(1, 70))).astype(np.int32) for _ in range(40)]
    index = SuffixIndex(docs[:25])
    for doc in docs[25:]:
        index.add(doc)
    assert index.documents == 40 and index.tokens == sum(len(d) for d in docs)
    for i in range(1500):
        query = [int(t) for t in rng.integers(0, 6, size=int(rng.integers(1, 24)))]  # 5: never in the index
        if i % 2:   # a document's start and then anything: a match past DEPTH, up to where the document starts
            doc = docs[int(rng.integers(0, len(docs)))]
            query = [int(t) for t in doc[:int(rng.integers(1, len(doc) + 1))]] + query[:int(rng.integers(0, 3))]
        found = index.continuation(query)
        expected = brute_force(docs, query)
        assert (found.token, found.length, found.count, found.total) == expected if expected else found is None


def test_a_match_never_crosses_a_documents_start():
    index = SuffixIndex([np.array([1, 2, 3]), np.array([4, 5])])
    assert index.continuation([3]) is None          # 3 ends its document: nothing followed it
    assert index.continuation([3, 4]).length == 1    # "3 4" is not in the text, "4" is
    assert index.continuation([2, 3, 4]).token == 5


def test_a_chain_drafts_on_from_what_it_drafted_and_stops_where_nothing_followed():
    index = SuffixIndex([np.array([7, 1, 2, 3, 4, 5]), np.array([7, 1, 2, 9])])
    chain = list(index.chain([0, 7, 1], 10))
    # after "7 1" came 2 twice; after "7 1 2" 3 once and 9 once: the later, 9, where the document ends
    assert [c.token for c in chain] == [2, 9]
    assert (chain[0].count, chain[0].total, chain[0].length) == (2, 2, 2)
    assert (chain[1].count, chain[1].total) == (1, 2)
    assert list(index.chain([0, 7, 1], 1)) == chain[:1]
    index.add(np.array([7, 1, 2, 3, 4]))   # now 3 twice: the more frequent, and the copy runs on
    assert [c.token for c in index.chain([0, 7, 1], 10)] == [2, 3, 4, 5]


def test_an_empty_index_finds_nothing():
    assert SuffixIndex().continuation([1, 2]) is None and list(SuffixIndex().chain([1], 4)) == []


def test_the_score_carries_the_match_and_its_frequency():
    assert SuffixMatch(4, 9, 9).confidence == 0.9 and SuffixMatch(4, 1, 1).confidence == 0.5


@pytest.mark.parametrize("draft_max", [1, 4, 8])
def test_greedy_output_with_the_suffix_drafter_is_the_main_models(draft_max):
    answer = plain_greedy(MAIN, PROMPT, 40)
    other = ReferenceModel(n_vocab=12, seed=5)
    # the answer itself (so drafts are accepted) and another model's answer (so some are rejected)
    index = SuffixIndex([np.array(PROMPT + answer), np.array(PROMPT + plain_greedy(other, PROMPT, 40))])
    events, _, _ = run(SuffixDrafter(index), spec=SpeculationParams(policy="fixed", draft_max=draft_max))
    summary = events[-1]
    assert list(summary.token_ids) == answer
    assert dict((name, (d, a)) for name, d, a in summary.by_drafter)[SUFFIX][1] > 0   # it drafted, and was right


def test_greedy_output_is_the_main_models_when_the_index_is_mostly_wrong():
    wrong = [(t + 1) % 12 for t in plain_greedy(MAIN, PROMPT, 40)]
    events, _, _ = run(SuffixDrafter(SuffixIndex([np.array(PROMPT + wrong)])))
    assert list(events[-1].token_ids) == plain_greedy(MAIN, PROMPT, 40)
    assert events[-1].drafted > 4 * events[-1].accepted   # a short match may be right by chance


@pytest.mark.parametrize("keyed", [False, True], ids=["unseeded", "seeded"])
def test_speculative_sampling_with_the_suffix_drafter_keeps_the_main_models_distribution(keyed):
    """The index holds sequences of SMALL's 3 tokens, so it drafts every round, right or wrong."""
    rng = np.random.default_rng(3)
    index = SuffixIndex([rng.integers(0, 3, size=30).astype(np.int32) for _ in range(8)])
    n_runs = 6000
    dist = exact_distribution(SMALL, [0, 1], 4, SamplingParams(**SAMPLING))
    counts = sample_many(lambda: SuffixDrafter(index), n_runs, keyed=keyed)
    assert sum(counts.values()) == n_runs
    assert chi2(counts, dist, n_runs) < chi2_critical(len(dist) - 1)


def test_the_suffix_indexs_accepted_tokens_have_an_origin_of_their_own():
    from app.core.speculation.events import Origin, TokenPiece

    answer = plain_greedy(MAIN, PROMPT, 40)
    events, _, _ = run(SuffixDrafter(SuffixIndex([np.array(PROMPT + answer)])))
    origins = Counter(e.origin for e in events if isinstance(e, TokenPiece) for _ in e.token_ids)
    assert origins[Origin.SUFFIX] == events[-1].accepted > 0 and Origin.DRAFT not in origins


def _retried_answer():
    """A prompt, and an earlier answer to it that the index holds: it copies the prompt's first 14
    tokens, then departs (30 31 32) and copies on. The answer being written now repeats that answer.
    The prompt starts with 31 70: lookup has a short match wherever the answer ends at 31."""
    prompt = [31, 70] + list(range(40, 58))
    earlier = prompt[:14] + [30, 31, 32] + prompt[14:]
    return prompt, earlier


def test_the_default_drafts_from_the_index_where_its_match_is_longer_than_lookups():
    """Past the departure lookup matches only "31" (the prompt's, followed by 70), the index matches the
    earlier answer's 16 tokens and drafts how it went on; without the index first, lookup's shorter match
    would have drafted the round."""
    prompt, earlier = _retried_answer()
    fixed = FixedPolicy(SpeculationParams(policy="fixed", draft_max=4))
    chain = default_chain(SuffixIndex([np.array(earlier)]), [], "default")
    chain.prepare(prompt, fixed)
    context = prompt + earlier[:16]            # ... 30 31
    assert chain.lookup.peek(context) == (1, 70) and chain.suffix.peek(context) == (DEPTH, 32)
    draft = chain.draft(context, 4, fixed, None)
    assert draft.tokens == earlier[16:20] and set(draft.sources) == {SUFFIX}
    # where lookup's copy of the prompt is as long as the index's match, lookup drafts as before
    context = prompt + prompt[:14]
    assert chain.lookup.peek(context)[0] >= chain.suffix.peek(context)[0]
    draft = chain.draft(context, 4, fixed, None)
    assert draft.tokens == prompt[14:18] and set(draft.sources) == {LOOKUP}


def test_where_both_copy_a_passage_the_index_goes_first_once_it_was_right_where_they_disagreed():
    """A retried answer copies the prompt's passages as the earlier answer did, and changes them where it
    did. Within a passage lookup's run is the longer, so where the first change comes lookup drafts the
    prompt's token; the index's token is the one written, and from then on the index drafts where the two
    disagree. In the index a document holds the prompt before its answer: a tie goes to the answer's."""
    text = list(range(100, 150))                                        # a file of 50 tokens
    prompt = [5, *text, 7, 8]
    earlier = [*text[:20], 30, *text[21:45], 31, *text[46:]]           # two tokens changed
    fixed = FixedPolicy(SpeculationParams(policy="fixed", draft_max=4))

    def chain():
        c = default_chain(SuffixIndex([np.array(prompt + earlier)]), [], "default")
        c.prepare(prompt, fixed)
        return c

    first, second = prompt + earlier[:20], prompt + earlier[:45]
    retried = chain()
    assert retried.lookup.peek(first) == (20, text[20]) and retried.suffix.peek(first) == (DEPTH, 30)
    assert retried.draft(first, 4, fixed, None).sources[0] == LOOKUP   # lookup's run is the longer
    retried.sync(first + [30])                                          # the index was right
    assert retried.draft(second, 4, fixed, None).tokens == earlier[45:49]
    fresh = chain()
    assert fresh.draft(second, 4, fixed, None).sources[0] == LOOKUP
    fresh.draft(first, 4, fixed, None)
    fresh.sync(first + [text[20]])                                      # lookup was right: it stays first
    assert fresh.draft(second, 4, fixed, None).sources[0] == LOOKUP


def test_a_retried_answer_is_drafted_from_its_earlier_self_not_from_later_versions_of_the_file():
    """The index holds a first answer (the prompt's file with one change) and two later turns' versions of
    it, each changing a line the first answer kept. A retried first turn agrees with the first answer back
    into the prompt, and with the later versions only since the first change: at that line the index drafts
    the first answer's token, where by count (2 to 1) and by recency the later versions' would win."""
    text = list(range(100, 160))
    prompt = [5, *text, 7, 8]
    first = [*text[:20], 30, *text[21:]]
    second = [*first[:40], 31, *first[41:]]
    third = [*second[:50], 32, *second[51:]]
    index = SuffixIndex([np.array(prompt + first), np.array([9, 9, *second]), np.array([9, 10, *third])])
    assert index.continuation(prompt + first[:20]).token == 30          # all three changed this line
    found = index.continuation(prompt + first[:40])
    assert (found.token, found.length, found.count, found.total) == (text[40], DEPTH, 1, 1)
    assert index.continuation([9, 9, *second[:50]]).token == text[50]   # the second turn's own, as written
    assert index.continuation(first[21:40]).token == 31   # no agreement past the query: 2 and 2, the latest


def test_where_the_index_and_lookup_would_draft_the_same_token_lookup_drafts():
    """A conversation's history is in the index too: where its longer match goes on as lookup's copy
    does, lookup drafts, on the acceptance it learned over every copy."""
    prompt, _ = _retried_answer()
    written = list(range(60, 70)) + [60] + prompt[:5]       # 11 tokens of its own, then it copies the prompt
    fixed = FixedPolicy(SpeculationParams(policy="fixed", draft_max=4))
    chain = default_chain(SuffixIndex([np.array(written + prompt[5:10])]), [], "default")
    chain.prepare(prompt, fixed)
    context = prompt + written
    assert chain.lookup.peek(context) == (5, prompt[5]) and chain.suffix.peek(context) == (DEPTH, prompt[5])
    draft = chain.draft(context, 4, fixed, None)
    assert draft.tokens == prompt[5:9] and set(draft.sources) == {LOOKUP}


def test_a_retried_answer_drafted_by_the_default_chain_is_the_main_models():
    answer = plain_greedy(MAIN, PROMPT, 40)
    index = SuffixIndex([np.array(PROMPT + answer)])
    events, _, _ = run(default_chain(index, [], "default"), spec=SpeculationParams(policy="fixed", draft_max=6))
    assert list(events[-1].token_ids) == answer
    assert dict((name, (d, a)) for name, d, a in events[-1].by_drafter)[SUFFIX][1] > 0


def test_a_continuation_the_policy_declined_still_teaches_how_often_such_a_match_is_right():
    """A retried answer matches its earlier one, seen once: a prior the CPU's costs do not draft on. The
    token the round produced says whether the declined continuation was right, so such a match earns drafts."""
    from tests.core.speculation.test_policy import AUTO, STEP, profile

    steps = [1, 1.95, 2.7, 3.4, 4.1, 4.6, 5.3, 6.0, 6.82]   # one thread of this project's CPU (batch-sizes JSON)
    policy = AutoPolicy(AUTO, profile([STEP * s for s in steps]))
    earlier = list(range(20, 50))
    drafter = SuffixDrafter(SuffixIndex([np.array(earlier)]), min_length=12)
    context = [5] + earlier[:16]
    declined = 0
    while not drafter.draft(context, 8, policy, sampler=None).tokens and declined < 60:
        declined += 1
        drafter.sync(context + [earlier[16]])          # not drafted, but it would have been right
    assert 1 <= declined < 60                          # the prior declined it; what it saw earned it drafts
    fresh = AutoPolicy(AUTO, profile([STEP * s for s in steps]))
    match = SuffixMatch(DEPTH, 1, 1)
    prior = fresh.acceptance.chance(SUFFIX, 0, match)
    drafter.draft(context, 8, fresh, sampler=None)
    drafter.sync(context + [3])                        # a wrong one counts against it
    assert fresh.acceptance.chance(SUFFIX, 0, match) < prior


class _Told(FixedPolicy):
    """Drafts ``draft_max`` tokens, and keeps what it is told of the tokens past them."""

    def __init__(self, draft_max: int):
        super().__init__(SpeculationParams(policy="fixed", draft_max=draft_max))
        self.told: list[tuple[int, bool]] = []

    def observe_undrafted(self, source, score, right, n=0):
        assert source == SUFFIX
        self.told.append((n, right))


def test_the_token_past_an_accepted_draft_is_told_as_the_next_of_such_a_draft():
    """A draft the policy cut at one token, every time right, would never show that the tokens after the
    first hold: the token past it is checked against what the round produced, as that draft's second."""
    earlier = list(range(20, 50))
    drafter, policy = SuffixDrafter(SuffixIndex([np.array(earlier)]), min_length=12), _Told(1)
    context = [5] + earlier[:16]
    assert drafter.draft(context, 8, policy, None).tokens == [earlier[16]]
    drafter.sync(context + earlier[16:18])            # accepted, then the main model's token: the index's
    drafter.draft(context, 8, policy, None)
    drafter.sync(context + [earlier[16], 3])          # accepted, then another token
    drafter.draft(context, 8, policy, None)
    drafter.sync(context + [3, 4])                    # rejected: the token past it says nothing
    assert policy.told == [(1, True), (1, False)]
