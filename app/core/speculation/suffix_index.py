"""The suffix index: what followed each stretch of tokens in past documents (answers, tool calls, tool
results, prompts), found fast enough to draft from at every round (SuffixDecoding, Oliaro et al. 2025,
over a suffix array instead of a tree). Kept on disk by suffix_store.py; drafted from by suffix_drafter.py.

Each ``Segment`` holds documents as one int32 array, each document after a separator, and every token
position ordered by the tokens before it, read backwards (its left context), up to DEPTH tokens: the
positions whose last k tokens equal the context's last k then form one range, nested in the range for
k - 1, found by a binary search per k. The longest k with a range is the match; the tokens at the
range's positions are the continuations, counted. Once a range is small, its positions' left contexts
are compared with the query's further back, up to RUN tokens: the match is then the positions that
agree furthest back (an answer written again agrees with its earlier self from the prompt on, where a
later version of the same file agrees only since its last change). A document never matches across its start: the
separator equals no token. The order is built with numpy, by doubling (the ranks of 1, 2, 4, 8 and 16
tokens of left context, each a sort), so a month of documents loads in seconds and takes 8 bytes a
token in memory, and no Python object per n-gram exists.

``SuffixIndex`` keeps the documents in segments of about a million tokens; a query asks each.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from app.core.params import COPY_MAX

DEPTH = 16           # the longest match the order is sorted by, in tokens
RUN = COPY_MAX       # how far back a small range's agreement with the query is measured (lookup's run's cap)
SEP = -1             # before each document: no token equals it, so no match crosses a document's start
COUNT_AT_MOST = 1024   # a match with more continuations is counted over this many, spread evenly
GATHER_AT_MOST = 256   # a range this small is narrowed with numpy; a larger one by bisection
SEGMENT_TOKENS = 1 << 20   # a segment's size: its sort keys pack in one int64 (``_sorted_by``)


@dataclass(frozen=True)
class Continuation:
    """The most frequent token after the longest match, with how often it and any token followed."""

    token: int
    length: int   # tokens of the context's end that matched, up to DEPTH (agreement past it only picks the places)
    count: int    # how often ``token`` followed the match
    total: int    # how often any token did


class Segment:
    """Documents, and every token position ordered by its left context (see the module docstring)."""

    def __init__(self, docs: Sequence[np.ndarray]):
        self.documents = len(docs)
        self.tokens = int(sum(len(doc) for doc in docs))
        pieces = []
        for doc in docs:
            pieces += [np.array([SEP], dtype=np.int32), np.asarray(doc, dtype=np.int32)]
        self.text = np.concatenate(pieces) if pieces else np.array([SEP], dtype=np.int32)
        self.order = _left_context_order(self.text)
        # where each token's range begins in ``order`` (the positions it precedes: sorted by it), for the
        # first step of a search: a table per distinct token, not a column per position
        first = self.text[self.order - 1]
        starts = np.concatenate([[0], np.flatnonzero(first[1:] != first[:-1]) + 1]) if len(first) else np.zeros(0)
        self.first_tokens = first[starts.astype(np.int64)]
        self.first_starts = np.append(starts, len(first)).astype(np.int64)

    def match(self, query: Sequence[int]) -> tuple[int, np.ndarray]:
        """(k, positions): the longest k for which the last k tokens of ``query`` occur, and the positions
        they precede (where the continuations stand: ``text`` at them), or an even spread of COUNT_AT_MOST
        of them; (0, none) when the last token never does. Up to DEPTH tokens by the order; past it, up
        to the query's length (at most RUN), where the positions are few (GATHER_AT_MOST): those of them
        that agree furthest back."""
        if not query or not len(self.order):
            return 0, self.order[:0]
        query = query[-RUN:]
        token = np.int32(query[-1])   # an int32 key: a Python int would cast the whole array to int64
        at = int(self.first_tokens.searchsorted(token))
        if at == len(self.first_tokens) or self.first_tokens[at] != token:
            return 0, self.order[:0]
        lo, hi = int(self.first_starts[at]), int(self.first_starts[at + 1])
        k, depth = 1, min(DEPTH, len(query))
        while k < depth:
            # narrowed by the next token back (sorted within the range): most ranges end here, cheaply
            narrow_lo, narrow_hi = self._narrow(lo, hi, k + 1, int(query[-k - 1]))
            if narrow_lo == narrow_hi:
                break
            k, lo, hi = k + 1, narrow_lo, narrow_hi
            if hi - lo <= GATHER_AT_MOST:
                return self._agreeing(self.order[lo:hi], k, query)
        return k, self._spread(self.order[lo:hi])

    def _agreeing(self, positions: np.ndarray, k: int, query: Sequence[int]) -> tuple[int, np.ndarray]:
        """Of ``positions``, whose last k tokens are the query's, those whose left context agrees with the
        query's furthest back, and how far: each compared token by token past k, up to the query's length."""
        if k == len(query):
            return k, positions
        back = np.arange(k + 1, len(query) + 1)
        # [position, k + 1 back, k + 2, ...]; before the text's start reads its first separator: a mismatch
        rows = self.text[np.maximum(positions[:, None] - back, 0)]
        differ = rows != np.asarray(query[::-1][k:], dtype=np.int32)
        agree = np.where(differ.any(axis=1), differ.argmax(axis=1), differ.shape[1])
        most = int(agree.max())
        return k + most, positions[agree == most]

    @staticmethod
    def _spread(positions: np.ndarray) -> np.ndarray:
        """``positions``, or an even spread of COUNT_AT_MOST of them."""
        if len(positions) > COUNT_AT_MOST:
            positions = positions[np.linspace(0, len(positions) - 1, COUNT_AT_MOST).astype(np.int64)]
        return positions

    def _narrow(self, lo: int, hi: int, k: int, token: int) -> tuple[int, int]:
        """The part of ``order[lo:hi]`` (positions sharing k - 1 tokens of left context) whose k-th
        token back is ``token``: those tokens are sorted within the range."""
        if hi - lo <= GATHER_AT_MOST:
            column, key = self.text[self.order[lo:hi] - k], np.int32(token)
            return lo + int(column.searchsorted(key, "left")), lo + int(column.searchsorted(key, "right"))
        return self._bisect(lo, hi, k, token, right=False), self._bisect(lo, hi, k, token, right=True)

    def _bisect(self, lo: int, hi: int, k: int, token: int, right: bool) -> int:
        text, order = self.text, self.order
        while lo < hi:
            middle = (lo + hi) // 2
            value = int(text[int(order[middle]) - k])
            if value < token or (right and value == token):
                lo = middle + 1
            else:
                hi = middle
        return lo


def _left_context_order(text: np.ndarray) -> np.ndarray:
    """The positions of ``text``'s tokens (not its separators), sorted by the DEPTH tokens before each,
    nearest first (ties by position): ranks of 1, 2, 4 ... DEPTH tokens of left context, each pair of
    ranks (the nearer half, the farther one) ranked again with one sort, until every rank differs."""
    n = len(text)
    rank = np.zeros(n, dtype=np.int64)
    rank[1:] = text[:-1].astype(np.int64) + 2   # a separator ranks 1, before the text's start 0
    span, distinct = 1, 0
    while span < DEPTH and distinct < n:
        farther = np.zeros(n, dtype=np.int64)
        farther[span:] = rank[:-span]
        rank, distinct = _dense_ranks(rank, farther)
        span *= 2
    positions = np.flatnonzero(text != SEP)
    return positions[_sorted_by(rank[positions], np.zeros(len(positions), dtype=np.int64))].astype(np.int32)


def _dense_ranks(near: np.ndarray, far: np.ndarray) -> tuple[np.ndarray, int]:
    """Each position's rank (0, 1, ...) among the pairs (near, far), equal pairs equal; and how many differ."""
    order = _sorted_by(near, far)
    near_s, far_s = near[order], far[order]
    starts = np.empty(len(order), dtype=np.int64)
    starts[:1] = 0
    starts[1:] = (near_s[1:] != near_s[:-1]) | (far_s[1:] != far_s[:-1])
    ranks = np.empty(len(order), dtype=np.int64)
    ranks[order] = np.cumsum(starts)
    return ranks, int(ranks.max(initial=-1)) + 1


