"""The prompt as an edit's answer has been rewriting it: the substitutions the answer has made more than
once (a rename: `tmp` -> `total` on every line), learned as the answer goes, applied to the whole
prompt, for prompt lookup to copy from (drafters.py, ``PromptLookupDrafter``). A copy of the prompt
itself breaks at every renamed token, and after it the context's end matches the prompt again only a
few tokens later; a copy of the rewritten prompt goes on across them.
"""

from __future__ import annotations

from typing import Sequence

from app.core.params import COPY_MAX

Tokens = tuple[int, ...]


def agreeing(a: Sequence[int], a_end: int, b: Sequence[int], b_end: int, n: int) -> int:
    """How far back ``a`` before ``a_end`` agrees with ``b`` before ``b_end``, given their last ``n`` do:
    counted on token by token, up to COPY_MAX (a copy's run: lookup's, and the rewritten prompt's)."""
    while n < COPY_MAX and a_end - n > 0 and b_end - n > 0 and a[a_end - n - 1] == b[b_end - n - 1]:
        n += 1
    return n


class PromptRewrites:
    """Follows the answer along the prompt it copies, and learns what it writes instead.

    While the answer follows the prompt token for token from a cursor, nothing is learned. Where it
    departs, its own tokens are kept until it re-joins the prompt: REJOIN tokens in a row that occur
    in the prompt at most WINDOW tokens on from where it left. The prompt's tokens it skipped and the
    ones it wrote are then one substitution (old -> new), when both are short (a word or two, not an
    insertion or a deletion). A substitution seen SEEN times rewrites every occurrence of its old
    tokens (a rename recurs; a typo's fix or a verb's new tense mostly does not, and applied
    elsewhere drafted tokens that failed: replayed, copy-5, copy-7 and copy-12 fell under 0.95x of
    plain when a substitution seen once was applied). Where the answer writes more than MAX_NEW +
    REJOIN tokens without re-joining, it has left the prompt, and the lookup finds where it follows
    it again (``start_following``).
    """

    REJOIN = 3
    WINDOW = 12
    MAX_OLD, MAX_NEW = 8, 12
    SEEN = 2

    def __init__(self, prompt: Sequence[int], longest: int = 16):
        self.prompt = list(prompt)
        self.longest = longest                 # the longest match ``copy`` looks up (lookup's ngram_max)
        self._read = len(self.prompt)          # context tokens followed so far
        self._cursor: int | None = None        # the prompt token the answer is expected to copy next
        self._left: tuple[int, int] | None = None   # (answer token, prompt cursor) where it departed
        self._seen: dict[tuple[Tokens, Tokens], int] = {}
        self.substitutions: dict[Tokens, Tokens] = {}
        # the rewritten prompt, its n-grams -> their latest end, and its longest n-grams -> every end of
        # theirs (``copy``), made again when a substitution is learned
        self._rewritten: tuple[list[int], dict[Tokens, int], dict[Tokens, list[int]]] | None = None

    def start_following(self, at: int) -> None:
        """The answer's end matches the prompt ending before token ``at``: it copies from there on."""
        if self._cursor is None and self._left is None:
            self._cursor = at

    def follow(self, context: Sequence[int]) -> None:
        """Read the context's tokens after those read before (the prompt's own are never read)."""
        if len(context) < self._read:   # another context: what it follows starts over
            self._read, self._cursor, self._left = len(self.prompt), None, None
        for j in range(self._read, len(context)):
            self._step(context, j)
        self._read = len(context)

    def _step(self, context: Sequence[int], j: int) -> None:
        if self._left is None:
            if self._cursor is None:
                return
            if self._cursor < len(self.prompt) and self.prompt[self._cursor] == context[j]:
                self._cursor += 1
            else:
                self._left = (j, self._cursor)
            return
        since, where = self._left
        if j - since + 1 < self.REJOIN:
            return
        tail = list(context[j - self.REJOIN + 1:j + 1])
        for start in range(where, min(len(self.prompt) - self.REJOIN + 1, where + self.WINDOW)):
            if self.prompt[start:start + self.REJOIN] == tail:
                self._learn(tuple(self.prompt[where:start]), tuple(context[since:j - self.REJOIN + 1]))
                self._cursor, self._left = start + self.REJOIN, None
                return
        if j - since > self.MAX_NEW + self.REJOIN:
            self._cursor, self._left = None, None

    def _learn(self, old: Tokens, new: Tokens) -> None:
        if not (0 < len(old) <= self.MAX_OLD and 0 < len(new) <= self.MAX_NEW) or old == new:
            return
        seen = self._seen[old, new] = self._seen.get((old, new), 0) + 1
        if seen >= self.SEEN and self.substitutions.get(old) != new:
            self.substitutions[old] = new
            self._rewritten = None

    @property
    def text(self) -> list[int] | None:
        """The prompt with every substitution made (the longest old tokens first, left to right);
        None until one has been learned."""
        return self._made()[0] if self.substitutions else None

    def copy(self, context: Sequence[int], max_len: int) -> tuple[int, list[int]]:
        """(length, continuation) of the longest match of the context's end in the rewritten prompt,
        copied up to ``max_len`` tokens; (0, []) with none or before a substitution is learned. A shorter
        match copies from its latest occurrence. A match of ``longest`` tokens is measured on as far back
        as the two agree, up to COPY_MAX, at the occurrence agreeing furthest (the latest of equals), as
        lookup measures the prompt's own (its run, ``PromptLookupDrafter._longest_run``): lookup compares
        the two lengths, and measured to ``longest`` only, the rewritten copy lost to the prompt's wherever
        the answer had gone more than ``longest`` tokens since its last renamed token; the prompt's copy
        then broke at the next old name, and taught the shared acceptance that long copies of the prompt
        fail (docs/architecture.md, section 4)."""
        if not self.substitutions:
            return 0, []
        text, index, longest = self._made()
        for n in range(min(self.longest, len(context)), 0, -1):
            gram = tuple(context[len(context) - n:])
            end = index.get(gram)
            if end is not None:
                if n == self.longest:   # of several occurrences, the one agreeing furthest back (the latest of equals)
                    n, end = max((agreeing(text, e, context, len(context), n), e) for e in longest[gram])
                return n, text[end:end + max_len]
        return 0, []

    def _made(self) -> tuple[list[int], dict[Tokens, int], dict[Tokens, list[int]]]:
        if self._rewritten is None:
            olds = sorted(self.substitutions, key=len, reverse=True)
            text, i, prompt = [], 0, self.prompt
            while i < len(prompt):
                old = next((o for o in olds if tuple(prompt[i:i + len(o)]) == o), None)
                if old is None:
                    text.append(prompt[i])
                    i += 1
                else:
                    text.extend(self.substitutions[old])
                    i += len(old)
            index = {tuple(text[end - n:end]): end
                     for end in range(1, len(text)) for n in range(1, min(self.longest, end) + 1)}
            longest: dict[Tokens, list[int]] = {}
            for end in range(self.longest, len(text)):
                longest.setdefault(tuple(text[end - self.longest:end]), []).append(end)
            self._rewritten = text, index, longest
        return self._rewritten
