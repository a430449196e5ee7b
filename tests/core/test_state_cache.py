"""Cache states kept between conversations (issue 41, item 7): switching to another conversation keeps
the cache of the one left, and switching back puts it back, so only the new message is read; answers
are the ones read from scratch give; states are bounded by the bytes allowed, least recently used first;
a state llama.cpp will not read back is deleted and the prompt read as usual; recurrent models too."""

from __future__ import annotations

import pytest

from app.core.engine import Engine
from app.core.frontdoor import GenerationRequest
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.state_cache import MIN_TOKENS
from app.core.params import DrafterKind, ModelParams, SamplingParams, StatesConfig
from app.core.speculation.events import Started

TEXT_A = "the cat is on the mat and the dog sat by the door of the house "
TEXT_B = "a bird sang in the tree while the sun rose over the hill "


def _load(path, states=None) -> Engine:
    return Engine.load(ModelParams(str(path), n_gpu_layers=0, n_ctx=2048, n_threads=1), states=states)


def _answer(engine, prompt):
    events = list(engine.generate(GenerationRequest(prompt=prompt, drafter=DrafterKind.NONE,
                                                    sampling=SamplingParams(max_tokens=8))))
    started = next(e for e in events if isinstance(e, Started))
    return started, events[-1]


def _conversations(engine):
    tokenize = engine.main.model.tokenize
    a = (tokenize(TEXT_A) * 40)[:MIN_TOKENS + 200]
    b = (tokenize(TEXT_B) * 40)[:MIN_TOKENS + 200]
    return a, b


@pytest.mark.parametrize("architecture", ["llama", "qwen35"])
def test_switching_back_reads_only_the_new_message_and_answers_the_same(tmp_path, architecture):
    main = write_tiny_model(tmp_path / "main.gguf", TinySpec(architecture=architecture, name=f"tiny-{architecture}"))
    engine = _load(main, StatesConfig(tmp_path / "states", 1 << 30))
    try:
        a, b = _conversations(engine)
        _, first = _answer(engine, a)
        _answer(engine, b)                       # another conversation: a's cache is kept on disk
        assert len(list((tmp_path / "states").rglob("*.state"))) == 1
        back = a + list(first.token_ids) + engine.main.model.tokenize(" and then?", add_special=False)
        started, resumed = _answer(engine, back)
        assert started.cached_tokens >= len(a)   # a and its answer were put back, not read again
    finally:
        engine.close()
    fresh = _load(main)
    try:
        _, from_scratch = _answer(fresh, back)
    finally:
        fresh.close()
    assert resumed.token_ids == from_scratch.token_ids


def test_states_stay_within_the_bytes_allowed_least_recently_used_first(tmp_path, tiny_models):
    probe = _load(tiny_models.main, StatesConfig(tmp_path / "probe", 1 << 30))
    try:
        a, b = _conversations(probe)
        _answer(probe, a)
        _answer(probe, b)
        one = next((tmp_path / "probe").rglob("*.state")).stat().st_size
    finally:
        probe.close()
    engine = _load(tiny_models.main, StatesConfig(tmp_path / "states", int(one * 1.5)))   # room for one
    try:
        _answer(engine, a)
        _answer(engine, b)    # keeps a
        _answer(engine, a)    # keeps b; a is put back, and only one state fits
        states = list((tmp_path / "states").rglob("*.state"))
        assert len(states) == 1
    finally:
        engine.close()


def test_a_state_llama_cpp_will_not_read_back_is_deleted_and_the_prompt_read(tmp_path, tiny_models):
    engine = _load(tiny_models.main, StatesConfig(tmp_path / "states", 1 << 30))
    try:
        a, b = _conversations(engine)
        _, first = _answer(engine, a)
        _answer(engine, b)
        state = next((tmp_path / "states").rglob("*.state"))
        state.write_bytes(b"\x00" * state.stat().st_size)   # same size, nothing llama.cpp can read
        started, again = _answer(engine, a)
        assert started.cached_tokens == 0 and again.token_ids == first.token_ids
        assert not state.exists()
    finally:
        engine.close()


def test_a_branch_reads_only_what_follows_the_shared_history_and_the_branch_left_resumes(tmp_path, tiny_models):
    """Editing a message (the window's branch, item 8) sends the same history with another end: the
    cache keeps the shared part; flipping back to the first branch puts its saved state back."""
    engine = _load(tiny_models.main, StatesConfig(tmp_path / "states", 1 << 30))
    try:
        a, b = _conversations(engine)
        shared = a[:200]
        first_branch, edited_branch = shared + b[:MIN_TOKENS + 50], shared + a[200:MIN_TOKENS + 250]
        _, first = _answer(engine, first_branch)
        started, _ = _answer(engine, edited_branch)
        assert started.cached_tokens == len(shared)   # the shared history is not read again
        back = first_branch + list(first.token_ids) + engine.main.model.tokenize(" and then?", add_special=False)
        started, _ = _answer(engine, back)
        assert started.cached_tokens >= len(first_branch)   # the first branch was kept and put back
    finally:
        engine.close()
