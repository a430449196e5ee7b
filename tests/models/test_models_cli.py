"""`quickdraft models ...` end to end against the fake hub and a data dir per test."""

from __future__ import annotations

import argparse

import pytest

from app.core.gguf.pair_check import OTHER_VOCABULARY_NOTE
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.models.cli import add_models_parser, run_models_command
from app.paths import DATA_DIR_ENV, app_paths
from tests.models.fakehub import DRAFT_FILE, MAIN_FILE, TINY_REPO


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    d = tmp_path / "data"
    monkeypatch.setenv(DATA_DIR_ENV, str(d))
    return d


def run(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="quickdraft")
    add_models_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["models", *argv])
    assert args.handler is run_models_command
    return args.handler(args)


def test_search_and_files(fake_hub, data_dir, capsys):
    assert run("search", "tiny", "--endpoint", fake_hub.url) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:3] == ["repository", "downloads", "likes"]
    assert out[1].startswith("test-org/Tiny-Other-GGUF") and "900" in out[1]
    assert run("files", TINY_REPO, "--card", "--endpoint", fake_hub.url) == 0
    out = capsys.readouterr().out
    assert "A tiny llama-architecture model" in out
    assert MAIN_FILE in out and "Q8_0" in out and "mmproj" not in out


def test_download_list_pairs_rm(fake_hub, data_dir, capsys, monkeypatch):
    for name in (MAIN_FILE, DRAFT_FILE):
        assert run("download", TINY_REPO, name, "--endpoint", fake_hub.url) == 0
    captured = capsys.readouterr()
    models_dir = app_paths().models_dir
    assert str(models_dir / TINY_REPO / MAIN_FILE) in captured.out
    assert "100.0%" in captured.err
    assert run("download", TINY_REPO, MAIN_FILE, "--endpoint", fake_hub.url) == 0
    assert "already downloaded" in capsys.readouterr().err

    other = write_tiny_model(data_dir.parent / "elsewhere" / "french.gguf", TinySpec(other_vocab=True))
    assert run("import", str(other), "--link") == 0
    assert "Linked french.gguf" in capsys.readouterr().out

    assert run("list", "--ctx", "1024") == 0
    out = capsys.readouterr().out
    assert MAIN_FILE in out and DRAFT_FILE in out and "french.gguf" in out
    assert "3 models" in out and "fits" in out

    assert run("pairs", MAIN_FILE) == 0
    out = capsys.readouterr().out
    assert f"1. {DRAFT_FILE}" in out and "same family" in out
    # another vocabulary drafts too, after the same vocabulary, saying what it costs
    assert "2. french.gguf" in out and OTHER_VOCABULARY_NOTE in out and "Incompatible:" not in out

    assert run("rm", "french") == 1
    assert "needs confirmation" in capsys.readouterr().err
    assert run("rm", "french", "--yes") == 0
    assert "link" in capsys.readouterr().out
    assert other.exists()


def test_user_errors_are_one_line(fake_hub, data_dir, capsys, tmp_path):
    junk = tmp_path / "junk.gguf"
    junk.write_text("hello")
    cases = [
        (("download", TINY_REPO, "nope.gguf", "--endpoint", fake_hub.url), "no GGUF file named"),
        (("download",), "Name a repository"),
        (("import", str(junk)), "not a GGUF"),
        (("rm", "ghost", "--yes"), "No installed model"),
        (("pairs", "ghost"), "No installed model"),
        (("download", "--pair", "nope"), "No recommended pair"),
        (("files", "x/y", "--endpoint", fake_hub.url), "no such repository"),
    ]
    for argv, message in cases:
        assert run(*argv) == 1, argv
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and "Traceback" not in err, (argv, err)
        assert len(err.strip().splitlines()) == 1


def test_catalog_listing(data_dir, capsys):
    assert run("pairs") == 0
    out = capsys.readouterr().out
    assert "qwen2.5-coder-7b" in out and "gemma-3-12b" in out and "--pair" in out


def test_paused_download_is_listed_and_resumed(fake_hub, data_dir, capsys):
    fake_hub.cut_after[MAIN_FILE] = 200_000
    fake_hub.cut_every_get = True          # the connection keeps dropping at 200 kB: the download gives up
    assert run("download", TINY_REPO, MAIN_FILE, "--endpoint", fake_hub.url) == 1
    assert "dropped" in capsys.readouterr().err
    fake_hub.cut_every_get = False
    fake_hub.cut_after.clear()
    assert run("list") == 0
    out = capsys.readouterr().out
    assert "paused download" in out and "200.0 KB" in out and f"models download {TINY_REPO} {MAIN_FILE}" in out
    assert run("download", TINY_REPO, MAIN_FILE, "--endpoint", fake_hub.url) == 0
    assert "Resuming at 200.0 KB" in capsys.readouterr().err
    assert fake_hub.file_requests(MAIN_FILE)[-1].headers.get("Range") == "bytes=200000-"