def _sorted_by(near: np.ndarray, far: np.ndarray) -> np.ndarray:
    """The indices sorting (near, far, index). Both keys and the index packed in one int64 and sorted by
    value (numpy's vectorised sort, ~15x an argsort) where they fit in 63 bits, as they do for a segment
    of SEGMENT_TOKENS; a lexicographic argsort otherwise."""
    n = len(near)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    key_bits = max(int(near.max()), int(far.max()), 1).bit_length()
    index_bits = max(n - 1, 1).bit_length()
    if 2 * key_bits + index_bits > 63:
        return np.lexsort((np.arange(n), far, near))
    packed = (near << (key_bits + index_bits)) | (far << index_bits) | np.arange(n, dtype=np.int64)
    packed.sort()
    return packed & ((1 << index_bits) - 1)


class SuffixIndex:
    """Documents, searchable, in segments of about SEGMENT_TOKENS: a document joins the last segment,
    which is built again (at most SEGMENT_TOKENS tokens: a fraction of a second), or starts a new one.
    Adding runs on one thread while another drafts: the segments are swapped whole, never changed in place."""

    def __init__(self, docs: Sequence[np.ndarray] = ()):
        self._docs: list[np.ndarray] = []
        self._segments: tuple[Segment, ...] = ()
        self._last: list[np.ndarray] = []   # the documents of the last segment
        self.replace(docs)

    @property
    def documents(self) -> int:
        return len(self._docs)

    @property
    def tokens(self) -> int:
        return sum(segment.tokens for segment in self._segments)

    def docs(self) -> list[np.ndarray]:
        return list(self._docs)

    def add(self, doc: Sequence[int]) -> None:
        """Make one more document searchable."""
        doc = np.asarray(doc, dtype=np.int32)
        self._docs.append(doc)
        if self._last and sum(len(d) for d in self._last) + len(doc) <= SEGMENT_TOKENS:
            self._last.append(doc)
            self._segments = self._segments[:-1] + (Segment(self._last),)
        else:
            self._last = [doc]
            self._segments = self._segments + (Segment(self._last),)

    def replace(self, docs: Sequence[np.ndarray]) -> None:
        """Hold exactly ``docs`` (at load, or after a compaction dropped the oldest)."""
        self._docs, groups, size = [np.asarray(doc, dtype=np.int32) for doc in docs], [], SEGMENT_TOKENS + 1
        for doc in self._docs:
            if size + len(doc) > SEGMENT_TOKENS:
                groups.append([])
                size = 0
            groups[-1].append(doc)
            size += len(doc)
        self._last = groups[-1] if groups else []
        self._segments = tuple(Segment(group) for group in groups)

    def continuation(self, query: Sequence[int]) -> Continuation | None:
        """The most frequent token after the longest match of ``query``'s end over every segment, counted
        at the places that agree with it furthest back (up to RUN tokens; the match's length is reported up
        to DEPTH); ties: the token that followed it last. None when its last token never occurs.

        An answer written again (an agent's retried turn, a regenerated reply) agrees with its earlier self
        back into the prompt, and a later answer that changed the same file again agrees with it only since
        its last change: the earlier answer is the one drafted, however often the later version was
        written. Of a tie the latest is taken because a document holds its prompt before its answer: where
        an answer changed a line of the file it was given, the line's start is followed once by the old
        text and once by the new, and an answer written again writes the new one."""
        segments = self._segments   # one snapshot: another thread may swap them
        found = [(i, segment, *segment.match(query)) for i, segment in enumerate(segments)]
        length = max((k for _, _, k, _ in found), default=0)
        if length == 0:
            return None
        where = [(i, segment, positions) for i, segment, k, positions in found if k == length]
        followers = np.concatenate([segment.text[positions] for _, segment, positions in where])
        length = min(length, DEPTH)   # the chain's rules and the acceptance buckets read a match up to DEPTH
        if len(followers) == 1:
            return Continuation(int(followers[0]), length, 1, 1)
        # how recent each follower is: later segments hold later documents, and within one, later positions
        recency = np.concatenate([positions.astype(np.int64) + (i << 40) for i, _, positions in where])
        tokens, inverse, counts = np.unique(followers, return_inverse=True, return_counts=True)
        latest = np.full(len(tokens), -1, dtype=np.int64)
        np.maximum.at(latest, inverse, recency)
        best = int(np.argmax(np.where(counts == counts.max(), latest, -1)))
        return Continuation(int(tokens[best]), length, int(counts[best]), int(counts.sum()))

    def chain(self, context: Sequence[int], max_len: int) -> Iterator[Continuation]:
        """Up to ``max_len`` continuations, chained, looked up as they are asked for: each with the ones
        before it appended to the context; the chain ends where the context's end occurs nowhere."""
        query = [int(t) for t in context[-RUN:]]
        for _ in range(max_len):
            found = self.continuation(query)
            if found is None:
                return
            yield found
            query = (query + [found.token])[-RUN:]
