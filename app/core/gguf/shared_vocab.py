"""The tokens two vocabularies share: a draft token whose text is, byte for byte, one main-model token.

A draft of another vocabulary samples from these alone when the main model samples (Token-Level
Intersection, Timor et al., ICML 2025: app/core/speculation/crossvocab.py), so each drafted token is
one main token and its probability is known. The texts are read from the GGUF metadata as llama.cpp
renders them (``llama_token_to_piece`` without special tokens: src/llama-vocab.cpp): no model has to
be loaded, and a pair is mapped once (cached per pair of files; a 152k and a 262k vocabulary take
about a second).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from app.core.gguf.info import GGUFInfo

# gguf.TokenType
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# byte-level BPE pre-tokenizers whose tokens spell a space as "▁" (llama.cpp: escape_whitespaces)
_ESCAPED_BPE = frozenset({"gemma4", "granite-embed-multi-311m", "sarvam-moe"})
# of several main tokens with the same text, the one a tokenizer would produce: a word, then an
# added token, then a byte-fallback token
_PREFERENCE = {NORMAL: 0, USER_DEFINED: 1, BYTE: 2}
# texts llama.cpp makes end-of-generation control tokens whatever their type (src/llama-vocab.cpp, load)
_EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "<end_of_turn>",
    "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
    "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "[e~["})


def gpt2_byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: each byte as the printable character a BPE token spells it with."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


# str.translate table from a BPE token's characters to latin-1 characters (one per byte); a
# character outside the alphabet becomes one latin-1 cannot encode, so that token has no text
_GPT2_DECODE = {ord(c): b for b, c in gpt2_byte_chars().items()}
_GPT2_DECODE.update({c: 0xFFFF for c in range(256) if c not in _GPT2_DECODE})


def token_bytes(info: GGUFInfo) -> list[bytes | None]:
    """Each token's text as llama.cpp renders it; None for control, unknown and unused tokens (and for
    every token of a tokenizer this does not read: RWKV, PLaMo-2), which text never maps to."""
    types = info.token_types or (NORMAL,) * len(info.tokens)
    escaped = info.vocab_type in ("llama", "t5", "bert") or \
        (info.vocab_type == "gpt2" and info.tokenizer_pre in _ESCAPED_BPE)
    if not escaped and info.vocab_type != "gpt2":
        return [None] * len(info.tokens)
    out: list[bytes | None] = []
    for text, kind in zip(info.tokens, types):
        if text in _EOG_TEXTS:
            out.append(None)
        elif kind == NORMAL:
            out.append(_escaped(text) if escaped else _byte_level(text))
        elif kind == USER_DEFINED:
            out.append(text.encode("utf-8") or None)
        elif kind == BYTE and text.startswith("<0x") and text.endswith(">") and len(text) == 6:
            out.append(bytes([int(text[3:5], 16)]))
        else:
            out.append(None)
    out += [None] * (len(info.tokens) - len(out))
    return out


def _escaped(text: str) -> bytes | None:
    return text.replace("\u2581", " ").encode("utf-8") or None


def _byte_level(text: str) -> bytes | None:
    try:
        return text.translate(_GPT2_DECODE).encode("latin-1") or None
    except UnicodeEncodeError:
        return None


@dataclass(frozen=True)
class SharedVocabulary:
    """Which draft tokens are main tokens too. ``draft_to_main[d]``: the main token with the text of
    draft token ``d``, -1 where there is none (its text is no single main token, or it is special)."""

    draft_to_main: np.ndarray
    draft_byte_tokens: dict[int, int] = field(default_factory=dict)   # byte -> a draft token of that byte alone
    main_size: int = 0
    seconds: float = 0.0          # what mapping the pair took

    @property
    def shared(self) -> int:
        return int(np.count_nonzero(self.draft_to_main >= 0))

    def describe(self) -> str:
        return (f"{self.shared:,} of the draft's {len(self.draft_to_main):,} tokens are main-model tokens too "
                f"(mapped in {1000 * self.seconds:.0f} ms)")

    @classmethod
    def from_token_bytes(cls, main: list[bytes | None], draft: list[bytes | None],
                         main_types: tuple[int, ...] = (), draft_types: tuple[int, ...] = ()) -> "SharedVocabulary":
        """The mapping between two vocabularies given each token's text (None: special)."""
        started = time.perf_counter()
        rank = [_PREFERENCE.get(main_types[i] if i < len(main_types) else NORMAL, 3) for i in range(len(main))]
        index: dict[bytes, int] = {}
        for i in sorted(range(len(main)), key=rank.__getitem__):   # stable: the lowest id of a rank first
            if main[i]:
                index.setdefault(main[i], i)
        draft_to_main = np.array([index.get(text, -1) if text else -1 for text in draft], dtype=np.int64)
        byte_tokens: dict[int, int] = {}
        draft_rank = [_PREFERENCE.get(draft_types[i] if i < len(draft_types) else NORMAL, 3) for i in range(len(draft))]
        for i in sorted(range(len(draft)), key=draft_rank.__getitem__):
            if draft[i] is not None and len(draft[i]) == 1:
                byte_tokens.setdefault(draft[i][0], i)
        return cls(draft_to_main, byte_tokens, len(main), time.perf_counter() - started)


def shared_vocabulary(main: GGUFInfo, draft: GGUFInfo) -> SharedVocabulary:
    """The shared tokens of a pair of files, mapped once per pair (``seconds``: reading the texts and
    mapping them, the first time)."""
    return _shared_cached(main, draft)


@lru_cache(maxsize=4)
def _shared_cached(main: GGUFInfo, draft: GGUFInfo) -> SharedVocabulary:
    started = time.perf_counter()
    mapped = SharedVocabulary.from_token_bytes(token_bytes(main), token_bytes(draft), main.token_types,
                                               draft.token_types)
    return SharedVocabulary(mapped.draft_to_main, mapped.draft_byte_tokens, mapped.main_size,
                            time.perf_counter() - started)
