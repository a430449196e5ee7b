"""The relations between a GGUF file's counts that llama.cpp 0.3.36 asserts (GGML_ASSERT) when it loads
a model (src/llama-model.cpp, load_hparams) or builds its first graph (src/models/*.cpp, ggml's ops):
a file that breaks one aborts the whole process (SIGABRT), not a load error, so info.py checks each
with ``check_relations`` before llama.cpp reads the file. tests/core/gguf/test_relations.py fuzzes
the metadata with llama.cpp itself as the judge; four of these rules are what it found.
"""

from __future__ import annotations

import re
from typing import Protocol

from app.core.gguf.reader import GGUFFormatError

BLOCK = re.compile(r"^blk\.(\d+)\.")
ROUTED_EXPERTS = re.compile(r"\.ffn_\w+_exps\.")   # ffn_gate_exps, ffn_up_exps, ffn_down_exps, ffn_gate_up_exps
ROPE_SCALING_TYPES = ("none", "linear", "yarn", "longrope")     # llama-model.cpp's LLAMA_ROPE_SCALING_TYPES
# the graph of these asserts that a head's keys, values and rotary dimensions are as wide (n_embd_head == n_rot)
HEAD_IS_ROTARY_ARCHITECTURES = frozenset({
    "apertus", "arcee", "arctic", "baichuan", "chameleon", "codeshell", "cogvlm", "cohere2moe", "dbrx", "deci",
    "deepseek", "dots1", "dream", "ernie4_5", "ernie4_5-moe", "exaone", "exaone-moe", "exaone4", "falcon", "granite",
    "granite_swa", "graniteswitch", "grok", "grovemoe", "hunyuan-moe", "hunyuan_vl", "hy_v3", "internlm2", "jais2",
    "llada", "llada-moe", "llama", "llama4", "maincoder", "mellum", "minimax-01", "minimax-m2", "mistral3", "nemotron",
    "olmo", "olmo2", "olmoe", "orion", "paddleocr", "pangu-embedded", "plamo", "pockettts", "qwen2", "qwen2moe",
    "qwen2vl", "qwen3", "qwen3moe", "qwen3vl", "qwen3vlmoe", "rnd1", "seed_oss", "smallthinker", "smollm3",
    "starcoder2", "talkie", "xverse"})


class Metadata(Protocol):
    """What the checks read of a file's metadata (info.py's typed reader)."""

    def integer(self, key: str) -> int | None: ...
    def integers(self, key: str) -> list[int]: ...
    def string(self, key: str) -> str | None: ...


# llama.cpp sets these to no experts when they declare one or none, before it checks the expert counts
EXPERTS_ZEROED_ARCHITECTURES = frozenset({"hunyuan_vl", "hunyuan-dense"})


def check_relations(arch: str, meta: Metadata, blocks: int | None, mtp_layers: int,
                     tensors: dict[str, tuple[int, ...]]) -> None:
    """The relations between counts that llama.cpp asserts (see the module's docstring); ``tensors``:
    each tensor's shape by name."""
    if blocks == 0:
        raise GGUFFormatError("it declares no layers (block_count 0)")
    if blocks is not None and mtp_layers > blocks:
        raise GGUFFormatError(f"it declares {mtp_layers:,} MTP layers (nextn_predict_layers) among {blocks:,} "
                              f"layers in all (block_count)")
    _check_experts(arch, meta, tensors)
    _check_heads(arch, meta, blocks, tensors)
    scaling = meta.string(f"{arch}.rope.scaling.type")
    if scaling is not None and scaling not in ROPE_SCALING_TYPES:
        raise GGUFFormatError(f"its rope.scaling.type {scaling!r:.40} is none of {', '.join(ROPE_SCALING_TYPES)}")


