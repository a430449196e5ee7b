"""What the vocabulary tells about its tokens, read once at load."""

from __future__ import annotations

from app.core.llama.binding import LlamaModel
from app.core.llama.library import lib
from app.core.params import ModelParams


def test_the_end_of_generation_tokens_are_read_once_at_load(tiny_models, monkeypatch):
    """ignore_eos bans them on every request: asking llama.cpp token by token took 150 ms a request on a
    150k vocabulary (each request's first token that much later), so the model answers from its load."""
    model = LlamaModel(ModelParams(str(tiny_models.main)))
    try:
        llama_cpp = lib()
        asked = [t for t in range(model.n_vocab) if llama_cpp.llama_vocab_is_eog(model.vocab, t)]

        def not_again(*_):
            raise AssertionError("llama.cpp asked again for a token's end-of-generation flag")

        monkeypatch.setattr(llama_cpp, "llama_vocab_is_eog", not_again)
        assert model.eog_tokens() == asked and 2 in asked   # the tiny model's EOS
    finally:
        model.close()
