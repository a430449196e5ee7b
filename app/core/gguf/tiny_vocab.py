"""The tiny models' vocabulary: a byte-level SentencePiece vocabulary of three control tokens, 256
byte tokens and a few words (so any text tokenizes and every output decodes), optionally padded to
a real model's size or with ChatML's control tokens, and the ChatML template they carry."""

from __future__ import annotations

# A template in the ChatML style, so chat formatting goes through a real Jinja template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_WORDS = ["\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581is", "\u2581of", "\u2581and", "in", "er", "on"]
_OTHER_WORDS = ["\u2581", "\u2581le", "\u2581la", "s", "r", "\u2581est", "\u2581de", "\u2581et", "ou", "ai", "an",
                "\u2581un", "\u2581une"]


CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")


def vocabulary(other: bool = False, chat_tokens: bool = False,
               size: int = 0) -> tuple[list[str], list[float], list[int]]:
    """Token texts, scores and types of the tiny byte-level SentencePiece vocabulary, padded with
    filler words to ``size`` tokens (a real model's vocabulary size, for what costs per token); with
    ``chat_tokens``, ChatML's control tokens follow at the end."""
    import gguf

    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    words = _OTHER_WORDS if other else _WORDS
    if other:  # words first, then bytes: token texts differ from id 3 on
        tokens += words + [f"<0x{b:02X}>" for b in range(256)]
        types += [gguf.TokenType.NORMAL] * len(words) + [gguf.TokenType.BYTE] * 256
    else:
        tokens += [f"<0x{b:02X}>" for b in range(256)] + words
        types += [gguf.TokenType.BYTE] * 256 + [gguf.TokenType.NORMAL] * len(words)
    filler = max(0, size - len(tokens))
    tokens += [f"\u2581w{i}" for i in range(filler)]
    types += [gguf.TokenType.NORMAL] * filler
    scores = [0.0] * 3 + [-float(i) for i in range(len(tokens) - 3)]
    if chat_tokens:
        tokens += list(CHAT_TOKENS)
        types += [gguf.TokenType.CONTROL] * len(CHAT_TOKENS)
        scores += [0.0] * len(CHAT_TOKENS)
    return tokens, scores, [int(t) for t in types]


def add_vocabulary(writer, tokens: list[str], scores: list[float], types: list[int]) -> None:
    """The tokenizer keys of a byte-level SentencePiece vocabulary made by ``vocabulary()``."""
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
