"""The speculative loop against a batch-invariant numpy reference model."""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
from collections import Counter

import numpy as np
import pytest

from app.core.errors import PromptTooLongError
from app.core.params import SamplingParams, SpeculationParams
from app.core.speculation.drafters import Draft, DraftModelDrafter
from app.core.speculation.events import Origin, Round, Started, StopReason, Summary, TokenPiece
from app.core.speculation.loop import SpeculativeGeneration
from app.core.speculation.policy import make_policy
from app.core.speculation.sampling import Sampler
from app.core.speculation.stats import GenerationStats
from tests.core.speculation.reference_model import ReferenceModel, ReferenceSession

MAIN = ReferenceModel(n_vocab=12, seed=0)
PROMPT = [1, 2, 3, 4]


class AlwaysWrongDrafter:
    """Proposes, deterministically, a token the main model never picks greedily."""

    name = "wrong"

    def __init__(self, model: ReferenceModel):
        self.model = model

    def prepare(self, prompt, policy):
        pass

    def draft(self, context, max_len, policy, sampler):
        ctx = list(context)
        out = Draft()
        for _ in range(max_len):
            token = (int(np.argmax(self.model.logits(ctx))) + 1) % self.model.n_vocab
            out.tokens.append(token)
            out.q.append(None)
            ctx.append(token)
        return out

    def sync(self, context):
        pass


class RandomDrafter(AlwaysWrongDrafter):
    def __init__(self, model, seed=0):
        super().__init__(model)
        self.rng = np.random.default_rng(seed)

    def draft(self, context, max_len, policy, sampler):
        n = int(self.rng.integers(0, max_len + 1))
        tokens = [int(t) for t in self.rng.integers(0, self.model.n_vocab, n)]
        return Draft(tokens, [None] * n)


def drafters():
    return {
        "same-model": lambda: DraftModelDrafter(ReferenceSession(MAIN)),
        "other-model": lambda: DraftModelDrafter(ReferenceSession(ReferenceModel(n_vocab=12, seed=7))),
        "always-wrong": lambda: AlwaysWrongDrafter(MAIN),
        "random": lambda: RandomDrafter(MAIN),
    }


def run(drafter, sampling=SamplingParams(max_tokens=40), spec=SpeculationParams(policy="fixed", draft_max=4), main_model=MAIN,
        prompt=PROMPT, cancel=None, on_round=None):
    session = ReferenceSession(main_model)
    gen = SpeculativeGeneration(session, main_model, drafter, make_policy(spec), sampling, spec.draft_min, cancel)
    events = []
    for event in gen.run(prompt):
        events.append(event)
        if isinstance(event, Round) and on_round:
            on_round(gen, event)
    return events, gen, session


def plain_greedy(model, prompt, n):
    ctx = list(prompt)
    for _ in range(n):
        ctx.append(int(np.argmax(model.logits(ctx))))
    return ctx[len(prompt):]


@pytest.mark.parametrize("name", list(drafters()))
@pytest.mark.parametrize("draft_max", [1, 3, 8])
def test_greedy_speculative_equals_main_model_alone(name, draft_max):
    events, _, _ = run(drafters()[name](), spec=SpeculationParams(policy="fixed", draft_max=draft_max))
    summary = events[-1]
    assert list(summary.token_ids) == plain_greedy(MAIN, PROMPT, 40)
    assert summary.stop_reason is StopReason.LENGTH


def test_same_model_draft_is_always_accepted_and_wrong_draft_never():
    same = run(drafters()["same-model"]())[0][-1]
    wrong = run(drafters()["always-wrong"]())[0][-1]
    assert same.drafted > 0 and same.accepted == same.drafted
    assert wrong.drafted > 0 and wrong.accepted == 0
    assert wrong.rounds == wrong.generated_tokens - 1  # one token per round, as without a draft


@pytest.mark.parametrize("name", list(drafters()))
def test_caches_hold_exactly_the_accepted_prefix_after_every_round(name):
    def check(gen, _round):
        assert gen.main.cached == gen.context[:-1]
        if isinstance(gen.drafter, DraftModelDrafter):
            cached = gen.drafter.session.cached
            assert cached == gen.context[: len(cached)]

    events, _, _ = run(drafters()[name](), on_round=check)
    assert any(isinstance(e, Round) for e in events)


