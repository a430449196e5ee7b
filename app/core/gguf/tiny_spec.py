"""The tiny models' specification: sizes, architecture, vocabulary and drafter options, and which
layers attend (see app/core/gguf/tiny.py, which writes them)."""

from __future__ import annotations

from dataclasses import dataclass

from app.core.gguf.tiny_vocab import CHATML_TEMPLATE, THINKING_TEMPLATE


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
    other_vocab: bool = False     # another SentencePiece vocabulary: ids and words differ from the usual one
    bpe_vocab: bool = False       # a byte-level BPE vocabulary (another tokenizer type), as Qwen's
    chat_template: str | None = CHATML_TEMPLATE
    architecture: str = "llama"   # or one of ARCHITECTURES; a made-up name tests one llama.cpp refuses
    name: str = "tiny"
    chat_tokens: bool = False     # add ChatML's <|im_start|> and <|im_end|> as control tokens
    vocab_size: int = 0           # pad the vocabulary with filler words to this many tokens (0: no padding)
    think_tokens: bool = False    # add Qwen3's <think> and </think> (user-defined tokens; see THINKING_SPEC)
    fim_tokens: bool = False      # add Qwen2.5-Coder's fill-in-the-middle control tokens (named in the tokenizer keys)
    n_expert: int = 4             # qwen3moe: experts in each layer
    n_expert_used: int = 2        # qwen3moe: experts each token is routed to
    n_nextn: int = 1              # qwen35: MTP (nextn) layers after the n_layer trunk ones (llama.cpp drafts
                                  # from exactly 1; 0: none)
    sliding_window: int = 8       # gemma4, gemma4-assistant: the window (tokens) of the sliding-window layers
    n_embd_assistant: int = 32    # gemma4-assistant: its own width; n_embd (with n_head, n_head_kv) is its
                                  # backbone's, the gemma4 main's, whose hidden states and KV cache it reads
    target_layers: tuple[int, ...] = (0, 1, 1)   # eagle3, dflash: the main's layers whose inputs it reads
                                  # (eagle3: exactly three, low, middle and high)
    n_embd_target: int = 0        # eagle3: the main model's width (0: n_embd); dflash drafts at its main's width
    draft_vocab: int = 0          # eagle3: its head's own, smaller vocabulary (d2t maps it; 0: the main's)
    block_size: int = 16          # dflash: tokens proposed in one pass
    markov_rank: int = 0          # dflash: DSpark's Markov head and confidence head of this rank (0: none)


# a model that thinks as Qwen3.5 does: its template opens a <think> block (enable_thinking switches it off),
# <think> and </think> are tokens of their own, ChatML's control tokens too
THINKING_SPEC = TinySpec(chat_template=THINKING_TEMPLATE, chat_tokens=True, think_tokens=True, name="tiny-thinking")


# lfm2 and qwen35 layers alternate: recurrent, attention, recurrent, attention, ...
HYBRID_ATTENTION_INTERVAL = 2


def attention_layers(spec: TinySpec) -> tuple[int, ...]:
    """The trunk layers that attend (keep a KV cache): all of them for llama, qwen3moe and gemma4, none
    for mamba, every HYBRID_ATTENTION_INTERVAL-th one (from layer 1) for the hybrids lfm2 and qwen35;
    none for gemma4-assistant, whose layers are all MTP layers reading the main model's KV cache."""
    if spec.architecture in ("mamba", "gemma4-assistant"):
        return ()
    if spec.architecture in ("lfm2", "qwen35"):
        return tuple(i for i in range(spec.n_layer) if (i + 1) % HYBRID_ATTENTION_INTERVAL == 0)
    return tuple(range(spec.n_layer))


def sliding_window_layers(spec: TinySpec) -> tuple[int, ...]:
    """gemma4 and gemma4-assistant: the layers with sliding-window attention, every other one counting
    back from the last, which has full attention. The assistant's sliding-window layers read the main
    model's cache of layer n_layer - 2, its full-attention ones that of layer n_layer - 1."""
    return tuple(i for i in range(spec.n_layer) if (spec.n_layer - 1 - i) % 2 == 1)
