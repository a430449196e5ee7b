"""Drafting from the suffix index of past documents (suffix_index.py), and the chain of drafters the
default is: prompt lookup, else the suffix index, else the draft model (the index first where its match is
the longer)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Sequence

from app.core.errors import DrafterUnavailableError
from app.core.params import DrafterKind
from app.core.speculation.acceptance import SUFFIX, SuffixMatch
from app.core.speculation.draft import Draft
from app.core.speculation.drafters import Drafter, FirstOfDrafter, PromptLookupDrafter
from app.core.speculation.policy_base import Decision, DraftPolicy
from app.core.speculation.sampling import Sampler
from app.core.speculation.suffix_index import DEPTH, SuffixIndex

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
    16 tokens) over the index, its most frequent continuation, then the same with that token appended,
    as long as the policy wants more. Each token is scored by its match (length, how often it followed,
    how often anything did), so the auto policy learns its acceptance by length and frequency. The
    tokens are deterministic proposals (q None, as prompt lookup's): the acceptance rule is unchanged."""

    name = SUFFIX

    def __init__(self, index: SuffixIndex, min_length: int = 1, ready: threading.Event | None = None):
        self.index = index
        self.min_length = min_length   # a shorter match at the context's end drafts nothing
        self.ready = ready             # set once the index holds what its log held (None: it does)
        self._unasked: tuple[int, int, SuffixMatch, DraftPolicy] | None = None   # see ``sync``

    def prepare(self, prompt: Sequence[int], policy: DraftPolicy) -> None:
        if self.ready is not None and policy.may_draft(SUFFIX):
            self.ready.wait()   # an index still being built after the model loaded: once, in the prompt phase

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        max_len = min(max_len, policy.draft_length(SUFFIX))
        out, self._unasked = Draft(), None
        for found in self.index.chain(context, max(0, max_len)):
            if not len(out) and found.length < self.min_length:
                break
            match = SuffixMatch(found.length, found.count, found.total)
            decision = policy.step(len(out), match, SUFFIX)
            if decision is Decision.STOP:
                if not len(out):
                    self._unasked = (len(context), found.token, match, policy)
                break
            out.add(found.token, None, SUFFIX, match)
            if decision is Decision.LAST:
                break
        return out

    def peek(self, context: Sequence[int]) -> tuple[int, int | None]:
        """(length, token): the match a draft would start from at the context's end and the token it would
        draft first, read without drafting ((0, None): none, or shorter than ``min_length``)."""
        found = self.index.continuation(context[-DEPTH:])
        return (found.length, found.token) if found is not None and found.length >= self.min_length else (0, None)

    def sync(self, context: Sequence[int]) -> None:
        """The index does not follow the context (only an answer's end feeds it), but a continuation the
        policy declined says whether such a match is right: its token against the token the round produced
        there, told to the policy (``observe_undrafted``), as lookup's are. A retried answer matches its
        earlier one at every token, seen once (a prior too low to draft on a CPU): without this the policy
        never drafts such a match, so never learns that it holds."""
        if self._unasked is not None and len(context) > self._unasked[0]:
            at, token, match, policy = self._unasked
            policy.observe_undrafted(SUFFIX, match, context[at] == token)
        self._unasked = None


class DefaultChain(FirstOfDrafter):
    """The default's drafters in turn, the first that drafts anything drafting the round: prompt lookup,
    else the suffix index, else the draft model; but the index before lookup where the two disagree on the
    next token and the index's match is the longer. The longer match of the context's end is the better
    guess of how it goes on: an answer that writes again what an earlier one wrote (an agent's retried
    turn, a file given the same edit in a new session) departs from the prompt wherever that answer did,
    and there lookup's match shrinks to the few tokens since the change while the index's runs on through
    the earlier answer. Where they agree lookup drafts, on its own acceptance, learned over every copy:
    a conversation's history is in the index too, and asked first wherever its match was a token longer,
    the index took lookup's copies of it and drafted them shorter (an agent workload's rewrite turns
    drafted half as many tokens)."""

    def __init__(self, lookup: PromptLookupDrafter, suffix: SuffixDrafter, model: Sequence[Drafter], name: str):
        super().__init__([lookup, suffix, *model], name)
        self.lookup, self.suffix, self.model = lookup, suffix, tuple(model)

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        for drafter in self._in_turn(context):
            draft = drafter.draft(context, max_len, policy, sampler)
            if len(draft):
                return draft
        return Draft()

    def _in_turn(self, context: Sequence[int]) -> tuple[Drafter, ...]:
        copied, copy = self.lookup.peek(context)
        if copied >= DEPTH:   # the index matches DEPTH tokens at most
            return self.drafters
        found, token = self.suffix.peek(context)
        if found > copied and token != copy:
            return (self.suffix, self.lookup, *self.model)
        return self.drafters


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
    where its match is the longer: ``DefaultChain``), else the draft model (``model``: its drafter, or none)."""
    lookup = PromptLookupDrafter(tells_unasked=not model)   # beside a draft model, lookup learns only its drafts
    return DefaultChain(lookup, SuffixDrafter(index, DEFAULT_MIN_MATCH, ready), model, name)
