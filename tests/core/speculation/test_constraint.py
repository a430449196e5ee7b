"""A grammar over the main model's distribution under speculation: the answer always follows it, greedy
answers are the constrained main model's own, and sampled answers keep the constrained (masked and
renormalised) distribution exactly, with and without a drafter."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest

from app.core.params import SamplingParams, SpeculationParams
from app.core.speculation.constraint import DeadEndError, GrammarConstraint
from app.core.speculation.drafters import Draft, DraftModelDrafter, PromptLookupDrafter
from app.core.speculation.loop import SpeculativeGeneration
from app.core.speculation.policy import make_policy
from app.core.speculation.sampling import Sampler
from tests.core.speculation.reference_model import ReferenceModel, ReferenceSession
from tests.core.speculation.test_loop import AlwaysWrongDrafter, chi2, chi2_critical


class NoRepeat:
    """A grammar over token ids: no token twice in a row (a state is the last token). Each state keeps
    the tokens accepted along its line, and ``closed`` collects them as states are closed: the last
    closed is the answer's, so a test sees that the state followed the kept tokens and only them."""

    def __init__(self, last: int | None = None, history: tuple = (), closed: list | None = None):
        self.last = last
        self.history = history
        self.closed = closed if closed is not None else []

    def allowed(self, ids):
        return np.asarray(ids) != (-1 if self.last is None else self.last)

    def allows(self, token):
        return token != self.last

    def accept(self, token):
        assert token != self.last, "a token the grammar forbids was accepted"
        self.last = token
        self.history += (token,)

    def clone(self):
        return type(self)(self.last, self.history, self.closed)

    def close(self):
        self.closed.append(self.history)


def masked_probs(model, ctx, last, params):
    logits = model.logits(ctx).copy()
    if last is not None:
        logits[last] = -np.inf
    return Sampler(params).probs(logits)


def exact_constrained(model, prompt, n, params):
    """Every answer of ``n`` tokens with its probability under the no-repeat grammar."""
    dist = {}
    for seq in itertools.product(range(model.n_vocab), repeat=n):
        ctx, p, last = list(prompt), 1.0, None
        for t in seq:
            p *= masked_probs(model, ctx, last, params)[t]
            ctx.append(t)
            last = t
        if p > 0:
            dist[seq] = p
    return dist


SMALL = ReferenceModel(n_vocab=4, seed=11, sharpness=1.0)
# a draft that likes repeating itself: the grammar refuses many of its tokens
REPEATER = ReferenceModel(n_vocab=4, seed=12, sharpness=1.5)
REPEATER.table[np.arange(4), np.arange(4), np.arange(4)] += 4.0
SAMPLING = dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, max_tokens=3)


def generate(model, drafter, params, grammar, prompt=(0, 1), draft_max=3):
    gen = SpeculativeGeneration(ReferenceSession(model), model, drafter,
                                make_policy(SpeculationParams(policy="fixed", draft_max=draft_max)), params,
                                constraint=GrammarConstraint(grammar, model))
    return list(gen.run(list(prompt)))[-1]


DRAFTERS = {
    "no drafter": lambda: None,
    "sampled draft model": lambda: DraftModelDrafter(ReferenceSession(REPEATER)),
    "deterministic wrong drafter": lambda: AlwaysWrongDrafter(SMALL),
    "prompt lookup": lambda: PromptLookupDrafter(),
}


class IgnoresTheRefusedToken(Sampler):
    """A broken rule: a draft cut by the grammar continues from p, as if nothing had been drafted."""

    def verify(self, rows, draft_tokens, draft_q, constraint=None, refused_q=None):
        return super().verify(rows, draft_tokens, draft_q, constraint, None)


def sample_many(make_drafter, n_runs, sampler_class=Sampler, keyed=False):
    """Unseeded runs (speculative sampling, each run's generator seeded by its number), or seeded ones
    (keyed by position, the seed the run's number)."""
    counts = Counter()
    for seed in range(n_runs):
        params = SamplingParams(seed=seed if keyed else None, **SAMPLING)
        gen = SpeculativeGeneration(ReferenceSession(SMALL), SMALL, make_drafter(),
                                    make_policy(SpeculationParams(policy="fixed", draft_max=3)), params,
                                    constraint=GrammarConstraint(NoRepeat(), SMALL))
        gen.sampler = sampler_class(params)
        gen.sampler.rng = np.random.default_rng(seed)
        counts[tuple(list(gen.run([0, 1]))[-1].token_ids)] += 1
    return counts


@pytest.mark.parametrize("keyed", [False, True], ids=["unseeded", "seeded"])
@pytest.mark.parametrize("name", list(DRAFTERS))
def test_sampled_answers_keep_the_constrained_distribution_exactly(name, keyed):
    """The first three tokens' joint distribution, chi-square against the masked-and-renormalised
    main model's, with each drafter and without one (alpha 0.001)."""
    n_runs = 5000
    dist = exact_constrained(SMALL, [0, 1], 3, SamplingParams(**SAMPLING))
    counts = sample_many(DRAFTERS[name], n_runs, keyed=keyed)
    assert all(seq in dist for seq in counts), "an answer broke the grammar"
    assert chi2(counts, dist, n_runs) < chi2_critical(len(dist) - 1)


