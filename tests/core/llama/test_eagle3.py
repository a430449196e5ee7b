"""An EAGLE-3 drafter follows the main session: fed incrementally over rounds that verify drafts,
reject some and roll the main model back, its context gives the logits feeding the whole context
afresh gives; it drafts from the main model's hidden states; and a drafter made for another main model is refused, saying why."""

from __future__ import annotations

import numpy as np
import pytest

from app.core.errors import IncompatibleDraftError
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.binding import LlamaModel, LlamaSession
from app.core.llama.eagle3 import Eagle3Head, target_layers
from app.core.params import ModelParams

PROMPT = "the cat is on the mat and the dog sat by the door of the house"
# the tiny llama main has 2 layers: its layer inputs 0 and 1 (llama.cpp's llama graph gives no final state)
EAGLE3 = TinySpec(architecture="eagle3", name="tiny-eagle3", n_layer=1, target_layers=(0, 1, 1))


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("eagle3")
    return {
        "main": write_tiny_model(d / "main.gguf", TinySpec()),
        "other-main": write_tiny_model(d / "other-main.gguf", TinySpec(seed=7)),
        "eagle3": write_tiny_model(d / "eagle3.gguf", EAGLE3),
        "wide": write_tiny_model(d / "wide.gguf", TinySpec(architecture="eagle3", n_layer=1, n_embd_target=96,
                                                           target_layers=(0, 1, 1))),
        "d2t": write_tiny_model(d / "d2t.gguf", TinySpec(architecture="eagle3", n_layer=1, target_layers=(0, 1, 1),
                                                         draft_vocab=100)),
        "final": write_tiny_model(d / "final.gguf", TinySpec(architecture="eagle3", n_layer=1, target_layers=(0, 1, 2))),
        "deep": write_tiny_model(d / "deep.gguf", TinySpec(architecture="eagle3", n_layer=1, target_layers=(0, 1, 7))),
        "big-vocab": write_tiny_model(d / "big-vocab.gguf", TinySpec(architecture="eagle3", n_layer=1,
                                                                     target_layers=(0, 1, 1), vocab_size=300)),
    }


def _load(path) -> LlamaModel:
    return LlamaModel(ModelParams(str(path), n_gpu_layers=0))


@pytest.fixture
def pair(files):
    main, drafter = _load(files["main"]), _load(files["eagle3"])
    session = LlamaSession(main, n_ctx=256, n_threads=1)
    head = Eagle3Head(session, drafter)
    yield session, head
    head.close()
    session.close()
    drafter.close()
    main.close()


def _follow(session, context: list[int]) -> None:
    """The main model's cache holds ``context`` but its newest token, as the loop keeps it."""
    keep = 0
    while keep < min(len(session.cached), len(context) - 1) and session.cached[keep] == context[keep]:
        keep += 1
    session.truncate(keep)
    if context[keep:-1]:
        session.eval(context[keep:-1])


def _rounds(session, head, tokens: list[int], seed: int) -> list[int]:
    """Rounds as the loop runs them: draft a few tokens, verify a batch longer than what is accepted
    (the main model decodes rejected tokens too), roll back to what is kept, go on."""
    rng = np.random.default_rng(seed)
    n = 6
    while n < len(tokens):
        context = tokens[:n]
        _follow(session, context)
        assert head.can_follow(context)
        logits = head.start(context)
        for _ in range(int(rng.integers(1, 4))):
            logits = head.step(int(np.argmax(logits)))
        verified = int(rng.integers(1, 5))
        session.eval(tokens[n - 1:n - 1 + verified] + [3] * 2)   # two rejected tokens decoded past them
        n += int(rng.integers(1, verified + 1))
    context = tokens[:len(tokens)]
    _follow(session, context)
    return context


def test_llama_cpp_reads_the_drafters_three_target_layers(pair):
    _, head = pair
    assert head.hidden.layers == [0, 1, 1] and head.hidden.n_embd == 3 * 64


@pytest.mark.parametrize("seed", [0, 1])
def test_the_drafter_followed_over_rounds_matches_one_fed_from_scratch(pair, seed):
    session, head = pair
    tokens = session.model.tokenize(PROMPT)
    context = _rounds(session, head, tokens, seed)
    incremental = head.start(context).copy()
    head.forget()
    from_scratch = head.start(context).copy()
    # llama.cpp's CPU numerics differ between one batch and several (a few hundredths here); a pair fed
    # with the wrong state, at the wrong position, or a drafted pair kept, moves them by far more
    assert np.abs(incremental - from_scratch).max() < 0.1
    head.forget()
    swapped = [*context[:-3], context[-2], context[-3], context[-1]]
    _follow(session, swapped)
    assert np.abs(head.start(swapped) - from_scratch).max() > 0.3


def test_it_drafts_from_the_main_models_hidden_states(pair):
    """The same tokens with other hidden states from the main model (here: the states the main model
    gave, changed after the fact) give other drafts."""
    session, head = pair
    tokens = session.model.tokenize(PROMPT)
    _follow(session, tokens)
    ours = head.start(tokens).copy()
    head.forget()
    head.hidden._rows[:len(tokens)] *= 1.5
    assert np.abs(head.start(tokens) - ours).max() > 0.3


def test_a_drafter_with_a_smaller_vocabulary_proposes_only_tokens_it_maps(files):
    """EAGLE-3 drafters often carry a head over the most frequent tokens only (d2t maps them)."""
    main, drafter = _load(files["main"]), _load(files["d2t"])
    session = LlamaSession(main, n_ctx=256, n_threads=1)
    head = Eagle3Head(session, drafter)
    try:
        tokens = main.tokenize(PROMPT)
        _follow(session, tokens)
        logits = head.start(tokens)
        assert logits.shape == (main.n_vocab,) and np.isneginf(logits[100:]).all() and np.isfinite(logits[:100]).all()
    finally:
        head.close()
        session.close()
        drafter.close()
        main.close()


@pytest.mark.parametrize("drafter, reason", [
    ("wide", "it reads hidden states 96 wide, main.gguf's are 64"),
    ("deep", "it reads layer 7, main.gguf has 2"),
    ("big-vocab", "its vocabulary has 300 tokens"),
    ("main", "is not an EAGLE-3 drafter: it reads 0 of the main model's layers"),
    # what the first version read: llama.cpp never writes a llama model's final state, so its rows were stale
    ("final", r"it reads the main model's final hidden state \(layer 2\), which llama.cpp gives for some "
              r"architectures only, not for llama"),
])
def test_a_drafter_made_for_another_main_model_is_refused_saying_why(files, drafter, reason):
    main, other = _load(files["main"]), _load(files[drafter])
    session = LlamaSession(main, n_ctx=256, n_threads=1)
    try:
        with pytest.raises(IncompatibleDraftError, match=reason):
            Eagle3Head(session, other)
        assert not session.decode_hooks   # nothing left hooked into the main session
        expected = {"deep": [0, 1, 7], "main": [], "final": [0, 1, 2]}.get(drafter, [0, 1, 1])
        assert target_layers(other) == expected
    finally:
        session.close()
        other.close()
        main.close()
