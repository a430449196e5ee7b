"""How a model file is read: mapped (the default) or read into memory (--no-mmap). llama.cpp replaced
llama_model_params.use_mmap with load_mode; setting the old name on the ctypes structure only added a
Python attribute, so --no-mmap would have been accepted and ignored. The buffer llama.cpp reports says
which it did."""

from __future__ import annotations

import pytest

from app.cli.commands import build_parser
from app.cli.model_args import model_params
from app.core.llama.binding import LlamaModel
from app.core.params import ModelParams


@pytest.mark.parametrize("use_mmap, buffer", [(True, "(CPU_Mapped "), (False, "(CPU ")])
def test_the_file_is_mapped_or_read_as_asked(tiny_models, use_mmap, buffer):
    model = LlamaModel(ModelParams(str(tiny_models.main), n_gpu_layers=0, device="cpu", use_mmap=use_mmap))
    try:
        assert buffer in model.placement.describe()
    finally:
        model.close()


def test_no_mmap_reaches_both_models():
    args = build_parser().parse_args(["generate", "-m", "a.gguf", "-md", "b.gguf", "--no-mmap", "-p", "hi"])
    main, draft = model_params(args)
    assert (main.use_mmap, draft.use_mmap) == (False, False)
    default_main, _ = model_params(build_parser().parse_args(["generate", "-m", "a.gguf", "-p", "hi"]))
    assert default_main.use_mmap