@pytest.mark.parametrize("name", list(drafters()))
def test_counters_add_up(name):
    events, _, _ = run(drafters()[name](), sampling=SamplingParams(max_tokens=37))
    s: Summary = events[-1]
    rounds = [e for e in events if isinstance(e, Round)]
    pieces = [e for e in events if isinstance(e, TokenPiece)]
    assert s.generated_tokens == 37 == len(s.token_ids)
    assert s.generated_tokens == s.accepted + s.main_tokens
    assert s.drafted == sum(r.drafted for r in rounds) and s.accepted == sum(r.accepted for r in rounds)
    assert s.rounds == len(rounds)
    assert sum(len(p.token_ids) for p in pieces) == s.generated_tokens
    assert sum(1 for p in pieces for _ in p.token_ids if p.origin is Origin.DRAFT) == s.accepted
    assert sum(s.drafted_by_position) == s.drafted and sum(s.accepted_by_position) == s.accepted
    assert all(a <= d for a, d in zip(s.accepted_by_position, s.drafted_by_position))
    assert "".join(p.text for p in pieces) == s.text


@pytest.mark.parametrize("name", list(drafters()))
def test_the_events_give_the_summarys_numbers(name):
    """A consumer that counts the stream (the window, the server) gets what the Summary says."""
    events, _, _ = run(drafters()[name](), sampling=SamplingParams(max_tokens=37))
    started, *middle, summary = events
    assert isinstance(started, Started) and started.prompt_tokens == len(PROMPT) == summary.prompt_tokens
    assert started.cached_tokens == 0 == summary.prompt_tokens - summary.prompt_tokens_evaluated
    stamps = [e.at_s for e in events]
    assert stamps == sorted(stamps) and stamps[0] == 0.0 <= summary.ttft_s <= stamps[1]
    assert summary.at_s == pytest.approx(summary.ttft_s + summary.generation_s)
    stats = GenerationStats()
    for event in [started, *middle]:
        stats.add(event)
    assert (stats.generated_tokens, stats.drafted, stats.accepted, stats.main_tokens) == \
        (summary.generated_tokens, summary.drafted, summary.accepted, summary.main_tokens)
    assert (stats.rounds, stats.drafting_rounds) == (summary.rounds, summary.drafting_rounds)
    assert tuple(stats.drafted_by_position) == summary.drafted_by_position
    assert tuple(stats.accepted_by_position) == summary.accepted_by_position
    assert stats.acceptance_rate == summary.acceptance_rate
    assert stats.tokens_per_round == summary.tokens_per_round


class _Halves:
    """A scripted PartTracker: the first ten tokens are reasoning, the rest the answer."""

    def __init__(self):
        self.seen, self.counts = 0, Counter()

    def piece(self, text, n_tokens):
        part = "reasoning" if self.seen < 10 else "answer"
        self.seen += n_tokens
        self.counts[part] += n_tokens
        return part

    def take(self):
        part = max(self.counts, key=self.counts.get)
        self.counts = Counter()
        return part


def test_the_loops_events_are_final_rounds_name_their_part_and_the_summary_the_threads():
    spec = SpeculationParams(policy="fixed", draft_max=4)
    gen = SpeculativeGeneration(ReferenceSession(MAIN), MAIN, DraftModelDrafter(ReferenceSession(MAIN)),
                                make_policy(spec), SamplingParams(max_tokens=30), parts=_Halves(),
                                threads=lambda: (3, 2))
    *middle, summary = list(gen.run(PROMPT))
    assert [r.part for r in middle if isinstance(r, Round)][:2] == ["reasoning", "reasoning"]
    assert [r.part for r in middle if isinstance(r, Round)][-1] == "answer"
    assert (summary.threads, summary.draft_threads) == (3, 2)
    assert [row[0] for row in summary.by_part] == ["reasoning", "answer"]
    assert sum(row[3] for row in summary.by_part) == summary.generated_tokens - 1   # the tokens after the first
    stats = GenerationStats()
    for event in middle:
        stats.add(event)
    assert [row[:4] for row in stats.part_rows()] == [row[:4] for row in summary.by_part]


