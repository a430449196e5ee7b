"""The tiny models of other architectures (app/core/gguf/tiny.py) load and decode in llama.cpp, and
llama.cpp sees each as the kind of model it is meant to be: hybrid, recurrent, mixture of experts,
or carrying an MTP (nextn) head it can draft from."""

from __future__ import annotations

import ctypes
import hashlib

import numpy as np
import pytest

import llama_cpp
from app.core.gguf.info import read_gguf_info
from app.core.gguf.pair_check import check_pair
from app.core.gguf.tiny import ARCHITECTURES, TinySpec, attention_layers, write_tiny_model
from app.core.llama.binding import LlamaModel, LlamaSession
from app.core.llama.library import ensure_backend
from app.core.params import ModelParams
from tests.core.gguf.decoding import assert_generates_varied_tokens

# sha256 of write_tiny_model(path, TinySpec()), taken before the other architectures were added: the
# llama models every other test uses must stay byte for byte what they were
DEFAULT_LLAMA_SHA256 = "317f24717195d89ab15b5b66ac0d9d8337cb2b9fb9b5da338ed368e5a5953d50"

# architecture: (llama_model_is_recurrent, llama_model_is_hybrid)
KINDS = {
    "lfm2": (False, True),
    "mamba": (True, False),
    "qwen3moe": (False, False),
    "qwen35": (False, True),
}

PROMPT = "the cat is on the mat and the dog"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """One file per architecture (and the default llama), written once for this module."""
    d = tmp_path_factory.mktemp("tiny-architectures")
    paths = {arch: write_tiny_model(d / f"{arch}.gguf", TinySpec(architecture=arch, name=f"tiny-{arch}"))
             for arch in KINDS}
    paths["llama"] = write_tiny_model(d / "llama.gguf", TinySpec())
    return paths


@pytest.fixture
def loaded(tiny, request):
    model = LlamaModel(ModelParams(str(tiny[request.param]), n_gpu_layers=0))
    session = LlamaSession(model, n_ctx=256, n_threads=1)
    yield model, session
    session.close()
    model.close()


def _context(model, ctx_type: int, n_rs_seq: int = 0):
    """A raw llama.cpp context of one sequence (LlamaSession chooses its own n_rs_seq)."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx = params.n_batch = params.n_ubatch = 256
    params.n_seq_max = 1
    params.n_rs_seq = n_rs_seq
    params.n_threads = params.n_threads_batch = 1
    params.ctx_type = ctx_type
    ctx = llama_cpp.llama_init_from_model(model, params)
    assert ctx
    return ctx


def _decode(ctx, tokens: list[int], start: int = 0) -> np.ndarray:
    """Decode ``tokens`` at positions from ``start``; a copy of the last token's logits."""
    batch = llama_cpp.llama_batch_init(len(tokens), 0, 1)
    try:
        for i, token in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = token, start + i, 1, 0
            batch.logits[i] = i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        assert llama_cpp.llama_decode(ctx, batch) == 0
        n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(llama_cpp.llama_get_model(ctx)))
        return np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, len(tokens) - 1), shape=(n_vocab,)).copy()
    finally:
        llama_cpp.llama_batch_free(batch)


def test_default_llama_model_is_unchanged(tmp_path):
    path = write_tiny_model(tmp_path / "default.gguf", TinySpec())
    assert hashlib.sha256(path.read_bytes()).hexdigest() == DEFAULT_LLAMA_SHA256


@pytest.mark.parametrize("loaded", list(KINDS), indirect=True)
def test_decodes_and_generates_varied_tokens(loaded):
    model, session = loaded
    prompt = model.tokenize(PROMPT)
    assert_generates_varied_tokens(session, prompt)


@pytest.mark.parametrize("arch", list(KINDS))
def test_llama_cpp_sees_the_memory_kind(tiny, arch):
    recurrent, hybrid = KINDS[arch]
    model = LlamaModel(ModelParams(str(tiny[arch]), n_gpu_layers=0))
    try:
        assert llama_cpp.llama_model_is_recurrent(model._model) is recurrent
        assert llama_cpp.llama_model_is_hybrid(model._model) is hybrid
        assert llama_cpp.llama_model_n_layer(model._model) == TinySpec().n_layer   # the trunk, not MTP layers
    finally:
        model.close()


def test_every_laid_out_architecture_is_tested():
    # the gemma4 main and its assistant: tests/core/gguf/test_tiny_gemma4.py; eagle3 and dflash:
    # tests/core/gguf/test_tiny_drafters.py
    assert set(ARCHITECTURES) == set(KINDS) | {"llama", "gemma4", "gemma4-assistant", "eagle3", "dflash"}


def test_hybrids_alternate_recurrent_and_attention_layers():
    for arch in ("lfm2", "qwen35"):
        assert attention_layers(TinySpec(architecture=arch, n_layer=4)) == (1, 3)
    assert attention_layers(TinySpec(architecture="mamba")) == ()
    assert attention_layers(TinySpec(architecture="qwen3moe")) == (0, 1)


