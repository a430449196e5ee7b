"""`generate --drafter mtp`: a main model with MTP layers drafts for itself, exactly; one without is
refused with one error line before any answer."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.gguf.tiny import TinySpec, write_tiny_model

ROOT = Path(__file__).resolve().parents[2]


def quickdraft(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "--data-dir", str(tmp_path / "data"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


@pytest.fixture(scope="module")
def qwen35(tmp_path_factory):
    return write_tiny_model(tmp_path_factory.mktemp("mtp-cli") / "qwen35.gguf", TinySpec(architecture="qwen35", name="tiny-qwen35"))


def test_generate_help_names_mtp(tmp_path):
    r = quickdraft("generate", "--help", tmp_path=tmp_path)
    assert r.returncode == 0 and "mtp" in r.stdout


def test_mtp_drafts_the_main_models_own_greedy_answer(qwen35, tmp_path):
    common = ("generate", "-m", str(qwen35), "-p", "the cat is on the mat", "-n", "32", "-c", "256", "--json")
    plain = quickdraft(*common, "--drafter", "none", tmp_path=tmp_path)
    drafted = quickdraft(*common, "--drafter", "mtp", "--policy", "fixed", "--draft-max", "4", tmp_path=tmp_path)
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    plain, drafted = json.loads(plain.stdout), json.loads(drafted.stdout)
    assert drafted["token_ids"] == plain["token_ids"] and drafted["text"] == plain["text"]
    assert drafted["drafted"] > 0 and plain["drafted"] == 0


def test_mtp_under_the_auto_policy_answers_the_main_models_answer(qwen35, tmp_path):
    """Whether MTP drafts pay is the auto policy's to learn on this machine; the answer is the same."""
    answers = []
    for drafter in ("mtp", "none"):
        r = quickdraft("generate", "-m", str(qwen35), "-p", "hello", "-n", "8", "-c", "256", "--drafter", drafter,
                       "--json", tmp_path=tmp_path)
        assert r.returncode == 0, r.stderr
        answers.append(json.loads(r.stdout)["token_ids"])
    assert answers[0] == answers[1] and len(answers[0]) == 8


def test_mtp_without_mtp_layers_is_one_error_line(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-p", "hello", "-n", "8", "--drafter", "mtp",
                   tmp_path=tmp_path)
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "no MTP layers" in lines[0], r.stderr


@pytest.fixture(scope="module")
def gemma(tmp_path_factory):
    d = tmp_path_factory.mktemp("mtp-drafter-cli")
    return (write_tiny_model(d / "gemma4.gguf", TinySpec(architecture="gemma4", name="tiny-gemma4")),
            write_tiny_model(d / "gemma4-assistant.gguf", TinySpec(architecture="gemma4-assistant",
                                                                   name="tiny-gemma4-assistant")))


def test_an_mtp_drafter_given_as_the_draft_drafts_the_main_models_greedy_answer(gemma, tmp_path):
    main, assistant = gemma
    common = ("generate", "-m", str(main), "-p", "the cat is on the mat", "-n", "32", "-c", "256", "--json")
    plain = quickdraft(*common, "--drafter", "none", tmp_path=tmp_path)
    drafted = quickdraft(*common, "-md", str(assistant), "--policy", "fixed", "--draft-max", "4", tmp_path=tmp_path)
    assert plain.returncode == 0 and drafted.returncode == 0, drafted.stderr
    plain, drafted = json.loads(plain.stdout), json.loads(drafted.stdout)
    assert drafted["token_ids"] == plain["token_ids"] and drafted["drafted"] > 0


def test_info_and_check_pair_say_what_an_mtp_drafter_is(gemma, tiny_models, tmp_path):
    main, assistant = gemma
    info = quickdraft("info", str(assistant), tmp_path=tmp_path)
    assert info.returncode == 0 and "an MTP drafter for a gemma4 model 64 wide" in info.stdout, info.stdout
    good = quickdraft("check-pair", str(main), str(assistant), tmp_path=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    bad = quickdraft("check-pair", str(tiny_models.main), str(assistant), tmp_path=tmp_path)
    assert bad.returncode != 0 and "MTP drafter for gemma4 models" in bad.stdout + bad.stderr
    alone = quickdraft("generate", "-m", str(assistant), "-p", "hello", "-n", "4", tmp_path=tmp_path)
    assert alone.returncode == 1 and "not a model that answers" in alone.stderr
