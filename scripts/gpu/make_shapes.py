"""Write GGUF models shaped like real ones, with random weights, for measuring what a model costs.

A model's speed depends on its shapes and tensor types, not on its weights, so a file with the layer
count, widths, vocabulary and quantization mix of Qwen2.5 7B Instruct Q4_K_M costs what that model
costs to run, while being written in seconds on any machine (no download, no 15 GB F16 file to
quantize). Tensor types follow llama.cpp's Q4_K_M rules (llama-quant.cpp): Q4_K, with Q6_K for the
output matrix and for attn_v / ffn_down in the layers that get more bits, and llama.cpp's fallbacks
(Q5_0, Q8_0) where a row is not a multiple of 256 (the 0.5B model's 896-wide rows). Quantized blocks
hold random bits with small, finite scales, so every kernel sees ordinary numbers.

    python scripts/gpu/make_shapes.py OUT_DIR [--shapes 0.5b,7b,14b,qwen35-9b]  # tiny, qwen35-tiny: seconds
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from app.core.gguf.tiny import TinySpec, plan_layout  # noqa: E402
from app.core.gguf.tiny_vocab import add_vocabulary, vocabulary  # noqa: E402

QK_K = 256


@dataclass(frozen=True)
class Shape:
    name: str
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    tied: bool            # the output layer reuses the token embeddings


# Qwen2.5 (Instruct / Coder Instruct) shapes, from their config.json files
SHAPES = {
    "0.5b": Shape("qwen2.5-0.5b-shape", 896, 24, 14, 2, 4864, 151_936, tied=True),
    "1.5b": Shape("qwen2.5-1.5b-shape", 1536, 28, 12, 2, 8960, 151_936, tied=True),
    "7b": Shape("qwen2.5-7b-shape", 3584, 28, 28, 4, 18944, 152_064, tied=False),
    "14b": Shape("qwen2.5-14b-shape", 5120, 48, 40, 8, 13824, 152_064, tied=False),
    "tiny": Shape("qwen2.5-tiny-shape", 256, 4, 4, 2, 512, 151_936, tied=True),  # smoke tests of the pipeline
}

# Models laid out by the tiny models' writer for their architecture, at real sizes. Qwen3.5 with its MTP
# layer: that writer ties the delta-net heads to the attention heads, so these are Qwen3.5-9B's delta-net
# heads (16 key heads of 128, 32 value heads of 128) and attention of 32 heads of 128 with 16 for keys and
# values where Qwen3.5-9B has 16 of 256 with 4 (heads of 256 made the delta-net's state 256 wide, which
# llama.cpp's CUDA kernel refuses: it has 16 to 128); it alternates the two kinds of layer where Qwen3.5
# attends in every fourth; widths, depth, FFN and
# vocabulary are Qwen3.5-9B's. Llama 3.1 8B and an EAGLE-3 drafter of its published shape (one layer
# at the main's width, the main's layers 2, 16 and 29, a head over 32,000 tokens mapped by d2t), with
# Q4_K_M's types like the rest (published EAGLE-3 files are mostly BF16: a bigger head and layer). A
# DFlash drafter for it as z-lab's are made: five layers at the main's width reading five of its layers,
# a block of 16, the main's embeddings and head.
LAID_OUT = {
    "qwen35-9b": TinySpec(architecture="qwen35", name="qwen3.5-9b-shape", n_embd=4096, n_layer=32, n_head=32,
                          n_head_kv=16, n_ff=12288, vocab_size=248_320, context_length=32768, chat_template=None),
    "qwen35-tiny": TinySpec(architecture="qwen35", name="qwen3.5-tiny-shape", n_embd=256, n_layer=4, n_head=4,
                            n_head_kv=2, n_ff=512, vocab_size=151_936, context_length=32768, chat_template=None),
    "llama3.1-8b": TinySpec(architecture="llama", name="llama3.1-8b-shape", n_embd=4096, n_layer=32, n_head=32,
                            n_head_kv=8, n_ff=14336, vocab_size=128_256, context_length=32768, chat_template=None),
    "eagle3-llama3.1-8b": TinySpec(architecture="eagle3", name="eagle3-llama3.1-8b-shape", n_embd=4096, n_layer=1,
                                   n_head=32, n_head_kv=8, n_ff=14336, vocab_size=128_256, target_layers=(2, 16, 29),
                                   draft_vocab=32_000, context_length=32768, chat_template=None),
    "dflash-llama3.1-8b": TinySpec(architecture="dflash", name="dflash-llama3.1-8b-shape", n_embd=4096, n_layer=5,
                                   n_head=32, n_head_kv=8, n_ff=14336, vocab_size=128_256, block_size=16,
                                   target_layers=(1, 8, 15, 22, 29), context_length=32768, chat_template=None),
    "llama-tiny": TinySpec(architecture="llama", name="llama-tiny-shape", n_embd=256, n_layer=4, n_head=4,
                           n_head_kv=2, n_ff=512, vocab_size=32_000, context_length=32768, chat_template=None),
    "eagle3-tiny": TinySpec(architecture="eagle3", name="eagle3-tiny-shape", n_embd=256, n_layer=1, n_head=4,
                            n_head_kv=2, n_ff=512, vocab_size=32_000, target_layers=(0, 2, 3), draft_vocab=8_000,
                            context_length=32768, chat_template=None),
    "dflash-tiny": TinySpec(architecture="dflash", name="dflash-tiny-shape", n_embd=256, n_layer=2, n_head=4,
                            n_head_kv=2, n_ff=512, vocab_size=32_000, block_size=16, target_layers=(0, 1, 2, 3),
                            context_length=32768, chat_template=None),
}

# bytes per block and elements per block of the types written here, and their fallbacks
BLOCKS = {"Q4_K": (144, QK_K), "Q6_K": (210, QK_K), "Q5_0": (22, 32), "Q8_0": (34, 32)}
FALLBACK = {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}
# where a block's fp16 scales sit, each as a multiple of the layer's scale d. Q4_K's weight is
# d * sc * q - dmin * m with q, sc and m unsigned: random bits make it d * 236 on average unless dmin
# offsets that (m averages 31.5, so dmin = 7.5 d). Random weights of one sign add up layer by layer: with
# dmin = d the Llama-3.1-8B shape's hidden states reached 11,000, and an EAGLE-3 drafter summing 12,288 of
# them overflowed the GPU's half-precision products into NaN (the 2026-11-27 H100 run).
SCALE_OFFSETS = {"Q4_K": ((0, 1.0), (2, 7.5)), "Q6_K": ((208, 1.0),), "Q5_0": ((0, 1.0),), "Q8_0": ((0, 1.0),)}
# the largest |weight| a block's random bits make, in units of its fp16 scale: quant x sub-block scale
# (Q4_K: 15 x 63, 6-bit sub-scales; Q6_K: 32 x 128, int8 sub-scales). A layer's scale divides by it, so
# its weights stay under 0.5/sqrt(columns) and activations stay ordinary numbers through every layer
# (leaving the sub-scales out, as the first version did, made weights up to 60x larger than that).
SPAN = {"Q4_K": 15 * 63, "Q6_K": 32 * 128, "Q5_0": 16, "Q8_0": 127}
# The output matrix alone keeps large weights (its input is normalized and its products are float), and
# each of its rows gets a scale of its own: rows drawn from the repeated pool were otherwise equal, so
# ten tokens tied for the best at every step. Our greedy pick took the first of them; llama.cpp's
# drafter samples its top 10 at temperature 1, so a model drafting for itself agreed with itself 2 to
# 14% of the time. Peaked logits with one best token make the race the ceiling it is meant to be.
HEAD_SPAN = 16


def use_more_bits(i_layer: int, n_layer: int) -> bool:
    """llama.cpp's choice of layers that get Q6_K in Q4_K_M."""
    return i_layer < n_layer // 8 or i_layer >= 7 * n_layer // 8 or (i_layer - n_layer // 8) % 3 == 2


