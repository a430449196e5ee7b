"""A thin typed wrapper over llama-cpp-python's low-level API: loads a model and a context, decodes
batches with logits for chosen positions, hands logits rows out as numpy views, trims the KV cache,
tokenizes and turns tokens back into bytes. With library.py, mtp.py, recurrent.py and devices.py, the
only code that touches ``llama_cpp`` (besides the benchmark's baseline).
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from app.core.errors import DecodeError, InvalidMessagesError, LoadCancelledError, ModelLoadError
from app.core.llama import library, model_load
from app.core.llama.deadline import ABORTED, DecodeDeadline
from app.core.llama.devices import choose_device
from app.core.llama.library import lib
from app.core.llama.placement import parse_placement
from app.core.llama.recurrent import LATEST, PROMPT, SavedState, SavedStates
from app.core.llama.threads import GIVE_UP_RATIO, ThreadTuner
from app.core.params import ModelParams

def default_threads() -> int:
    """Physical cores are what matter for decoding; os.cpu_count() counts hyper-threads."""
    n = os.cpu_count() or 1
    return n if n <= 4 else max(4, n // 2)


# What a model keeps of the past: keys and values per token (attention: any suffix can be dropped),
# a recurrent state that folds every token in (recurrent), or both (hybrid).
ATTENTION, RECURRENT, HYBRID = "attention", "recurrent", "hybrid"
# Recurrent-state snapshots asked of llama.cpp per sequence (n_rs_seq), for the architectures that keep
# them: a rejected draft of up to this many tokens is undone inside the batch that verified it.
ROLLBACK_TOKENS = 16


class LlamaModel:
    """Weights and vocabulary of one GGUF model."""

    def __init__(self, params: ModelParams, cancelled: Callable[[], bool] | None = None):
        """Load ``params``' file; ``cancelled`` (asked as llama.cpp reads each tensor) cuts the load short
        with LoadCancelledError once it says so."""
        library.ensure_backend()
        llama_cpp = lib()
        self.params = params
        self.path = str(params.path)
        device = choose_device(params.device)
        progress = model_load.LoadProgress(cancelled) if cancelled is not None else None
        mparams, devices = model_load.model_params(params, device, progress)
        self.device = device
        library.take_errors()
        with library.load_log() as log:
            model = llama_cpp.llama_model_load_from_file(self.path.encode(), mparams)
        del devices   # llama.cpp copied the list
        self.placement = dataclasses.replace(parse_placement(log), device=device.name if device else "")
        if not model and progress is not None and progress.stopped:
            raise LoadCancelledError(f"Loading {Path(self.path).name} was cancelled.")
        if not model:
            raise ModelLoadError(model_load.failure_message(self.path, library.take_errors()))
        self._model = model
        self._vocab = llama_cpp.llama_model_get_vocab(model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self.bos = int(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos = int(llama_cpp.llama_vocab_eos(self._vocab))
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self.n_ctx_train = int(llama_cpp.llama_model_n_ctx_train(model))
        self.memory = (RECURRENT if llama_cpp.llama_model_is_recurrent(model)
                       else HYBRID if llama_cpp.llama_model_is_hybrid(model) else ATTENTION)
        self.size_bytes = int(llama_cpp.llama_model_size(model))
        self.n_params = int(llama_cpp.llama_model_n_params(model))
        self._pieces: dict[int, bytes] = {}
        self._eog = np.array([bool(llama_cpp.llama_vocab_is_eog(self._vocab, t)) for t in range(self.n_vocab)])

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def vocab(self):
        """The llama_vocab pointer, for the vocabulary's other readers (special.py)."""
        return self._vocab

    def chat_template(self) -> str | None:
        if self.params.chat_template is not None or self.params.chat_template_name:   # the user's over the file's
            return self.params.chat_template   # a built-in template by name is no Jinja (named_templates.py)
        raw = lib().llama_model_chat_template(self._model, None)
        return raw.decode("utf-8", "replace") if raw else None

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        llama_cpp = lib()
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as exc:   # callers check messages first; this guards any other text
            raise InvalidMessagesError(f"The text is not valid Unicode: character {exc.start + 1} is a lone "
                                       f"surrogate ({text[exc.start]!r}).") from None
        n = -(len(data) + 8)   # room for every byte a token and the specials; asked again with what it says
        while n < 0:
            buf = (llama_cpp.llama_token * -n)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, len(buf), add_special, parse_special)
        return list(buf[:n])

    def is_control(self, token: int) -> bool:
        """Whether ``token`` is one that tokenizing with ``parse_special`` alone turns text into
        (control and unknown tokens): message text must never become one."""
        llama_cpp = lib()
        return bool(self._attr(token) & (llama_cpp.LLAMA_TOKEN_ATTR_CONTROL | llama_cpp.LLAMA_TOKEN_ATTR_UNKNOWN))

    def strips_left(self, token: int) -> bool:
        return bool(self._attr(token) & lib().LLAMA_TOKEN_ATTR_LSTRIP)

    def strips_right(self, token: int) -> bool:
        return bool(self._attr(token) & lib().LLAMA_TOKEN_ATTR_RSTRIP)

    def _attr(self, token: int) -> int:
        if not 0 <= token < self.n_vocab:
            return 0
        return int(lib().llama_vocab_get_attr(self._vocab, token))

    def token_text(self, token: int) -> str:
        """A token's text as the vocabulary spells it (control tokens included); "" for none."""
        if not 0 <= token < self.n_vocab:
            return ""
        raw = lib().llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""

    def piece(self, token: int) -> bytes:
        """The bytes of one token (control tokens render as nothing)."""
        if (cached := self._pieces.get(token)) is None:
            cached = self._pieces[token] = self._token_to_piece(token)
        return cached

    def _token_to_piece(self, token: int) -> bytes:
        llama_cpp = lib()
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, len(buf), 0, False)
        return buf.raw[:n]

    def detokenize(self, tokens: Sequence[int]) -> str:
        return b"".join(self.piece(t) for t in tokens).decode("utf-8", "replace")

    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token]) if 0 <= token < self.n_vocab else False

    def eog_tokens(self) -> list[int]:
        """EOS, EOT and the like, read once at load (token by token: 150 ms of each ignore_eos request)."""
        return [int(t) for t in np.flatnonzero(self._eog)]

    def close(self) -> None:
        if self._model:
            lib().llama_model_free(self._model)
            self._model = None

    def __del__(self):  # pragma: no cover - safety net; Engine closes explicitly
        try:
            self.close()
        except Exception:
            pass


