"""Write tiny llama-architecture GGUF models with random weights.

The fast test suite, the packaging smoke test and demos need real GGUF files that llama.cpp loads in
milliseconds, without any download. These have F32 weights, a few layers, a 64-wide embedding and a
byte-level SentencePiece vocabulary (three control tokens, 256 byte tokens and a few words), so any
text tokenizes and every output decodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

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


@dataclass(frozen=True)
class TinySpec:
    seed: int = 0
    n_embd: int = 64
    n_layer: int = 2
    n_head: int = 4
    n_head_kv: int = 2
    n_ff: int = 128
    context_length: int = 2048
    weight_scale: float = 0.35
    other_vocab: bool = False     # a vocabulary a "normal" tiny model's draft is incompatible with
    chat_template: str | None = CHATML_TEMPLATE
    architecture: str = "llama"   # set to a made-up name to test an architecture llama.cpp refuses
    name: str = "tiny"
    chat_tokens: bool = False     # add ChatML's <|im_start|> and <|im_end|> as control tokens
    vocab_size: int = 0           # pad the vocabulary with filler words to this many tokens (0: no padding)


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


def write_tiny_model(path: str | Path, spec: TinySpec = TinySpec()) -> Path:
    """Write a tiny model to ``path`` and return the path."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, scores, types = vocabulary(spec.other_vocab, spec.chat_tokens, spec.vocab_size)
    n_vocab = len(tokens)
    head_dim = spec.n_embd // spec.n_head
    n_embd_kv = head_dim * spec.n_head_kv
    rng = np.random.default_rng(spec.seed)

    def weight(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * spec.weight_scale).astype(np.float32)

    w = gguf.GGUFWriter(str(path), spec.architecture)
    arch = spec.architecture
    w.add_name(spec.name)
    w.add_uint32(f"{arch}.context_length", spec.context_length)
    w.add_uint32(f"{arch}.embedding_length", spec.n_embd)
    w.add_uint32(f"{arch}.block_count", spec.n_layer)
    w.add_uint32(f"{arch}.feed_forward_length", spec.n_ff)
    w.add_uint32(f"{arch}.attention.head_count", spec.n_head)
    w.add_uint32(f"{arch}.attention.head_count_kv", spec.n_head_kv)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_uint32(f"{arch}.rope.dimension_count", head_dim)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    add_vocabulary(w, tokens, scores, types)
    if spec.chat_template:
        w.add_chat_template(spec.chat_template)

    w.add_tensor("token_embd.weight", weight(n_vocab, spec.n_embd))
    w.add_tensor("output_norm.weight", np.ones(spec.n_embd, dtype=np.float32))
    w.add_tensor("output.weight", weight(n_vocab, spec.n_embd) * 2)
    for i in range(spec.n_layer):
        w.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(spec.n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.attn_q.weight", weight(spec.n_embd, spec.n_embd))
        w.add_tensor(f"blk.{i}.attn_k.weight", weight(n_embd_kv, spec.n_embd))
        w.add_tensor(f"blk.{i}.attn_v.weight", weight(n_embd_kv, spec.n_embd))
        w.add_tensor(f"blk.{i}.attn_output.weight", weight(spec.n_embd, spec.n_embd))
        w.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(spec.n_embd, dtype=np.float32))
        w.add_tensor(f"blk.{i}.ffn_gate.weight", weight(spec.n_ff, spec.n_embd))
        w.add_tensor(f"blk.{i}.ffn_up.weight", weight(spec.n_ff, spec.n_embd))
        w.add_tensor(f"blk.{i}.ffn_down.weight", weight(spec.n_embd, spec.n_ff))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
