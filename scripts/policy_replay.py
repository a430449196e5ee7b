"""Tune the auto policy in seconds instead of benchmark hours: record once, replay many times.

`record` decodes each prompt greedily with the main model alone, one token at a time, and notes for
every answer position the main model's top probability, and the draft model's greedy token and top
probability there (the draft reads the main model's answer, as it does while its drafts are being
accepted). `replay` runs the real drafters and policy (app.core.speculation.drafters, app.core.speculation.policy) over those
answers with a cost profile (`quickdraft calibrate` writes one under the cache dir), charging each
round the profile's times: drafting, the draft model's catch-up on tokens it skipped, verification.
It prints the speedup per prompt against the main model alone under the same profile. A profile from
another machine replays what the policy would do there.

    .venv/bin/python scripts/policy_replay.py record MAIN.gguf DRAFT.gguf --prompts ../shared/prompts/*.jsonl \
        -o traces.json
    .venv/bin/python scripts/policy_replay.py replay traces.json PROFILE.json --drafter lookup+model
    .venv/bin/python scripts/policy_replay.py bound traces.json PROFILE.json

The suffix index (app/core/speculation/suffix_index.py) is replayed as the engine feeds it:
`--suffix-index empty` starts it empty and feeds it each replayed answer (its prompt and tokens, one
document) after it is replayed, so later answers draft from earlier ones; `--suffix-index PATH` starts
it from a real index's log (`tokens.log` under the data folder's `suffix-index/<model>/`: the record of
past documents) and feeds it likewise. `--drafter suffix` replays it alone, `--drafter lookup+model`
with it the default (lookup, else the index, else the model), each suffix round charged SUFFIX_STEP_S
per token looked up.

    .venv/bin/python scripts/policy_replay.py replay traces.json PROFILE.json --drafter suffix --suffix-index empty

`bound` is what prompt lookup could reach at best on that profile: an oracle that knows before each round
how many of lookup's proposed tokens will be accepted and drafts exactly the length that finishes the
answer soonest (dynamic programming over the answer). No policy can beat it with this drafter. `replay`
prints each prompt's fraction of that bound too ("of bound"), and its median per category.
`replay --rates traces` gives the policy the traces' own acceptance rates per bucket from the start
instead of learning them: it knows how often a kind of drafted token is right, not which ones will be,
so what separates it from the bound is foresight, and what separates the learned policy from it is
learning. `replay --rates answer` replays each answer with that answer's own rates (in sample, so
they carry some foresight: an answer that will repeat a block of itself has a high rate for the
matches that repeat it). It is a reference, not a bound: a bucket's rate says how often its drafts
are right, not which, and where even an answer's own rates stay under a fraction of the bound, the
buckets cannot tell the drafts that will be accepted from the others.

The machine can drift: `--drift 2x@50%` makes every cost twice the profile's from half-way through the
replayed tokens on (another program taking a core). The policy then learns its costs from the rounds
as the app does (`--learn`, implied by `--drift` and `--cold`), starting from the profile (a warm
start from what is now a stale profile) or, with `--cold`, from the prior a fresh install starts from;
the main model alone and the bound are charged the drifting costs too. `--start-from OTHER.json` starts
the learning from another profile than the machine's (one stored while the machine was busier).
`--noise 0.1 --seed N` makes every batch the replay decodes vary in time as on a shared machine (the
policy learns from those times; the references keep the profile's): how much of its fraction of the
bound a policy keeps when what it measures is noisy.

    .venv/bin/python scripts/policy_replay.py replay traces.json PROFILE.json --drafter lookup --drift 2x@50%

Greedy only, and the replayed answer is the recorded one: a replay cannot show the batch-numerics
near-ties that `bench`'s "same" column reports. The draft model is a stand-in that gives the recorded
guesses; after its first wrong token its guesses are never right and keep the scores of its
right-context guesses, which only changes where a draft is cut.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.cli.bench import load_prompts  # noqa: E402
from app.core.params import DrafterKind, ModelParams, PolicyName, SamplingParams, SpeculationParams  # noqa: E402
from app.core.speculation.acceptance import HEADS, LOOKUP, MODEL, SUFFIX, AcceptanceModel  # noqa: E402
from app.core.speculation.calibration import round_robin_medians  # noqa: E402
from app.core.speculation.costmodel import SUFFIX_STEP_S, CostModel, CostProfile  # noqa: E402
from app.core.speculation.drafters import (Draft, DraftModelDrafter, Drafter, LookupThenModelDrafter,  # noqa: E402
                               PromptLookupDrafter)
from app.core.speculation.policy import make_policy
from app.core.speculation.sampling import Sampler, top_probability  # noqa: E402
from app.core.speculation.suffix_drafter import SuffixDrafter, default_chain  # noqa: E402
from app.core.speculation.suffix_index import SuffixIndex  # noqa: E402
from app.core.speculation.suffix_store import read_log  # noqa: E402


# -- record -----------------------------------------------------------------------------------------

def record(args: argparse.Namespace) -> int:
    from app.core.chat.prompt import prompt_tokens
    from app.core.llama.binding import LlamaModel, LlamaSession

    from app.core.gguf.info import read_gguf_info

    from app.core.gguf.pair_check import vocabulary_differences

    if vocabulary_differences(read_gguf_info(args.main), read_gguf_info(args.draft)):
        raise SystemExit("error: the draft's vocabulary is another: scripts/crossvocab_bench.py --json writes "
                         "its traces in this form")
    main_model = LlamaModel(ModelParams(args.main))
    main = LlamaSession(main_model, args.ctx, args.threads)
    draft = LlamaSession(LlamaModel(ModelParams(args.draft)), args.ctx, args.threads)
    traces = []
    for prompt_id, messages in load_prompts(args.prompts):
        prompt = prompt_tokens(main_model, messages).tokens
        tokens, main_p = greedy_answer(main, main_model, prompt, args.n_predict)
        draft_tokens, draft_p = draft_guesses(draft, prompt, tokens)
        traces.append(dict(id=prompt_id, prompt=prompt, tokens=tokens, main_p=main_p,
                           draft_tokens=draft_tokens, draft_p=draft_p))
        agree = np.mean([a == b for a, b in zip(draft_tokens, tokens)])
        print(f"{prompt_id:10s} {len(tokens):4d} tokens  draft agrees {agree:.0%}  main sure {np.mean(main_p):.2f}")
    catch_up = draft_batch_times(draft, traces[0]["prompt"])
    Path(args.output).write_text(json.dumps(dict(traces=traces, draft_batch_s=catch_up)))
    print(f"wrote {args.output}")
    return 0


def greedy_answer(session, model, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    session.truncate(0)
    logits = session.eval(prompt)[-1]
    tokens, sure = [], []
    for _ in range(n):
        token = int(np.argmax(logits))
        tokens.append(token)
        sure.append(top_probability(logits))
        if model.is_eog(token):
            break
        logits = session.eval([token])[-1]
    return tokens, sure


def draft_guesses(session, prompt: list[int], tokens: list[int]) -> tuple[list[int], list[float]]:
    """The draft's guess for each answer position, reading the main model's answer."""
    session.truncate(0)
    session.eval(prompt[:-1])
    sequence = [prompt[-1], *tokens[:-1]]
    rows = np.concatenate([session.eval(sequence[i:i + 64], all_logits=True).copy()
                           for i in range(0, len(sequence), 64)])
    return [int(np.argmax(r)) for r in rows], [top_probability(r) for r in rows]


def draft_batch_times(session, filler: list[int]) -> dict[int, float]:
    """What the draft model takes to read n skipped tokens in one batch (its catch-up)."""
    filler = (filler * 64)[:320]
    sizes = (1, 2, 4, 8, 16, 32, 64)
    times = round_robin_medians(session, filler[:256], [filler[256:256 + n] for n in sizes], 5, None, "draft")
    return dict(zip(sizes, times))


# -- replay -----------------------------------------------------------------------------------------

class RecordedDraftModel:
    """Stands in for the draft model's session (app.core.lm.Session), so the real DraftModelDrafter
    runs: while its cache follows the recorded answer its logits give the recorded guess with the
    recorded top probability, once it holds a wrong drafted token they give a guess that is never
    right. Each eval is charged the profile's time: a step, or a batch read when it catches up."""

    def __init__(self, trace: dict, step_s: float, batch_s, speed=lambda: 1.0):
        self.sequence = trace["prompt"] + trace["tokens"]
        self.answer_start = len(trace["prompt"])
        self.guesses, self.scores = trace["draft_tokens"], trace["draft_p"]
        self.n_vocab = max(self.sequence + self.guesses) + 2  # the last id is the guess never right
        self.n_ctx = len(self.sequence) + 1
        self.cached: list[int] = []
        self.step_s, self.batch_s, self.speed = step_s, batch_s, speed
        self.seconds = 0.0

    def eval(self, tokens, all_logits: bool = False) -> np.ndarray:
        self.cached.extend(tokens)
        self.seconds += self.speed() * (self.step_s if len(tokens) == 1 else self.batch_s(len(tokens)))
        return self._next_logits()[None, :]

    def truncate(self, n_keep: int) -> None:
        del self.cached[n_keep:]

    def _next_logits(self) -> np.ndarray:
        i = len(self.cached) - self.answer_start  # the answer position the cache predicts
        on_track = self.cached == self.sequence[:len(self.cached)]
        p = min(self.scores[min(i, len(self.scores) - 1)], 1 - 1e-7)
        token = self.guesses[i] if on_track and 0 <= i < len(self.guesses) else self.n_vocab - 1
        logits = np.zeros(self.n_vocab, dtype=np.float32)
        logits[token] = np.log(p / (1 - p) * (self.n_vocab - 1))  # softmax gives it probability p
        return logits


