"""Drafting from the suffix index of past documents (suffix_index.py), and the chain of drafters the
default is: prompt lookup, else the suffix index, else the draft model (the index before lookup where the
two disagree and the index has the better claim: ``DefaultChain``)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Sequence

from app.core.errors import DrafterUnavailableError
from app.core.params import DrafterKind
from app.core.speculation.acceptance import SUFFIX, SuffixMatch
from app.core.speculation.draft import Draft
from app.core.speculation.drafters import Drafter, FirstOfDrafter, PromptLookupDrafter, UntriedToken
from app.core.speculation.policy_base import Decision, DraftPolicy
from app.core.speculation.sampling import Sampler
from app.core.speculation.suffix_index import RUN, SuffixIndex

if TYPE_CHECKING:
    from app.core.speculation.suffix_memory import SuffixMemory

# In the default the index drafts only from a match this long: an agent's loop or a file written again
# matches far longer, while short matches in unrelated past answers took rounds from the draft model and
# from lookup's copies. Replayed on the recorded Qwen2.5-Coder traces of the shared prompts
# (scripts/policy_replay.py --suffix-index empty, EPYC busy profile), the default's median went 1.31x ->
# 1.27x with any match and stayed 1.31x (every prompt as without the index) from 12 tokens on.
DEFAULT_MIN_MATCH = 12


class SuffixDrafter:
    """Drafts what most often followed the context's end in past documents: the longest match (up to
    16 tokens; of the places that have it, those that agree with the context furthest back: suffix_index.py)
    over the index, its most frequent continuation, then the same with that token appended,
    as long as the policy wants more. Each token is scored by its match (length, how often it followed,
    how often anything did), so the auto policy learns its acceptance by length and frequency. The
    tokens are deterministic proposals (q None, as prompt lookup's): the acceptance rule is unchanged."""

    name = SUFFIX

    def __init__(self, index: SuffixIndex, min_length: int = 1, ready: threading.Event | None = None):
        self.index = index
        self.min_length = min_length   # a shorter match at the context's end drafts nothing
        self.ready = ready             # set once the index holds what its log held (None: it does)
        self._unasked: UntriedToken | None = None   # the continuation past this round's draft, told at ``sync``

    def prepare(self, prompt: Sequence[int], policy: DraftPolicy) -> None:
        if self.ready is not None and policy.may_draft(SUFFIX):
            self.ready.wait()   # an index still being built after the model loaded: once, in the prompt phase

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        max_len = min(max_len, policy.draft_length(SUFFIX))
        out, self._unasked, last = Draft(), None, False
        for found in self.index.chain(context, max(0, max_len) + 1):   # one past the longest draft
            if not len(out) and found.length < self.min_length:
                break
            match = SuffixMatch(found.length, found.count, found.total)
            decision = Decision.STOP if last or len(out) == max_len else policy.step(len(out), match, SUFFIX)
            if decision is Decision.STOP:   # this token is the one past the draft: told at ``sync``
                self._unasked = UntriedToken(len(context) + len(out), tuple(out.tokens), found.token, match, policy)
                break
            out.add(found.token, None, SUFFIX, match)
            last = decision is Decision.LAST
        return out

    def peek(self, context: Sequence[int]) -> tuple[int, int | None]:
        """(length, token): the match a draft would start from at the context's end and the token it would
        draft first, read without drafting ((0, None): none, or shorter than ``min_length``)."""
        found = self.index.continuation(context[-RUN:])
        return (found.length, found.token) if found is not None and found.length >= self.min_length else (0, None)

    def sync(self, context: Sequence[int]) -> None:
        """The index does not follow the context (only an answer's end feeds it), but the continuation past
        the round's draft says whether such a match is right: where every drafted token was accepted, its
        token against the token the round produced there, told to the policy (``observe_undrafted``) as
        the next token of such a draft, as lookup's declined proposals are. A retried answer matches its
        earlier one at every token, seen once (a prior too low to draft long on a CPU): without this the
        policy never drafts such a match, or drafts it one token a round and never learns that the tokens
        after the first hold (a replayed agent's retried rewrite: 22 one-token drafts, every one right)."""
        if self._unasked is not None:
            self._unasked.tell(context, SUFFIX)
        self._unasked = None


class DefaultChain(FirstOfDrafter):
    """The default's drafters in turn, the first that drafts anything drafting the round: prompt lookup,
    else the suffix index, else the draft model; but the index before lookup where the two disagree on the
    next token and either the index's match is the longer or the index was right where they last
    disagreed in this answer.

    The longer match of the context's end is the better guess of how it goes on: an answer that writes
    again what an earlier one wrote (an agent's retried turn, a file given the same edit in a new session)
    departs from the prompt wherever that answer did, and there lookup's match shrinks to the few tokens
    since the change while the index's runs on through the earlier answer. Within a passage both copy,
    lookup's run is measured on past the index's 16 tokens, so length cannot tell them apart there: which
    one this answer follows is read off their disputes instead (a retried answer's first changed line
    shows it follows the index). Where they agree lookup drafts, on its own acceptance, learned over every
    copy: a conversation's history is in the index too, and asked first wherever its match was a token
    longer, the index took lookup's copies of it and drafted them shorter (an agent workload's rewrite
    turns drafted half as many tokens)."""

    def __init__(self, lookup: PromptLookupDrafter, suffix: SuffixDrafter, model: Sequence[Drafter], name: str):
        super().__init__([lookup, suffix, *model], name)
        self.lookup, self.suffix = lookup, suffix
        self.index_was_right = False                        # where they last disagreed, settled
        self._dispute: tuple[int, int, int] | None = None   # (at, lookup's token, the index's): this round's

    def _in_turn(self, context: Sequence[int]) -> tuple[Drafter, ...]:
        self._dispute = None
        found, token = self.suffix.peek(context)
        if token is None:   # most rounds: the index has no match of DEFAULT_MIN_MATCH, and lookup is not read
            return self.drafters
        copied, copy = self.lookup.peek(context)
        if copy is None or copy == token:
            return self.drafters
        self._dispute = (len(context), copy, token)
        if found > copied or self.index_was_right:
            return (self.suffix, self.lookup, *self.drafters[2:])
        return self.drafters

    def sync(self, context: Sequence[int]) -> None:
        if self._dispute is not None and len(context) > self._dispute[0]:
            at, copy, token = self._dispute
            if context[at] in (copy, token):   # neither: the answer went a third way, and settles nothing
                self.index_was_right = context[at] == token
        self._dispute = None
        super().sync(context)


def suffix_drafter(kind: DrafterKind, memory: "SuffixMemory | None", model: Sequence[Drafter]) -> Drafter:
    """The suffix index's drafter (``kind`` SUFFIX), or the default with it: prompt lookup, else the index,
    else the draft model (``model``: its drafter, or none). DrafterUnavailableError when the index is off."""
    if memory is None:
        raise DrafterUnavailableError("The suffix index is off for this run: turn it on in Settings, or with "
                                      "--suffix-index on (`quickdraft suffix-index on` for every run).")
    if kind is DrafterKind.SUFFIX:
        return SuffixDrafter(memory.index, ready=memory.ready)
    return default_chain(memory.index, model, kind, memory.ready)


def default_chain(index: SuffixIndex, model: Sequence[Drafter], name: str,
                  ready: threading.Event | None = None) -> FirstOfDrafter:
    """Prompt lookup, else the suffix index from a match of DEFAULT_MIN_MATCH tokens or more (before lookup
    where the two disagree and the index has the better claim: ``DefaultChain``), else the draft model
    (``model``: its drafter, or none)."""
    lookup = PromptLookupDrafter(tells_unasked=not model)   # beside a draft model, lookup learns only its drafts
    return DefaultChain(lookup, SuffixDrafter(index, DEFAULT_MIN_MATCH, ready), model, name)
