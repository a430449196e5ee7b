"""A draft model of another vocabulary (app/core/speculation/crossvocab.py) on the numpy reference model:
greedy answers are the main model's own, whether the draft is random, steered to the answer or unable
to spell part of it; sampled answers follow the main model's distribution (the statistical test of
test_loop.py, with the draft sampling on the shared tokens)."""

from __future__ import annotations

import pytest

from app.core.gguf.shared_vocab import BYTE, NORMAL, SharedVocabulary
from app.core.params import SamplingParams, SpeculationParams
from app.core.speculation.acceptance import CROSS, MODEL, AcceptanceModel
from app.core.speculation.costmodel import CostProfile
from app.core.speculation.crossvocab import CrossVocabDrafter, continuation, draft_prompt
from app.core.speculation.loop import SpeculativeGeneration
from app.core.speculation.policy import AutoPolicy, make_policy
from tests.core.speculation.crossvocab_steering import FakeVocabulary, SteeredDraft
from tests.core.speculation.reference_model import ReferenceModel, ReferenceSession
from tests.core.speculation.test_loop import (MAIN, PROMPT, SAMPLING, SMALL, AcceptEverything, chi2, chi2_critical,
                                              exact_distribution, plain_greedy, sample_many)

MAIN_VOCAB = FakeVocabulary([MAIN.piece(t) for t in range(MAIN.n_vocab)])      # a .. l
# another vocabulary over the same letters: words across the main model's tokens, some single letters
# elsewhere, one spelt twice, and its own end-of-generation token
DRAFT_PIECES = [b"ba", b"c", b"a", b"b", b"dd", b"e", b"f", b"g", b"h", b"ij", b"i", b"j", b"k", b"l", b"d",
                b"efg", b"a", b"<eos>"]
DRAFT_VOCAB = FakeVocabulary(DRAFT_PIECES, eog=len(DRAFT_PIECES) - 1)
DRAFT = ReferenceModel(n_vocab=len(DRAFT_PIECES), seed=5)


def shared(main: FakeVocabulary, draft: FakeVocabulary) -> SharedVocabulary:
    return SharedVocabulary.from_token_bytes([main.piece(t) or None for t in range(main.n_vocab)],
                                             [draft.piece(t) or None for t in range(draft.n_vocab)])


def cross(session, draft_vocab=DRAFT_VOCAB, main_vocab=MAIN_VOCAB) -> CrossVocabDrafter:
    return CrossVocabDrafter(session, main_vocab, draft_vocab, shared(main_vocab, draft_vocab))


def run(drafter, draft_max: int, max_tokens: int = 40):
    gen = SpeculativeGeneration(ReferenceSession(MAIN), MAIN, drafter,
                                make_policy(SpeculationParams(policy="fixed", draft_max=draft_max)),
                                SamplingParams(max_tokens=max_tokens))
    return list(gen.run(PROMPT))[-1]


def steered(draft_vocab=DRAFT_VOCAB, wrong_every: int = 4, n: int = 40) -> SteeredDraft:
    answer = b"".join(MAIN.piece(t) for t in plain_greedy(MAIN, PROMPT, n))
    start = len(draft_prompt(MAIN_VOCAB, draft_vocab, PROMPT))
    model = ReferenceModel(n_vocab=draft_vocab.n_vocab, seed=5)
    return SteeredDraft(ReferenceSession(model), draft_vocab, start, answer, draft_vocab.eog, wrong_every)


# --- text at the seam ------------------------------------------------------------------------------

def test_the_seam_is_read_as_the_tokenizer_merges_it():
    vocab = FakeVocabulary([b"a", b"b", b"c", b"x", b"ab", "\u00e9".encode(), b"z"])
    assert continuation(vocab, b"x", b"abc") == ([4, 2], 3)        # read with "x": "ab" and "c"
    assert continuation(vocab, b"a", b"bc") == ([], 0)             # "ab" would straddle the seam
    assert continuation(vocab, b"", b"bc") == ([1, 2], 2)
    # half a character: the text stops before it; a character split by the seam is no seam
    assert continuation(vocab, b"x", "z\u00e9".encode()[:2]) == ([6], 1)
    assert continuation(vocab, "a\u00e9".encode()[:2], "\u00e9z".encode()[1:]) == ([], 0)
    assert continuation(vocab, b"\xff", b"ab") == ([4], 2)          # bytes that are no text are left out


def test_shared_tokens_map_by_text_and_prefer_a_word_to_a_byte():
    main = [b"a", None, b"ab", b"a", b"c"]
    mapped = SharedVocabulary.from_token_bytes(main, [b"ab", b"a", None, b"zz", b"c", b"a"],
                                               main_types=(BYTE, NORMAL, NORMAL, NORMAL, NORMAL))
    assert mapped.draft_to_main.tolist() == [2, 3, -1, -1, 4, 3]   # "a": the word (3), not the byte token (0)
    assert mapped.shared == 4 and mapped.draft_byte_tokens == {ord("a"): 1, ord("c"): 4}


# --- greedy: the main model's own answer -----------------------------------------------------------

@pytest.mark.parametrize("draft_max", [1, 3, 8])
def test_greedy_answer_is_the_main_models_with_a_random_draft_of_another_vocabulary(draft_max):
    summary = run(cross(ReferenceSession(DRAFT)), draft_max)
    assert list(summary.token_ids) == plain_greedy(MAIN, PROMPT, 40)
    assert summary.drafted > 0 and dict((n, (d, a)) for n, d, a in summary.by_drafter).keys() == {CROSS}


