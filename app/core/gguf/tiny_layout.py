"""The tiny models' layouts, one writer per architecture (keys and random weights), and the planner
that lays a spec out without drawing its weights (app/core/gguf/tiny.py writes the files)."""

from __future__ import annotations

import numpy as np

from app.core.gguf.tiny_spec import HYBRID_ATTENTION_INTERVAL, TinySpec, attention_layers, sliding_window_layers


class Layout:
    """What the per-architecture writers share: the GGUF writer, the spec, the sizes and the random
    weights (drawn in the order the tensors are added, so a spec always writes the same bytes)."""

    def __init__(self, writer, spec: TinySpec, n_vocab: int):
        self.w = writer
        self.spec = spec
        self.arch = spec.architecture
        self.n_vocab = n_vocab
        self.n_embd = spec.n_embd
        self.head_dim = spec.n_embd // spec.n_head
        self.n_embd_kv = self.head_dim * spec.n_head_kv
        self.rng = np.random.default_rng(spec.seed)

    def key(self, name: str, value) -> None:
        """``{arch}.{name}``: an int is written as uint32, a float as float32, a list as an array."""
        key = f"{self.arch}.{name}"
        if isinstance(value, (list, tuple)):
            self.w.add_array(key, list(value))
        elif isinstance(value, float):
            self.w.add_float32(key, value)
        else:
            self.w.add_uint32(key, int(value))

    def weight(self, *shape: int) -> np.ndarray:
        """Random weights; numpy's shape is GGUF's reversed: ``weight(out, in)`` maps in -> out."""
        return (self.rng.standard_normal(shape) * self.spec.weight_scale).astype(np.float32)

    def tensor(self, name: str, data: np.ndarray) -> None:
        self.w.add_tensor(name, _stored(data))

    def norm(self, name: str, n: int | None = None) -> None:
        self.tensor(name, np.ones(n or self.n_embd, dtype=np.float32))


# --- shared parts -----------------------------------------------------------------------------------

def _base_keys(t: Layout, n_layer: int, n_ff: int, n_head: int, n_head_kv: int | list[int]) -> None:
    t.key("context_length", t.spec.context_length)
    t.key("embedding_length", t.n_embd)
    t.key("block_count", n_layer)
    t.key("feed_forward_length", n_ff)
    t.key("attention.head_count", n_head)
    t.key("attention.head_count_kv", n_head_kv)
    t.key("attention.layer_norm_rms_epsilon", 1e-5)


def _embeddings(t: Layout, output_norm: str = "output_norm") -> None:
    """The token embedding, the final norm and a separate output head."""
    t.tensor("token_embd.weight", t.weight(t.n_vocab, t.n_embd))
    t.norm(f"{output_norm}.weight")
    t.tensor("output.weight", t.weight(t.n_vocab, t.n_embd) * 2)


def _attention(t: Layout, i: int, n_q: int | None = None, qk_norm: bool = False) -> None:
    """Separate Q, K, V and output projections (Q ``n_q`` wide: Qwen3.5 adds a gate to it), with
    per-head RMS norms of Q and K if ``qk_norm``."""
    n_q = n_q or t.n_embd
    t.tensor(f"blk.{i}.attn_q.weight", t.weight(n_q, t.n_embd))
    t.tensor(f"blk.{i}.attn_k.weight", t.weight(t.n_embd_kv, t.n_embd))
    t.tensor(f"blk.{i}.attn_v.weight", t.weight(t.n_embd_kv, t.n_embd))
    t.tensor(f"blk.{i}.attn_output.weight", t.weight(t.n_embd, t.head_dim * t.spec.n_head))
    if qk_norm:
        t.norm(f"blk.{i}.attn_q_norm.weight", t.head_dim)
        t.norm(f"blk.{i}.attn_k_norm.weight", t.head_dim)


def _ffn(t: Layout, i: int) -> None:
    """A SwiGLU feed-forward block."""
    t.tensor(f"blk.{i}.ffn_gate.weight", t.weight(t.spec.n_ff, t.n_embd))
    t.tensor(f"blk.{i}.ffn_up.weight", t.weight(t.spec.n_ff, t.n_embd))
    t.tensor(f"blk.{i}.ffn_down.weight", t.weight(t.n_embd, t.spec.n_ff))