class Machine:
    """The replayed machine: the profile's costs, times ``factor`` once ``at`` (a fraction) of the
    replayed tokens are done (--drift FACTORx@AT%). With ``noise``, each batch the replay decodes
    takes its cost times a random factor of mean 1 (log-normal, that standard deviation of the log):
    the policy learns from noisy times, as on a real machine, and is charged them (--noise 0.1
    --seed N); what the main model alone and the bound are charged stays the profile's."""

    def __init__(self, profile: CostProfile, total_tokens: int, factor: float = 1.0, at: float = 1.0,
                 noise: float = 0.0, seed: int = 0):
        self.profile, self.factor, self.change_at = profile, factor, at * total_tokens
        self.done = 0  # tokens replayed so far, over all answers
        self.noise, self._random = noise, random.Random(seed)

    def speed(self, position: int | None = None) -> float:
        return self.factor if (self.done if position is None else position) >= self.change_at else 1.0

    def main_batch(self, n: int, position: int | None = None) -> float:
        """A batch of ``n`` at token ``position`` of the replay (a reference's cost, noiseless), or the
        replay's own next batch (None: where it is now, with noise)."""
        cost = self.speed(position) * self.profile.main_batch(n)
        if position is None and self.noise:
            cost *= math.exp(self._random.gauss(0.0, self.noise) - self.noise ** 2 / 2)
        return cost


