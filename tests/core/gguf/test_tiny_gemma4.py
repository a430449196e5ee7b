"""The tiny Gemma 4 pair (app/core/gguf/tiny.py): a ``gemma4`` main model with sliding-window layers,
and its ``gemma4-assistant``, the separate MTP drafter that reads the main model's token embedding,
hidden state and KV cache. Both load and run in llama.cpp, and the assistant drafts through llama.cpp's
batch_ext API the way common/speculative.cpp's draft-mtp does when the memory is shared."""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import llama_cpp
from app.core.gguf.info import read_gguf_info
from app.core.gguf.pair_check import check_pair
from app.core.gguf.tiny import TinySpec, attention_layers, sliding_window_layers, vocabulary, write_tiny_model
from app.core.llama.binding import LlamaModel, LlamaSession, context_params
from app.core.llama.mtp import _function
from app.core.params import ModelParams
from tests.core.gguf.decoding import assert_generates_varied_tokens

PROMPT = "the cat is on the mat and the dog"
OTHER_PROMPT = "a dog and a cat are not on the mat, are they? no, they are not"
SPEC = TinySpec()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny-gemma4")
    return {
        "main": write_tiny_model(d / "gemma4.gguf", TinySpec(architecture="gemma4", name="tiny-gemma4")),
        "assistant": write_tiny_model(d / "gemma4-assistant.gguf",
                                      TinySpec(architecture="gemma4-assistant", name="tiny-gemma4-assistant")),
        "llama": write_tiny_model(d / "llama.gguf", TinySpec()),
    }


@pytest.fixture(scope="module")
def models(tiny):
    main = LlamaModel(ModelParams(str(tiny["main"]), n_gpu_layers=0))
    assistant = LlamaModel(ModelParams(str(tiny["assistant"]), n_gpu_layers=0))
    yield main, assistant
    assistant.close()
    main.close()


@pytest.fixture
def session(models):
    main, _ = models
    session = LlamaSession(main, n_ctx=256, n_threads=1)
    yield session
    session.close()


def _assistant_context(assistant: LlamaModel, session: LlamaSession | None):
    """A raw MTP context of the assistant as common/speculative.cpp makes it: the main context's size,
    no recurrent snapshots and ``ctx_other`` the main context (none when ``session`` is None)."""
    params = context_params(session.n_ctx if session else 256, session.n_batch if session else 256, 1)
    params.ctx_type = llama_cpp.LLAMA_CONTEXT_TYPE_MTP
    params.n_rs_seq = 0
    if session is not None:
        params.ctx_other = session.raw_context
    return llama_cpp.llama_init_from_model(assistant._model, params)


def _hidden(ctx, i: int, n_embd: int) -> np.ndarray:
    row = _function("llama_get_embeddings_nextn_ith")(ctx, i)
    assert row
    return np.ctypeslib.as_array(row, shape=(n_embd,)).copy()


def test_layer_pattern(tmp_path):
    assert sliding_window_layers(TinySpec(architecture="gemma4")) == (0,)   # [SWA, full]
    assert sliding_window_layers(TinySpec(architecture="gemma4", n_layer=5)) == (1, 3)   # the last is full
    assert attention_layers(TinySpec(architecture="gemma4")) == (0, 1)
    assert attention_layers(TinySpec(architecture="gemma4-assistant")) == ()   # it keeps no cache of its own
    with pytest.raises(ValueError):
        write_tiny_model(tmp_path / "one-layer.gguf", TinySpec(architecture="gemma4", n_layer=1))


def test_main_decodes_past_the_window_and_generates_varied_tokens(models, session):
    main, _ = models
    prompt = main.tokenize(PROMPT)
    assert len(prompt) > SPEC.sliding_window
    assert_generates_varied_tokens(session, prompt)


def test_main_is_an_attention_model(models):
    main, _ = models
    assert llama_cpp.llama_model_is_recurrent(main._model) is False
    assert llama_cpp.llama_model_is_hybrid(main._model) is False
    assert llama_cpp.llama_model_n_layer(main._model) == SPEC.n_layer
    assert llama_cpp.llama_model_n_layer_nextn(main._model) == 0
    assert llama_cpp.llama_model_n_embd(main._model) == llama_cpp.llama_model_n_embd_out(main._model) == SPEC.n_embd


def test_main_with_a_sliding_window_cache_smaller_than_the_context(models):
    """Without llama.cpp's default full-size SWA cache the sliding-window layers keep only the last
    tokens (256 cells here): decoding far past them still works."""
    main, _ = models
    params = context_params(1024, 64, 1)
    params.swa_full = False
    ctx = llama_cpp.llama_init_from_model(main._model, params)
    assert ctx
    batch = llama_cpp.llama_batch_init(64, 0, 1)
    try:
        tokens = [3 + (i * 37) % 256 for i in range(300)]
        for start in range(0, len(tokens), 64):
            chunk = tokens[start:start + 64]
            for i, token in enumerate(chunk):
                batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.seq_id[i][0] = token, start + i, 1, 0
                batch.logits[i] = i == len(chunk) - 1
            batch.n_tokens = len(chunk)
            assert llama_cpp.llama_decode(ctx, batch) == 0
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, -1), shape=(main.n_vocab,))
        assert np.isfinite(logits).all() and logits.std() > 0
        assert llama_cpp.llama_memory_seq_pos_max(llama_cpp.llama_get_memory(ctx), 0) == len(tokens) - 1
    finally:
        llama_cpp.llama_batch_free(batch)
        llama_cpp.llama_free(ctx)


