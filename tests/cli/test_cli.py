"""The headless CLI on tiny models: run as a user would, in a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]


def quickdraft(*args: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "app.cli", "--data-dir", str(tmp_path / "data"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_generate_streams_then_prints_llama_style_statistics(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "-p", "the cat",
                   "-n", "24", "--draft-max", "4", "--policy", "fixed", "--drafter", "model", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip()
    for line in ("encoded", "decoded", "n_draft   = 4", "n_predict = 24", "n_drafted =", "n_accept  =", "accept    = 100.000%"):
        assert line in r.stderr


def test_generate_json_summary(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-md", str(tiny_models.other), "-p", "the cat",
                   "-n", "20", "--json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert s["generated_tokens"] == 20 == s["accepted"] + s["main_tokens"]
    assert s["stop_reason"] == "length" and 0 <= s["acceptance_rate"] <= 1
    assert 1 <= s["threads"] <= os.cpu_count() and 1 <= s["draft_threads"] <= os.cpu_count()  # learned


def test_threads_given_are_the_threads_used(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-md", str(tiny_models.other), "-p", "the cat",
                   "-n", "8", "-t", "3", "-td", "2", "--json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    s = json.loads(r.stdout)
    assert (s["threads"], s["draft_threads"]) == (3, 2)
    r = quickdraft("generate", "-m", str(tiny_models.main), "-p", "the cat", "-n", "4", "-t", "3", tmp_path=tmp_path)
    assert "threads   = main 3\n" in r.stderr


def test_a_first_auto_answer_learns_the_machine_instead_of_calibrating(tiny_models, tmp_path):
    args = ("generate", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "-p", "the cat the cat the cat",
            "-n", "20", "--draft-max", "4", "--json")
    first = quickdraft(*args, tmp_path=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "calibrating" not in first.stderr
    s = json.loads(first.stdout)
    assert s["cost_rounds_observed"] == s["rounds"] > 0 and isinstance(s["policy_learning"], bool)
    stored = list((tmp_path / "data" / "cache" / "profiles").glob("*.json"))
    # every round is learned from but one far slower than its tokens one by one (a burst of load on a busy test
    # run), and the batch of 16 timed after the answer (pair_costs.py: its verify batches may be padded to it)
    learned = json.loads(stored[0].read_text())["learned_rounds"]
    assert len(stored) == 1 and 0 < learned <= s["rounds"] + 1
    second = json.loads(quickdraft(*args, tmp_path=tmp_path).stdout)   # starts warm from what the first learned
    # ... and goes on from it; or, when its first rounds ran 1.5x off it (a tiny model's millisecond
    # batches under a busy test run can), drops it as stale and learns again from those rounds
    again = json.loads(stored[0].read_text())["learned_rounds"]
    assert again <= learned + second["rounds"] + 1 and (again > learned or again <= second["rounds"] + 1)


def test_generate_from_a_messages_file_with_sampling(tiny_models, tmp_path):
    """A seed repeats a sampled answer when the draft lengths repeat (a fixed policy): the auto
    policy's lengths follow the machine's measured speed, and they decide how the draws are used."""
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps([{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]))
    args = ["generate", "-m", str(tiny_models.main), "-md", str(tiny_models.other), "--messages", str(messages),
            "-n", "16", "--temp", "0.8", "--seed", "3", "--policy", "fixed", "--draft-max", "4", "--json"]
    a, b = quickdraft(*args, tmp_path=tmp_path), quickdraft(*args, tmp_path=tmp_path)
    assert a.returncode == 0, a.stderr
    assert json.loads(a.stdout)["text"] == json.loads(b.stdout)["text"]


@pytest.mark.parametrize("case", ["missing", "garbage", "incompatible", "template", "template name"])
def test_user_errors_are_one_clear_line(tiny_models, tmp_path, case):
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"\x00" * 100)
    args = {"missing": ["-m", str(tmp_path / "none.gguf")],
            "garbage": ["-m", str(garbage)],
            "incompatible": ["-m", str(tiny_models.main), "-md", str(tiny_models.incompatible)],
            "template": ["-m", str(tiny_models.main), "--chat-template-file", str(tmp_path / "none.jinja")],
            "template name": ["-m", str(tiny_models.main), "--chat-template", "chatmll"]}[case]
    r = quickdraft("generate", *args, "-p", "x", tmp_path=tmp_path)
    assert r.returncode == 1
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert not case.startswith("template") or ("--chat-template" in r.stderr and "\n" not in r.stderr.strip())


def test_generate_with_a_draft_of_another_vocabulary_gives_the_main_models_answer(tiny_models, tmp_path):
    from app.core.gguf.tiny import TinySpec, write_tiny_model

    bpe = write_tiny_model(tmp_path / "bpe-draft.gguf", TinySpec(seed=5, bpe_vocab=True))
    common = ("generate", "-m", str(tiny_models.main), "-md", str(bpe), "-p", "the cat is on the mat", "-n", "24",
              "--policy", "fixed", "--draft-max", "4", "--json")
    alone = quickdraft(*common, "--drafter", "none", tmp_path=tmp_path)
    drafted = quickdraft(*common, "--drafter", "model", tmp_path=tmp_path)
    assert alone.returncode == 0 and drafted.returncode == 0, drafted.stderr
    assert "draft of another vocabulary: " in drafted.stderr and "different vocabulary" in drafted.stderr
    alone, drafted = json.loads(alone.stdout), json.loads(drafted.stdout)
    assert drafted["token_ids"] == alone["token_ids"] and drafted["drafted"] > 0
    assert list(drafted["by_drafter"]) == ["model (other vocabulary)"]


def test_info_and_check_pair(tiny_models, tmp_path):
    r = quickdraft("info", str(tiny_models.main), "--json", tmp_path=tmp_path)
    assert r.returncode == 0 and json.loads(r.stdout)["file"]["vocab_size"] == 270
    ok = quickdraft("check-pair", str(tiny_models.main), str(tiny_models.other), tmp_path=tmp_path)
    assert ok.returncode == 0 and "compatible" in ok.stdout
    bad = quickdraft("check-pair", str(tiny_models.main), str(tiny_models.incompatible), tmp_path=tmp_path)
    assert bad.returncode == 1 and "MTP drafter for gemma4 models" in bad.stdout
    other = quickdraft("check-pair", str(tiny_models.main), str(tiny_models.other_vocab), tmp_path=tmp_path)
    assert other.returncode == 0 and "different vocabulary: slower per accepted token" in other.stdout
    assert "vocabularies differ" in other.stdout and "main-model tokens too (mapped in" in other.stdout


def test_bench_prints_a_table_and_writes_json(tiny_models, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("\n".join(json.dumps({"id": f"p{i}", "messages": [{"role": "user", "content": t}]})
                                 for i, t in enumerate(["the cat", "a dog is on the mat"])))
    out = tmp_path / "bench.json"
    r = quickdraft("bench", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "--prompts", str(prompts),
                   "-n", "24", "--draft-max", "4", "--policy", "fixed", "--drafter", "model", "--json", str(out),
                   tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "speedup" in r.stdout and "median" in r.stdout and "p1" in r.stdout
    data = json.loads(out.read_text())
    assert [x["prompt_id"] for x in data["results"]] == ["p0", "p1"]
    assert all(x["identical"] and x["acceptance"] == 1.0 for x in data["results"])
    assert data["medians"]["identical"] == 2


def test_calibrate_then_auto_bench_reuses_the_profile(tiny_models, tmp_path):
    r = quickdraft("calibrate", "-m", str(tiny_models.main), "-md", str(tiny_models.other), "--draft-max", "6",
                   tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "x one step" in r.stdout and "draft model, one token" in r.stdout
    sizes = [int(line.split()[0]) for line in r.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert sizes == list(range(1, 18)) + [25]   # copies to 24: every size of a chain, then the longest
    assert len(list((tmp_path / "data" / "cache" / "profiles").glob("*.json"))) == 1
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "rep", "prompt": "the cat the cat the cat the cat"}))
    b = quickdraft("bench", "-m", str(tiny_models.main), "-md", str(tiny_models.other), "--prompts", str(prompts),
                   "-n", "24", "--draft-max", "6", "--drafter", "lookup+model", tmp_path=tmp_path)
    assert b.returncode == 0, b.stderr
    assert "calibrating" not in b.stderr          # the stored profile was reused
    assert "draft len" in b.stdout and "0-draft" in b.stdout


def test_a_model_whose_output_is_nan_fails_with_a_message_not_garbage(tmp_path):
    """A GPU's half-precision sums overflowed random weights into NaN logits on the lent H100; greedy
    decoding then printed the first token over and over, as if it were the answer."""
    import gguf

    from app.core.gguf.tiny import TinySpec, write_tiny_model

    path = write_tiny_model(tmp_path / "nan.gguf", TinySpec(seed=0))
    reader = gguf.GGUFReader(path, "r+")
    [head] = [t for t in reader.tensors if t.name in ("output.weight", "token_embd.weight")][-1:]
    head.data[...] = np.nan
    del reader
    r = quickdraft("generate", "-m", str(path), "-p", "the cat", "-n", "8", "--temp", "0", tmp_path=tmp_path)
    assert r.returncode == 1
    assert "not a number (NaN or infinity)" in r.stderr
    assert "Traceback" not in r.stderr


def test_generate_json_lists_each_tokens_logprob_with_its_alternatives(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "-p", "the cat", "-n", "8",
                   "--drafter", "model", "--policy", "fixed", "--draft-max", "4", "--json", "--logprobs", "2",
                   tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [p["token"] for p in out["logprobs"]] == out["token_ids"][:len(out["logprobs"])]
    assert len(out["logprobs"]) >= out["generated_tokens"] - (out["stop_reason"] == "eog")
    assert all(p["logprob"] <= 0 and len(p["top"]) == 2 and p["top"][0]["token"] == p["token"] for p in out["logprobs"])
    assert out["accepted"] > 0   # drafted tokens carry theirs too
    plain = json.loads(quickdraft("generate", "-m", str(tiny_models.main), "-p", "the cat", "-n", "8", "--json",
                                  "--logprobs", "2", tmp_path=tmp_path).stdout)
    assert [p["logprob"] for p in plain["logprobs"]] == pytest.approx([p["logprob"] for p in out["logprobs"]], abs=1e-3)


def test_logprobs_without_json_is_refused_with_a_message(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-p", "the cat", "-n", "4", "--logprobs", "2",
                   tmp_path=tmp_path)
    assert r.returncode != 0 and "--logprobs goes with --json" in r.stderr
