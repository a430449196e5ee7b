"""The tiny models' vocabulary: a byte-level SentencePiece vocabulary of three control tokens, 256
byte tokens and a few words (so any text tokenizes and every output decodes), optionally padded to
a real model's size, with ChatML's control tokens or with Qwen3's ``<think>`` markers, and the
templates they carry (ChatML; a thinking template in Qwen3's way). Or, for a vocabulary of another
tokenizer type, a byte-level BPE one as Qwen's (``bpe_vocabulary``: the 256 byte characters, a few
merged words, ``<|endoftext|>``)."""

from __future__ import annotations

# A template in the ChatML style, so chat formatting goes through a real Jinja template.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# A thinking template as Qwen3.5 writes it, cut to what the tests need: the generation prompt opens
# the reasoning block (``<think>\n``) unless ``enable_thinking`` is false (then it is empty and closed);
# an earlier answer's reasoning (``reasoning_content``, or the ``<think>`` block of its text) is dropped
# before the last user message and kept after it (a tool-calling turn).
THINKING_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) %}"
    "{%- for message in messages %}{% if message.role == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}"
    "{%- endfor %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' %}"
    "{%- set content = message.content %}"
    "{%- set reasoning = message.reasoning_content if message.reasoning_content is defined "
    "and message.reasoning_content is not none else '' %}"
    "{%- if '</think>' in content %}"
    "{%- set reasoning = reasoning or content.split('</think>')[0].split('<think>')[-1].strip('\n') %}"
    "{%- set content = content.split('</think>')[-1].lstrip('\n') %}"
    "{%- endif %}"
    "{%- if loop.index0 > ns.last_user and reasoning %}"
    "{{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content + '<|im_end|>\n' }}"
    "{%- else %}{{- '<|im_start|>assistant\n' + content + '<|im_end|>\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{- '<think>\n\n</think>\n\n' }}"
    "{%- else %}{{- '<think>\n' }}{%- endif %}"
    "{%- endif %}"
)

_WORDS = ["\u2581", "\u2581the", "\u2581a", "e", "t", "\u2581is", "\u2581of", "\u2581and", "in", "er", "on"]
_OTHER_WORDS = ["\u2581", "\u2581le", "\u2581la", "s", "r", "\u2581est", "\u2581de", "\u2581et", "ou", "ai", "an",
                "\u2581un", "\u2581une"]


CHAT_TOKENS = ("<|im_start|>", "<|im_end|>")
# Qwen2.5-Coder's FIM tokens, by the tokenizer key that names each (gguf.Keys.Tokenizer.FIM_*_ID)
FIM_TOKENS = {"<|fim_prefix|>": "tokenizer.ggml.fim_pre_token_id", "<|fim_suffix|>": "tokenizer.ggml.fim_suf_token_id",
              "<|fim_middle|>": "tokenizer.ggml.fim_mid_token_id", "<|repo_name|>": "tokenizer.ggml.fim_rep_token_id",
              "<|file_sep|>": "tokenizer.ggml.fim_sep_token_id"}
THINK_TOKENS = ("<think>", "</think>")   # Qwen3's: added tokens that are not control tokens (they render)


def vocabulary(other: bool = False, chat_tokens: bool = False, size: int = 0, think_tokens: bool = False,
               fim_tokens: bool = False) -> tuple[list[str], list[float], list[int]]:
    """Token texts, scores and types of the tiny byte-level SentencePiece vocabulary, padded with
    filler words to ``size`` tokens (a real model's vocabulary size, for what costs per token); with
    ``chat_tokens``, ChatML's control tokens follow at the end, then with ``think_tokens`` the
    reasoning markers as user-defined tokens."""
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
    if think_tokens:
        tokens += list(THINK_TOKENS)
        types += [gguf.TokenType.USER_DEFINED] * len(THINK_TOKENS)
        scores += [0.0] * len(THINK_TOKENS)
    if fim_tokens:
        tokens += list(FIM_TOKENS)
        types += [gguf.TokenType.CONTROL] * len(FIM_TOKENS)
        scores += [0.0] * len(FIM_TOKENS)
    return tokens, scores, [int(t) for t in types]


def add_fim_keys(writer, tokens: list[str]) -> None:
    """Name the FIM tokens of ``tokens`` (those of FIM_TOKENS it holds) in the tokenizer keys."""
    for text, key in FIM_TOKENS.items():
        if text in tokens:
            writer.add_uint32(key, tokens.index(text))


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


# the BPE vocabulary's merges, in rank order: "Ġ" is GPT-2's space, "Ċ" its newline
_BPE_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("Ġ", "a"), ("i", "n"), ("e", "r"), ("o", "n"), ("Ġ", "i"),
               ("Ġi", "s"), ("Ġ", "o"), ("Ġo", "f"), ("Ġa", "n"), ("Ġan", "d"), ("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("Ċ", "Ċ"),
               ("e", "s"), ("Ġ", "w"), ("r", "e"), ("Ġ", "c")]
END_OF_TEXT = "<|endoftext|>"


def bpe_vocabulary(chat_tokens: bool = False) -> tuple[list[str], list[int], list[str]]:
    """Token texts, types and merges of a tiny byte-level BPE vocabulary (GPT-2's byte alphabet, as
    Qwen's): a token per byte, in byte order, then the merged words, then ``<|endoftext|>`` (its
    begin and end of sequence) and, with ``chat_tokens``, ChatML's control tokens."""
    import gguf

    from app.core.gguf.shared_vocab import gpt2_byte_chars

    chars = gpt2_byte_chars()
    tokens = [chars[b] for b in range(256)] + [a + b for a, b in _BPE_MERGES] + [END_OF_TEXT]
    types = [gguf.TokenType.NORMAL] * (len(tokens) - 1) + [gguf.TokenType.CONTROL]
    if chat_tokens:
        tokens += list(CHAT_TOKENS)
        types += [gguf.TokenType.CONTROL] * len(CHAT_TOKENS)
    return tokens, [int(t) for t in types], [f"{a} {b}" for a, b in _BPE_MERGES]


def add_bpe_vocabulary(writer, tokens: list[str], types: list[int], merges: list[str]) -> None:
    """The tokenizer keys of a byte-level BPE vocabulary made by ``bpe_vocabulary()``."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("qwen2")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    end = tokens.index(END_OF_TEXT)
    writer.add_bos_token_id(end)
    writer.add_eos_token_id(end)
    writer.add_add_bos_token(False)
