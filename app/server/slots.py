"""The server's engine thread: several requests answered at once, each in a slot (``quickdraft serve``'s
own thread, ThreadedJobs, or the window's, HostedJobs).

A slot is an engine of its own on the same loaded models (``Engine.another_slot``: its own KV cache and
drafting contexts, the pair's learned costs shared): ``quickdraft serve`` opens its ``--parallel`` slots
as it starts, the window's server when a client first needs one.
The thread takes one step (one event: a round of drafting and verification, a chunk of prompt read) of
every busy slot in turn, so a short answer is not held behind a long one, and each slot drafts and
verifies for itself. A request goes to the free slot whose cache it continues, so a client that comes
back reads only its new tokens. Slots answer one after another on the thread: their batches are not
yet merged into one decode (docs/architecture.md, section 6)."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Generator, Protocol, Sequence

from app.core.errors import ModelLoadError, QuickdraftError
from app.core.frontdoor import AnswerEngine, LoadedPair
from app.core.params import DEFAULT_DRAFTER, DrafterKind, SpeculationParams
from app.core.llama.shared_context import MergedVerify, SharedContext, share_main
from app.core.speculation.loop import SHARED_READ_CHUNK
from app.core.speculation.events import Reading, Round, TokenPiece
from app.server.metrics import ServerMetrics
from app.server.api import NO_LIMIT
from app.server.errors import ApiError
from app.server.worker import Failed, Job, JobQueue, internal_error

DEFAULT_PARALLEL = 4   # as LM Studio: four requests answered at once
# a free slot's cache counts as the request's own when the prompt keeps at least this much of it (then
# reusing it loses little); otherwise a new slot is opened, so another client's cache is not evicted
KEEP_FRACTION = 0.5
# drafters that read the main model's hidden states: their slots keep contexts of their own
HEADS = (DrafterKind.MTP, DrafterKind.EAGLE3, DrafterKind.DFLASH)


class SlotEngine(AnswerEngine, Protocol):
    """An engine that can answer in several slots (the local Engine)."""

    def another_slot(self) -> "SlotEngine":
        """Another engine on the same models, with contexts of its own."""

    def cached_prefix(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens``, from the start, the cache holds."""

    read_chunk: int   # a long prompt's tokens read per step

    @property
    def cached_length(self) -> int:
        """How many tokens the cache holds."""


@dataclass(eq=False)
class Slot:
    index: int
    engine: SlotEngine | None      # None only in /slots' picture of a slot not opened yet
    job: Job | None = None
    steps: Generator | None = None    # the job's events (JobQueue._answer)
    task: int = -1                    # the job's number, llama-server's id_task
    started: float = 0.0
    decoded: int = 0                  # tokens of its answer so far
    last_used: float = 0.0

    def take(self, job: Job, steps: Generator, task: int) -> None:
        self.job, self.steps, self.task = job, steps, task
        self.started = self.last_used = time.perf_counter()
        self.decoded = 0

    def release(self) -> None:
        """The answer ended: an idle slot shows no budget and nothing decoded, as llama-server's."""
        self.job = self.steps = None
        self.decoded = 0
        self.last_used = time.perf_counter()

    def describe(self, n_ctx: int, speculative: bool) -> dict:
        """The slot as llama-server's /slots shows one (the fields Quickdraft has)."""
        return {"id": self.index, "id_task": self.task, "n_ctx": n_ctx, "speculative": speculative,
                "is_processing": self.job is not None,
                "n_cached": self.engine.cached_length if self.engine is not None else 0,
                "next_token": [{"has_next_token": self.job is not None, "n_remain": self._remaining(),
                                "n_decoded": self.decoded}]}   # a list of one, as llama-server's

    def _remaining(self) -> int:
        """Tokens the answer may still write (llama-server's n_remain): -1 without a limit or a job."""
        limit = self.job.sampling.max_tokens if self.job is not None and self.job.sampling is not None else None
        return -1 if limit is None or limit >= NO_LIMIT else max(0, limit - self.decoded)