def parse_drift(text: str | None) -> tuple[float, float]:
    """"2x@50%" -> (2.0, 0.5): costs double half-way through; None -> no drift."""
    if not text:
        return 1.0, 1.0
    factor, at = text.lower().split("@")
    return float(factor.rstrip("x")), float(at.rstrip("%")) / 100


class Replay:
    """One answer replayed through the real drafters and policy, with the machine's times."""

    LOOKUP_ROUND_S = 1e-4  # a lookup probe in Python

    def __init__(self, trace: dict, machine: Machine, drafter: DrafterKind, acceptance: AcceptanceModel,
                 catch_up: dict[int, float], params: SpeculationParams, costs: CostModel | None = None,
                 index: SuffixIndex | None = None):
        self.trace = trace
        self.machine = machine
        profile = machine.profile
        policy_costs = costs if costs is not None else profile
        self.policy = make_policy(params, policy_costs, acceptance, pads=True)   # a Qwen main pads, as the engine
        self.prompt, self.answer = trace["prompt"], trace["tokens"]
        self.start = machine.done  # where this answer starts in the replay
        self.draft_model = RecordedDraftModel(trace, profile.draft_step_s, catch_up_time(catch_up, profile),
                                              machine.speed)
        self.uses_lookup = drafter in (DrafterKind.LOOKUP, DrafterKind.LOOKUP_MODEL)
        self.drafter = make_drafter(drafter, self.draft_model, index)
        self.index = index
        self.drafter.prepare(self.prompt, self.policy)
        self.seconds = machine.main_batch(1)  # the first token comes from the prompt phase
        self.drafted = self.accepted = self.rounds = self.empty_rounds = 0

    def run(self) -> float:
        """Speedup against the main model alone, one step per token."""
        done = 1
        while done < len(self.answer):
            step = self.round(done)
            done += step
            self.machine.done += step
        self.machine.done = self.start + len(self.answer)
        if self.index is not None:
            self.index.add(self.prompt + self.answer)   # as the engine feeds it after an answer
        alone = sum(self.machine.main_batch(1, self.start + i) for i in range(len(self.answer)))
        return alone / self.seconds

    def round(self, done: int) -> int:
        """As SpeculativeGeneration._round, with the profile's times instead of the clock's."""
        context = self.prompt + self.answer[:done]
        budget = len(self.answer) - done - 1
        draft, spent = Draft(), 0.0
        if budget > 0:
            before = self.draft_model.seconds
            draft = self.drafter.draft(context, budget, self.policy, GREEDY)
            spent = self.draft_model.seconds - before + (self.LOOKUP_ROUND_S if self.uses_lookup else 0.0)
            if draft.sources and draft.sources[0] == SUFFIX:   # each token looked up, and the one that ended it
                spent += SUFFIX_STEP_S * (len(draft) + 1)
            draft = draft.cut(self.policy.cut(draft))
        accepted = right_prefix(draft.tokens, self.answer, done)
        verify_s = self.machine.main_batch(self.policy.verify_size(len(draft) + 1, self.machine.profile.n_max))
        self.seconds += spent + verify_s
        confidence = self.trace["main_p"][done:done + accepted + 1] if self.policy.wants_main_confidence() else ()
        self.policy.observe(draft, accepted, draft_s=spent, main_confidence=confidence, verify_s=verify_s,
                            context=len(self.prompt) + done - 1)
        self.drafter.sync(self.prompt + self.answer[:done + accepted + 1])
        self.rounds += 1
        self.empty_rounds += not len(draft)
        self.drafted += len(draft)
        self.accepted += accepted
        return accepted + 1