@pytest.mark.parametrize("draft_max", [1, 3, 8])
def test_greedy_answer_is_the_main_models_with_a_draft_steered_to_it(draft_max):
    session = steered()
    summary = run(cross(session), draft_max)
    assert list(summary.token_ids) == plain_greedy(MAIN, PROMPT, 40)
    # the draft's words ("ba", "efg", ...) became the main model's letters, and were accepted
    assert summary.accepted > 0.5 * summary.drafted and summary.accepted < summary.drafted
    assert session.wrong > 0


def test_a_draft_that_cannot_spell_the_answer_drafts_nothing_it_cannot_follow():
    """Without a token for "k", the draft cannot spell an answer past a "k": it stops drafting there
    (its drafts must spell what it has not read) and the answer stays the main model's."""
    pieces = [p for p in DRAFT_PIECES if p != b"k"]
    vocab = FakeVocabulary(pieces, eog=len(pieces) - 1)
    answer = plain_greedy(MAIN, PROMPT, 40)
    summary = run(cross(steered(vocab, wrong_every=0), vocab), 4)
    assert list(summary.token_ids) == answer
    assert MAIN_VOCAB.tokenize("k")[0] in answer and summary.accepted > 0


def test_the_drafts_tokens_follow_the_answers_text():
    session = steered(wrong_every=3)
    drafter = cross(session)
    summary = run(drafter, 4)
    text = b"".join(MAIN.piece(t) for t in summary.token_ids)
    spelt = b"".join(DRAFT_VOCAB.piece(t) for t in drafter._tokens)
    assert text.startswith(spelt) and len(text) - len(spelt) <= 3   # all but what came after its last draft
    assert drafter.context[:len(drafter._prompt)] == DRAFT_VOCAB.tokenize("bcde")


# --- sampling: Token-Level Intersection keeps the main model's distribution ------------------------

SMALL_VOCAB = FakeVocabulary([b"a", b"b", b"c"])
# the draft's words "ab", "x" and "ca" are no main token (its samples are restricted to the others),
# and "a" is two of its tokens
SMALL_DRAFT_VOCAB = FakeVocabulary([b"b", b"a", b"ab", b"x", b"a", b"ca", b"c"])
SMALL_DRAFT = ReferenceModel(n_vocab=7, seed=12, sharpness=1.5)


def small_cross() -> CrossVocabDrafter:
    return cross(ReferenceSession(SMALL_DRAFT), SMALL_DRAFT_VOCAB, SMALL_VOCAB)


def test_sampling_with_a_draft_of_another_vocabulary_keeps_the_main_models_distribution():
    n_runs = 6000
    dist = exact_distribution(SMALL, [0, 1], 4, SamplingParams(**SAMPLING))
    counts = sample_many(small_cross, n_runs)
    assert sum(counts.values()) == n_runs
    assert chi2(counts, dist, n_runs) < chi2_critical(len(dist) - 1)


def test_the_distribution_test_detects_a_broken_rule_with_a_draft_of_another_vocabulary():
    n_runs = 6000
    dist = exact_distribution(SMALL, [0, 1], 4, SamplingParams(**SAMPLING))
    counts = sample_many(small_cross, n_runs, AcceptEverything)
    assert chi2(counts, dist, n_runs) > chi2_critical(len(dist) - 1)


def test_a_sampled_draft_proposes_shared_tokens_with_their_probability_on_the_main_vocabulary():
    drafter = small_cross()
    policy = make_policy(SpeculationParams(policy="fixed", draft_max=3))
    gen = SpeculativeGeneration(ReferenceSession(SMALL), SMALL, drafter, policy, SamplingParams(seed=3, **SAMPLING))
    sampler, context = gen.sampler, [0, 1]
    drafter.prepare(context, policy)
    draft = drafter.draft(context + [2], 3, policy, sampler)
    assert len(draft) == 3
    for token, q in zip(draft.tokens, draft.q):
        assert q.shape == (3,) and q.sum() == pytest.approx(1.0) and q[token] > 0
    assert drafter._drafted and all(SMALL_DRAFT_VOCAB.piece(d) == SMALL_VOCAB.piece(m)
                                    for d, m in zip(drafter._drafted, draft.tokens))


# --- the policy weighs it as a draft model and learns its acceptance apart --------------------------

def test_the_auto_policy_costs_it_as_a_draft_model_and_learns_its_acceptance_apart():
    profile = CostProfile(key={}, main_batch_s=[0.02 * (1 + 0.1 * i) for i in range(9)], draft_step_s=0.002)
    policy = AutoPolicy(SpeculationParams(draft_max=8), profile)
    assert policy.token_cost(CROSS) == policy.token_cost(MODEL) == 0.002
    assert policy.may_draft(CROSS) and policy.draft_length(CROSS) == 8
    assert AcceptanceModel.bucket(CROSS, 0, 0.55) != AcceptanceModel.bucket(MODEL, 0, 0.55)
    acceptance = AcceptanceModel()
    for _ in range(50):
        acceptance.update(CROSS, 0, 0.55, False)
    assert acceptance.chance(CROSS, 0, 0.55) < 0.1 and acceptance.chance(MODEL, 0, 0.55) == pytest.approx(0.55)
    slow = AutoPolicy(SpeculationParams(draft_max=8), CostProfile(key={}, main_batch_s=profile.main_batch_s,
                                                                  draft_step_s=0.05))
    assert not slow.may_draft(CROSS) and slow.draft_length(CROSS) == 0   # a step dearer than the main model's