def tensor_type(name: str, n_cols: int, i_layer: int, n_layer: int) -> str:
    if name == "output.weight":
        kind = "Q6_K"
    elif name.endswith(("attn_v.weight", "ffn_down.weight")) and use_more_bits(i_layer, n_layer):
        kind = "Q6_K"
    else:
        kind = "Q4_K"
    return kind if n_cols % QK_K == 0 else FALLBACK[kind]


# random blocks drawn per tensor; a larger tensor repeats them: a kernel's time does not depend on the
# bits, and drawing every byte of a 14B model took minutes
POOL_BLOCKS = 1 << 14


def random_blocks(rng: np.random.Generator, kind: str, n_rows: int, n_cols: int, span: int,
                  row_scales: bool = False) -> np.ndarray:
    """``row_scales``: each row's scale drawn from 0.5 to 1.5 times the base, so no two rows are equal."""
    size, per_block = BLOCKS[kind]
    n_blocks = n_rows * (n_cols // per_block)
    pool = rng.integers(0, 256, size=(min(n_blocks, POOL_BLOCKS), size), dtype=np.uint8)
    base = 0.5 / (span * np.sqrt(n_cols))
    blocks = np.resize(pool, (n_blocks, size)).reshape(n_rows, n_cols // per_block, size)
    factors = rng.uniform(0.5, 1.5, size=(n_rows, 1)) if row_scales else np.ones((1, 1))
    for offset, multiple in SCALE_OFFSETS[kind]:
        scale = (base * multiple * factors).astype(np.float16)
        blocks[:, :, offset:offset + 2] = scale.view(np.uint8).reshape(-1, 1, 2)
    return blocks.reshape(n_rows, -1)


def tensors(shape: Shape):
    """(name, kind, rows, cols) in the order llama.cpp's qwen2 loader lists them."""
    e, kv = shape.n_embd, shape.n_embd // shape.n_head * shape.n_head_kv
    # with tied embeddings llama.cpp quantizes the token embeddings as the output matrix
    embd_rule = "output.weight" if shape.tied else "token_embd.weight"
    yield "token_embd.weight", tensor_type(embd_rule, e, 0, 1), shape.n_vocab, e
    yield "output_norm.weight", "F32", 1, e
    if not shape.tied:
        yield "output.weight", tensor_type("output.weight", e, 0, 1), shape.n_vocab, e
    for i in range(shape.n_layer):
        for name, rows, cols in (("attn_q", e, e), ("attn_k", kv, e), ("attn_v", kv, e), ("attn_output", e, e),
                                 ("ffn_gate", shape.n_ff, e), ("ffn_up", shape.n_ff, e),
                                 ("ffn_down", e, shape.n_ff)):
            full = f"blk.{i}.{name}.weight"
            yield full, tensor_type(full, cols, i, shape.n_layer), rows, cols
        for name, width in (("attn_q", e), ("attn_k", kv), ("attn_v", kv)):
            yield f"blk.{i}.{name}.bias", "F32", 1, width
        yield f"blk.{i}.attn_norm.weight", "F32", 1, e
        yield f"blk.{i}.ffn_norm.weight", "F32", 1, e


def write_shape(path: Path, shape: Shape, seed: int = 0) -> Path:
    import gguf

    tokens, scores, types = vocabulary(size=shape.n_vocab)
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name(shape.name)
    w.add_uint32("qwen2.context_length", 32768)
    w.add_uint32("qwen2.embedding_length", shape.n_embd)
    w.add_uint32("qwen2.block_count", shape.n_layer)
    w.add_uint32("qwen2.feed_forward_length", shape.n_ff)
    w.add_uint32("qwen2.attention.head_count", shape.n_head)
    w.add_uint32("qwen2.attention.head_count_kv", shape.n_head_kv)
    w.add_float32("qwen2.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32("qwen2.rope.freq_base", 1_000_000.0)
    add_vocabulary(w, tokens, scores, types)
    planned = [(name, kind, (rows, cols), None) for name, kind, rows, cols in tensors(shape)]
    return _write_tensors(w, path, planned, np.random.default_rng(seed))


def write_laid_out_shape(path: Path, spec: TinySpec, seed: int = 0) -> Path:
    """A model laid out by the tiny models' writer for its architecture, at ``spec``'s real sizes, with
    Q4_K_M's tensor types for its weight matrices (F32 where a row is too short to quantize; integer
    tables as they are)."""
    import gguf

    tokens, scores, types = vocabulary(size=spec.vocab_size)
    w = gguf.GGUFWriter(str(path), spec.architecture)
    w.add_name(spec.name)
    n_layer = spec.n_layer + spec.n_nextn
    planned = []
    for name, numpy_shape, data in plan_layout(w, spec, len(tokens)):
        rows, cols = int(np.prod(numpy_shape[:-1])), numpy_shape[-1]
        if data is not None and np.issubdtype(data.dtype, np.integer):
            planned.append((name, "RAW", numpy_shape, data))
        elif data is not None or cols % 32:
            planned.append((name, "F32", numpy_shape, data))
        else:
            layer = int(name.split(".")[1]) if name.startswith("blk.") else 0
            planned.append((name, tensor_type(name, cols, layer, n_layer), (rows, cols), None))
    add_vocabulary(w, tokens, scores, types)
    return _write_tensors(w, path, planned, np.random.default_rng(seed))


def _write_tensors(w, path: Path, planned, rng: np.random.Generator) -> Path:
    """Write ``planned`` (name, kind, numpy shape, data or None) after the writer's keys: F32 tensors
    with their data (small random numbers without), quantized ones as random blocks."""
    import gguf

    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_K_M)
    for name, kind, shape, data in planned:
        if kind == "RAW":
            w.add_tensor_info(name, shape, data.dtype, data.nbytes)
        elif kind == "F32":
            w.add_tensor_info(name, shape, np.dtype(np.float32), int(np.prod(shape)) * 4)
        else:
            rows, cols = shape
            size, per_block = BLOCKS[kind]
            w.add_tensor_info(name, (rows, cols // per_block * size), np.dtype(np.uint8),
                              rows * cols // per_block * size, raw_dtype=gguf.GGMLQuantizationType[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    names = {name for name, *_ in planned}
    head = "output.weight" if "output.weight" in names else "token_embd.weight"   # tied: the embedding is the head
    for name, kind, shape, data in planned:
        if kind not in ("F32", "RAW"):
            data = (random_blocks(rng, kind, *shape, span=HEAD_SPAN, row_scales=True) if name == head
                    else random_blocks(rng, kind, *shape, span=SPAN[kind]))
        elif data is None:
            data = np.ones(shape, np.float32) if "norm" in name else (rng.standard_normal(shape) * 0.02).astype(np.float32)
        w.write_tensor_data(data)
    w.close()
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("--shapes", default="0.5b,7b,14b", help=f"comma-separated: {', '.join([*SHAPES, *LAID_OUT])}")
    args = parser.parse_args(argv)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for key in args.shapes.split(","):
        if key in LAID_OUT:
            path = write_laid_out_shape(out / f"{LAID_OUT[key].name}-q4_k_m.gguf", LAID_OUT[key])
        else:
            path = write_shape(out / f"{SHAPES[key].name}-q4_k_m.gguf", SHAPES[key])
        print(f"{key}\t{path}\t{path.stat().st_size / 2**30:.2f} GiB", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
