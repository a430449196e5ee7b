"""One context of the main model for a server's slots, each a sequence of its own, whose verify batches
are decoded together.

Slots that each had a context of their own took their rounds in turn, one decode each, so four clients
shared one answer's speed (15 t/s summed on 2 cores where llama-server's batching reached 21). Here the
slots' sessions are sequences of one context (``LlamaSession(shared=..., seq=i)``, keys and values in
one unified cache as large as theirs together), and ``decode_together`` puts every waiting slot's batch
(its last token and its draft) into one llama_decode, each token in its slot's sequence at its slot's
positions, every row's logits read: one pass over the weights for all of them.

Only a main model whose memory is keys and values (attention): a recurrent state would need a rollback
snapshot per sequence that a merged batch does not take.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from app.core.errors import DecodeError
from app.core.llama import library
from app.core.llama.binding import ATTENTION, LlamaModel, LlamaSession, context_params, logits_view, new_context
from app.core.llama.library import lib
from app.core.llama.threads import ThreadTuner


@dataclass(eq=False)
class MergedVerify:
    """A slot's verify batch waiting to be decoded with the others' (the loop yields it; the slots'
    scheduler decodes it and resumes the loop): ``rows`` every token's logits, ``share_s`` this batch's
    share of the decode's time (by its tokens), or ``error``."""

    session: LlamaSession
    tokens: list[int]
    rows: np.ndarray | None = None
    share_s: float = 0.0
    error: Exception | None = field(default=None)


class SharedContext:
    """``n_seq`` sequences of ``n_ctx`` tokens each in one context of ``model``."""

    def __init__(self, model: LlamaModel, n_ctx: int, n_seq: int, threads: ThreadTuner, n_batch: int = 512):
        if model.memory != ATTENTION:
            raise ValueError("a shared context needs a main model whose memory is keys and values")
        llama_cpp = lib()
        self.model = model
        self.threads = threads
        cparams = context_params(n_ctx * n_seq, n_batch, threads.current)
        cparams.n_seq_max = n_seq
        cparams.kv_unified = True     # one cache: a slot may hold up to n_ctx of it, as its own context did
        self.raw_context = new_context(model, cparams)
        self.n_ctx = n_ctx
        self.n_seq = n_seq
        self.n_batch = int(llama_cpp.llama_n_batch(self.raw_context))
        self._batch = llama_cpp.llama_batch_init(self.n_batch, 0, 1)
        np.ctypeslib.as_array(self._batch.n_seq_id, shape=(self.n_batch,))[:] = 1
        self._tokens = np.ctypeslib.as_array(self._batch.token, shape=(self.n_batch,))
        self._pos = np.ctypeslib.as_array(self._batch.pos, shape=(self.n_batch,))
        self._flags = np.ctypeslib.as_array(self._batch.logits, shape=(self.n_batch,))
        self.merged = 0            # decodes that held several slots' batches (for tests and /metrics)

    def session(self, seq: int) -> LlamaSession:
        return LlamaSession(self.model, self.n_ctx, threads=self.threads, shared=self, seq=seq)

    def decode_together(self, waiting: Sequence[MergedVerify]) -> None:
        """Decode every waiting batch, as few llama_decodes as the batch size allows (one, for a server's
        slots and drafts), and give each its rows and its share of the time; a batch alone is decoded by
        its session as any other. A failed decode is each waiting batch's error."""
        groups: list[list[MergedVerify]] = [[]]
        for item in waiting:
            if groups[-1] and sum(len(w.tokens) for w in groups[-1]) + len(item.tokens) > self.n_batch:
                groups.append([])
            groups[-1].append(item)
        for group in groups:
            try:
                self._decode_group(group)
            except DecodeError as exc:
                for item in group:
                    item.error = exc

    def _decode_group(self, group: list[MergedVerify]) -> None:
        if len(group) == 1:
            item = group[0]
            start = time.perf_counter()
            item.rows = item.session.eval(item.tokens, all_logits=True)
            item.share_s = time.perf_counter() - start
            return
        llama_cpp = lib()
        starts, n = [], 0
        for item in group:
            starts.append(n)
            session = item.session
            end = n + len(item.tokens)
            self._tokens[n:end] = item.tokens
            self._pos[n:end] = np.arange(len(session.cached), len(session.cached) + len(item.tokens))
            for i in range(n, end):
                self._batch.seq_id[i][0] = session.seq
            self._flags[n:end] = 1
            n = end
        self._batch.n_tokens = n
        threads = self.threads.current
        llama_cpp.llama_set_n_threads(self.raw_context, threads, threads)
        t0 = time.perf_counter()
        rc = llama_cpp.llama_decode(self.raw_context, self._batch)
        llama_cpp.llama_synchronize(self.raw_context)
        seconds = time.perf_counter() - t0
        if rc != 0:
            for item in group:   # what the batch may have left behind of each sequence goes
                item.session._after_failed_decode(len(item.session.cached))
            raise DecodeError(f"llama.cpp failed to decode the slots' batch of {n} tokens (code {rc}). "
                              f"{library.take_errors()}".rstrip())
        self.merged += 1
        for item, first in zip(group, starts):
            session = item.session
            session.decode_s += seconds * len(item.tokens) / n
            session._cached.extend(int(t) for t in item.tokens)
            item.rows = logits_view(llama_cpp.llama_get_logits_ith(self.raw_context, first), len(item.tokens),
                                    session.n_vocab).copy()
            item.share_s = seconds * len(item.tokens) / n

    def close(self) -> None:
        if self.raw_context:
            lib().llama_batch_free(self._batch)
            lib().llama_free(self.raw_context)
            self.raw_context = None


def share_main(engine, n_slots: int) -> SharedContext | None:
    """Make ``engine``'s main cache sequence 0 of a context for ``n_slots`` server slots (the others'
    are ``engine.another_slot(shared, i)``), its own context closed; None, nothing changed, for one
    slot or a main model whose memory is not keys and values."""
    main = engine.main
    if n_slots < 2 or main.memory != ATTENTION:
        return None
    shared = SharedContext(main.model, main.n_ctx, n_slots, main.threads, main.n_batch)
    engine.use_main(shared.session(0))
    return shared