GREEDY = Sampler(SamplingParams(temperature=0.0))


def make_drafter(kind: DrafterKind, draft_model: RecordedDraftModel, index: SuffixIndex | None = None) -> Drafter:
    """The engine's drafter for ``kind``: with a suffix index, the default asks it after lookup."""
    model = DraftModelDrafter(draft_model)
    if kind is DrafterKind.SUFFIX:
        if index is None:
            raise SystemExit("error: --drafter suffix needs --suffix-index empty or PATH")
        return SuffixDrafter(index)
    if kind is DrafterKind.LOOKUP_MODEL and index is not None:
        return default_chain(index, [model], kind)
    return {DrafterKind.MODEL: model, DrafterKind.LOOKUP: PromptLookupDrafter(),
            DrafterKind.LOOKUP_MODEL: LookupThenModelDrafter(PromptLookupDrafter(tells_unasked=False), model)}[kind]


def suffix_index(source: str | None) -> SuffixIndex | None:
    """--suffix-index: none, an empty index, or one read from a suffix index's log."""
    if not source or source == "off":
        return None
    if source == "empty":
        return SuffixIndex()
    docs, _ = read_log(Path(source))
    if not docs:
        raise SystemExit(f"error: {source} holds no suffix-index documents")
    return SuffixIndex(docs)


