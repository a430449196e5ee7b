"""EAGLE-3 and DFlash drafters on the command line: `info` says what one is and how it drafts, `check-pair` says
what it reads, `generate -md` drafts with it by default and gives the main model's greedy answer, and
one made for a model whose final state llama.cpp does not give is refused before anything loads."""

from __future__ import annotations

import json

import pytest

from app.core.gguf.tiny import TinySpec, write_tiny_model
from tests.cli.test_mtp_cli import quickdraft


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("eagle3-cli")
    return (write_tiny_model(d / "main.gguf", TinySpec()),
            write_tiny_model(d / "eagle3.gguf", TinySpec(architecture="eagle3", name="tiny-eagle3", n_layer=1,
                                                         target_layers=(0, 1, 1))),
            write_tiny_model(d / "final.gguf", TinySpec(architecture="eagle3", name="tiny-eagle3-final", n_layer=1,
                                                        target_layers=(0, 1, 2))))


def test_info_names_the_drafter_and_how_it_drafts(files, tmp_path):
    _, eagle3, _ = files
    r = quickdraft("info", str(eagle3), tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert ("EAGLE-3: it only drafts, for a main model 64 wide with 1 layers or more and 270 tokens, reading its "
            "layers 0, 1, 1 (-md FILE: it drafts with --drafter eagle3, the default)") in r.stdout


def test_check_pair_says_what_it_reads(files, tmp_path):
    main, eagle3, final = files
    ok = quickdraft("check-pair", str(main), str(eagle3), tmp_path=tmp_path)
    assert ok.returncode == 0 and ("(an EAGLE-3 drafter: it drafts from the main model's hidden states at its "
                                   "layers 0, 1, 1)") in ok.stdout
    refused = quickdraft("check-pair", str(main), str(final), tmp_path=tmp_path)
    assert refused.returncode == 1 and "final hidden state (layer 2)" in refused.stdout


def test_generate_drafts_with_it_by_default_and_keeps_the_greedy_answer(files, tmp_path):
    main, eagle3, _ = files
    common = ("generate", "-m", str(main), "-p", "the cat is on the mat", "-n", "24", "-c", "256", "--json",
              "--policy", "fixed", "--draft-max", "3")
    plain = quickdraft(*common, "--drafter", "none", tmp_path=tmp_path)
    drafted = quickdraft(*common, "-md", str(eagle3), tmp_path=tmp_path)
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    plain, drafted = json.loads(plain.stdout), json.loads(drafted.stdout)
    assert drafted["token_ids"] == plain["token_ids"] and drafted["drafted"] > 0
    assert list(drafted["by_drafter"]) == ["eagle3"]


def test_a_drafter_it_cannot_serve_is_refused_with_one_line(files, tmp_path):
    main, _, final = files
    r = quickdraft("generate", "-m", str(main), "-md", str(final), "-p", "hi", "-n", "4", tmp_path=tmp_path)
    assert r.returncode != 0 and r.stdout == ""
    assert "final hidden state (layer 2)" in r.stderr and "Traceback" not in r.stderr


def test_a_dflash_drafter_drafts_blocks_from_the_command_line(files, tmp_path):
    main = files[0]
    dflash = write_tiny_model(tmp_path / "dflash.gguf", TinySpec(architecture="dflash", name="tiny-dflash", n_layer=2,
                                                                 target_layers=(0, 1), block_size=8))
    info = quickdraft("info", str(dflash), tmp_path=tmp_path)
    assert "DFlash: it only drafts" in info.stdout and "(-md FILE: it drafts with --drafter dflash, the default)" in info.stdout
    common = ("generate", "-m", str(main), "-p", "the cat is on the mat", "-n", "24", "-c", "256", "--json",
              "--policy", "fixed", "--draft-max", "5")
    plain = json.loads(quickdraft(*common, "--drafter", "none", tmp_path=tmp_path).stdout)
    drafted = quickdraft(*common, "-md", str(dflash), tmp_path=tmp_path)
    assert drafted.returncode == 0, drafted.stderr
    drafted = json.loads(drafted.stdout)
    assert drafted["token_ids"] == plain["token_ids"] and list(drafted["by_drafter"]) == ["dflash"]