def test_draft_min_drops_short_drafts():
    events, _, _ = run(RandomDrafter(MAIN), spec=SpeculationParams(policy="fixed", draft_max=4, draft_min=3))
    assert all(r.drafted == 0 or r.drafted >= 3 for r in events if isinstance(r, Round))


def test_p_min_stops_drafting_when_the_draft_is_unsure():
    # a drafter whose distribution is flat is never sure enough for p_min 0.9
    flat = ReferenceModel(n_vocab=12, seed=3, sharpness=0.01)
    events, _, _ = run(DraftModelDrafter(ReferenceSession(flat)),
                       spec=SpeculationParams(draft_max=4, p_min=0.9, policy="pmin"))
    assert events[-1].drafted == 0
    sure = run(drafters()["same-model"](), spec=SpeculationParams(draft_max=4, p_min=0.0, policy="pmin"))[0][-1]
    assert sure.drafted > 0


def test_end_of_generation_token_stops_and_is_not_shown():
    ref = plain_greedy(MAIN, PROMPT, 40)
    eog = ref[10]
    model = ReferenceModel(n_vocab=12, seed=0, eog=eog)
    cut = ref.index(eog) + 1
    for name in ("same-model", "always-wrong"):
        drafter = DraftModelDrafter(ReferenceSession(model)) if name == "same-model" else AlwaysWrongDrafter(model)
        events, _, _ = run(drafter, main_model=model)
        s = events[-1]
        assert s.stop_reason is StopReason.EOG
        assert list(s.token_ids) == ref[:cut]
        assert s.generated_tokens == s.accepted + s.main_tokens
        assert s.text == "".join(model.piece(t).decode() for t in ref[: cut - 1])


class CopyingDrafter(AlwaysWrongDrafter):
    """Proposes the main model's own greedy continuation, on past an end-of-generation token: a copy
    of the prompt's last passage, which runs on into the chat template's next turn."""

    def draft(self, context, max_len, policy, sampler):
        tokens = plain_greedy(self.model, context, max_len)
        return Draft(tokens, [None] * len(tokens))


def test_a_draft_is_never_verified_past_an_end_of_generation_token():
    ref = plain_greedy(MAIN, PROMPT, 40)
    eog = ref[10]
    model = ReferenceModel(n_vocab=12, seed=0, eog=eog)
    events, _, session = run(CopyingDrafter(model), main_model=model, spec=SpeculationParams(policy="fixed", draft_max=8))
    s = events[-1]
    assert s.stop_reason is StopReason.EOG
    assert list(s.token_ids) == ref[:ref.index(eog) + 1]
    assert s.drafted == s.accepted   # every verified draft token counted: none after the end
    assert sum(session.batches[1:]) == len(s.token_ids)   # the prompt's batch, then nothing wasted


def test_stop_string_ends_the_text_before_it():
    full = run(drafters()["same-model"]())[0][-1].text
    stop = full[12:15]
    events, _, _ = run(drafters()["same-model"](), sampling=SamplingParams(max_tokens=40, stop=(stop,)))
    s = events[-1]
    assert s.stop_reason is StopReason.STOP_STRING
    assert s.text == full[: full.index(stop)]


def test_cancel_stops_at_the_next_round():
    cancel = threading.Event()
    seen = []

    def on_round(gen, r):
        seen.append(r)
        if r.index == 2:
            cancel.set()

    events, _, _ = run(drafters()["other-model"](), cancel=cancel, on_round=on_round)
    assert events[-1].stop_reason is StopReason.CANCEL
    assert len(seen) == 3


def test_prompt_longer_than_context_is_refused_before_decoding():
    session = ReferenceSession(MAIN, n_ctx=8)
    gen = SpeculativeGeneration(session, MAIN, None, make_policy(SpeculationParams(policy="fixed")), SamplingParams())
    with pytest.raises(PromptTooLongError, match="8"):
        next(gen.run(list(range(8))))
    assert session.batches == []


