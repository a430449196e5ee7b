"""The tiny writer's drafters that read the main model's hidden states: EAGLE-3 (one layer over three
target layers) and DFlash (a block drafter; with DSpark's Markov and confidence heads). llama.cpp loads
each and reads the target layers it will ask the main model for."""

from __future__ import annotations

import dataclasses

import ctypes

import llama_cpp
import pytest

from app.core.engine import read_pair
from app.core.errors import ModelLoadError
from app.core.gguf.info import read_gguf_info
from app.core.gguf.pair_check import check_pair
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.core.llama.binding import LlamaModel
from app.core.params import DrafterKind, ModelParams

DRAFTERS = {
    "eagle3": TinySpec(architecture="eagle3", name="tiny-eagle3", n_layer=1, target_layers=(0, 1, 1)),
    "eagle3-wider-main": TinySpec(architecture="eagle3", name="tiny-eagle3-w", n_layer=1, n_embd_target=96,
                                  target_layers=(0, 1, 1)),
    "eagle3-draft-vocabulary": TinySpec(architecture="eagle3", name="tiny-eagle3-d2t", n_layer=1,
                                        target_layers=(0, 1, 1), draft_vocab=100),
    "dflash": TinySpec(architecture="dflash", name="tiny-dflash", n_layer=2, target_layers=(0, 1), block_size=8),
    "dspark": TinySpec(architecture="dflash", name="tiny-dspark", n_layer=1, target_layers=(0, 1), markov_rank=8),
}


def _staging(name: str, restype, argtypes):
    """A function of llama.cpp's staging API (C++ linkage: its Itanium-mangled name)."""
    mangled = {"llama_model_target_layer_ids": "_Z28llama_model_target_layer_idsPK11llama_model",
               "llama_model_target_layer_ids_n": "_Z30llama_model_target_layer_ids_nPK11llama_model"}[name]
    function = getattr(llama_cpp.llama_cpp._lib, mangled)
    function.restype, function.argtypes = restype, argtypes
    return function


def target_layers(model: LlamaModel) -> list[int]:
    count = _staging("llama_model_target_layer_ids_n", ctypes.c_uint32, (ctypes.c_void_p,))(model._model)
    ids = _staging("llama_model_target_layer_ids", ctypes.POINTER(ctypes.c_int32), (ctypes.c_void_p,))(model._model)
    return [ids[i] for i in range(count)]


@pytest.mark.parametrize("kind", list(DRAFTERS))
def test_llama_cpp_loads_the_drafter_and_reads_its_target_layers(tmp_path, kind):
    spec = DRAFTERS[kind]
    path = write_tiny_model(tmp_path / f"{kind}.gguf", spec)
    assert read_gguf_info(path).architecture == spec.architecture
    model = LlamaModel(ModelParams(str(path), n_gpu_layers=0))
    try:
        assert target_layers(model) == list(spec.target_layers)
        assert llama_cpp.llama_model_n_layer(model._model) == spec.n_layer
    finally:
        model.close()


def test_an_eagle3_drafter_reads_exactly_three_layers(tmp_path):
    with pytest.raises(ValueError, match="three target layers"):
        write_tiny_model(tmp_path / "e.gguf", TinySpec(architecture="eagle3", n_layer=1, target_layers=(0, 1)))


def test_info_names_the_drafter_and_the_main_model_it_was_made_for(tmp_path):
    kinds = {"eagle3": "EAGLE-3", "eagle3-wider-main": "EAGLE-3", "dflash": "DFlash", "dspark": "DSpark"}
    for kind, name in kinds.items():
        info = read_gguf_info(write_tiny_model(tmp_path / f"{kind}.gguf", DRAFTERS[kind]))
        assert info.hidden_state_drafter == name and info.target_layers == DRAFTERS[kind].target_layers
    wide = read_gguf_info(tmp_path / "eagle3-wider-main.gguf")
    assert wide.target_width == 96 and wide.drafts_for().startswith("a main model 96 wide with 1 layers or more")
    assert read_gguf_info(write_tiny_model(tmp_path / "main.gguf", TinySpec())).hidden_state_drafter is None


def test_a_hidden_state_drafter_is_never_a_main_model_and_drafts_only_for_the_main_it_was_made_for(tmp_path):
    main = read_gguf_info(write_tiny_model(tmp_path / "main.gguf", TinySpec()))
    fits = read_gguf_info(write_tiny_model(tmp_path / "e.gguf", DRAFTERS["eagle3"]))
    wide = read_gguf_info(write_tiny_model(tmp_path / "w.gguf", DRAFTERS["eagle3-wider-main"]))
    dflash = read_gguf_info(write_tiny_model(tmp_path / "d.gguf", DRAFTERS["dflash"]))
    assert check_pair(main, fits).compatible and fits.drafts_as is DrafterKind.EAGLE3 and fits.is_drafter_file
    assert not check_pair(main, fits).warnings   # a drafter file is no draft model to compare sizes with
    final = read_gguf_info(write_tiny_model(tmp_path / "f.gguf", TinySpec(architecture="eagle3", n_layer=1,
                                                                          target_layers=(0, 1, 2))))
    assert check_pair(main, final).reasons == ("it reads the main model's final hidden state (layer 2), which "
                                               "llama.cpp gives for some architectures only, not for llama",)
    qwen35 = read_gguf_info(write_tiny_model(tmp_path / "q.gguf", TinySpec(architecture="qwen35", name="tiny-qwen35")))
    assert check_pair(qwen35, final).compatible   # qwen35's graph gives its final state
    assert check_pair(main, dflash).compatible and dflash.drafts_as is DrafterKind.DFLASH
    selector = dataclasses.replace(dflash, tensor_bytes=dflash.tensor_bytes + (("selector_hidden.weight", 4),))
    assert selector.hidden_state_drafter == "DFlash2" and selector.drafts_as is None
    assert check_pair(main, selector).reasons[-1] == ("Quickdraft does not draft with DFlash2 drafters: choose a draft "
                                                      "model, prompt lookup, MTP heads, an EAGLE-3 or a DFlash drafter")
    assert "it is an EAGLE-3 drafter for a main model 96 wide; the main model is 64 wide" in check_pair(main, wide).reasons
    assert check_pair(fits, main).reasons[0] == "tiny-eagle3 is an EAGLE-3 drafter, not a model that answers"
    with pytest.raises(ModelLoadError, match="is an EAGLE-3 drafter, not a model that answers: it drafts for a main"):
        read_pair(fits.path, None)
