"""Hybrid and recurrent models speculate exactly: whatever a rejected draft, a reused prefix or the draft
model's catching up takes back, the answer is the main model's own, token for token.

A recurrent state cannot be unwound token by token. LlamaSession takes back tokens of the last batch
from llama.cpp's snapshots (lfm2, qwen35: n_rs_seq), puts back a saved state past that (mamba has no
snapshots), and reads the cache again from the start past the saved state. Each path is checked here
against a fresh decode. Before this, `generate -m LFM2 --drafter model` stopped after 2 tokens with
"failed to decode", and every second server answer failed the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.core.engine import Engine
from app.core.gguf.info import read_gguf_info
from app.core.gguf.pair_check import check_pair
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.binding import ATTENTION, HYBRID, RECURRENT, LlamaModel, LlamaSession
from app.core.frontdoor import GenerationRequest
from app.core.params import DrafterKind, ModelParams, SamplingParams, SpeculationParams

ARCHITECTURES = {"lfm2": HYBRID, "qwen35": HYBRID, "mamba": RECURRENT, "qwen3moe": ATTENTION}
MESSAGES = [{"role": "user", "content": "the cat is on the mat and the dog is in the house"}]
GREEDY = SamplingParams(max_tokens=40)
FIXED_4 = SpeculationParams(policy="fixed", draft_max=4)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Per architecture: a main model, a draft with the same weights (every draft accepted) and one with
    other weights (drafts rejected), all on the suite's vocabulary."""
    folder = tmp_path_factory.mktemp("recurrent")
    return {arch: {role: write_tiny_model(folder / f"{arch}-{role}.gguf",
                                          TinySpec(architecture=arch, seed=seed, name=f"{arch}-{role}"))
                   for role, seed in (("main", 0), ("same", 0), ("other", 1))}
            for arch in ARCHITECTURES}


@pytest.fixture(scope="module")
def plain(files):
    """Each architecture's answer without speculation, from an engine of its own."""
    answers = {}
    for arch, paths in files.items():
        engine = Engine.load(ModelParams(str(paths["main"]), n_ctx=512, n_threads=1))
        answers[arch] = list(engine.generate(GenerationRequest(MESSAGES, sampling=GREEDY,
                                                               drafter=DrafterKind.NONE)))[-1].token_ids
        engine.close()
    return answers


def speculate(paths, draft: str, drafter: str, runs: int = 1):
    engine = Engine.load(ModelParams(str(paths["main"]), n_ctx=512, n_threads=1),
                         ModelParams(str(paths[draft]), n_ctx=512, n_threads=1))
    try:
        return [list(engine.generate(GenerationRequest(MESSAGES, sampling=GREEDY, speculation=FIXED_4,
                                                       drafter=DrafterKind(drafter))))[-1]
                for _ in range(runs)]
    finally:
        engine.close()


@pytest.mark.parametrize("arch", ARCHITECTURES)
@pytest.mark.parametrize("drafter", ["model", "lookup", "lookup+model"])
@pytest.mark.parametrize("draft", ["same", "other"])
def test_every_drafter_gives_the_main_models_answer(files, plain, arch, drafter, draft):
    [summary] = speculate(files[arch], draft, drafter)
    assert summary.error is None and summary.token_ids == plain[arch], (arch, drafter, draft, summary.error)
    if drafter == "model" and draft == "same":   # drafts accepted, so the rollback within a batch ran too
        assert summary.accepted > 0.7 * summary.drafted > 0
    if drafter == "model" and draft == "other":  # drafts rejected every round
        assert summary.drafted > 20 and summary.accepted < summary.drafted


@pytest.mark.parametrize("arch", ["lfm2", "mamba"])
def test_the_same_request_four_times_gets_the_same_answer(files, plain, arch):
    """What the server does: each request reuses the cached prefix of the one before."""
    answers = speculate(files[arch], "other", "lookup+model", runs=4)
    assert [a.token_ids for a in answers] == [plain[arch]] * 4 and all(a.error is None for a in answers)
    engine = Engine.load(ModelParams(str(files[arch]["main"]), n_ctx=512, n_threads=1))
    plain_again = [list(engine.generate(GenerationRequest(MESSAGES, sampling=GREEDY,
                                                          drafter=DrafterKind.NONE)))[-1] for _ in range(4)]
    assert [a.token_ids for a in plain_again] == [plain[arch]] * 4
    engine.close()


@pytest.fixture(params=["lfm2", "mamba", "qwen35"])
def session(files, request):
    model = LlamaModel(ModelParams(str(files[request.param]["main"]), n_gpu_layers=0))
    session = LlamaSession(model, n_ctx=256, n_threads=1)
    yield session
    session.close()
    model.close()


TOKENS = [1, 200, 7, 42, 99, 5, 260, 17, 88, 120, 3, 64]   # the tiny vocabulary has 270 tokens


def fresh_logits(session: LlamaSession, tokens: list[int]) -> np.ndarray:
    """The last logits of ``tokens`` decoded into an emptied cache, one batch."""
    session.truncate(0)
    return session.eval(tokens)[-1].copy()