def test_generation_stops_when_the_context_is_full():
    session = ReferenceSession(MAIN, n_ctx=20)
    drafter = DraftModelDrafter(ReferenceSession(MAIN, n_ctx=20))
    gen = SpeculativeGeneration(session, MAIN, drafter, make_policy(SpeculationParams(policy="fixed", draft_max=8)),
                                SamplingParams(max_tokens=100))
    s = list(gen.run(PROMPT))[-1]
    assert s.stop_reason is StopReason.CONTEXT
    assert len(PROMPT) + s.generated_tokens == 20
    assert list(s.token_ids) == plain_greedy(MAIN, PROMPT, s.generated_tokens)


# --- sampling keeps the main model's distribution ------------------------------------------------

SMALL = ReferenceModel(n_vocab=3, seed=11, sharpness=1.0)
DRAFT_SMALL = ReferenceModel(n_vocab=3, seed=12, sharpness=1.5)
SAMPLING = dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, max_tokens=4)


def exact_distribution(model, prompt, n, params):
    sampler = Sampler(params)
    dist = {}
    for seq in itertools.product(range(model.n_vocab), repeat=n):
        ctx, p = list(prompt), 1.0
        for t in seq:
            p *= sampler.probs(model.logits(ctx))[t]
            ctx.append(t)
        dist[seq] = p
    return dist


def chi2_critical(df: int, alpha_z: float = 3.09) -> float:
    """Wilson-Hilferty approximation of the chi-square quantile (z = 3.09: alpha = 0.001)."""
    return df * (1 - 2 / (9 * df) + alpha_z * math.sqrt(2 / (9 * df))) ** 3


def sample_many(make_drafter, n_runs, sampler_class=Sampler, keyed=False):
    """``n_runs`` answers, each with a generator of its own: unseeded (speculative sampling, its random
    generator seeded by the run's number) or seeded (keyed by position, the seed the run's number)."""
    counts = Counter()
    for seed in range(n_runs):
        params = SamplingParams(seed=seed if keyed else None, **SAMPLING)
        session = ReferenceSession(SMALL)
        gen = SpeculativeGeneration(session, SMALL, make_drafter(), make_policy(SpeculationParams(policy="fixed", draft_max=3)),
                                    params)
        gen.sampler = sampler_class(params)
        gen.sampler.rng = np.random.default_rng(seed)
        counts[tuple(list(gen.run([0, 1]))[-1].token_ids)] += 1
    return counts


def chi2(counts, dist, n_runs):
    return sum((counts.get(seq, 0) - n_runs * p) ** 2 / (n_runs * p) for seq, p in dist.items())


@pytest.mark.parametrize("name,make_drafter", [
    ("sampled draft model", lambda: DraftModelDrafter(ReferenceSession(DRAFT_SMALL))),
    ("deterministic wrong drafter", lambda: AlwaysWrongDrafter(SMALL)),
])
@pytest.mark.parametrize("keyed", [False, True], ids=["unseeded", "seeded"])
def test_speculative_sampling_keeps_the_main_models_distribution(name, make_drafter, keyed):
    n_runs = 6000
    dist = exact_distribution(SMALL, [0, 1], 4, SamplingParams(**SAMPLING))
    counts = sample_many(make_drafter, n_runs, keyed=keyed)
    assert sum(counts.values()) == n_runs
    assert chi2(counts, dist, n_runs) < chi2_critical(len(dist) - 1)


def test_a_seeded_answer_is_the_same_whatever_drafts_it_and_however_much():
    """Keyed by position (keyed.py), a seed gives one answer: without a drafter, with a sampled draft
    model or a drafter always wrong, drafting 1 or 6 tokens a round (as the auto policy might)."""
    model = ReferenceModel(n_vocab=12, seed=5, sharpness=1.0)
    draft = ReferenceModel(n_vocab=12, seed=6, sharpness=1.0)
    sampling = SamplingParams(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, max_tokens=40, seed=1234)
    answers = set()
    for make in (lambda: None, lambda: DraftModelDrafter(ReferenceSession(draft)), lambda: AlwaysWrongDrafter(model)):
        for draft_max in (1, 6):
            events, _, _ = run(make(), sampling=sampling, spec=SpeculationParams(policy="fixed", draft_max=draft_max),
                               main_model=model)
            answers.add(tuple(events[-1].token_ids))
    assert len(answers) == 1
    other = run(None, sampling=dataclasses.replace(sampling, seed=99), main_model=model)[0][-1]
    assert tuple(other.token_ids) not in answers