def _ssm_dt_bias(n: int) -> np.ndarray:
    """softplus⁻¹ of time steps spread over [0.01, 0.1], as Mamba initialises them."""
    dt = np.exp(np.linspace(np.log(0.01), np.log(0.1), n))
    return np.log(np.expm1(dt)).astype(np.float32)


# --- one writer per architecture ------------------------------------------------------------------

def _write_llama(t: Layout) -> None:
    s = t.spec
    _base_keys(t, s.n_layer, s.n_ff, s.n_head, s.n_head_kv)
    t.key("rope.dimension_count", t.head_dim)
    _embeddings(t)
    for i in range(s.n_layer):
        t.norm(f"blk.{i}.attn_norm.weight")
        _attention(t, i)
        t.norm(f"blk.{i}.ffn_norm.weight")
        _ffn(t, i)


SHORTCONV_L_CACHE = 3   # lfm2: the short convolution's kernel width (LFM2's own)


def _write_lfm2(t: Layout) -> None:
    """LFM2: each layer is a gated short convolution or attention (with Q/K norms) and a SwiGLU FFN.
    llama.cpp reads which is which from the per-layer KV head counts: 0 marks a convolution layer."""
    s = t.spec
    attends = attention_layers(s)
    _base_keys(t, s.n_layer, s.n_ff, s.n_head, [s.n_head_kv if i in attends else 0 for i in range(s.n_layer)])
    t.key("rope.dimension_count", t.head_dim)
    t.key("shortconv.l_cache", SHORTCONV_L_CACHE)
    _embeddings(t, output_norm="token_embd_norm")   # LFM2's final norm has this (historical) name
    for i in range(s.n_layer):
        t.norm(f"blk.{i}.attn_norm.weight")
        if i in attends:
            _attention(t, i, qk_norm=True)
        else:
            t.tensor(f"blk.{i}.shortconv.in_proj.weight", t.weight(3 * t.n_embd, t.n_embd))   # B, C, x
            t.tensor(f"blk.{i}.shortconv.conv.weight", t.weight(t.n_embd, SHORTCONV_L_CACHE))
            t.tensor(f"blk.{i}.shortconv.out_proj.weight", t.weight(t.n_embd, t.n_embd))
        t.norm(f"blk.{i}.ffn_norm.weight")
        _ffn(t, i)


MAMBA_D_CONV = 4
MAMBA_D_STATE = 16


