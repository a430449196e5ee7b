"""A main model's suffix index kept across runs: loaded from its log (suffix_store.py) into the index
(suffix_index.py) when the engine loads, and fed after each answer, off the token path.

The log is read when the engine loads (reading it checks every record: a fraction of a second at the
bound), and the index is built from it on the writer thread (seconds at the bound: scripts/
suffix_index_size.py), so that loading the model is not held up; the first answer that drafts from it
waits in its prompt phase until it is built (``ready``).

What is fed: after each answer, the tokens of the request's context that are new to the conversation
(the prompt past what the previous answer of the same engine already fed, then the answer), as one
document; tool calls and tool results are in the prompt, so they are fed too. The append (an fsync)
and the index's rebuild of its last segment run on a writer thread: the answer's last event is not
held up by them, and the next request drafts from the new document once the thread is done.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Iterator, Sequence

import numpy as np

from app.core.gguf.fingerprint import vocabulary_fingerprint
from app.core.gguf.info import GGUFInfo
from app.core.lm import common_prefix_length
from app.core.params import SuffixConfig
from app.core.speculation.events import Event, Summary, TokenPiece
from app.core.speculation.suffix_index import SuffixIndex
from app.core.speculation.suffix_store import SuffixStore, VocabularyMismatchError, index_key

log = logging.getLogger(__name__)


class SuffixMemory:
    """One main model's index and its log, fed on a writer thread. ``problem`` holds the last write
    that failed (a full disk): the index still holds the document for this run."""

    def __init__(self, store: SuffixStore, index: SuffixIndex):
        self.store = store
        self.index = index
        self.problem = ""
        self._queue: queue.Queue[tuple[str, list[np.ndarray]] | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.ready = threading.Event()   # the index holds what the log held

    @classmethod
    def open(cls, config: SuffixConfig, model_path: str, fingerprint: str, model_name: str) -> "SuffixMemory":
        """The index of the main model at ``model_path``, read from its log. Raises the store's
        VocabularyMismatchError for another vocabulary's index, OSError where it cannot be read."""
        store = SuffixStore(config.folder / index_key(model_path), fingerprint, model_name, config.limit_bytes)
        memory = cls(store, SuffixIndex())
        memory._put("load", store.open())   # built on the writer thread: the model answers meanwhile
        return memory

    def feed(self, tokens: Sequence[int]) -> None:
        """Add one document (kept on disk, then searchable), on the writer thread."""
        if len(tokens):
            self._put("add", [np.asarray(tokens, dtype=np.int32)])

    def _put(self, job: str, docs: list[np.ndarray]) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._write, name="suffix-index", daemon=True)
                self._thread.start()
        self._queue.put((job, docs))

    def flush(self) -> None:
        """Wait until the index is built and every document fed is on disk and searchable."""
        self._queue.join()

    def close(self) -> None:
        """Write what was fed and stop the writer thread."""
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.put(None)
            thread.join()

    def _write(self) -> None:
        while True:
            job = self._queue.get()
            try:
                if job is None:
                    return
                if job[0] == "load":
                    self.index.replace(job[1])
                    self.ready.set()
                else:
                    self._add(job[1][0])
            finally:
                self._queue.task_done()

    def _add(self, doc: np.ndarray) -> None:
        try:
            kept = self.store.append(doc, self.index.docs() + [doc])
        except OSError as exc:
            self.problem = f"The suffix index could not be written ({exc}); this run still drafts from it."
            log.warning(self.problem)
            kept = None
        if kept is None:
            self.index.add(doc)
        else:
            self.index.replace(kept)   # compacted: the oldest documents are gone from disk, and from here


class ConversationFeed:
    """What one engine (a window's, a server slot's) has fed: the next answer feeds only what is new."""

    def __init__(self, memory: SuffixMemory):
        self.memory = memory
        self._fed: list[int] = []   # the last context fed: the previous prompt and its answer

    def after(self, prompt: Sequence[int], answer: Sequence[int]) -> None:
        """Feed the prompt past what the last context fed shares with it, and the answer."""
        new = list(prompt[common_prefix_length(self._fed, prompt):]) + list(answer)
        self._fed = list(prompt) + list(answer)
        self.memory.feed(new)

    def feeding(self, events: Iterator[Event], prompt: Sequence[int]) -> Iterator[Event]:
        """``events`` as they come; when the Summary comes, the context new to the conversation is
        fed (before the Summary is passed on, so that a consumer stopping there loses nothing: feeding
        only queues it for the writer thread)."""
        answer: list[int] = []
        for event in events:
            if isinstance(event, TokenPiece):
                answer.extend(event.token_ids)
            elif isinstance(event, Summary):
                self.after(prompt, answer)
            yield event


def open_memory(config: SuffixConfig, model_path: str, info: GGUFInfo) -> tuple[SuffixMemory | None, str]:
    """The main model's suffix index, or (None, why not) where it cannot be used: another vocabulary's
    index in its folder, or a folder that cannot be read or written. The model answers either way."""
    try:
        return SuffixMemory.open(config, model_path, vocabulary_fingerprint(info), info.display_name), ""
    except VocabularyMismatchError as exc:
        return None, str(exc)
    except OSError as exc:
        return None, f"The suffix index in {config.folder} cannot be used ({exc}); drafting goes on without it."