class SlotPool:
    """The slots, opened as requests need them up to ``limit`` (``open_engine`` makes a slot's engine).
    ``first``: a slot that is already there (the loaded engine itself; its owner closes it)."""

    def __init__(self, open_engine: Callable[[], SlotEngine], limit: int, first: SlotEngine | None = None,
                 shared: SharedContext | None = None, read_chunk: int | None = None):
        self.shared = shared   # the context whose sequences the slots' main models are, if they share one
        self.read_chunk = read_chunk   # a long prompt's tokens read per step (serve --batch-size); None: as below
        self.slots = [Slot(0, first)] if first is not None else []
        self._owned_from = len(self.slots)   # the slots this pool opened, and closes
        self.limit = limit
        self._open_engine = open_engine
        self._tasks = itertools.count()
        for slot in self.slots:
            self._share(slot.engine)

    def _share(self, engine: SlotEngine) -> None:
        """Beside other slots, a long prompt is read in smaller chunks: each is a step the others wait for."""
        if self.read_chunk or self.limit > 1:
            engine.read_chunk = self.read_chunk or SHARED_READ_CHUNK

    @property
    def busy(self) -> list[Slot]:
        return [slot for slot in self.slots if slot.job is not None]

    def has_room(self) -> bool:
        return len(self.slots) < self.limit or any(slot.job is None for slot in self.slots)

    def busy_for(self, pinned: int) -> bool:
        """Whether a job pinned to slot ``pinned`` (id_slot; -1: none) must wait for it."""
        return 0 <= pinned < len(self.slots) and self.slots[pinned].job is not None

    def slot_for(self, tokens: Sequence[int], pinned: int = -1) -> Slot | None:
        """Slot ``pinned`` when the request names one; else the free slot whose cache the prompt continues;
        else an empty one; else a new slot while there is room; else the free slot used least recently.
        None when every slot is busy."""
        if pinned >= 0:
            return None if self.busy_for(pinned) else self.slots[pinned]
        free = [slot for slot in self.slots if slot.job is None]
        kept = {slot.index: slot.engine.cached_prefix(tokens) for slot in free}
        own = [slot for slot in free if slot.engine.cached_length
               and kept[slot.index] >= KEEP_FRACTION * slot.engine.cached_length]
        if own:
            return max(own, key=lambda slot: kept[slot.index])
        empty = [slot for slot in free if not slot.engine.cached_length]
        if empty:
            return empty[0]
        opened = self._open() if len(self.slots) < self.limit else None
        if opened is not None:
            return opened
        return min(free, key=lambda slot: slot.last_used) if free else None

    def next_task(self) -> int:
        return next(self._tasks)

    def open_through(self, index: int) -> None:
        """Open the slots up to ``index`` (a request pinned to one not opened yet), as many as fit."""
        while len(self.slots) <= index < self.limit and self._open() is not None:
            pass

    def open_all(self) -> None:
        """Open every slot now (as llama-server allocates its slots at start): the first burst of
        requests does not wait for contexts to be made; those that do not fit are said at once."""
        while len(self.slots) < self.limit and self._open() is not None:
            pass

    def _open(self) -> Slot | None:
        """A new slot, or None (and no more tried) when its contexts do not fit."""
        try:
            engine = self._open_engine()
        except QuickdraftError as exc:
            print(f"quickdraft: answering {len(self.slots)} requests at once at most: another slot does not "
                  f"fit ({exc})", file=sys.stderr)
            self.limit = max(1, len(self.slots))
            return None
        self._share(engine)
        self.slots.append(Slot(len(self.slots), engine))
        return self.slots[-1]

    def close(self) -> None:
        """Close the engines this pool opened (the first slot's owner closes its own)."""
        for slot in self.slots[self._owned_from:]:
            slot.engine.close()
        del self.slots[self._owned_from:]
        if self.shared is not None:
            self.shared.close()