def _write_mamba(t: Layout) -> None:
    """Mamba 1: each layer is a selective state-space block (no attention, no FFN). llama.cpp
    supports only an inner width of twice the embedding."""
    s = t.spec
    d_inner = 2 * t.n_embd
    dt_rank = -(-t.n_embd // 16)
    _base_keys(t, s.n_layer, 0, 0, 0)
    t.key("ssm.conv_kernel", MAMBA_D_CONV)
    t.key("ssm.inner_size", d_inner)
    t.key("ssm.state_size", MAMBA_D_STATE)
    t.key("ssm.time_step_rank", dt_rank)
    _embeddings(t)
    a = -np.tile(np.arange(1, MAMBA_D_STATE + 1, dtype=np.float32), (d_inner, 1))   # A = -exp(A_log), S4D-real
    for i in range(s.n_layer):
        t.norm(f"blk.{i}.attn_norm.weight")
        t.tensor(f"blk.{i}.ssm_in.weight", t.weight(2 * d_inner, t.n_embd))              # x and the gate z
        t.tensor(f"blk.{i}.ssm_conv1d.weight", t.weight(d_inner, MAMBA_D_CONV))
        t.tensor(f"blk.{i}.ssm_conv1d.bias", t.weight(d_inner))
        t.tensor(f"blk.{i}.ssm_x.weight", t.weight(dt_rank + 2 * MAMBA_D_STATE, d_inner))  # dt, B, C
        t.tensor(f"blk.{i}.ssm_dt.weight", t.weight(d_inner, dt_rank))
        t.tensor(f"blk.{i}.ssm_dt.bias", _ssm_dt_bias(d_inner))
        t.tensor(f"blk.{i}.ssm_a", a)
        t.tensor(f"blk.{i}.ssm_d", np.ones(d_inner, dtype=np.float32))
        t.tensor(f"blk.{i}.ssm_out.weight", t.weight(t.n_embd, d_inner))


def _write_qwen3moe(t: Layout) -> None:
    """Qwen3-MoE: attention with Q/K norms, then a softmax router over ``n_expert`` SwiGLU experts of
    which each token uses ``n_expert_used`` (no shared expert)."""
    s = t.spec
    if not 0 < s.n_expert_used <= s.n_expert:
        raise ValueError(f"qwen3moe needs 0 < n_expert_used <= n_expert, not {s.n_expert_used} of {s.n_expert}")
    n_ff_exp = max(1, s.n_ff // s.n_expert_used)
    _base_keys(t, s.n_layer, s.n_ff, s.n_head, s.n_head_kv)
    t.key("rope.dimension_count", t.head_dim)
    t.key("expert_count", s.n_expert)
    t.key("expert_used_count", s.n_expert_used)
    t.key("expert_feed_forward_length", n_ff_exp)
    _embeddings(t)
    for i in range(s.n_layer):
        t.norm(f"blk.{i}.attn_norm.weight")
        _attention(t, i, qk_norm=True)
        t.norm(f"blk.{i}.ffn_norm.weight")
        t.tensor(f"blk.{i}.ffn_gate_inp.weight", t.weight(s.n_expert, t.n_embd))
        t.tensor(f"blk.{i}.ffn_gate_exps.weight", t.weight(s.n_expert, n_ff_exp, t.n_embd))
        t.tensor(f"blk.{i}.ffn_up_exps.weight", t.weight(s.n_expert, n_ff_exp, t.n_embd))
        t.tensor(f"blk.{i}.ffn_down_exps.weight", t.weight(s.n_expert, t.n_embd, n_ff_exp))


QWEN35_D_CONV = 4
QWEN35_ROPE_SECTIONS = (3, 3, 2, 0)   # interleaved M-RoPE; text positions are equal in every section


def _write_qwen35(t: Layout) -> None:
    """Qwen3.5: recurrent gated delta-net layers and gated attention layers (Q/K norms, a sigmoid gate
    the Q projection also yields), each followed by a SwiGLU FFN; then ``n_nextn`` MTP blocks, each a
    gated attention layer fed with the projection of [norm(token embedding), norm(trunk output)]."""
    s = t.spec
    attends = attention_layers(s)
    head_k, n_k_heads, n_v_heads = t.head_dim, max(1, s.n_head_kv), s.n_head   # delta-net head sizes
    key_dim, value_dim = head_k * n_k_heads, head_k * n_v_heads
    conv_dim = 2 * key_dim + value_dim
    _base_keys(t, s.n_layer + s.n_nextn, s.n_ff, s.n_head, s.n_head_kv)
    t.key("rope.dimension_count", t.head_dim)
    t.key("rope.dimension_sections", list(QWEN35_ROPE_SECTIONS))
    t.key("full_attention_interval", HYBRID_ATTENTION_INTERVAL)
    t.key("ssm.conv_kernel", QWEN35_D_CONV)
    t.key("ssm.inner_size", value_dim)
    t.key("ssm.state_size", head_k)
    t.key("ssm.time_step_rank", n_v_heads)
    t.key("ssm.group_count", n_k_heads)
    if s.n_nextn:
        t.key("nextn_predict_layers", s.n_nextn)
    _embeddings(t)
    a = -np.arange(1, n_v_heads + 1, dtype=np.float32)   # -exp(A_log)
    for i in range(s.n_layer + s.n_nextn):
        t.norm(f"blk.{i}.attn_norm.weight")
        t.norm(f"blk.{i}.post_attention_norm.weight")
        if i in attends or i >= s.n_layer:
            _attention(t, i, n_q=2 * t.head_dim * s.n_head, qk_norm=True)
        else:
            t.tensor(f"blk.{i}.attn_qkv.weight", t.weight(conv_dim, t.n_embd))
            t.tensor(f"blk.{i}.attn_gate.weight", t.weight(value_dim, t.n_embd))    # z, the output gate
            t.tensor(f"blk.{i}.ssm_conv1d.weight", t.weight(conv_dim, QWEN35_D_CONV))
            t.tensor(f"blk.{i}.ssm_dt.bias", np.zeros(n_v_heads, dtype=np.float32))
            t.tensor(f"blk.{i}.ssm_a", a)
            t.tensor(f"blk.{i}.ssm_beta.weight", t.weight(n_v_heads, t.n_embd))
            t.tensor(f"blk.{i}.ssm_alpha.weight", t.weight(n_v_heads, t.n_embd))
            t.norm(f"blk.{i}.ssm_norm.weight", head_k)
            t.tensor(f"blk.{i}.ssm_out.weight", t.weight(t.n_embd, value_dim))
        _ffn(t, i)
        if i >= s.n_layer:   # the MTP block's own inputs; it shares the trunk's embedding and head
            t.tensor(f"blk.{i}.nextn.eh_proj.weight", t.weight(t.n_embd, 2 * t.n_embd))
            t.norm(f"blk.{i}.nextn.enorm.weight")
            t.norm(f"blk.{i}.nextn.hnorm.weight")
            t.norm(f"blk.{i}.nextn.shared_head_norm.weight")


def _gemma4_keys(t: Layout, n_layer: int) -> None:
    """What Gemma 4's main model and assistant share: the layer pattern (sliding-window layers beside
    full-attention ones), K and V heads ``head_dim`` wide in both kinds of layers (llama.cpp requires
    K and V of equal width) and fully rotated, no per-layer embeddings and no shared-KV layers."""
    s = t.spec
    if n_layer < 2:
        raise ValueError(f"{t.arch} needs at least 2 layers (a sliding-window one, then a full one), not {n_layer}")
    if s.sliding_window < 1:
        raise ValueError(f"{t.arch} needs a sliding window of at least 1 token, not {s.sliding_window}")
    sliding = sliding_window_layers(s)
    _base_keys(t, n_layer, s.n_ff, s.n_head, s.n_head_kv)
    for kind in ("key_length", "value_length", "key_length_swa", "value_length_swa"):
        t.key(f"attention.{kind}", t.head_dim)
    t.key("rope.dimension_count", t.head_dim)
    t.key("rope.dimension_count_swa", t.head_dim)
    t.key("attention.sliding_window", s.sliding_window)
    t.key("attention.sliding_window_pattern", [i in sliding for i in range(n_layer)])   # an array of bools
    t.key("attention.shared_kv_layers", 0)
    t.key("embedding_length_per_layer_input", 0)


def _gemma4_layer_tail(t: Layout, i: int, rope_freqs: bool) -> None:
    """After a Gemma 4 layer's attention projections: the norm of the attention output, the scale of
    the layer's output (ones), the rope frequency factors the full-attention layers share (written
    once, by the first: ones, every dimension rotated) and the GELU-gated FFN between its two norms."""
    t.norm(f"blk.{i}.post_attention_norm.weight")
    t.norm(f"blk.{i}.layer_output_scale.weight", 1)
    if rope_freqs:
        t.norm("rope_freqs.weight", t.head_dim // 2)
    t.norm(f"blk.{i}.ffn_norm.weight")
    _ffn(t, i)
    t.norm(f"blk.{i}.post_ffw_norm.weight")


def _write_gemma4(t: Layout) -> None:
    """Gemma 4, dense and without per-layer embeddings: each layer has attention with Q/K norms (V is
    normed without weights) and no 1/sqrt(head) scaling, the sliding-window layers over the last
    ``sliding_window`` tokens, then a GELU-gated FFN, each with a norm after it too. llama.cpp
    exposes the final-normed hidden state as the "nextn" embedding its assistant drafts from."""
    s = t.spec
    sliding = sliding_window_layers(s)
    _gemma4_keys(t, s.n_layer)
    _embeddings(t)
    full = [i for i in range(s.n_layer) if i not in sliding]
    for i in range(s.n_layer):
        t.norm(f"blk.{i}.attn_norm.weight")
        _attention(t, i, qk_norm=True)
        _gemma4_layer_tail(t, i, rope_freqs=i == full[0])


def _write_gemma4_assistant(t: Layout) -> None:
    """Gemma 4's assistant: an MTP drafter ``n_embd_assistant`` wide for a gemma4 main ``n_embd`` wide
    (``embedding_length_out``). Its input is the main's (scaled) token embedding beside the main's
    hidden state, projected down (``nextn.pre_projection``); its ``n_layer`` layers (all MTP layers,
    as the converter writes them: ``block_count`` = ``nextn_predict_layers``) have only Q and output
    projections and attend over the main's keys and values; its head is tied to its own token
    embedding and ``nextn.post_projection`` maps its hidden state back to the main's width."""
    s = t.spec
    sliding = sliding_window_layers(s)
    backbone, t.n_embd = t.n_embd, s.n_embd_assistant   # t.head_dim stays the backbone's: it reads its cache
    _gemma4_keys(t, s.n_layer)
    t.key("embedding_length_out", backbone)
    t.key("nextn_predict_layers", s.n_layer)
    t.tensor("token_embd.weight", t.weight(t.n_vocab, t.n_embd))
    t.norm("output_norm.weight")
    t.tensor("nextn.pre_projection.weight", t.weight(t.n_embd, 2 * backbone))
    t.tensor("nextn.post_projection.weight", t.weight(backbone, t.n_embd))
    full = [i for i in range(s.n_layer) if i not in sliding]
    for i in range(s.n_layer):
        t.norm(f"blk.{i}.attn_norm.weight")
        t.tensor(f"blk.{i}.attn_q.weight", t.weight(t.head_dim * s.n_head, t.n_embd))
        t.tensor(f"blk.{i}.attn_output.weight", t.weight(t.n_embd, t.head_dim * s.n_head))
        t.norm(f"blk.{i}.attn_q_norm.weight", t.head_dim)
        _gemma4_layer_tail(t, i, rope_freqs=i == full[0])


def _write_eagle3(t: Layout) -> None:
    """EAGLE-3 as llama.cpp's converter writes it: ``fc`` fuses the main's three hidden states
    (``n_embd_target`` wide each) to the drafter's width; the single layer normalizes its token
    embedding (``attn_norm``) and the fused state (``attn_norm_2``) and attends over both side by side
    (Q, K and V read ``2 * n_embd``); its head is its own (over ``draft_vocab`` tokens mapped to the
    main's by ``d2t``, when set), its token embedding the main's."""
    s = t.spec
    if s.n_layer != 1 or len(s.target_layers) != 3:
        raise ValueError("an eagle3 drafter has one layer and reads three target layers")
    target = s.n_embd_target or t.n_embd
    _base_keys(t, 1, s.n_ff, s.n_head, s.n_head_kv)
    t.key("rope.dimension_count", t.head_dim)
    t.w.add_array("eagle3.target_layers", [int(i) for i in s.target_layers])
    t.key("target_hidden_size", target)
    t.tensor("fc.weight", t.weight(t.n_embd, 3 * target))
    t.norm("output_norm.weight")
    t.tensor("output.weight", t.weight(s.draft_vocab or t.n_vocab, t.n_embd) * 2)
    if s.draft_vocab:   # its head's rows are the main vocabulary's first draft_vocab tokens
        t.tensor("d2t", np.arange(s.draft_vocab, dtype=np.int64))
    t.norm("blk.0.attn_norm.weight")
    t.norm("blk.0.attn_norm_2.weight")
    t.tensor("blk.0.attn_q.weight", t.weight(t.head_dim * s.n_head, 2 * t.n_embd))
    t.tensor("blk.0.attn_k.weight", t.weight(t.n_embd_kv, 2 * t.n_embd))
    t.tensor("blk.0.attn_v.weight", t.weight(t.n_embd_kv, 2 * t.n_embd))
    t.tensor("blk.0.attn_output.weight", t.weight(t.n_embd, t.head_dim * s.n_head))
    t.norm("blk.0.ffn_norm.weight")
    _ffn(t, 0)


# the tiny vocabulary's unknown token: never an answer's, so it can stand for "a token to predict"
DFLASH_MASK_TOKEN = 0


def _write_dflash(t: Layout) -> None:
    """DFlash: ``fc`` fuses the main's hidden states at ``target_layers`` (each ``n_embd`` wide, the
    main's width) and ``enc.output_norm`` normalizes the result; ``n_layer`` layers with Q/K norms then
    draft a block; embedding and head are the main's. DSpark adds a Markov head (``markov_w1`` over the
    previous token, ``markov_w2`` to the vocabulary) and a confidence head over [hidden, Markov state]."""
    s = t.spec
    _base_keys(t, s.n_layer, s.n_ff, s.n_head, s.n_head_kv)
    t.key("rope.dimension_count", t.head_dim)
    t.w.add_array("dflash.target_layers", [int(i) for i in s.target_layers])
    t.key("block_size", s.block_size)
    t.w.add_mask_token_id(DFLASH_MASK_TOKEN)   # what the block's positions after its first token hold
    t.tensor("fc.weight", t.weight(t.n_embd, len(s.target_layers) * t.n_embd))
    t.norm("enc.output_norm.weight")
    t.norm("output_norm.weight")
    if s.markov_rank:
        t.tensor("markov_w1.weight", t.weight(t.n_vocab, s.markov_rank))
        t.tensor("markov_w2.weight", t.weight(t.n_vocab, s.markov_rank))
        t.tensor("conf_proj.weight", t.weight(1, t.n_embd + s.markov_rank))
        t.tensor("conf_proj.bias", np.zeros(1, dtype=np.float32))
    for i in range(s.n_layer):
        t.norm(f"blk.{i}.attn_norm.weight")
        _attention(t, i, qk_norm=True)
        t.norm(f"blk.{i}.ffn_norm.weight")
        _ffn(t, i)


class _Planned:
    """A weight's shape without its numbers (the arithmetic the layouts do on weights keeps it)."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape

    def __mul__(self, _factor) -> "_Planned":
        return self


class PlanningLayout(Layout):
    """Lays a spec out without drawing weights: keys go to the writer, tensors to ``planned``."""

    def __init__(self, writer, spec: TinySpec, n_vocab: int):
        super().__init__(writer, spec, n_vocab)
        self.planned: list[tuple[str, tuple[int, ...], np.ndarray | None]] = []

    def weight(self, *shape: int) -> _Planned:
        return _Planned(shape)

    def tensor(self, name: str, data) -> None:
        if isinstance(data, _Planned):
            self.planned.append((name, data.shape, None))
        else:
            self.planned.append((name, data.shape, _stored(data)))


def _stored(data: np.ndarray) -> np.ndarray:
    """A tensor as the file keeps it: F32, but an integer table (EAGLE-3's d2t) as its integers."""
    data = np.asarray(data)
    return np.ascontiguousarray(data if np.issubdtype(data.dtype, np.integer) else data.astype(np.float32))

_LAYOUTS = {
    "llama": _write_llama,
    "lfm2": _write_lfm2,
    "mamba": _write_mamba,
    "qwen3moe": _write_qwen3moe,
    "qwen35": _write_qwen35,
    "gemma4": _write_gemma4,
    "gemma4-assistant": _write_gemma4_assistant,
    "eagle3": _write_eagle3,
    "dflash": _write_dflash,
}
ARCHITECTURES = tuple(_LAYOUTS)   # what write_tiny_model lays out; any other name gets the llama layout


def lay_out(t: Layout) -> None:
    """Lay ``t.spec``'s architecture out through ``t`` (any other name: the llama layout)."""
    _LAYOUTS.get(t.spec.architecture, _write_llama)(t)