def catch_up_time(catch_up: dict[int, float], profile: CostProfile):
    """Seconds for the draft model to read n tokens in one batch: the recorded machine's times,
    scaled to the profile's draft step."""
    sizes = sorted(catch_up)
    scale = profile.draft_step_s / catch_up[sizes[0]]
    times = [catch_up[size] for size in sizes]
    return lambda n: scale * float(np.interp(n, sizes, times, right=times[-1] * n / sizes[-1]))


def right_prefix(proposal: list[int], answer: list[int], start: int) -> int:
    """How many of ``proposal``'s first tokens are the answer's from ``start`` on."""
    right = 0
    while right < len(proposal) and start + right < len(answer) and proposal[right] == answer[start + right]:
        right += 1
    return right


def load(args: argparse.Namespace) -> tuple[list[dict], dict[int, float], CostProfile]:
    data = json.loads(Path(args.traces).read_text())
    traces = [t for t in data["traces"] if not args.only or t["id"] in args.only]
    catch_up = data["draft_batch_s"]
    if getattr(args, "catch_up", None):  # the draft's batch times measured with the profile, not the traces
        catch_up = json.loads(Path(args.catch_up).read_text())
    catch_up = {int(k): v for k, v in catch_up.items()}
    return traces, catch_up, CostProfile(**json.loads(Path(args.profile).read_text()))


def replay(args: argparse.Namespace) -> int:
    traces, catch_up, profile = load(args)
    params = SpeculationParams(draft_max=args.draft_max, policy=args.policy)
    # one per replay, as the engine keeps one while it is loaded
    acceptance = TraceRates(traces) if args.rates == "traces" else AcceptanceModel()
    factor, at = parse_drift(args.drift)
    total = sum(len(t["tokens"]) for t in traces)
    machine = Machine(profile, total, factor, at, args.noise, args.seed)
    costs = None  # fixed costs: the profile's
    if args.learn or args.drift or args.cold or args.start_from or args.noise:  # the policy learns the costs, as the app does
        n_max = params.batch_max
        warm = CostProfile(**json.loads(Path(args.start_from).read_text())) if args.start_from else profile
        costs = CostModel({}, n_max) if args.cold else CostModel.from_profile(warm, n_max)
        if args.cold and args.drafter != "lookup":
            costs.observe_draft(1, profile.draft_step_s)  # as if timed after an answer before these (the engine's way)
    speedups, fractions = {}, {}
    index = suffix_index(args.suffix_index)
    print(f"{'prompt':10s} {'speedup':>8s} {'of bound':>8s} {'drafted':>8s} {'accepted':>9s} {'rounds':>7s} "
          f"{'0-draft':>8s}")
    for trace in traces:
        start = machine.done
        rates = answer_rates(args.rates, trace, acceptance)
        r = Replay(trace, machine, args.drafter, rates, catch_up, params, costs, index)
        speedups[trace["id"]] = r.run()
        if costs is not None and (tile := costs.unmeasured_tile()):   # timed after the answer, as the engine does
            costs.observe_main(tile, len(trace["prompt"]) + len(trace["tokens"]), machine.main_batch(tile))
        fractions[trace["id"]] = speedups[trace["id"]] / lookup_bound(trace, machine, params.copy_max, start)
        print(f"{trace['id']:10s} {speedups[trace['id']]:7.2f}x {fractions[trace['id']]:8.2f} {r.drafted:8d} "
              f"{r.accepted:9d} {r.rounds:7d} {r.empty_rounds:8d}")
    _print_summary(speedups)
    _print_fractions(fractions)
    if costs is not None:
        learned = costs.profile(0).main_batch_s
        print("learned main batch times / the machine's at the end: "
              + " ".join(f"{learned[n - 1] / machine.main_batch(n, machine.done):.2f}" for n in (1, 2, 4, 8, 16) if n <= len(learned)))
    return 0