class AcceptEverything(Sampler):
    """A broken acceptance rule: keeps every drafted token."""

    def _verify_sampled(self, rows, draft_tokens, draft_q, refused_q=None):
        return len(draft_tokens), self.sample(rows[len(draft_tokens)])


def test_the_distribution_test_detects_a_broken_acceptance_rule():
    n_runs = 6000
    dist = exact_distribution(SMALL, [0, 1], 4, SamplingParams(**SAMPLING))
    counts = sample_many(lambda: DraftModelDrafter(ReferenceSession(DRAFT_SMALL)), n_runs, AcceptEverything)
    assert chi2(counts, dist, n_runs) > chi2_critical(len(dist) - 1)


class _Lines(ReferenceModel):
    """The reference model with token 0 written as a line break and token 1 as a space."""

    def piece(self, token: int) -> bytes:
        return {0: b"\n", 1: b" "}.get(token, super().piece(token))


def test_n_indent_and_the_time_limit_end_the_answer_where_llama_server_does(monkeypatch):
    import app.core.speculation.loop as loop_module

    model = _Lines(n_vocab=12, seed=7)   # its second line starts with a space
    full = run(DraftModelDrafter(ReferenceSession(model)), main_model=model,
               sampling=SamplingParams(max_tokens=60))[0][-1].text
    line = full.index("\n") + 1            # the second line starts here
    assert line < len(full.rstrip("\n ")), full   # the model writes a second line: the test can see the cut
    indented = run(DraftModelDrafter(ReferenceSession(model)), main_model=model,
                   sampling=SamplingParams(max_tokens=60, n_indent=8))[0][-1]
    spaces = len(full[line:]) - len(full[line:].lstrip(" "))
    assert indented.text == full[:line + spaces] and indented.stop_reason is StopReason.LENGTH

    clock = itertools.count()   # every reading of the clock is a second later: the limit is always past
    monkeypatch.setattr(loop_module.time, "perf_counter", lambda: float(next(clock)))
    timed = run(DraftModelDrafter(ReferenceSession(model)), main_model=model,
                sampling=SamplingParams(max_tokens=60, max_predict_ms=1))[0][-1]
    assert timed.text == full[:line] and timed.stop_reason is StopReason.LENGTH


def _top_two(ids, z):
    """A stand-in for llama.cpp's infill sampler: keeps the two likeliest candidates."""
    return ids[np.argsort(-z[ids], kind="stable")[:2]], None


def test_speculative_sampling_keeps_a_custom_chains_distribution():
    """llama-server's samplers (temperature first, then an infill-like filter): verification keeps the
    chain's distribution exactly, with a sampled draft model."""
    n_runs = 6000
    params = dict(SAMPLING, samplers=("temperature", "infill"))
    expected = {}
    ref = Sampler(SamplingParams(**params), infill=_top_two)
    for seq in itertools.product(range(SMALL.n_vocab), repeat=4):
        ctx, p = [0, 1], 1.0
        for t in seq:
            p *= ref.probs(SMALL.logits(ctx))[t]
            ctx.append(t)
        if p > 0:
            expected[seq] = p
    counts = Counter()
    for seed in range(n_runs):
        sampling = SamplingParams(seed=seed, **params)
        gen = SpeculativeGeneration(ReferenceSession(SMALL), SMALL, DraftModelDrafter(ReferenceSession(DRAFT_SMALL)),
                                    make_policy(SpeculationParams(policy="fixed", draft_max=3)), sampling,
                                    infill=_top_two)
        counts[tuple(list(gen.run([0, 1]))[-1].token_ids)] += 1
    assert set(counts) <= set(expected)   # never a token the chain leaves out
    assert chi2(counts, expected, n_runs) < chi2_critical(len(expected) - 1)