def test_assistant_is_all_mtp_layers_over_the_main_width(models):
    main, assistant = models
    model = assistant._model
    assert llama_cpp.llama_model_n_layer(model) == 0                       # no trunk
    assert llama_cpp.llama_model_n_layer_nextn(model) == SPEC.n_layer
    assert llama_cpp.llama_model_n_embd(model) == SPEC.n_embd_assistant
    assert llama_cpp.llama_model_n_embd_out(model) == llama_cpp.llama_model_n_embd_out(main._model)
    assert assistant.n_vocab == main.n_vocab


def test_assistant_context_needs_the_main_context(models, session):
    _, assistant = models
    assert not _assistant_context(assistant, None)   # "Gemma4Assistant requires ctx_other to be set"
    ctx = _assistant_context(assistant, session)
    assert ctx
    llama_cpp.llama_free(ctx)


def test_assistant_drafts_from_the_main_hidden_state_and_cache(models, session):
    """Decode the prompt on the main context with its hidden state ("nextn" embedding) for every
    token, then feed the assistant the token after the prompt (at position len(prompt), which the
    main has not decoded) with the main's hidden state at the last prompt position. Its logits come
    from attention over the main's cache: another prompt there gives other logits."""
    main, assistant = models
    n_embd = llama_cpp.llama_model_n_embd_out(main._model)
    set_embeddings_nextn = _function("llama_set_embeddings_nextn")
    set_embeddings_nextn(session.raw_context, True, False)   # every token's row, not only the outputs'
    ctx = _assistant_context(assistant, session)
    assert ctx
    set_embeddings_nextn(ctx, True, True)
    batch = llama_cpp.llama_batch_ext_init(ctx)
    memory = llama_cpp.llama_get_memory(ctx)
    try:
        def draft(token: int, pos: int, h: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            llama_cpp.llama_batch_ext_clear(batch)
            idx = llama_cpp.llama_batch_ext_add_token(batch, 0, token)
            assert idx >= 0
            assert llama_cpp.llama_batch_ext_set_pos(batch, idx, (llama_cpp.llama_pos * 4)(pos, 0, 0, 0))
            embd = llama_cpp.llama_embd(h.ctypes.data_as(ctypes.POINTER(ctypes.c_float)), 1, len(h))
            assert llama_cpp.llama_batch_ext_set_embd_token(batch, idx, embd)
            assert llama_cpp.llama_batch_ext_set_output_logits(batch, idx, True)
            assert llama_cpp.llama_process(ctx, llama_cpp.LLAMA_PROCESS_TYPE_DECODE, batch) == 0
            logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(ctx, idx), shape=(main.n_vocab,)).copy()
            return logits, _hidden(ctx, idx, n_embd)

        prompt = main.tokenize(PROMPT)
        n = len(prompt)
        token = int(np.argmax(session.eval(prompt)[-1]))
        h = np.ascontiguousarray(_hidden(session.raw_context, n - 1, n_embd))
        assert np.isfinite(h).all() and h.std() > 0

        logits, h_draft = draft(token, n, h)
        assert np.isfinite(logits).all() and logits.std() > 0
        assert h_draft.shape == (n_embd,) and np.isfinite(h_draft).all() and h_draft.std() > 0
        # the assistant keeps no cells of its own: its memory is the main's
        assert llama_cpp.llama_memory_seq_pos_max(memory, 0) == n - 1
        again, _ = draft(token, n, h)
        np.testing.assert_array_equal(again, logits)

        session.truncate(0)
        other = main.tokenize(OTHER_PROMPT)[:n]
        assert other != prompt
        session.eval(other)
        with_other_cache, _ = draft(token, n, h)   # same token, position and hidden row
        assert np.abs(with_other_cache - logits).max() > 1e-3
    finally:
        llama_cpp.llama_batch_ext_free(batch)
        llama_cpp.llama_free(ctx)
        set_embeddings_nextn(session.raw_context, False, False)


def test_files_read_back(tiny):
    main = read_gguf_info(tiny["main"])
    assistant = read_gguf_info(tiny["assistant"])
    assert (main.architecture, assistant.architecture) == ("gemma4", "gemma4-assistant")
    assert main.n_layers == SPEC.n_layer and main.mtp_layers == 0
    assert main.n_embd == SPEC.n_embd and assistant.n_embd == SPEC.n_embd_assistant
    assert assistant.mtp_layers == SPEC.n_layer and assistant.n_layers == 0   # block_count counts only MTP layers
    assert main.key_length == assistant.key_length == SPEC.n_embd // SPEC.n_head
    assert main.tokens == assistant.tokens == tuple(vocabulary()[0])
    assert main.vocab_type == assistant.vocab_type == "llama"
    assert check_pair(main, assistant).compatible
    assert check_pair(read_gguf_info(tiny["llama"]), main).compatible   # the suite's vocabulary