def test_each_way_back_matches_a_fresh_decode(session):
    expected = fresh_logits(session, TOKENS[:7] + [TOKENS[9]])
    # within the last batch: llama.cpp's snapshots where the architecture keeps them
    session.truncate(0)
    session.eval(TOKENS[:4])
    session.eval(TOKENS[4:10], all_logits=True)
    reread = session.rereads
    session.truncate(7)
    assert session.eval([TOKENS[9]])[-1] == pytest.approx(expected, abs=1e-4)
    assert session.rereads == reread   # no reading again from the start
    # past the last batch, after single tokens: the state saved before them, then the kept tokens again
    session.truncate(0)
    session.eval(TOKENS[:6])
    for token in TOKENS[6:10]:
        session.eval([token])
    reread = session.rereads
    session.truncate(7)
    assert list(session.cached) == TOKENS[:7]
    assert session.eval([TOKENS[9]])[-1] == pytest.approx(expected, abs=1e-4)
    assert session.rereads == reread
    # before any saved state: the whole cache is read again
    session.truncate(2)
    session.eval(TOKENS[2:7])
    assert session.eval([TOKENS[9]])[-1] == pytest.approx(expected, abs=1e-4)
    assert session.rereads == reread + 1


def test_a_refused_removal_is_an_error_not_a_wrong_cache(files, monkeypatch):
    import llama_cpp

    model = LlamaModel(ModelParams(str(files["qwen3moe"]["main"]), n_gpu_layers=0))
    session = LlamaSession(model, n_ctx=128, n_threads=1)
    session.eval(TOKENS)
    monkeypatch.setattr(llama_cpp, "llama_memory_seq_rm", lambda *args: False)
    from app.core.errors import DecodeError

    with pytest.raises(DecodeError, match="could not remove positions 5"):
        session.truncate(5)
    assert list(session.cached) == TOKENS   # what the cache holds is still said truly
    session.close()
    model.close()


def test_memory_kinds_are_known_before_and_after_loading(files):
    for arch, kind in ARCHITECTURES.items():
        info = read_gguf_info(files[arch]["main"])
        assert info.memory == kind
        model = LlamaModel(ModelParams(str(files[arch]["main"]), n_gpu_layers=0))
        assert model.memory == kind
        model.close()
    pair = check_pair(read_gguf_info(files["mamba"]["main"]), read_gguf_info(files["mamba"]["other"]))
    assert pair.compatible and any("recurrent model without llama.cpp's state snapshots" in w for w in pair.warnings)
    hybrid = check_pair(read_gguf_info(files["lfm2"]["main"]), read_gguf_info(files["lfm2"]["other"]))
    assert any("hybrid model: tokens it must take back (a rejected draft) come from llama.cpp's recurrent-state "
               "snapshots" in w
               for w in hybrid.warnings)


def test_memory_estimates_count_only_the_layers_that_keep_keys_and_values(files):
    """lfm2 names its attention layers in a per-layer head count, qwen35 puts one every
    full_attention_interval layers (and its MTP layer is not part of the stack), mamba keeps none."""
    infos = {arch: read_gguf_info(files[arch]["main"]) for arch in ARCHITECTURES}
    per_layer = infos["qwen3moe"].kv_bytes_per_token() // infos["qwen3moe"].n_layers
    assert (infos["qwen3moe"].kv_layers, infos["qwen35"].n_layers) == (2, 2)
    assert infos["lfm2"].kv_layers == infos["qwen35"].kv_layers == 1 and infos["mamba"].kv_layers == 0
    assert infos["lfm2"].kv_bytes_per_token() == infos["qwen35"].kv_bytes_per_token() == per_layer
    assert infos["mamba"].kv_bytes_per_token() == 0 and infos["lfm2"].n_head_kv == 2


@pytest.mark.parametrize("arch", ["lfm2", "mamba"])
@pytest.mark.parametrize("drafter", ["none", "lookup+model"])
def test_a_second_chat_turn_picks_up_after_the_first_prompt_without_reading_it_again(files, arch, drafter):
    engine = Engine.load(ModelParams(str(files[arch]["main"]), n_ctx=512, n_threads=1),
                         ModelParams(str(files[arch]["other"]), n_ctx=512, n_threads=1))
    try:
        first = list(engine.generate(GenerationRequest(MESSAGES, sampling=GREEDY, speculation=FIXED_4,
                                                       drafter=DrafterKind(drafter))))[-1]
        turn = MESSAGES + [{"role": "assistant", "content": first.text}, {"role": "user", "content": "and then?"}]
        rereads = engine.main.rereads
        second = list(engine.generate(GenerationRequest(turn, sampling=GREEDY, speculation=FIXED_4,
                                                        drafter=DrafterKind(drafter))))[-1]
        assert engine.main.rereads == rereads   # from the state saved after the first prompt
    finally:
        engine.close()
    fresh = Engine.load(ModelParams(str(files[arch]["main"]), n_ctx=512, n_threads=1))
    try:
        assert second.token_ids == list(fresh.generate(GenerationRequest(turn, sampling=GREEDY,
                                                                         drafter=DrafterKind.NONE)))[-1].token_ids
    finally:
        fresh.close()


def test_a_batch_llama_cpp_refuses_leaves_no_half_read_state_behind(files, monkeypatch):
    import llama_cpp

    from app.core.errors import DecodeError

    engine = Engine.load(ModelParams(str(files["lfm2"]["main"]), n_ctx=512, n_threads=1))
    try:
        plain = list(engine.generate(GenerationRequest(MESSAGES, sampling=GREEDY,
                                                       drafter=DrafterKind.NONE)))[-1].token_ids
        real = llama_cpp.llama_decode
        monkeypatch.setattr(llama_cpp, "llama_decode", lambda ctx, batch: 1)
        with pytest.raises(DecodeError, match="failed to decode"):
            engine.main.eval([5, 6, 7])
        assert list(engine.main.cached) == []   # a recurrent state the batch may have touched is not trusted
        monkeypatch.setattr(llama_cpp, "llama_decode", real)
        assert list(engine.generate(GenerationRequest(MESSAGES, sampling=GREEDY,
                                                      drafter=DrafterKind.NONE)))[-1].token_ids == plain
    finally:
        engine.close()
