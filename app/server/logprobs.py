"""Token log-probabilities in each API's shape (SamplingParams.logprobs; the engine reports them from the
main model's raw distribution at every answer token's position, drafted or not):

- OpenAI chat: ``logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}]}``;
- OpenAI's legacy completions: ``logprobs: {tokens, token_logprobs, top_logprobs, text_offset}``;
- llama-server's /completion ``n_probs``: ``completion_probabilities: [{id, token, bytes, logprob,
  top_logprobs: [...]}]``.

A token's text is its bytes read as UTF-8, a byte of a character split across tokens shown as U+FFFD,
with ``bytes`` exact, as OpenAI and llama-server give them.
"""

from __future__ import annotations

import math
from typing import Sequence

from app.core.speculation.events import TokenProb


def _text(piece: bytes) -> str:
    return piece.decode("utf-8", errors="replace")


def chat(probs: Sequence[TokenProb]) -> dict:
    return {"content": [{"token": _text(p.piece), "logprob": p.logprob, "bytes": list(p.piece),
                         "top_logprobs": [{"token": _text(b), "logprob": lp, "bytes": list(b)} for _, b, lp in p.top]}
                        for p in probs]}


def legacy(probs: Sequence[TokenProb], offset: int = 0) -> dict:
    """``offset``: where in the answer's text the first token starts (a stream's pieces so far)."""
    offsets = []
    for p in probs:
        offsets.append(offset)
        offset += len(_text(p.piece))
    return {"tokens": [_text(p.piece) for p in probs], "token_logprobs": [p.logprob for p in probs],
            "top_logprobs": [_by_text(p.top) for p in probs], "text_offset": offsets}


def _by_text(top: Sequence[tuple[int, bytes, float]]) -> dict[str, float]:
    """The legacy shape keys alternatives by text: tokens that read the same (bytes of a split
    character all read U+FFFD) keep the likeliest's."""
    out: dict[str, float] = {}
    for _, piece, logprob in top:
        out.setdefault(_text(piece), logprob)
    return out


def native(probs: Sequence[TokenProb], post_sampling: bool = False) -> list[dict]:
    """``post_sampling``: llama-server's post_sampling_probs, probabilities (``prob``, ``top_probs``) of
    the distribution each token was drawn from, not log-probabilities of the raw one."""
    if post_sampling:
        return [{"id": p.token, "token": _text(p.piece), "bytes": list(p.piece), "prob": math.exp(p.logprob),
                 "top_probs": [{"id": t, "token": _text(b), "bytes": list(b), "prob": math.exp(lp)}
                               for t, b, lp in p.top]}
                for p in probs]
    return [{"id": p.token, "token": _text(p.piece), "bytes": list(p.piece), "logprob": p.logprob,
             "top_logprobs": [{"id": t, "token": _text(b), "bytes": list(b), "logprob": lp} for t, b, lp in p.top]}
            for p in probs]