# architecture: (seq_rm of a suffix without snapshots, llama_n_rs_seq when 4 snapshots are asked for)
ROLLBACK = {"llama": (True, 0), "qwen3moe": (True, 0), "mamba": (False, 0), "lfm2": (False, 4), "qwen35": (False, 4)}


@pytest.mark.parametrize("arch", list(ROLLBACK))
def test_partial_memory_removal(tiny, arch):
    """Without recurrent-state snapshots (n_rs_seq 0) llama.cpp cannot trim a recurrent or hybrid
    model's memory back to an earlier position: seq_rm says False and keeps everything. With them it
    can for the architectures llm_arch_supports_rs_rollback lists (lfm2 and qwen35, not mamba); an
    attention-only model trims either way and keeps no snapshots."""
    trims_without, n_rs_seq = ROLLBACK[arch]
    model = LlamaModel(ModelParams(str(tiny[arch]), n_gpu_layers=0))
    try:
        for asked in (0, 4):
            ctx = _context(model._model, llama_cpp.LLAMA_CONTEXT_TYPE_DEFAULT, n_rs_seq=asked)
            try:
                assert llama_cpp.llama_n_rs_seq(ctx) == (n_rs_seq if asked else 0)
                _decode(ctx, [50 + i for i in range(8)])
                memory = llama_cpp.llama_get_memory(ctx)
                trims = trims_without or llama_cpp.llama_n_rs_seq(ctx) >= 2
                assert llama_cpp.llama_memory_seq_rm(memory, 0, 6, -1) is trims
                assert llama_cpp.llama_memory_seq_pos_max(memory, 0) == (5 if trims else 7)
                assert llama_cpp.llama_memory_seq_rm(memory, 0, -1, -1) is True   # the whole sequence always goes
            finally:
                llama_cpp.llama_free(ctx)
    finally:
        model.close()


@pytest.mark.parametrize("arch", ["lfm2", "qwen35"])
def test_rollback_inside_the_last_batch_is_exact(tiny, arch):
    """Taking back the last tokens of the batch just decoded, then decoding others, gives the logits
    of decoding the kept tokens and the others from scratch (what undoing a rejected draft needs)."""
    model = LlamaModel(ModelParams(str(tiny[arch]), n_gpu_layers=0))
    ctx = _context(model._model, llama_cpp.LLAMA_CONTEXT_TYPE_DEFAULT, n_rs_seq=4)
    try:
        memory = llama_cpp.llama_get_memory(ctx)
        tokens = [50 + i for i in range(8)]
        _decode(ctx, tokens)
        assert llama_cpp.llama_memory_seq_rm(memory, 0, 5, -1)
        after_rollback = _decode(ctx, [99, 98], start=5)
        assert llama_cpp.llama_memory_seq_rm(memory, 0, -1, -1)
        from_scratch = _decode(ctx, tokens[:5] + [99, 98])
        np.testing.assert_allclose(after_rollback, from_scratch, rtol=1e-4, atol=1e-4)
    finally:
        llama_cpp.llama_free(ctx)
        model.close()