class SlotJobs(JobQueue):
    """A queue whose jobs are answered in slots, a step of each busy slot a turn, on the engine's thread."""

    _pool: SlotPool | None = None

    @property
    def shares_context(self) -> bool:
        """Whether the slots' verify batches are decoded together, on one shared context."""
        return self._pool is not None and self._pool.shared is not None

    def slots(self) -> list[dict]:
        """Each slot as llama-server's /slots shows it (any thread: a snapshot)."""
        pool = self._pool
        if pool is None or self.pair is None:
            return []
        speculative = self.drafting is not DrafterKind.NONE
        opened = [slot.describe(self.pair.n_ctx, speculative) for slot in list(pool.slots)]
        # slots not opened yet (or that did not fit: pool.limit) are idle with nothing cached
        unopened = [Slot(index, None).describe(self.pair.n_ctx, speculative) for index in range(len(opened), pool.limit)]
        return opened + unopened

    def _work_left(self) -> bool:
        with self._cond:
            return bool(self._pool.busy) or (bool(self._waiting) and not self._stopping)

    def _turn_of_steps(self) -> None:
        """Admit waiting jobs to free slots, then take one step of every busy slot; the verify batches
        the steps left waiting (slots on a shared context) are decoded together, each slot going on
        with its rows at its next step."""
        self._admit()
        waiting = [item for item in map(self._step, self._pool.busy) if item is not None]
        if waiting:
            self._pool.shared.decode_together(waiting)
            self.metrics.record_decode(len(waiting), sum(len(item.tokens) for item in waiting))

    def _admit(self) -> None:
        """Waiting jobs, oldest first, into free slots (calls are answered at once, without one). A job
        pinned to a busy slot (id_slot) waits for it without holding up the jobs behind it."""
        held: list[Job] = []
        try:
            while True:
                with self._cond:
                    if self._stopping or not self._waiting or (self._waiting[0].call is None and not self._pool.has_room()):
                        return
                    job = self._waiting.popleft()
                    if self._pool.busy_for(job.pinned):
                        held.append(job)
                        continue
                    self._answering.append(job)
                if job.call is not None:
                    self._finish(job, self._run_call(job), time.perf_counter(), counted=False)
                    continue
                if not self._place(job):
                    return
        finally:
            with self._cond:
                self._waiting.extendleft(reversed(held))

    def _engine_for(self, job: Job) -> SlotEngine:
        """A call on a slot runs on that slot's engine; llama-server's 400 for a slot that is not there."""
        if job.on_slot < 0:
            return self._engine
        self._pool.open_through(job.on_slot)
        if job.on_slot >= len(self._pool.slots):
            raise ApiError(400, f"Invalid slot ID: the slots are 0 to {len(self._pool.slots) - 1}; got {job.on_slot}.")
        return self._pool.slots[job.on_slot].engine

    def _place(self, job: Job) -> bool:
        """Prepare ``job`` and give it a slot; False (the job back at the queue's head) when none is free."""
        started = time.perf_counter()
        self._pool.open_through(job.request.id_slot)
        if job.request.id_slot >= len(self._pool.slots):
            self._finish(job, Failed(ApiError(400, f"'id_slot' must be -1 (any slot) or a slot from 0 to "
                                                   f"{len(self._pool.slots) - 1}; got {job.request.id_slot}.",
                                              param="id_slot")), started, counted=False)
            return True
        try:
            tokens = self._prepare(job)
            slot = self._pool.slot_for(tokens, job.request.id_slot) if not isinstance(tokens, Failed) else None
        except Exception as exc:
            self._finish(job, internal_error(exc), started)
            return True
        if isinstance(tokens, Failed):
            self._finish(job, tokens, started, counted=False)
            return True
        if slot is None:   # another slot did not fit after all: the job waits for a free one
            with self._cond:
                self._answering.remove(job)
                self._waiting.appendleft(job)
            return False
        job.slot = slot.index
        slot.take(job, self._answer(job, slot.engine, tokens), self._pool.next_task())
        return True

    def _step(self, slot: Slot) -> MergedVerify | None:
        """The slot's answer up to its next decode, its events sent: one event for a slot with a context
        of its own; on a shared context, up to its next verify batch, returned to be decoded with the
        others' (every busy slot's then waits on one decode a turn), or a chunk of prompt read. Its last
        item ends the job and frees the slot."""
        job = slot.job
        while True:
            try:
                item = next(slot.steps)
            except StopIteration as end:
                slot.release()
                self._finish(job, end.value, slot.started)
                return None
            except Exception as exc:  # a defect, not the client's doing: answer 500, keep serving
                slot.release()
                self._finish(job, internal_error(exc), slot.started)
                return None
            if isinstance(item, MergedVerify):
                return item
            if isinstance(item, TokenPiece):
                slot.decoded += len(item.token_ids)
            elif isinstance(item, Round) and self._pool.shared is None:   # its verify decoded alone
                self.metrics.record_decode(1, item.drafted + 1)
            self._send(job, item)
            if self._pool.shared is None or isinstance(item, Reading):
                return None

    def _drop_slots(self, error: ApiError) -> None:
        """End every answer in progress with ``error`` and close the slots' engines (the models they
        borrow are about to go)."""
        if self._pool is None:
            return
        for slot in self._pool.busy:
            job = slot.job
            slot.steps.close()
            slot.release()
            self._finish(job, Failed(error), slot.started, counted=False)
        self._pool.close()