def _check_experts(arch: str, meta: Metadata, tensors: dict[str, tuple[int, ...]]) -> None:
    """llama-model.cpp: experts used per token (the most of any layer) at most the experts and at least 1;
    expert groups fewer than the experts, dividing them, with 1 to groups - 1 used; none of these without experts.
    And a layer with experts routes to at least one (0 crashed llama.cpp: found by the fuzzer)."""
    n_expert = meta.integer(f"{arch}.expert_count") or 0
    per_layer = meta.integers(f"{arch}.expert_used_count")
    used = max(per_layer, default=0)
    groups = meta.integer(f"{arch}.expert_group_count") or 0
    groups_used = meta.integer(f"{arch}.expert_group_used_count") or 0
    if arch in EXPERTS_ZEROED_ARCHITECTURES and n_expert <= 1:
        return
    if n_expert == 0 and (used or groups):
        raise GGUFFormatError(f"it routes to {used} experts in {groups} groups (expert_used_count, "
                              f"expert_group_count) but has no experts (expert_count)")
    if n_expert and not 0 < used <= n_expert:
        raise GGUFFormatError(f"it routes each token to {used} of its {n_expert} experts (expert_used_count); "
                              f"llama.cpp needs 1 to {n_expert}")
    if n_expert and (groups >= n_expert or (groups > 1 and (n_expert % groups or not 0 < groups_used < groups))):
        raise GGUFFormatError(f"its {n_expert} experts in {groups} groups, {groups_used} used "
                              f"(expert_group_count, expert_group_used_count), do not divide as llama.cpp needs")
    with_experts = {int(block.group(1)) for name in tensors if (block := BLOCK.match(name)) and ROUTED_EXPERTS.search(name)}
    idle = sorted(layer for layer in with_experts if n_expert and layer < len(per_layer) and per_layer[layer] == 0)
    if idle:
        raise GGUFFormatError(f"layer {idle[0]} has experts but routes each token to none of them (expert_used_count)")


def _check_heads(arch: str, meta: Metadata, blocks: int | None, tensors: dict[str, tuple[int, ...]]) -> None:
    """In every layer with attention the KV heads divide the heads (ggml's product of queries and keys
    asserts it); the rotary dimensions are even and fit in a head; where the graph asserts it, keys,
    values and rotary dimensions are as wide. A layer with a key projection has KV heads (0 aborted
    llama.cpp's first decode: found by the fuzzer)."""
    heads = _per_layer(meta.integers(f"{arch}.attention.head_count"), blocks)
    kv_heads = _per_layer(meta.integers(f"{arch}.attention.head_count_kv"), blocks) or heads
    keyed = sorted({int(block.group(1)) for name in tensors if (block := BLOCK.match(name)) and ".attn_k." in name})
    headless = [layer for layer in keyed if layer < len(kv_heads) and not kv_heads[layer]]
    if headless:
        raise GGUFFormatError(f"layer {headless[0]} has a key projection but no KV heads (head_count_kv)")
    for layer, (n_head, n_kv) in enumerate(zip(heads, kv_heads)):
        if n_head and n_kv and n_head % n_kv:
            raise GGUFFormatError(f"layer {layer} has {n_head} attention heads and {n_kv} KV heads "
                                  f"(head_count, head_count_kv): the KV heads must divide the heads")
    n_embd = meta.integer(f"{arch}.embedding_length")
    if not heads or not heads[0] or n_embd is None:
        return
    key = meta.integer(f"{arch}.attention.key_length") or n_embd // heads[0]
    value = meta.integer(f"{arch}.attention.value_length") or n_embd // heads[0]
    rotary = meta.integer(f"{arch}.rope.dimension_count")
    # ggml's rope asserts an even count no wider than the head; 0 made a qwen35 file's first decode spin
    # for good, 1 and 3 and 32 of 16 aborted it (all three found by the fuzzer in tests/core/gguf/test_relations.py)
    if rotary is not None and (rotary == 0 or rotary % 2 or rotary > key):
        raise GGUFFormatError(f"it rotates {rotary} dimensions of heads {key} wide (rope.dimension_count); llama.cpp "
                              f"needs an even count from 2 to the head's width")
    if arch in HEAD_IS_ROTARY_ARCHITECTURES and not key == value == (rotary or key):
        raise GGUFFormatError(f"its heads' keys, values and rotary dimensions are {key}, {value} and {rotary or key} "
                              f"wide (key_length, value_length, rope.dimension_count); {arch} needs them equal")
    if arch in HEAD_IS_ROTARY_ARCHITECTURES:   # heads of one width: each layer's K and V are that times its KV heads
        _check_kv_widths(key, kv_heads, tensors)


def _check_kv_widths(head: int, kv_heads: list[int], tensors: dict[str, tuple[int, ...]]) -> None:
    """A per-layer head_count_kv of [1, 2] over K and V weights one head wide loaded, and the first
    decode aborted in the KV cache (ggml_set_rows: found by the fuzzer)."""
    for layer, n_kv in enumerate(kv_heads):
        for part in ("attn_k", "attn_v"):
            shape = tensors.get(f"blk.{layer}.{part}.weight")
            if shape is not None and len(shape) == 2 and shape[1] != head * n_kv:
                raise GGUFFormatError(f"layer {layer}'s {part} weight is {shape[1]} wide, not {n_kv} KV heads of "
                                      f"{head} (head_count_kv)")


def _per_layer(values: list[int], blocks: int | None) -> list[int]:
    """A per-layer key as one value per layer (llama.cpp repeats a single value for every layer)."""
    return values * blocks if len(values) == 1 and blocks else values