def answer_rates(kind: str, trace: dict, shared: AcceptanceModel | TraceRates) -> AcceptanceModel | TraceRates:
    """The acceptance an answer is replayed with (``--rates``): its own rates ("answer"), the priors
    learned anew ("fresh": each `quickdraft generate` is a process of its own, so its answer drafts from
    them), or the replay's one model (learned over the answers, or the traces' rates)."""
    if kind == "answer":
        return TraceRates([trace])
    return AcceptanceModel() if kind == "fresh" else shared


def bound(args: argparse.Namespace) -> int:
    traces, _, profile = load(args)
    speedups = {}
    machine = Machine(profile, 1)
    for trace in traces:
        speedups[trace["id"]] = lookup_bound(trace, machine, SpeculationParams(draft_max=args.draft_max).copy_max)
        print(f"{trace['id']:10s} {speedups[trace['id']]:7.2f}x")
    _print_summary(speedups)
    return 0


class TraceRates(AcceptanceModel):
    """The traces' own acceptance rates, bucket by bucket, known from the first round and never
    updated: what the policy does when it knows how often each kind of drafted token is right (in
    sample), though not which ones will be. The lookup bound knows which: the gap between the two is
    what that foresight is worth. A policy's fraction of this one's speedup is how close its learned
    acceptance comes to the rates it could at best learn on these buckets."""

    def __init__(self, traces: list[dict]):
        super().__init__()
        counts: dict[tuple, list[int]] = {}
        for trace in traces:
            for key, right in _drafted_outcomes(trace):
                tally = counts.setdefault(key, [0, 0])
                tally[0] += right
                tally[1] += 1
        self.rates = {key: accepted / tried for key, (accepted, tried) in counts.items()}

    def chance(self, source: str, n: int, score) -> float:
        key = self.bucket(source, n, score)
        return self.rates.get(key, self.prior(key))

    def update(self, source: str, n: int, score, accepted: bool) -> None:
        pass


def _drafted_outcomes(trace: dict):
    """(bucket, right) of every token a drafter could draft along the answer: each position's lookup
    proposal up to its first wrong token, and the draft model's guess at each position."""
    prompt, answer = trace["prompt"], trace["tokens"]
    lookup = PromptLookupDrafter()
    lookup.prepare(prompt, None)
    for done in range(1, len(answer)):
        proposed = lookup.propose(prompt + answer[:done], lookup.ngram_max)
        right = right_prefix([token for token, _ in proposed], answer, done)
        for i, (_, match) in enumerate(proposed[:right + 1]):
            yield AcceptanceModel.bucket(LOOKUP, i, match), i < right
    for guess, p, token in zip(trace["draft_tokens"], trace["draft_p"], answer):
        yield AcceptanceModel.bucket(MODEL, 0, p), guess == token


def lookup_bound(trace: dict, machine: Machine, draft_max: int, start: int = 0) -> float:
    """Speedup of the best possible use of lookup's proposals of up to ``draft_max`` tokens (the
    longest copy the policy may draft: SpeculationParams.copy_max), knowing which will be accepted, on
    ``machine`` with this answer starting at token ``start`` of the replay."""
    prompt, answer = trace["prompt"], trace["tokens"]
    lookup = PromptLookupDrafter()
    lookup.prepare(prompt, None)
    proposals = {}  # position -> (tokens proposed, how many of them are right)
    for done in range(1, len(answer)):
        proposal = [token for token, _ in lookup.propose(prompt + answer[:done], draft_max)]
        proposals[done] = (len(proposal), right_prefix(proposal, answer, done))
    finish = [0.0] * (len(answer) + 2)  # finish[i]: the least time to produce answer[i:]
    for done in range(len(answer) - 1, 0, -1):
        proposed, right = proposals[done]
        finish[done] = min(machine.main_batch(length + 1, start + done)
                           + finish[min(len(answer), done + min(right, length) + 1)] for length in range(proposed + 1))
    alone = sum(machine.main_batch(1, start + i) for i in range(len(answer)))
    return alone / (machine.main_batch(1, start) + finish[1])