def test_moe_states_its_experts(tiny):
    import gguf

    reader = gguf.GGUFReader(tiny["qwen3moe"])

    def value(key):
        field = reader.get_field(key)
        return int(field.parts[field.data[0]][0])

    spec = TinySpec()
    assert value("qwen3moe.expert_count") == spec.n_expert == 4
    assert value("qwen3moe.expert_used_count") == spec.n_expert_used == 2
    experts = {t.name: tuple(int(n) for n in t.shape) for t in reader.tensors if "_exps" in t.name}
    assert experts["blk.0.ffn_gate_exps.weight"] == (spec.n_embd, spec.n_ff // spec.n_expert_used, spec.n_expert)

    model = LlamaModel(ModelParams(str(tiny["qwen3moe"]), n_gpu_layers=0))   # and llama.cpp reads the same
    try:
        buf = ctypes.create_string_buffer(32)
        n = llama_cpp.llama_model_meta_val_str(model._model, b"qwen3moe.expert_count", buf, len(buf))
        assert n > 0 and buf.value == b"4"
    finally:
        model.close()


def test_all_kinds_share_the_vocabulary(tiny):
    """A draft of one architecture can pair with a main model of another."""
    main = read_gguf_info(tiny["llama"])
    for arch in KINDS:
        info = read_gguf_info(tiny[arch])
        assert info.architecture == arch
        assert info.tokens == main.tokens
        assert check_pair(main, info).compatible


# --- MTP: Qwen3.5's nextn layer ----------------------------------------------------------------------

def _load_raw(path, load_mtp: bool):
    ensure_backend()
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0
    params.load_mtp = load_mtp
    model = llama_cpp.llama_model_load_from_file(str(path).encode(), params)
    assert model
    return model




def test_mtp_model_has_a_nextn_layer(tiny):
    for load_mtp in (True, False):   # the count comes from the metadata; load_mtp decides the weights
        model = _load_raw(tiny["qwen35"], load_mtp)
        try:
            assert llama_cpp.llama_model_n_layer_nextn(model) == TinySpec().n_nextn == 1
            assert llama_cpp.llama_model_n_layer(model) == TinySpec().n_layer
        finally:
            llama_cpp.llama_model_free(model)
    info = read_gguf_info(tiny["qwen35"])
    assert info.n_layers == TinySpec().n_layer and info.mtp_layers == 1   # block_count counts the nextn layer


def test_qwen35_without_mtp_layers(tmp_path):
    path = write_tiny_model(tmp_path / "qwen35-no-mtp.gguf", TinySpec(architecture="qwen35", n_nextn=0))
    model = LlamaModel(ModelParams(str(path), n_gpu_layers=0))
    session = LlamaSession(model, n_ctx=256, n_threads=1)
    try:
        assert llama_cpp.llama_model_n_layer_nextn(model._model) == 0
        assert np.isfinite(session.eval(model.tokenize(PROMPT))).all()
    finally:
        session.close()
        model.close()


def _ext_function(name: str, mangled: str, restype, *argtypes):
    """One of llama-ext.h's staging functions: C++, so exported under its mangled name only."""
    try:
        function = getattr(llama_cpp.llama_cpp._lib, mangled)
    except AttributeError:
        pytest.skip(f"this libllama does not export {name} ({mangled})")
    function.restype = restype
    function.argtypes = argtypes
    return function


def test_mtp_context_drafts_from_the_nextn_head(tiny):
    """What common_speculative_impl_draft_mtp does for Qwen3.5: the main context outputs its final
    hidden state (h_nextn) for every token; an MTP context on the same weights takes each token with
    the hidden state of the token before it, then drafts the next token from the last one."""
    set_embeddings_nextn = _ext_function("llama_set_embeddings_nextn", "_Z26llama_set_embeddings_nextnP13llama_contextbb",
                                         None, ctypes.c_void_p, ctypes.c_bool, ctypes.c_bool)
    get_embeddings_nextn = _ext_function("llama_get_embeddings_nextn", "_Z26llama_get_embeddings_nextnP13llama_context",
                                         ctypes.POINTER(ctypes.c_float), ctypes.c_void_p)
    model = _load_raw(tiny["qwen35"], load_mtp=True)
    n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
    n_embd = llama_cpp.llama_model_n_embd_out(model)
    target = _context(model, llama_cpp.LLAMA_CONTEXT_TYPE_DEFAULT)
    mtp = _context(model, llama_cpp.LLAMA_CONTEXT_TYPE_MTP)
    ext = llama_cpp.llama_batch_ext_init(mtp)
    try:
        set_embeddings_nextn(target, True, False)   # every token's h, not only the output rows
        set_embeddings_nextn(mtp, True, True)
        prompt = [1, 50, 60, 70, 80, 90, 100, 110]
        n = len(prompt)
        sampled = int(np.argmax(_decode(target, prompt)))
        h = np.ctypeslib.as_array(get_embeddings_nextn(target), shape=(n, n_embd)).copy()
        assert np.isfinite(h).all() and h.std() > 0

        rows = [np.zeros(n_embd, dtype=np.float32)] + [h[k] for k in range(n - 1)]   # token k pairs with h[k-1]

        def add(token: int, pos: int, h_row: np.ndarray, output: bool) -> int:
            idx = llama_cpp.llama_batch_ext_add_token(ext, 0, token)
            assert idx >= 0
            assert llama_cpp.llama_batch_ext_set_pos(ext, idx, (llama_cpp.llama_pos * 4)(pos, 0, 0, 0))
            embd = llama_cpp.llama_embd(h_row.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, n_embd)
            assert llama_cpp.llama_batch_ext_set_embd_token(ext, idx, embd)
            if output:
                assert llama_cpp.llama_batch_ext_set_output_logits(ext, idx, True)
            return idx

        for k, token in enumerate(prompt):   # catch up on the prompt
            add(token, k, rows[k], output=False)
        assert llama_cpp.llama_process(mtp, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, ext) == 0

        llama_cpp.llama_batch_ext_clear(ext)
        last_h = np.ascontiguousarray(h[n - 1])
        idx = add(sampled, n, last_h, output=True)   # draft the token after `sampled`
        assert llama_cpp.llama_process(mtp, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, ext) == 0
        draft_logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(mtp, idx), shape=(n_vocab,))
        assert np.isfinite(draft_logits).all() and draft_logits.std() > 0
        assert llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(mtp), 0) == n
    finally:
        llama_cpp.llama_batch_ext_free(ext)
        llama_cpp.llama_free(mtp)
        llama_cpp.llama_free(target)
        llama_cpp.llama_model_free(model)