def test_the_distribution_test_detects_a_cut_draft_that_forgets_its_refused_token():
    """Dropping a refused draft token and drawing its replacement from p (not from the residual of
    p and the draft's q) skews the answer: the test above would see it."""
    n_runs = 5000
    dist = exact_constrained(SMALL, [0, 1], 3, SamplingParams(**SAMPLING))
    counts = sample_many(DRAFTERS["sampled draft model"], n_runs, IgnoresTheRefusedToken)
    assert chi2(counts, dist, n_runs) > chi2_critical(len(dist) - 1)


@pytest.mark.parametrize("name", list(DRAFTERS))
def test_greedy_answers_are_the_constrained_main_models_own(name):
    model = ReferenceModel(n_vocab=6, seed=3, sharpness=3.0)
    model.table[:, :, :] += 5.0 * np.eye(6)[None, :, :]   # alone, it would repeat its last token
    params = SamplingParams(temperature=0.0, max_tokens=30)
    expected, ctx, last = [], [0, 1], None
    for _ in range(30):
        token = int(np.argmax(masked_probs(model, ctx, last, SamplingParams(temperature=1.0, top_k=0, top_p=1.0))))
        expected.append(token)
        ctx.append(token)
        last = token
    drafter = {"sampled draft model": lambda: DraftModelDrafter(ReferenceSession(model)),
               "deterministic wrong drafter": lambda: AlwaysWrongDrafter(model)}.get(name, DRAFTERS[name])
    answer = NoRepeat()
    summary = generate(model, drafter(), params, answer)
    assert list(summary.token_ids) == expected
    assert list(answer.closed[-1]) == expected   # the grammar's state followed the kept tokens, and only them


def test_a_draft_is_cut_at_the_first_token_the_grammar_refuses_and_walked_on_copies():
    answer = NoRepeat()
    constraint = GrammarConstraint(answer, SMALL)
    draft = Draft([2, 3, 3, 1], [None] * 4, ["x"] * 4, [0.5] * 4)
    cut, refused = constraint.follow(draft)
    assert cut.tokens == [2, 3] and refused is None and answer.history == ()
    q = np.full(4, 0.25)
    cut, refused = constraint.follow(Draft([1, 1], [q, q], ["x"] * 2, [0.5] * 2))
    assert cut.tokens == [1] and refused is q
    constraint.settle(1, 2)             # kept draft[:1] == [1], then 2
    constraint.close()
    assert answer.history == () and answer.closed[-1] == (1, 2)   # walked on copies; the kept one went on


@pytest.mark.parametrize("top_k,greedy", [(1, True), (40, False), (7, False), (0, False)])
def test_restricting_to_the_best_allowed_tokens_gives_the_fully_masked_distribution(top_k, greedy):
    """``restrict`` asks about the best candidates first (64, then 1024, ...): what the sampler draws
    from is the same as masking the whole row, for every top-k (0: the whole row is masked)."""
    rng = np.random.default_rng(top_k)
    row = (rng.standard_normal(5000) * 2).astype(np.float32)
    banned = set(np.argsort(-row)[:100:2].tolist())   # half of the best 100 are forbidden

    class Banned(NoRepeat):
        def allowed(self, ids):
            return np.array([int(i) not in banned for i in ids])

    params = SamplingParams(temperature=0.0 if greedy else 0.8, top_k=top_k, top_p=0.9, min_p=0.01)
    sampler = Sampler(params)
    full = row.copy()
    full[list(banned)] = -np.inf
    restricted = GrammarConstraint(Banned(), SMALL).restrict(0, row, sampler.keeps)
    if greedy:
        assert int(np.argmax(restricted)) == int(np.argmax(full))
    else:
        np.testing.assert_allclose(sampler.probs(restricted), sampler.probs(full), atol=1e-9)


def test_a_grammar_that_allows_nothing_ends_the_answer_with_an_error_saying_so():
    class Nothing(NoRepeat):
        def allowed(self, ids):
            return np.zeros(len(ids), dtype=bool)

    with pytest.raises(DeadEndError):
        GrammarConstraint(Nothing(), SMALL).restrict(0, SMALL.logits([0]), 1)
    summary = generate(SMALL, None, SamplingParams(temperature=0.0, max_tokens=5), Nothing())
    assert summary.error and "grammar allows no token" in summary.error


def test_a_token_logit_bias_bans_is_never_taken_even_where_the_grammar_allows_only_it():
    """ignore_eos bans the end-of-generation token; a grammar that then allows only it is a dead end,
    never a draw from a row of -inf (which would pick a token the grammar forbids)."""
    row = SMALL.logits([0]).copy()
    only_two = type("OnlyTwo", (NoRepeat,), {"allowed": lambda self, ids: np.asarray(ids) == 2})()
    row[2] = -np.inf
    with pytest.raises(DeadEndError, match="logit_bias"):
        GrammarConstraint(only_two, SMALL).restrict(0, row, 1)
    row[1] = -np.inf
    either = type("Either", (NoRepeat,), {"allowed": lambda self, ids: np.isin(ids, [1, 3])})()
    assert np.flatnonzero(np.isfinite(GrammarConstraint(either, SMALL).restrict(0, row, 0))).tolist() == [3]