def _print_fractions(fractions: dict[str, float]) -> None:
    """The policy's fraction of the lookup oracle's speedup, median per category."""
    groups = sorted({k.split("-")[0] for k in fractions})
    print("of the lookup bound: " + ", ".join(
        f"{g} {statistics.median(v for k, v in fractions.items() if k.split('-')[0] == g):.2f}" for g in groups))


def _print_summary(speedups: dict[str, float]) -> None:
    values = list(speedups.values())
    print(f"median {statistics.median(values):.2f}x, slowest {min(values):.2f}x")
    for group in sorted({k.split("-")[0] for k in speedups}):
        part = [v for k, v in speedups.items() if k.split("-")[0] == group]
        print(f"  {group}: median {statistics.median(part):.2f}x, slowest {min(part):.2f}x")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="decode the prompts and note both models' guesses")
    rec.add_argument("main")
    rec.add_argument("draft")
    rec.add_argument("--prompts", nargs="+", required=True)
    rec.add_argument("-n", "--n-predict", type=int, default=128)
    rec.add_argument("-t", "--threads", type=int, default=2)
    rec.add_argument("--ctx", type=int, default=4096)
    rec.add_argument("-o", "--output", default="traces.json")
    rep = sub.add_parser("replay", help="run the policy over recorded answers with a cost profile")
    rep.add_argument("traces")
    rep.add_argument("profile")
    rep.add_argument("--drafter", type=DrafterKind, default=DrafterKind.LOOKUP_MODEL,
                     choices=[kind for kind in DrafterKind if kind is not DrafterKind.NONE and kind not in HEADS],
                     help="who drafts (the heads, MTP and EAGLE-3, are not replayed: the traces record a draft "
                          "model's picks, not a head's)")
    rep.add_argument("--policy", type=PolicyName, choices=list(PolicyName), default=PolicyName.AUTO)
    rep.add_argument("--draft-max", type=int, default=16)
    rep.add_argument("--only", nargs="*", help="prompt ids to replay")
    rep.add_argument("--catch-up", help="a JSON {n: seconds} of the draft model reading n tokens in one batch, "
                                        "measured on the profile's machine (default: the recording machine's)")
    rep.add_argument("--learn", action="store_true", help="the policy learns the costs from the rounds (as the app)")
    rep.add_argument("--drift", help="the machine's costs change by a factor part-way: FACTORx@PERCENT%%, e.g. 2x@50%%")
    rep.add_argument("--cold", action="store_true", help="learn from the prior, not the profile (a fresh install)")
    rep.add_argument("--rates", choices=["learned", "fresh", "traces", "answer"], default="learned",
                     help="the acceptance the policy drafts by: learned over the answers as the app does, "
                          "learned from the priors anew in each answer (a one-shot `quickdraft generate`, a "
                          "process of its own), the traces' own rates per bucket, known from the start (an "
                          "upper reference for the learned ones), or each answer's own rates (in sample: a "
                          "reference that knows more)")
    rep.add_argument("--noise", type=float, default=0.0,
                     help="each replayed batch's time varies by this much (standard deviation of its log, "
                          "e.g. 0.1; a shared 2-core machine reads 0.05-0.15): learning from noisy times")
    rep.add_argument("--seed", type=int, default=0, help="the noise's seed")
    rep.add_argument("--suffix-index", default="off",
                     help="off (default), empty (grows with the replayed answers), or a suffix index's tokens.log "
                          "to start from; the default drafter then asks it after lookup")
    rep.add_argument("--start-from", help="learn from this stored profile instead (a stale warm start: e.g. one "
                     "calibrated while another program kept a core busy)")
    top = sub.add_parser("bound", help="the best prompt lookup could do, knowing what will be accepted")
    top.add_argument("traces")
    top.add_argument("profile")
    top.add_argument("--draft-max", type=int, default=16)
    top.add_argument("--only", nargs="*", help="prompt ids")
    args = ap.parse_args(argv)
    return {"record": record, "replay": replay, "bound": bound}[args.command](args)


if __name__ == "__main__":
    raise SystemExit(main())
