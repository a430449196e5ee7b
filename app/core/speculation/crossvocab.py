"""A draft model of another vocabulary drafts through text, losslessly (Timor et al., "Accelerating LLM
Inference with Lossless Speculative Decoding Algorithms for Heterogeneous Vocabularies", ICML 2025; Hugging
Face transformers' "universal assisted generation").

The draft model reads the answer as its own tokenizer spells it and drafts in its own vocabulary:

- greedy (String-Level Exact Match, SLEM): its tokens become text, and the main model's tokenizer reads
  that text again; the main tokens are verified as any draft. The text is read together with the last
  few tokens of text already in place (``OVERLAP``), so a word the two tokenizers split differently is
  joined at the seam as the main tokenizer joins it, and those tokens are dropped; where the tokenizer
  would merge across the seam the new text is read alone. Verification keeps exactly the main model's
  greedy answer, whatever was proposed.
- sampling (Token-Level Intersection, TLI): the draft samples only among the tokens whose text is one main
  token too (app/core/gguf/shared_vocab.py), its distribution renormalised there; each drafted token is
  one main token, whose probability q is known, so the speculative sampling rule (sampling.py) keeps
  the main model's distribution exactly.

After verification the draft's tokens are put back in step with the answer's text: the draft's answer
tokens whose text the answer still spells stay, then those of the last draft the answer went on with
(already in its cache), and the rest of the answer's text is read by the draft's tokenizer, again with
an overlap. That happens when the draft model is next asked, inside the drafting time the policy
measures: turning text into tokens is part of its cost per token. Bytes that are no whole UTF-8
character yet (a token piece may hold half of one) wait for the rest, or are read as byte tokens.
"""

from __future__ import annotations

import bisect
from typing import Protocol, Sequence

import numpy as np

from app.core.gguf.shared_vocab import SharedVocabulary
from app.core.lm import Session, common_prefix_length, prefill
from app.core.speculation.acceptance import CROSS
from app.core.speculation.draft import Draft
from app.core.speculation.policy_base import Decision, DraftPolicy
from app.core.speculation.sampling import Sampler

OVERLAP = 4   # tokens of text in place read again with new text, so the tokens at the seam merge as they would


class TextVocabulary(Protocol):
    """What the drafter needs of a model's vocabulary (llama.LlamaModel has it)."""

    n_vocab: int
    bos: int
    add_bos: bool

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]: ...

    def piece(self, token: int) -> bytes: ...

    def token_text(self, token: int) -> str: ...

    def is_control(self, token: int) -> bool: ...

    def is_eog(self, token: int) -> bool: ...


def prompt_text(vocab: TextVocabulary, prompt: Sequence[int]) -> str:
    """The prompt as text, control tokens spelt out (a chat template's markers reach the draft as text,
    or as its own control tokens where it has the same), the begin-of-sequence token left out."""
    parts = [vocab.token_text(t).encode("utf-8") if vocab.is_control(t) else vocab.piece(t)
             for t in prompt if t != vocab.bos]
    return b"".join(parts).decode("utf-8", "replace")


def draft_prompt(main: TextVocabulary, draft: TextVocabulary, prompt: Sequence[int]) -> list[int]:
    """The draft model's tokens for the main model's prompt: its text, read by the draft's tokenizer."""
    head = [draft.bos] if draft.add_bos and draft.bos >= 0 else []
    return head + draft.tokenize(prompt_text(main, prompt), add_special=False, parse_special=True)


def _decodable(before: bytes, text: bytes) -> tuple[bytes, bytes]:
    """The longest tail of ``before`` and head of ``text`` that decode together as UTF-8: ``before`` cut
    to start on a whole character, ``text`` cut before its first byte that is not (yet) one."""
    while True:
        start = 0
        while start < len(before) and 0x80 <= before[start] < 0xC0:
            start += 1
        before = before[start:]
        try:
            (before + text).decode("utf-8")
            return before, text
        except UnicodeDecodeError as exc:
            if exc.start < len(before):
                before = before[exc.start + 1:]
            else:
                text = text[:exc.start - len(before)]