class ThreadedJobs(SlotJobs):
    """Owns the Engine on a thread of its own and answers up to ``parallel`` requests at once (slots);
    up to ``max_waiting`` more wait. ``merge`` False keeps each slot's decodes its own (llama-server's
    --no-cont-batching) where they could have been decoded together."""

    def __init__(self, load_engine: Callable[[], AnswerEngine], speculation: SpeculationParams = SpeculationParams(),
                 drafter: DrafterKind = DEFAULT_DRAFTER, max_waiting: int = 8, metrics: ServerMetrics | None = None,
                 parallel: int = DEFAULT_PARALLEL, merge: bool = True, read_chunk: int | None = None):
        super().__init__(speculation, drafter, max_waiting, metrics)
        if parallel < 1:
            raise ValueError("parallel must be at least 1")
        self.parallel = parallel
        self.merge = merge
        self.read_chunk = read_chunk
        self._load_engine = load_engine
        self._ready = threading.Event()
        self._load_error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="quickdraft-engine", daemon=True)

    def start(self) -> LoadedPair:
        """Load the engine on its thread; raises the loader's error (a QuickdraftError) here."""
        self._thread.start()
        self._ready.wait()
        if self._load_error is not None:
            raise self._load_error
        return self.pair

    def stop(self, timeout: float = 30.0) -> None:
        """Cancel what runs and waits, then unload the engine on its thread."""
        self._refuse_all()
        if self._thread.is_alive():
            self._thread.join(timeout)

    @property
    def available(self) -> bool:
        return self._thread.is_alive() and super().available

    def _run(self) -> None:
        try:
            self._use(self._load_engine())
        except BaseException as exc:  # reported by start() on the caller's thread
            self._load_error = exc
            self._ready.set()
            return
        self._pool = self._slot_pool()
        self._pool.open_all()
        self.parallel = self._pool.limit   # as many as fit
        self._ready.set()
        try:
            while self._turn():
                pass
        finally:
            self._pool.close()
            self._engine.close()

    def _slot_pool(self) -> SlotPool:
        """The slots: sequences of one shared context whose verify batches are decoded together, where
        the main model's memory is keys and values and no head drafts (a recurrent state, or a head's
        hidden states, would need a sequence's own decode); else contexts of their own. The loaded
        engine is the first slot either way."""
        engine, shared = self._engine, None
        if self.merge and self.parallel > 1 and self.drafting not in HEADS and hasattr(engine, "use_main"):   # local
            try:
                shared = share_main(engine, self.parallel)
            except ModelLoadError as exc:
                print(f"quickdraft: the slots take their turns, each decoding alone ({exc})", file=sys.stderr)
        if shared is None:
            return SlotPool(engine.another_slot, self.parallel, first=engine, read_chunk=self.read_chunk)
        seqs = itertools.count(1)
        return SlotPool(lambda: engine.another_slot(shared, next(seqs)), self.parallel, first=engine, shared=shared,
                        read_chunk=self.read_chunk)

    def _turn(self) -> bool:
        """Wait for work, then one turn of steps. False once the queue stops and the slots' cancelled
        answers have ended."""
        with self._cond:
            while not self._waiting and not self._pool.busy and not self._stopping:
                self._cond.wait()
            if self._stopping and not self._pool.busy:
                return False
        self._turn_of_steps()
        return True


class HostedJobs(SlotJobs):
    """The server's jobs served on a thread that someone else owns, with an engine it lends: the
    window's engine thread, which also runs the window's own chat. The clients' slots are engines of
    their own on the lent engine's models (the window's cache stays the window's). ``wake`` is called
    (from any thread) when there is work; the host then calls ``serve_next()`` on its thread, which takes
    one turn of steps (a round of each busy slot) and wakes the host again while work is left, so the
    window's own requests, queued meanwhile, run between two turns: the window never waits for a
    client's whole answer."""

    def __init__(self, engine: AnswerEngine, wake: Callable[[], None],
                 speculation: SpeculationParams = SpeculationParams(), drafter: DrafterKind = DEFAULT_DRAFTER,
                 max_waiting: int = 8, metrics: ServerMetrics | None = None,
                 observe: Callable[[Job, object], None] | None = None, parallel: int = DEFAULT_PARALLEL):
        super().__init__(speculation, drafter, max_waiting, metrics, observe)
        self.parallel = parallel
        self._wake = wake
        self.lend(engine)

    def lend(self, engine: AnswerEngine) -> None:
        """Serve with ``engine``'s models from now on (the host loaded another pair); on the host's thread.
        Answers still running on the pair before are ended (503)."""
        self.release()
        self._use(engine)
        self._pool = SlotPool(engine.another_slot, self.parallel)

    def release(self) -> None:
        """Close the slots before the lent engine's models go (the host unloads them); on the host's thread.
        Answers in progress are ended with a 503 their clients can retry."""
        self._drop_slots(ApiError(503, "The window unloaded the model this request was answered with.",
                                  type="unavailable_error", retry_after=5))
        self._pool = None

    def serve_next(self) -> bool:
        """One turn of steps on the calling (the host's) thread. Returns whether work is left; the host
        is woken again for it."""
        if self._pool is None:
            return False
        self._turn_of_steps()
        more = self._work_left()
        if more:
            self._wake()
        return more

    def stop(self) -> None:
        """Refuse new jobs, answer the waiting ones 503, end the answers in progress and close the slots.
        The engine stays with its owner; call on the host's thread."""
        self._refuse_all()
        self._drop_slots(ApiError(503, "The server is stopping.", type="unavailable_error", retry_after=5))
        self._pool = None

    def _job_waiting(self) -> None:
        self._wake()