def logits_view(pointer, rows: int, n_vocab: int) -> np.ndarray:
    """llama.cpp's logits rows as a numpy array without a copy (valid until the next decode)."""
    return np.ctypeslib.as_array(pointer, shape=(rows, n_vocab))


def context_params(n_ctx: int, n_batch: int, n_threads: int):
    """llama_context_params for one sequence: ``n_batch`` tokens a decode, ``n_threads`` threads."""
    cparams = lib().llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = cparams.n_ubatch = n_batch
    cparams.n_seq_max = 1
    cparams.n_threads = cparams.n_threads_batch = n_threads
    cparams.no_perf = True
    return cparams


def new_context(model: LlamaModel, cparams):
    """A llama.cpp context of ``model``, or ModelLoadError saying what to lower."""
    library.take_errors()
    ctx = lib().llama_init_from_model(model._model, cparams)
    if not ctx:
        raise ModelLoadError(
            f"Could not create a context of {cparams.n_ctx} tokens for {model.name}: "
            f"lower the context size or offload fewer layers. {library.take_errors()}".rstrip())
    return ctx


class LlamaSession:
    """A llama.cpp context (one sequence) whose KV cache holds ``cached``; or, with ``shared``, sequence
    ``seq`` of a context several sessions share (shared_context.py: a server's slots, whose verify
    batches it decodes as one)."""

    def __init__(self, model: LlamaModel, n_ctx: int, n_threads: int | None = None, n_batch: int = 512,
                 threads: ThreadTuner | None = None, shared=None, seq: int = 0):
        llama_cpp = lib()
        self.model = model
        self.n_vocab = model.n_vocab
        self.seq = seq
        self.shared = shared
        # a count the user gave is kept; otherwise it is learned as the context decodes (threads.py);
        # ``threads``: another context's of the same model (a server slot), which learns for both
        self.threads = threads or ThreadTuner(n_threads or default_threads(), fixed=n_threads is not None)
        shared_tuner = threads is not None
        self._threads_set = self.threads.current
        if shared is None:
            cparams = context_params(n_ctx if n_ctx > 0 else model.n_ctx_train, n_batch, self._threads_set)
            if model.memory != ATTENTION:
                cparams.n_rs_seq = ROLLBACK_TOKENS  # llama.cpp keeps it only for architectures that support it
            ctx = new_context(model, cparams)
            self.n_ctx = int(llama_cpp.llama_n_ctx(ctx))
        else:
            ctx, self.n_ctx = shared.raw_context, shared.n_ctx
        self._ctx = ctx
        self._deadline = DecodeDeadline(ctx)
        n_batch = self.n_batch = int(llama_cpp.llama_n_batch(ctx))  # llama.cpp caps it at the context size
        self._memory = llama_cpp.llama_get_memory(ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._tokens = np.ctypeslib.as_array(self._batch.token, shape=(n_batch,))
        self._pos = np.ctypeslib.as_array(self._batch.pos, shape=(n_batch,))
        self._logits_flags = np.ctypeslib.as_array(self._batch.logits, shape=(n_batch,))
        np.ctypeslib.as_array(self._batch.n_seq_id, shape=(n_batch,))[:] = 1
        for i in range(n_batch):
            self._batch.seq_id[i][0] = seq
        self._cached: list[int] = []
        self.decode_s = 0.0  # time spent inside llama_decode, for the host-overhead benchmark
        self.memory = model.memory
        self.n_rs_seq = int(llama_cpp.llama_n_rs_seq(ctx))
        self._rollback_window = 0        # tokens llama.cpp can still take back exactly (see truncate)
        self._saved = SavedStates(ctx, model.name)   # recurrent states to take the cache back to
        self._in_single_run = False      # the last eval appended one token after a saved state
        self._after_prompt = False       # the last eval read a prompt (several tokens, logits of the last)
        self.rereads = 0                 # times the cache was read again from the start (for tests)
        # called with (start, n) after each batch decoded (app/core/llama/mtp.py reads hidden states)
        self.decode_hooks: list[Callable[[int, int], None]] = []
        if not shared_tuner:
            self._choose_threads()

    @property
    def raw_context(self):
        """The llama.cpp context (for app/core/llama/mtp.py's staging-API calls)."""
        return self._ctx

    @property
    def cached(self) -> list[int]:
        return self._cached

    def eval(self, tokens: Sequence[int], all_logits: bool = False) -> np.ndarray:
        if len(self._cached) + len(tokens) > self.n_ctx:
            raise DecodeError(f"The context of {self.n_ctx} tokens is full.")
        if self.memory != ATTENTION and not (self._in_single_run and len(tokens) == 1):
            self._saved.save(PROMPT if self._after_prompt else LATEST, len(self._cached))
        self._in_single_run = len(tokens) == 1
        self._after_prompt = len(tokens) > 1 and not all_logits
        return self._eval(tokens, all_logits)

    def _eval(self, tokens: Sequence[int], all_logits: bool) -> np.ndarray:
        if len(tokens) <= self.n_batch:
            return self._decode(tokens, all_logits)
        rows = []
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start:start + self.n_batch]
            last = start + self.n_batch >= len(tokens)
            out = self._decode(chunk, all_logits)
            if all_logits or last:
                rows.append(out.copy())
        return np.concatenate(rows)

    def _decode(self, tokens: Sequence[int], all_logits: bool) -> np.ndarray:
        llama_cpp = lib()
        n = len(tokens)
        start = len(self._cached)
        threads = self.threads.next_count()
        limit = self.threads.deadline(n)
        rc, seconds = self._timed_decode(tokens, start, all_logits, threads, limit)
        self.decode_s += seconds
        if rc == ABORTED and limit is not None:   # a thread count on trial was far slower: not that one
            self.threads.stopped()
            self._after_failed_decode(start, keep_state=True)
            return self._decode(tokens, all_logits)
        self.threads.observe(n, threads, seconds)
        if rc != 0:
            self._after_failed_decode(start)
            raise DecodeError(f"llama.cpp failed to decode a batch of {n} tokens (code {rc}). {library.take_errors()}".rstrip())
        self._cached.extend(int(t) for t in tokens)
        self._rollback_window = min(n - 1, self.n_rs_seq)  # snapshots of this batch's tokens but its first
        for hook in self.decode_hooks:
            hook(start, n)
        n_out = n if all_logits else 1
        first = 0 if all_logits else n - 1
        rows = logits_view(llama_cpp.llama_get_logits_ith(self._ctx, first), n_out, self.n_vocab)
        # another slot's decode on a shared context writes over the rows before this one reads them all
        return rows.copy() if self.shared is not None else rows

    @property
    def n_threads(self) -> int:
        """Threads the next decode uses (the learned count, or the user's)."""
        return self.threads.next_count()

    def _choose_threads(self) -> None:
        """The starting thread count, from one-token decodes timed now: one thread, then the default
        count, stopped once clearly slower (where every core is busy it would take seconds)."""
        if self.threads.fixed or self.threads.current == 1:
            return
        token = max(self.model.bos, 0)
        self._timed_first_token(token, 1, None)          # reads the weights in: not counted
        one = self._timed_first_token(token, 1, None)
        self.threads.start_from(one, self._timed_first_token(token, self.threads.current, GIVE_UP_RATIO * one))

    def _timed_first_token(self, token: int, count: int, limit: float | None) -> float | None:
        """Seconds to decode ``token`` alone with ``count`` threads (None: stopped past ``limit``); the
        cache is left empty."""
        rc, seconds = self._timed_decode([token], 0, False, count, limit)
        self._remove_from(0)
        if rc not in (0, ABORTED):
            raise ModelLoadError(f"llama.cpp failed to decode a first token with {self.model.name} (code {rc}). "
                                 f"{library.take_errors()}".rstrip())
        return seconds if rc == 0 else None

    def _timed_decode(self, tokens: Sequence[int], start: int, all_logits: bool, threads: int,
                      limit: float | None) -> tuple[int, float]:
        """llama_decode of ``tokens`` at ``start`` with ``threads`` threads, stopped past ``limit``
        seconds: (its answer, seconds). Logits of the last token, or of all."""
        n = len(tokens)
        self._tokens[:n] = tokens
        self._pos[:n] = np.arange(start, start + n)
        self._logits_flags[:n] = 1 if all_logits else 0
        self._logits_flags[n - 1] = 1
        self._batch.n_tokens = n
        if threads != self._threads_set or self.shared is not None:   # a shared context: others set it too
            lib().llama_set_n_threads(self._ctx, threads, threads)
            self._threads_set = threads
        t0 = time.perf_counter()
        with self._deadline.limit(limit):
            rc = lib().llama_decode(self._ctx, self._batch)
        # a GPU's llama_decode returns once the work is queued and the logits read waits for it: timed
        # without this wait, a decode on the H100 read 1.3 ms of a 12 ms round and the host the rest
        lib().llama_synchronize(self._ctx)
        return rc, time.perf_counter() - t0

    def truncate(self, n_keep: int) -> None:
        """Drop every cached position from ``n_keep`` on, exactly, whatever the model's memory.

        Keys and values (attention) drop any suffix. A recurrent state cannot be unwound token by
        token: llama.cpp takes back at most the last batch's tokens but its first (from its n_rs_seq
        snapshots, once per batch); past that the latest state saved at or before ``n_keep`` (before
        the last batch or run of single tokens, or right after the last prompt, where a new chat turn
        picks up) is put back and the kept tokens after it are decoded again; failing that, the whole
        cache is read again. Each llama.cpp answer is checked: a refused removal is never ignored."""
        n_keep = max(0, n_keep)
        if n_keep >= len(self._cached):
            return
        self._in_single_run = self._after_prompt = False
        saved = self._saved.latest_within(n_keep)
        if self.memory == ATTENTION:
            self._remove_from(n_keep)
        elif len(self._cached) - n_keep <= self._rollback_window and self._seq_rm(n_keep):
            del self._cached[n_keep:]
        elif saved is not None:
            self._put_back(saved, n_keep)
        else:
            self._read_again(n_keep)
        self._rollback_window = 0  # llama.cpp's rollback is single-use until the next decode
        self._saved.forget_after(n_keep)

    def _seq_rm(self, n_keep: int) -> bool:
        return bool(lib().llama_memory_seq_rm(self._memory, self.seq, n_keep, -1))

    def _remove_from(self, n_keep: int) -> None:
        if not self._seq_rm(n_keep):
            raise DecodeError(f"llama.cpp could not remove positions {n_keep}.. of {self.model.name}'s cache. "
                              f"{library.take_errors()}".rstrip())
        del self._cached[n_keep:]

    def _put_back(self, saved: "SavedState", n_keep: int) -> None:
        """Put a saved state back, drop the positions after it, decode the kept tokens past it."""
        kept = self._cached[:n_keep]
        if not self._saved.put_back(saved):
            self._read_again(n_keep)
            return
        self._remove_from(saved.n_tokens)
        if len(kept) > saved.n_tokens:
            self._eval(kept[saved.n_tokens:], all_logits=False)

    def _after_failed_decode(self, start: int, keep_state: bool = False) -> None:
        """A batch llama.cpp could not decode may have left part of itself behind: drop what it may have
        added to the keys and values; a recurrent state it may have folded in cannot be told apart, so
        that cache is emptied (the next answer reads its prompt again) instead of being trusted, or,
        with ``keep_state`` (the batch is decoded again at once), read again up to ``start``."""
        self._rollback_window = 0
        if self.memory == ATTENTION:
            self._seq_rm(start)
            return
        if keep_state:
            saved = self._saved.latest_within(start)
            return self._put_back(saved, start) if saved is not None else self._read_again(start)
        self._saved.clear()
        self._remove_from(0)

    def _read_again(self, n_keep: int) -> None:
        """Empty the sequence (always possible) and decode the kept tokens from the start."""
        kept = self._cached[:n_keep]
        self._saved.clear()
        self._remove_from(0)
        self.rereads += 1
        if kept:
            self._eval(kept, all_logits=False)

    def load_state(self, put: Callable[[], Sequence[int] | None]) -> bool:
        """Put back a whole sequence state: ``put()`` has llama.cpp read one into the emptied sequence and says its
        tokens (state_cache.py, seq_file.py); None (then False) or its error leave the cache emptied."""
        self._saved.clear()
        self._remove_from(0)
        self._rollback_window, self._in_single_run, self._after_prompt = 0, False, False
        tokens = None
        try:
            tokens = put()
        finally:
            if tokens is None:   # nothing of a state read in part is trusted
                self._seq_rm(0)
        self._cached = [int(t) for t in tokens] if tokens is not None else []
        return tokens is not None

    def kv_positions(self) -> tuple[int, int]:
        """(min, max) position llama.cpp holds for the sequence; (-1, -1) when empty. For tests."""
        llama_cpp = lib()
        return (int(llama_cpp.llama_memory_seq_pos_min(self._memory, self.seq)),
                int(llama_cpp.llama_memory_seq_pos_max(self._memory, self.seq)))

    def close(self) -> None:
        llama_cpp = lib()
        if self._ctx:
            llama_cpp.llama_batch_free(self._batch)
            if self.shared is None:
                llama_cpp.llama_free(self._ctx)
            elif self.shared.raw_context:   # a sequence of a shared context: its positions go, the context stays
                self._seq_rm(0)
            self._ctx = None

    def __del__(self):  # pragma: no cover
        try:
            self.close()
        except Exception:
            pass
