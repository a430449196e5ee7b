"""The pairing knows drafter files (EAGLE-3, DFlash): one made for the main model is its best draft,
ahead of a smaller model of its family, and a drafter file is never chosen as a main model."""

from __future__ import annotations

from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.models.memory import MachineMemory
from app.models.pairing import best_draft, choose_pair, installed_file, rank_drafts

ROOMY = MachineMemory(ram_total=64 * 2**30, ram_available=48 * 2**30, gpu_offload=False, vram_total=None, vram_free=None)


def _files(tmp_path):
    main = installed_file(write_tiny_model(tmp_path / "main.gguf", TinySpec(n_layer=4)))
    small = installed_file(write_tiny_model(tmp_path / "small.gguf", TinySpec(seed=3)))
    eagle3 = installed_file(write_tiny_model(tmp_path / "eagle3.gguf", TinySpec(
        architecture="eagle3", name="tiny-eagle3", n_layer=1, target_layers=(0, 1, 3))))
    dflash = installed_file(write_tiny_model(tmp_path / "dflash.gguf", TinySpec(
        architecture="dflash", name="tiny-dflash", n_layer=2, target_layers=(0, 3), block_size=8)))
    return main, small, eagle3, dflash


def test_a_drafter_file_made_for_the_main_model_is_its_best_draft(tmp_path):
    main, small, eagle3, dflash = _files(tmp_path)
    for drafter, kind in ((eagle3, "EAGLE-3"), (dflash, "DFlash")):
        assert best_draft(main, [small, drafter]) == drafter
        ranked = rank_drafts(main, [small, drafter]).compatible
        assert ranked[0].model == drafter and ranked[0].reason().startswith(f"{kind} drafter made for this model")


def test_a_drafter_file_is_never_chosen_as_the_main_model(tmp_path):
    main, small, eagle3, dflash = _files(tmp_path)
    chosen_main, _ = choose_pair([small, eagle3, dflash], ROOMY, 256)
    assert chosen_main == small
    assert choose_pair([eagle3, dflash], ROOMY, 256) is None   # drafters alone: nothing answers