def continuation(vocab: TextVocabulary, before: bytes, text: bytes) -> tuple[list[int], int]:
    """``vocab``'s tokens for ``text`` as it follows ``before``, and how many bytes of ``text`` they spell.
    The two are read together and the tokens of ``before`` dropped, so tokens at the seam merge as the
    tokenizer merges them (a tokenizer that adds a space at the start adds it to ``before``). The tokens
    stop before bytes that are no whole character; ([], 0) when a token would straddle the seam."""
    before, text = _decodable(before, text)
    if not text:
        return [], 0
    ids = vocab.tokenize((before + text).decode("utf-8"), add_special=False, parse_special=False)
    pieces = [vocab.piece(t) for t in ids]
    spelled = b"".join(pieces)
    if not spelled.endswith(before + text):
        return [], 0
    seam, at = len(spelled) - len(text), 0
    for k, piece in enumerate(pieces):
        if at == seam:
            return ids[k:], len(text)
        if at > seam:
            break
        at += len(piece)
    return [], 0


class CrossVocabDrafter:
    """A draft model of another vocabulary (see the module notes). ``session`` is the draft model's,
    ``shared`` the pair's shared tokens; ``name`` (CROSS) keeps its statistics and acceptance apart."""

    name = CROSS

    def __init__(self, session: Session, main_vocab: TextVocabulary, draft_vocab: TextVocabulary,
                 shared: SharedVocabulary):
        self.session = session
        self.main_vocab = main_vocab
        self.draft_vocab = draft_vocab
        self.shared = shared
        self._prompt_length = 0           # the main model's prompt tokens
        self._prompt: list[int] = []      # the draft's tokens for the prompt's text
        self._fits = False                # the draft's prompt fits its context
        self._start_answer()

    def _start_answer(self) -> None:
        self._main: list[int] = []        # the main model's answer tokens read so far
        self._text = bytearray()          # their text
        self._tokens: list[int] = []      # the draft's tokens for (a prefix of) that text
        self._ends: list[int] = []        # where each one's text ends in it
        self._drafted: list[int] = []     # the draft's tokens of its last draft

    def prepare(self, prompt: Sequence[int], policy: DraftPolicy) -> None:
        self._prompt_length = len(prompt)
        self._prompt = draft_prompt(self.main_vocab, self.draft_vocab, prompt)
        self._start_answer()
        self._fits = len(self._prompt) < self.session.n_ctx
        if self._fits and policy.may_draft(CROSS):
            prefill(self.session, self._prompt)

    def sync(self, context: Sequence[int]) -> None:
        """The draft catches up with the answer when it is next asked (``_follow``); an emptied
        context (an error) empties its cache."""
        if len(context) <= self._prompt_length:
            self.session.truncate(0)
            self._fits = False

    @property
    def context(self) -> list[int]:
        """The draft's tokens for the prompt and the answer as far as it is read."""
        return self._prompt + self._tokens

    def draft(self, context: Sequence[int], max_len: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        if not self._fits or len(context) < self._prompt_length:
            return Draft()
        self._follow(context[self._prompt_length:])
        gap = bytes(self._text[self._read():])   # answer text the draft's tokens do not spell yet
        target = self.context
        behind = len(target) - common_prefix_length(self.session.cached, target)
        steps = min(max_len, policy.draft_length(CROSS, behind), self.session.n_ctx - len(target))
        if steps <= 0 or (gap and not sampler.greedy):
            return Draft()
        logits = prefill(self.session, target)
        if sampler.greedy:
            return self._draft_text(context, logits, steps, max_len, gap, policy, sampler)
        return self._draft_shared(logits, steps, policy, sampler)

    # -- greedy: the draft's text, read by the main model's tokenizer ------------------------------

    def _draft_text(self, context: Sequence[int], logits: np.ndarray, steps: int, max_len: int, gap: bytes,
                    policy: DraftPolicy, sampler: Sampler) -> Draft:
        text, ends, scores = bytearray(), [], []
        while True:
            pick = sampler.draft_pick(logits)
            if self.draft_vocab.is_control(pick.token) or self.draft_vocab.is_eog(pick.token):
                break
            decision = policy.step(len(ends), pick.p_top, CROSS)
            if decision is Decision.STOP:
                break
            self._drafted.append(pick.token)
            text += self.draft_vocab.piece(pick.token)
            ends.append(len(text))
            scores.append(pick.p_top)
            if decision is Decision.LAST or len(ends) >= steps:
                break
            logits = self.session.eval([pick.token])[-1]
        if not text.startswith(gap):
            return Draft()
        proposed = bytes(text[len(gap):])
        before = b"".join(self.main_vocab.piece(t) for t in context[-OVERLAP:])
        ids, n = continuation(self.main_vocab, before, proposed)
        if not n:   # the main tokenizer would merge the new text into the last token: read it alone
            ids, _ = continuation(self.main_vocab, b"", proposed)
        out, at = Draft(), len(gap)
        for token in ids[:max_len]:
            start, at = at, at + len(self.main_vocab.piece(token))
            # the drafted tokens this one's text overlaps: the least sure of them is its score
            first, last = bisect.bisect_right(ends, start), bisect.bisect_left(ends, at)
            out.add(token, None, CROSS, min(scores[first:last + 1], default=scores[-1]))
        return out

    # -- sampling: the draft's distribution on the shared tokens ------------------------------------

    def _draft_shared(self, logits: np.ndarray, steps: int, policy: DraftPolicy, sampler: Sampler) -> Draft:
        to_main, out = self.shared.draft_to_main, Draft()
        while True:
            p = sampler.probs(logits)
            ids = np.flatnonzero(p)
            ids = ids[to_main[ids] >= 0]
            mass = float(p[ids].sum())
            if mass <= 0.0:
                break
            q_ids = p[ids] / mass
            token = int(ids[sampler.pick(q_ids)])
            # several draft tokens may spell one main token: its probability is theirs together
            q = np.bincount(to_main[ids], weights=q_ids, minlength=self.main_vocab.n_vocab)
            decision = policy.step(len(out), float(q.max()), CROSS)
            if decision is Decision.STOP:
                break
            self._drafted.append(token)
            out.add(int(to_main[token]), q, CROSS, float(q.max()))
            if decision is Decision.LAST or len(out) >= steps:
                break
            logits = self.session.eval([token])[-1]
        return out

    # -- keeping the draft's tokens in step with the answer's text ----------------------------------

    def _read(self) -> int:
        """How much of the answer's text the draft's tokens spell."""
        return self._ends[-1] if self._ends else 0

    def _follow(self, answer: Sequence[int]) -> None:
        """Read the main model's new answer tokens, then make the draft's tokens spell their text."""
        if common_prefix_length(self._main, answer) < len(self._main):
            self._start_answer()   # not the answer read so far: read it again
        for token in answer[len(self._main):]:
            self._main.append(token)
            self._text += self.main_vocab.piece(token)
        drafted, self._drafted = self._drafted, []
        for token in drafted:   # the last draft, as far as the answer went its way: in the draft's cache
            if not self._append(token):
                break
        if self._read() < len(self._text) and self._tokens:
            self._tokens.pop()   # read the last one again with what follows it: it may merge with it
            self._ends.pop()
        while self._read() < len(self._text):
            rest = bytes(self._text[self._read():])
            ids, n = continuation(self.draft_vocab, self._draft_tail(), rest)
            if not n:
                ids, n = continuation(self.draft_vocab, b"", rest)
            if not n:   # no whole character (or a seam no reading avoids): a byte token
                byte = self.shared.draft_byte_tokens.get(rest[0])
                if byte is None:
                    return   # the draft cannot spell it: drafts must start with it (``gap``)
                ids = [byte]
            for token in ids:
                if not self._append(token):
                    return

    def _append(self, token: int) -> bool:
        """Add a draft token whose text comes next in the answer; False (nothing added) if it does not."""
        piece, at = self.draft_vocab.piece(token), self._read()
        if not piece or self._text[at:at + len(piece)] != piece:
            return False
        self._tokens.append(token)
        self._ends.append(at + len(piece))
        return True

    def _draft_tail(self) -> bytes:
        """The text of the draft's last OVERLAP tokens (into the prompt when the answer is short)."""
        tail = self._tokens[-OVERLAP:]
        need = OVERLAP - len(tail)
        if need > 0:
            tail = self._prompt[max(0, len(self._prompt) - need):] + tail
        return b"".join(self.draft_vocab.piece(t) for t in tail)
