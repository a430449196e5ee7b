"""Write tiny GGUF models with random weights.

The fast test suite, the packaging smoke test and demos need real GGUF files that llama.cpp loads in
milliseconds, without any download. These have F32 weights, a few layers, a 64-wide embedding and a
byte-level SentencePiece vocabulary (three control tokens, 256 byte tokens and a few words), so any
text tokenizes and every output decodes.

Besides the default ``llama`` architecture, ``TinySpec.architecture`` picks one of the other kinds of
model llama.cpp treats differently, all with the same vocabulary (so any two can pair as main and
draft):

* ``lfm2``: a hybrid (LFM2): short-convolution layers beside attention layers;
* ``mamba``: a pure recurrent model (Mamba 1): no attention and no KV cache, only recurrent state;
* ``qwen3moe``: a mixture of experts (Qwen3-MoE): ``n_expert`` experts, ``n_expert_used`` per token;
* ``qwen35``: Qwen3.5, a hybrid (gated delta-net layers beside gated attention) that carries
  ``n_nextn`` MTP ("nextn") layers after its trunk, which llama.cpp loads with ``load_mtp`` and
  drafts from with a context of type ``LLAMA_CONTEXT_TYPE_MTP``;
* ``gemma4``: Gemma 4 (dense, without per-layer embeddings): sliding-window attention layers beside
  full-attention ones, the last layer full;
* ``gemma4-assistant``: Gemma 4's separate MTP drafter (the "assistant") for the tiny ``gemma4`` of
  the same spec: ``n_layer`` MTP layers ``n_embd_assistant`` wide, with no keys or values of their
  own. It reads the main model's token embedding and KV cache, so llama.cpp creates its context (of
  type ``LLAMA_CONTEXT_TYPE_MTP``) only with ``ctx_other``, the main model's context;
* ``eagle3``: an EAGLE-3 drafter: one decoder layer that reads the main model's hidden states at three
  ``target_layers`` (fused by ``fc``) beside its token embeddings, which, with no embedding of its
  own, are the main model's;
* ``dflash``: a DFlash block drafter: ``n_layer`` layers that propose ``block_size`` tokens in one pass
  from the main model's hidden states at ``target_layers``, with the main model's embedding and head;
  with ``markov_rank``, DSpark's Markov head and confidence head too.

Any other name gets the llama layout under that name (to test an architecture llama.cpp refuses).
``other_vocab`` and ``bpe_vocab`` give another vocabulary: another SentencePiece one, or a byte-level
BPE one (another tokenizer type, as Qwen's is to Gemma's); such a draft drafts through text.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from app.core.gguf.tiny_layout import ARCHITECTURES, Layout, PlanningLayout, lay_out
from app.core.gguf.tiny_spec import (HYBRID_ATTENTION_INTERVAL, THINKING_SPEC, TinySpec, attention_layers,
                                     sliding_window_layers)
from app.core.gguf.tiny_vocab import (CHATML_TEMPLATE, THINKING_TEMPLATE, add_bpe_vocabulary, add_fim_keys,
                                      add_vocabulary, bpe_vocabulary, vocabulary)

__all__ = ["ARCHITECTURES", "CHATML_TEMPLATE", "HYBRID_ATTENTION_INTERVAL", "THINKING_SPEC", "THINKING_TEMPLATE",
           "TinySpec", "attention_layers", "plan_layout", "sliding_window_layers", "vocabulary", "write_tiny_model"]


def write_tiny_model(path: str | Path, spec: TinySpec = TinySpec()) -> Path:
    """Write a tiny model to ``path`` and return the path."""
    import gguf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if spec.bpe_vocab:
        tokens, types, merges = bpe_vocabulary(spec.chat_tokens)
    else:
        tokens, scores, types = vocabulary(spec.other_vocab, spec.chat_tokens, spec.vocab_size, spec.think_tokens,
                                           spec.fim_tokens)
    w = gguf.GGUFWriter(str(path), spec.architecture)
    w.add_name(spec.name)
    lay_out(Layout(w, spec, len(tokens)))
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    if spec.bpe_vocab:
        add_bpe_vocabulary(w, tokens, types, merges)
    else:
        add_vocabulary(w, tokens, scores, types)
        add_fim_keys(w, tokens)
    if spec.chat_template:
        w.add_chat_template(spec.chat_template)

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def plan_layout(writer, spec: TinySpec, n_vocab: int) -> list[tuple[str, tuple[int, ...], np.ndarray | None]]:
    """Write ``spec``'s architecture keys to ``writer`` and list its tensors in order, as (name, numpy
    shape, data): data None for a weight matrix the caller fills (a model shaped like a real one, whose
    weights would not fit in memory as F32), the exact numbers for the rest (norms, recurrent constants)."""
    planner = PlanningLayout(writer, spec, n_vocab)
    lay_out(planner)
    return planner.planned
