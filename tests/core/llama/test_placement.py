"""GPU layer placement: llama.cpp's layer order, the estimate, and "auto" (the draft first)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.core.errors import ModelLoadError
from app.core.gguf.info import GGUFInfo, read_gguf_info
from app.core.llama.placement import parse_placement
from app.core.llama.placement import footprint, plan_gpu_layers, usable_bytes
from app.core.params import AUTO, ModelParams

GIB = 2**30
MIB = 2**20


def qwen_like(n_layers: int, layer_mib: int, vocab: int = 151_936, n_embd: int = 896, tied: bool = False,
              path: str = "m.gguf") -> GGUFInfo:
    """Metadata shaped like a Qwen2.5 GGUF: per-layer weights, token embeddings, maybe an output matrix."""
    embd = vocab * n_embd // 2  # ~4.5 bits a weight
    tensors = [("token_embd.weight", embd), ("output_norm.weight", n_embd * 4)]
    tensors += [] if tied else [("output.weight", embd)]
    for i in range(n_layers):
        tensors += [(f"blk.{i}.attn_q.weight", layer_mib * MIB // 2), (f"blk.{i}.ffn_up.weight", layer_mib * MIB // 2)]
    return GGUFInfo(path=path, file_size=sum(n for _, n in tensors), architecture="qwen2", name=path,
                    parameter_count=0, quantization="Q4_K_M", context_length=32768, n_layers=n_layers,
                    n_embd=n_embd, n_head_kv=2, n_head=14, vocab_type="gpt2", vocab_size=vocab, bos_token_id=None,
                    eos_token_id=None, add_bos=False, add_eos=False, chat_template=None,
                    tensor_bytes=tuple(tensors))


MAIN = qwen_like(28, 150, n_embd=3584, path="main.gguf")           # a 7B-class main model
DRAFT = qwen_like(24, 12, n_embd=896, tied=True, path="draft.gguf")  # a 0.5B-class draft, tied embeddings


def test_footprint_adds_up_to_the_files_tensors(tiny_models):
    info = read_gguf_info(tiny_models.main)
    fp = footprint(info, n_ctx=512)
    weights = sum(fp.block_bytes) + fp.output_bytes + fp.input_bytes
    assert weights == sum(n for _, n in info.tensor_bytes)  # the tiny model has its own output matrix
    assert fp.n_layers == info.n_layers + 1 and fp.kv_bytes_per_layer * info.n_layers == info.kv_bytes_per_token() * 512


def test_layers_leave_from_the_output_end_as_llama_cpp_places_them():
    fp = footprint(MAIN, n_ctx=4096)
    assert fp.gpu_bytes(0) == 0
    assert fp.gpu_bytes(1) == fp.output_bytes + fp.compute_bytes  # the output layer goes first
    assert fp.gpu_bytes(3) - fp.gpu_bytes(2) == fp.block_bytes[-2] + fp.kv_bytes_per_layer
    assert fp.gpu_bytes(-1) == fp.gpu_bytes(fp.n_layers) == fp.gpu_bytes(999)
    assert fp.cpu_bytes(fp.n_layers) == fp.input_bytes + fp.compute_bytes  # embeddings always stay in RAM


def test_tied_embeddings_are_copied_for_the_output_layer_only_on_a_gpu():
    fp = footprint(DRAFT, n_ctx=4096)
    assert fp.output_bytes >= fp.input_bytes == fp.tied_bytes > 0
    weights = sum(n for _, n in DRAFT.tensor_bytes)
    assert fp.cpu_bytes(0) == weights + fp.kv_bytes_per_layer * 24 + fp.compute_bytes  # no copy in RAM


def test_auto_without_a_gpu_keeps_everything_on_the_cpu():
    plan = plan_gpu_layers(ModelParams("main.gguf"), MAIN, ModelParams("draft.gguf"), DRAFT, free_bytes=0)
    assert (plan.main_layers, plan.draft_layers) == (0, 0) and plan.notes == ()


def test_auto_puts_the_whole_draft_first_then_what_fits_of_the_main_model():
    main_fp, draft_fp = footprint(MAIN, 4096), footprint(DRAFT, 4096)
    free = int((draft_fp.gpu_bytes(-1) + main_fp.gpu_bytes(15) + 600 * MIB) / 0.95) + 1
    plan = plan_gpu_layers(ModelParams("main.gguf"), MAIN, ModelParams("draft.gguf"), DRAFT, free)
    assert plan.draft_layers == draft_fp.n_layers
    assert 0 < plan.main_layers < main_fp.n_layers
    assert plan.main_gpu_bytes + plan.draft_gpu_bytes <= usable_bytes(free)
    assert main_fp.gpu_bytes(plan.main_layers + 1) + plan.draft_gpu_bytes > usable_bytes(free)  # the most that fit
    assert any("main-model layers fit on the GPU" in note for note in plan.notes)


def test_auto_on_a_big_gpu_offloads_everything():
    plan = plan_gpu_layers(ModelParams("main.gguf"), MAIN, ModelParams("draft.gguf"), DRAFT, 80 * GIB)
    assert plan.main_layers == 29 and plan.draft_layers == 25 and plan.notes == ()


def test_a_draft_that_does_not_fit_whole_is_named_in_a_note():
    free = int((footprint(DRAFT, 4096).gpu_bytes(10) + 600 * MIB) / 0.95)
    plan = plan_gpu_layers(ModelParams("main.gguf"), MAIN, ModelParams("draft.gguf"), DRAFT, free)
    assert 0 < plan.draft_layers < 25 and plan.main_layers == 0
    assert any("speculation will likely not pay" in note for note in plan.notes)


def test_a_draft_kept_on_the_cpu_by_hand_is_warned_about():
    plan = plan_gpu_layers(ModelParams("main.gguf"), MAIN, ModelParams("draft.gguf", n_gpu_layers=0), DRAFT, 80 * GIB)
    assert plan.draft_layers == 0 and plan.main_layers == 29
    assert any("a draft on the CPU makes speculation slower" in note for note in plan.notes)


def test_numbers_are_kept_and_a_pair_that_cannot_fit_is_refused_before_loading():
    plan = plan_gpu_layers(ModelParams("main.gguf", n_gpu_layers=5), MAIN,
                           ModelParams("draft.gguf", n_gpu_layers=-1), DRAFT, 80 * GIB)
    assert (plan.main_layers, plan.draft_layers) == (5, 25)
    with pytest.raises(ModelLoadError, match="GiB of GPU memory"):
        plan_gpu_layers(ModelParams("main.gguf", n_gpu_layers=-1), MAIN, None, None, 2 * GIB)


def test_gpu_layers_are_validated():
    assert ModelParams("m.gguf").n_gpu_layers == AUTO
    assert ModelParams("m.gguf", n_gpu_layers="AUTO").n_gpu_layers == AUTO
    assert ModelParams("m.gguf", n_gpu_layers="12").n_gpu_layers == 12
    for bad in (-2, "most", 1.5j, True):
        with pytest.raises(ValueError):
            ModelParams("m.gguf", n_gpu_layers=bad)


def test_the_load_log_says_where_layers_went():
    log = ["load_tensors: offloading output layer to GPU\n", "load_tensors: offloaded 29/29 layers to GPU\n",
           "load_tensors:        CUDA0 model buffer size =  4168.09 MiB\n",
           "load_tensors:   CPU_Mapped model buffer size =   292.36 MiB\n"]
    placement = parse_placement(log)
    assert (placement.offloaded, placement.total) == (29, 29)
    assert placement.describe() == "29/29 layers on the GPU (CUDA0 4.07 GiB, CPU_Mapped 292 MiB)"
    cpu_only = parse_placement(["load_tensors:   CPU_Mapped model buffer size =    12.00 MiB\n"])
    assert cpu_only.describe() == "all layers on the CPU (CPU_Mapped 12 MiB)"
    assert replace(placement, device="CUDA0").describe().startswith("29/29 layers on the GPU CUDA0 (CUDA0 4.07 GiB")
    # a GPU build told to keep the model in RAM logs "offloaded 0/29": nothing is on a GPU
    none_offloaded = parse_placement(["load_tensors: offloaded 0/29 layers to GPU\n"] + cpu_only_log())
    assert none_offloaded.describe() == "all layers on the CPU (CPU_Mapped 12 MiB)"


def cpu_only_log() -> list[str]:
    return ["load_tensors:   CPU_Mapped model buffer size =    12.00 MiB\n"]


def test_an_mtp_layer_is_one_more_layer_to_offload_as_llama_cpp_counts_it():
    """Counted without its MTP layer, a Qwen3.5 main model given -ngl 99 (or auto on an H100) had one
    layer too few offloaded: llama.cpp left the trunk's first layer on the CPU (33/34)."""
    carrier = qwen_like(29, 150, n_embd=3584, path="main.gguf")     # blk.28 is its MTP layer
    info = replace(carrier, n_layers=28, mtp_layers=1)
    fp = footprint(info, 4096)
    assert fp.n_layers == 30 and fp.block_bytes[-1] == 150 * MIB
    assert sum(fp.block_bytes) + fp.output_bytes + fp.input_bytes == sum(n for _, n in info.tensor_bytes)
    for asked in (99, AUTO, -1):
        plan = plan_gpu_layers(ModelParams("main.gguf", n_gpu_layers=asked), info, None, None, 80 * GIB)
        assert plan.main_layers == 30
