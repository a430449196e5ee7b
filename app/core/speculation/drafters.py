"""Drafters propose the tokens the main model verifies."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

import numpy as np

from app.core.lm import Session, common_prefix_length, prefill
from app.core.params import DrafterKind
from app.core.speculation.acceptance import DFLASH, LOOKUP, MODEL, LookupMatch, Score
from app.core.speculation.draft import Draft
from app.core.speculation.policy_base import Decision, DraftPolicy
from app.core.speculation.rewrites import PromptRewrites, agreeing
from app.core.speculation.sampling import Sampler

if TYPE_CHECKING:
    from app.core.llama.dflash import DFlashHead
    from app.core.llama.mtp import AssistantHead, ChainingHead



class Drafter(Protocol):
    name: str

    def prepare(self, prompt: Sequence[int], policy: DraftPolicy) -> None:
        """Read the prompt before the first round (part of prompt processing)."""

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        """Propose up to ``max_len`` tokens to follow ``context`` (the whole accepted sequence)."""

    def sync(self, context: Sequence[int]) -> None:
        """After verification: forget anything that is not a prefix of ``context``."""


@dataclass(frozen=True, slots=True)
class UntriedToken:
    """A token a copier proposed that no round verified (lookup's declined proposals and the second token of
    its one-token copies, the suffix index's token past its draft): free to make, it is free to check once the
    answer has reached its position ``at`` having taken ``before``, the proposal's tokens ahead of it. Told
    to the policy (``observe_undrafted``) as token ``len(before)`` of its kind of draft."""

    at: int
    before: tuple[int, ...]
    token: int
    match: Score
    policy: DraftPolicy

    def reached(self, context: Sequence[int]) -> bool:
        return len(context) > self.at

    def tell(self, context: Sequence[int], source: str) -> None:
        """Whether the answer took it, told where the context has reached it along the proposal."""
        if self.reached(context) and tuple(context[self.at - len(self.before):self.at]) == self.before:
            self.policy.observe_undrafted(source, self.match, context[self.at] == self.token, len(self.before))


class DraftModelDrafter:
    """A second, smaller model drafts a chain of its own most likely tokens (sampled from its
    distribution when the main model samples, so the acceptance rule can use its probabilities)."""

    name = MODEL

    def __init__(self, session: Session):
        self.session = session

    def prepare(self, prompt: Sequence[int], policy: DraftPolicy) -> None:
        if policy.may_draft(MODEL) and len(prompt) < self.session.n_ctx:
            prefill(self.session, prompt)

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        behind = len(context) - common_prefix_length(self.session.cached, context)
        max_len = min(max_len, policy.draft_length(MODEL, behind), self.session.n_ctx - len(context))
        if max_len <= 0:
            return Draft()  # nothing decoded: a round without drafting costs the draft model nothing
        return draft_chain(prefill(self.session, context), lambda token: self.session.eval([token])[-1],
                           MODEL, max_len, policy, sampler)

    def sync(self, context: Sequence[int]) -> None:
        self.session.truncate(common_prefix_length(self.session.cached, context))


def draft_chain(logits: np.ndarray, next_logits, source: str, max_len: int, policy: DraftPolicy,
                sampler: Sampler, scores: Sequence[float] | None = None) -> Draft:
    """A chain of a model's picks: each one's logits come from feeding it the pick before
    (``next_logits(token)``); the policy says when to stop. A token's score is the model's top
    probability, or ``scores[i]`` where the drafter has a confidence head of its own."""
    out = Draft()
    while True:
        pick = sampler.draft_pick(logits)
        score = pick.p_top if scores is None else float(scores[len(out)])
        decision = policy.step(len(out), score, source)
        if decision is Decision.STOP:
            break
        out.add(pick.token, pick.q, source, score)
        if decision is Decision.LAST or len(out) >= max_len:
            break
        logits = next_logits(pick.token)
    return out


class HeadDrafter:
    """A head over the main model's hidden states drafts: the main model's own MTP (nextn) layers, an
    MTP drafter file, or an EAGLE-3 drafter. A chain of the head's most likely tokens (sampled from its
    distribution when the main model samples), each fed back with the head's own hidden state. The
    head reads the main model's hidden states as it decodes, so it has nothing to catch up on.
    ``name``: the source its tokens count under (MTP, EAGLE3)."""

    def __init__(self, head: "ChainingHead | AssistantHead", name: str):
        self.head = head
        self.name = name

    def prepare(self, prompt: Sequence[int], policy: DraftPolicy) -> None:
        if policy.may_draft(self.name) and self.head.can_follow(prompt):
            self.head.start(prompt)   # read the prompt in the prompt phase, as the draft model does

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        max_len = min(max_len, policy.draft_length(self.name), self.head.n_ctx - len(context))
        if max_len <= 0 or not self.head.can_follow(context):
            return Draft()
        return draft_chain(self.head.start(context), self.head.step, self.name, max_len, policy, sampler)

    def sync(self, context: Sequence[int]) -> None:
        if not context:
            self.head.forget()   # otherwise the next draft drops what the context no longer holds


class BlockDrafter:
    """A DFlash or DSpark drafter proposes a whole block in one pass from the main model's hidden states:
    the block's rows are the logits of the tokens to come, each read as a draft model's (its most likely
    token, or one sampled from its distribution when the main model samples), the policy deciding
    token by token how far the draft goes. The block is asked for whole, the length its drafter was
    trained for (its rows see each other: a shorter block changes them), whatever is then verified.
    DSpark's confidence head, where the file has one, scores each token (what llama.cpp's p-min reads)."""

    name = DFLASH

    def __init__(self, head: "DFlashHead"):
        self.head = head

    def prepare(self, prompt: Sequence[int], policy: DraftPolicy) -> None:
        if policy.may_draft(DFLASH) and self.head.can_follow(prompt):
            self.head.start(prompt)   # inject the prompt's states in the prompt phase

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        room = self.head.n_ctx - len(context)   # the block's positions must fit the drafter's context
        max_len = min(max_len, policy.draft_length(DFLASH), self.head.max_block, room)
        if max_len <= 0 or not self.head.can_follow(context):
            return Draft()
        logits, confidence = self.head.block(context, min(self.head.max_block, room))
        rows = iter(logits)
        return draft_chain(next(rows), lambda _token: next(rows), DFLASH, max_len, policy, sampler, confidence)

    def sync(self, context: Sequence[int]) -> None:
        if not context:
            self.head.forget()


class PromptLookupDrafter:
    """Drafts by copying: finds an earlier occurrence of the last n tokens, the longest n that has
    one (``ngram_min`` <= n <= ``ngram_max``), in the prompt and the answer so far, and proposes
    what followed it. No second model, so its drafts cost next to nothing. The match length is the
    drafts' score, with where it was found: a long match in the prompt means the answer copies the
    user's text verbatim (an edit), one in the answer so far is more often a phrase said twice. A
    match as long as the longest n is measured on past it, as far as the text agrees with the
    occurrence (up to COPY_MAX): how long the answer has followed it, the run the policy reads
    (``AnswerReach.copy``).

    A copy runs on from the match's occurrence for as long as the text has it; where it reaches the
    end of the text, the context's end with the tokens copied so far is looked up again, at the
    longest length that occurs, and the draft goes on from that match (chained, as llama.cpp's
    ngram-mod chains its lookups). A copy is not looked up again token by token: the last 16 tokens
    of a copy also occur wherever the passage repeats, and the other occurrence may go on otherwise
    (an edit's answer copying the second of two similar methods in the prompt then drafted the
    first one's line: issue 43, docs/architecture.md section 4).

    Of several occurrences the latest in the prompt is copied, else the latest in the answer; of
    several of the longest n-gram looked up, the one the text agrees with furthest back
    (``_longest_run``: the method the answer is copying, of two that share their last lines). An
    edit's answer holds an edited copy of the prompt, so where it repeats a passage it copied
    before, the prompt says how the passage goes on and the earlier copy may not (the measurement:
    docs/architecture.md, section 4). Drafting the follower most earlier occurrences had instead was
    measured (issue 43): it lost those copies and gained nothing the replays could see.
    """

    name = LOOKUP
    FOLLOWS = 4   # a match in the prompt this long says the answer copies it (``PromptRewrites``)

    def __init__(self, ngram_max: int = 16, ngram_min: int = 1, tells_unasked: bool = True):
        self.ngram_max = ngram_max
        self.ngram_min = ngram_min
        self.tells_unasked = tells_unasked   # False beside a draft model that can take the rounds (``_tells``)
        self._indexed: list[int] = []
        self._prompt_length = 0
        self._unasked: UntriedToken | None = None        # see ``_tell_unasked``
        self._next_untried: UntriedToken | None = None   # see ``_tell_next_untried``
        self._rewrites = PromptRewrites([], ngram_max)   # the prompt as the answer rewrites it (``_rewritten``)
        self._new_index()

    def _new_index(self) -> None:
        # [n]: n-gram -> where its latest occurrence ends, for the occurrences whose continuation
        # starts in the prompt, and for those in the answer
        self._prompt_index: list[dict[tuple[int, ...], int]] = [{} for _ in range(self.ngram_max + 1)]
        self._answer_index: list[dict[tuple[int, ...], int]] = [{} for _ in range(self.ngram_max + 1)]
        # the longest n-grams' every occurrence, the prompt's and the answer's apart (``_longest_run``)
        self._prompt_longest: dict[tuple[int, ...], list[int]] = {}
        self._answer_longest: dict[tuple[int, ...], list[int]] = {}

    def find(self, context: Sequence[int], max_len: int) -> tuple[int, list[int]]:
        """(match length, continuation) of the longest match, copied from its preferred occurrence
        (the latest in the prompt, else in the answer) up to the end of the text; (0, []) when
        there is none."""
        self._update_index(context)
        n, end = self._longest_match(context, len(context))
        return n, list(context[end:end + max_len]) if n else []

    def propose(self, context: Sequence[int], max_len: int) -> list[tuple[int, LookupMatch]]:
        """Up to ``max_len`` (token, match) pairs to follow ``context``: the longest match's copy, and
        where it reaches the end of the text, the copy of the match looked up again with the copied
        tokens; the chain ends where nothing occurs. Each token is scored by the match it copies."""
        self._update_index(context)
        self._rewrites.follow(context)
        # the query needs the last ngram_max tokens at most, with the copied ones after them
        tail, seen = list(context[-(self.ngram_max + 1):]), len(context)
        out: list[tuple[int, LookupMatch]] = []
        while len(out) < max_len:
            n, end = self._longest_match(tail, seen)
            if n == 0:
                break
            if seen == len(context):   # the context's own end: the text before it is indexed
                n, end = self._longest_run(n, end, seen)
                if n >= self.FOLLOWS and end < self._prompt_length:
                    self._rewrites.start_following(end)
            match = LookupMatch(n, in_prompt=end < self._prompt_length)
            run = self._indexed[end:end + max_len - len(out)]   # never empty: end < len(context)
            out.extend((token, match) for token in run)
            tail = (tail + run)[-(self.ngram_max + 1):]
            seen += len(run)
        return self._rewritten(context, max_len, out)

    def peek(self, context: Sequence[int]) -> tuple[int, int | None]:
        """(length, token): the match a draft would copy from at the context's end and the first token it
        would copy, read without drafting ((0, None): none). The longest n-gram's run (``_longest_run``),
        or the rewritten prompt's match where lookup would draft from it (``_prefers_rewritten``)."""
        self._update_index(context)
        self._rewrites.follow(context)
        n, end = self._longest_match(context, len(context))
        if n:
            n, end = self._longest_run(n, end, len(context))
        rewritten, copy = self._rewrites.copy(context, 1)
        if self._prefers_rewritten(rewritten, n):
            return rewritten, copy[0] if copy else None
        return n, self._indexed[end] if n else None

    def _rewritten(self, context: Sequence[int], max_len: int,
                   out: list[tuple[int, LookupMatch]]) -> list[tuple[int, LookupMatch]]:
        """The copy of the prompt as the answer has been rewriting it (rewrites.py) instead of ``out``,
        where its match is longer, or as long and FOLLOWS tokens or more: after a renamed token the
        prompt's copy breaks, and the rewritten one goes on. Scored apart (``LookupMatch.rewritten``),
        so that its misses do not teach the policy that the prompt's copies fail (applied with the
        prompt's acceptance, they cut the shared recordings' edit-3 from 1.81x to 0.98x, replayed)."""
        have = out[0][1].length if out else 0
        n, copy = self._rewrites.copy(context, max_len)
        if self._prefers_rewritten(n, have):
            match = LookupMatch(n, in_prompt=True, rewritten=True)
            return [(token, match) for token in copy]
        return out

    def _prefers_rewritten(self, rewritten: int, have: int) -> bool:
        """Whether lookup copies the rewritten prompt's match of ``rewritten`` tokens rather than the
        match of ``have`` it found: where longer, or as long and FOLLOWS tokens or more."""
        return rewritten > have or (rewritten == have and rewritten >= self.FOLLOWS)

    def _longest_match(self, query: Sequence[int], seen: int) -> tuple[int, int]:
        """(length, end) of the preferred occurrence of the longest n-gram ending ``query``, whose
        last token is token ``seen`` - 1 of the text (a gram as long as the text cannot occur before)."""
        # An n-gram that occurs has every shorter ending of it occur where it ends (all are indexed),
        # so whether the last n tokens occur falls from yes to no as n grows: bisect for the longest
        # (4-5 lookups a round, not one per length down from ngram_max: most rounds match 0-2 tokens)
        low, high = self.ngram_min - 1, min(self.ngram_max, seen - 1, len(query))
        found = 0  # where the longest occurring length found so far (low) ends; none yet: low < ngram_min
        while low < high:
            n = (low + high + 1) // 2
            end = self._occurrence(query, n)
            if end is None:
                high = n - 1
            else:
                low, found = n, end
        return (low, found) if low >= max(1, self.ngram_min) else (0, 0)

    def _longest_run(self, n: int, end: int, seen: int) -> tuple[int, int]:
        """(run, end) of the occurrence whose run is the longest (``_run``), of the preferred place's
        (the prompt's, else the answer's), the latest of equal runs: where the longest n-gram looked up
        occurs twice, as in two similar methods, the answer is copying the one it has followed longer."""
        if n < self.ngram_max:
            return n, end
        gram = tuple(self._indexed[seen - n:seen])
        ends = (self._prompt_longest if end < self._prompt_length else self._answer_longest)[gram]
        return max((self._run(n, e, seen), e) for e in ends)

    def _run(self, n: int, end: int, seen: int) -> int:
        """How far back the text before token ``seen`` agrees with the text before ``end``, given that
        their last ``n`` (the longest n-gram looked up) do: counted on token by token up to COPY_MAX."""
        return agreeing(self._indexed, end, self._indexed, seen, n)

    def _occurrence(self, query: Sequence[int], n: int) -> int | None:
        """Where the preferred occurrence of the last ``n`` tokens ends: the latest in the prompt,
        else the latest in the answer; None if they occur nowhere before."""
        gram = tuple(query[-n:])
        end = self._prompt_index[n].get(gram)
        return self._answer_index[n].get(gram) if end is None else end

    def prepare(self, prompt: Sequence[int], policy: DraftPolicy) -> None:
        self._prompt_length = len(prompt)
        self._rewrites = PromptRewrites(prompt, self.ngram_max)
        self._indexed = []  # where the prompt ends decides which occurrences are the prompt's
        self._unasked = self._next_untried = None   # another answer's positions
        self._update_index(prompt)

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        allowed = min(max_len, policy.draft_length(LOOKUP))
        proposal = self.propose(context, max(2, allowed)) if max_len > 0 else []   # 2: ``_tell_next_untried``
        out = Draft()
        for token, match in proposal[:max(0, allowed)]:
            decision = policy.step(len(out), match, LOOKUP)
            if decision is Decision.STOP:
                break
            out.add(token, None, LOOKUP, match)
            if decision is Decision.LAST:
                break
        self._unasked = UntriedToken(len(context), (), *proposal[0], policy) if proposal and not out else None
        if len(out) <= 1 and len(proposal) > 1 and self._next_untried is None:
            self._next_untried = UntriedToken(len(context) + 1, (proposal[0][0],), *proposal[1], policy)
        return out

    def sync(self, context: Sequence[int]) -> None:
        self._tell_unasked(context)   # the index follows the context it is given
        self._tell_next_untried(context)

    def _tells(self, policy: DraftPolicy) -> bool:
        """Whether proposals the policy did not verify are told to it: with lookup alone, and beside a
        draft model that cannot take the rounds lookup leaves (parked, or not paying on this machine)."""
        return self.tells_unasked or not policy.wants_main_confidence()

    def _tell_unasked(self, context: Sequence[int]) -> None:
        """A proposal the policy did not draft still says whether such a match is right: its first
        token against the token the round produced there, told to the policy (``observe_undrafted``).
        Without it a kind of match the policy never drafts never shows it pays: an edit's answer
        re-joins the prompt after each change with a 2-token match whose copy runs on for 10 tokens,
        and the policy, which had never seen a 2-token match right, waited for 9 (issue 43's copy-2:
        0.86x replayed, against a bound of 1.21x). Free to make, a proposal is free to check; under
        sampling the token produced equals it with the chance verification would have accepted it.
        Not told beside a draft model that takes the rounds lookup leaves: there a kind of match
        learned right more often took rounds the model drafted better (replayed on the 2-core profile,
        the copy prompts' median 1.14x -> 1.09x; copy-5 1.19x -> 0.99x). Told beside one that cannot
        take them (parked, or not paying on this machine): nobody drafts those rounds (``_tells``)."""
        untried, self._unasked = self._unasked, None
        if untried is not None and self._tells(untried.policy):
            untried.tell(context, LOOKUP)

    def _tell_next_untried(self, context: Sequence[int]) -> None:
        """A copy whose round verified none of its tokens after the first (it drafted one, or none)
        still says whether such a copy goes on: where the answer took its first token, its second
        against the token the answer took next, told as a copy's next token once the context has it.
        The next tokens' acceptance is learned only from drafts of two or more, so where it read low
        enough that no copy of more than one token paid, it stayed there: a server on this CPU copied a
        rewrite's run of the prompt one token a round, every one right, for 114 rounds (1.2 accepted a
        round, where the same code beside it took 10-15), and replayed on such a server's learned costs
        2 of 12 seeds stopped drafting from their third turn to their ninth (docs/architecture.md,
        section 4)."""
        untried = self._next_untried
        if untried is None or not untried.reached(context):
            return   # a round that drafted nothing took only the first token
        self._next_untried = None
        if self._tells(untried.policy):
            untried.tell(context, LOOKUP)

    def _update_index(self, context: Sequence[int]) -> None:
        """Index every n-gram that ends before the last token (the last n-gram is the query). A
        context that extends the one indexed adds its new tokens; any other starts the index over.
        A generation's context only grows, so that is told by its first token and the last ones
        indexed, not by comparing all of it: every round, at 4,000 tokens of context, that comparison
        cost as much as the rest of a round's drafting."""
        done = len(self._indexed)
        tail = max(0, done - self.ngram_max)
        if done > len(context) or self._indexed[tail:] != list(context[tail:done]) or \
                (done and context[0] != self._indexed[0]):
            self._indexed, done = [], 0
            self._new_index()
        for end in range(max(done, 1), len(context)):
            in_prompt = end < self._prompt_length
            index = self._prompt_index if in_prompt else self._answer_index
            for n in range(1, min(self.ngram_max, end) + 1):
                index[n][tuple(context[end - n:end])] = end
            if end >= self.ngram_max:
                longest = self._prompt_longest if in_prompt else self._answer_longest
                longest.setdefault(tuple(context[end - self.ngram_max:end]), []).append(end)
        self._indexed.extend(context[done:])


class FirstOfDrafter:
    """The first of several drafters that proposes anything drafts the round (the default: prompt
    lookup, else the suffix index, else the draft model). Each reads the prompt and follows the context."""

    def __init__(self, drafters: Sequence[Drafter], name: str):
        self.drafters = tuple(drafters)
        self.name = name

    def prepare(self, prompt: Sequence[int], policy: DraftPolicy) -> None:
        for drafter in self.drafters:
            drafter.prepare(prompt, policy)

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        for drafter in self._in_turn(context):
            draft = drafter.draft(context, max_len, policy, sampler)
            if len(draft):
                return draft
        return Draft()

    def _in_turn(self, context: Sequence[int]) -> Sequence[Drafter]:
        """The order the drafters are asked in this round: as given (a chain may read the context first)."""
        return self.drafters

    def sync(self, context: Sequence[int]) -> None:
        for drafter in self.drafters:
            drafter.sync(context)


class LookupThenModelDrafter(FirstOfDrafter):
    """Prompt lookup first; the draft model when lookup has nothing worth proposing."""

    name = DrafterKind.LOOKUP_MODEL

    def __init__(self, lookup: PromptLookupDrafter, model: Drafter):   # a DraftModelDrafter or CrossVocabDrafter
        super().__init__([lookup, model], DrafterKind.LOOKUP_MODEL)
        self.lookup = lookup
        self.model = model
