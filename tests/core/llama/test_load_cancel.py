"""A load cut short on request: llama.cpp's progress callback, asked as it reads each tensor, returns
false once ``cancelled`` says so; the load ends with LoadCancelledError and nothing stays loaded. What the
window does when it is closed during a load (issue 42: it waited 20-28 s for the load to end)."""

from __future__ import annotations

import pytest

from app.core.engine import Engine
from app.core.errors import LoadCancelledError
from app.core.llama.binding import LlamaModel
from app.core.params import ModelParams


def test_a_cancelled_load_ends_at_the_next_tensor(tiny_models):
    asked = []

    def cancelled() -> bool:
        asked.append(True)
        return len(asked) > 2   # the third tensor read

    with pytest.raises(LoadCancelledError, match="Loading main.gguf was cancelled"):
        LlamaModel(ModelParams(str(tiny_models.main), n_gpu_layers=0, device="cpu"), cancelled)
    assert len(asked) == 3   # llama.cpp stopped asking once told


def test_a_load_never_cancelled_is_a_load(tiny_models):
    asked = []
    model = LlamaModel(ModelParams(str(tiny_models.main), n_gpu_layers=0, device="cpu"), lambda: asked.append(1) or False)
    try:
        assert model.n_vocab > 0 and asked   # it was asked, and the model loaded
    finally:
        model.close()


def test_the_engine_cancels_the_draft_after_the_main_model_and_frees_the_main(tiny_models, monkeypatch):
    """Cancelled while the draft loads: the main model already loaded is freed, not kept."""
    from app.core.llama import binding

    loaded, freed = [], []
    real_init, real_close = binding.LlamaModel.__init__, binding.LlamaModel.close

    def init(self, params, cancelled=None):
        real_init(self, params, cancelled)
        loaded.append(params.path)

    def close(self):
        freed.append(self.path)
        real_close(self)
    monkeypatch.setattr(binding.LlamaModel, "__init__", init)
    monkeypatch.setattr(binding.LlamaModel, "close", close)
    params = dict(n_gpu_layers=0, n_ctx=256, n_threads=1, device="cpu")
    with pytest.raises(LoadCancelledError, match="same.gguf"):
        Engine.load(ModelParams(str(tiny_models.main), **params), ModelParams(str(tiny_models.same), **params),
                    cancelled=lambda: len(loaded) >= 1)
    assert loaded == [str(tiny_models.main)] and str(tiny_models.main) in freed
