"""Steer a draft model of another vocabulary (random weights: the main model never agrees with it) to
draft the main model's known answer in its own tokens, now and then wrong: rounds then accept some
drafts and reject others, and the drafter has to turn the draft's tokens into the main model's and
put its own back in step with the answer. Used by the cross-vocabulary tests on the numpy reference
model and on tiny llama.cpp models."""

from __future__ import annotations

from typing import Sequence

import numpy as np


class FakeVocabulary:
    """A vocabulary of given token texts for the reference model: its tokenizer takes the longest token
    that spells what comes next, and stops where none does (the text is then not spelt out)."""

    def __init__(self, pieces: Sequence[bytes], eog: int | None = None):
        self.pieces = list(pieces)
        self.n_vocab = len(self.pieces)
        self.bos, self.add_bos, self.eog = -1, False, eog

    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        data, out = text.encode(), []
        while data:
            fitting = [t for t in range(self.n_vocab) if self.pieces[t] and data.startswith(self.pieces[t])
                       and t != self.eog]
            if not fitting:
                break
            token = max(fitting, key=lambda t: len(self.pieces[t]))
            out.append(token)
            data = data[len(self.pieces[token]):]
        return out

    def piece(self, token: int) -> bytes:
        return b"" if token == self.eog else self.pieces[token]

    def token_text(self, token: int) -> str:
        return self.pieces[token].decode("utf-8", "replace")

    def is_control(self, token: int) -> bool:
        return token == self.eog

    def is_eog(self, token: int) -> bool:
        return token == self.eog


class SteeredDraft:
    """A draft model's session whose logits, while its answer so far spells a prefix of ``answer``,
    put the draft token that spells the most of the answer's next text first (every ``wrong_every``-th
    answer token a wrong one instead); it still decodes every token as usual. ``answer_start``: where
    the answer starts in its cache (the draft's prompt tokens), ``stop``: the token it proposes once the
    answer is spelt out (a control token)."""

    def __init__(self, inner, vocab, answer_start: int, answer: bytes, stop: int, wrong_every: int = 0):
        self.inner, self.vocab, self.answer_start = inner, vocab, answer_start
        self.answer, self.stop, self.wrong_every = answer, stop, wrong_every
        self.pieces = [vocab.piece(t) for t in range(vocab.n_vocab)]
        self.n_ctx, self.n_vocab = inner.n_ctx, inner.n_vocab
        self.wrong = 0   # wrong tokens proposed

    def __getattr__(self, name: str):
        return getattr(self.inner, name)   # the rest is the real session's (its model, its threads)

    @property
    def cached(self):
        return self.inner.cached

    def truncate(self, n_keep: int) -> None:
        self.inner.truncate(n_keep)

    def close(self) -> None:
        self.inner.close()

    def eval(self, tokens: Sequence[int], all_logits: bool = False) -> np.ndarray:
        rows = np.array(self.inner.eval(tokens, all_logits), copy=True)
        cached = list(self.inner.cached)
        for i in range(len(rows)):
            rows[i] = self._steer(cached[:len(cached) - len(rows) + 1 + i])
        return rows

    def _steer(self, prefix: list[int]) -> np.ndarray:
        logits = np.zeros(self.n_vocab, dtype=np.float32)
        answer = prefix[self.answer_start:]
        text = b"".join(self.pieces[t] for t in answer)
        if not self.answer.startswith(text):
            return logits + np.arange(self.n_vocab, dtype=np.float32) * 1e-3   # off the answer: anything
        rest = self.answer[len(text):]
        fitting = [t for t in range(self.n_vocab) if self.pieces[t] and rest.startswith(self.pieces[t])]
        if not fitting:
            logits[self.stop] = 10.0
            return logits
        token = max(fitting, key=lambda t: (len(self.pieces[t]), -t))
        if self.wrong_every and len(answer) % self.wrong_every == self.wrong_every - 1:
            token = next(t for t in range(self.n_vocab) if self.pieces[t] and not rest.startswith(self.pieces[t]))
            self.wrong += 1
        logits[token] = 10.0
        return logits
