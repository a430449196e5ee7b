"""``quickdraft suffix-index`` and ``--suffix-index`` on tiny models, run as a user would."""

from __future__ import annotations

import json

from tests.cli.test_cli import quickdraft


def generate(tiny_models, tmp_path, *extra):
    return quickdraft("generate", "-m", str(tiny_models.main), "-p", "the cat sat on the mat", "-n", "24",
                      "--policy", "fixed", "--draft-max", "6", "--json", *extra, tmp_path=tmp_path)


def by_drafter(result) -> dict:
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)["by_drafter"]


def test_answers_feed_the_index_and_the_next_run_drafts_from_it(tiny_models, tmp_path):
    first = generate(tiny_models, tmp_path, "--drafter", "suffix")
    assert by_drafter(first).get("suffix", {"accepted": 0})["accepted"] == 0   # nothing in it yet
    second = generate(tiny_models, tmp_path, "--drafter", "suffix")
    assert by_drafter(second)["suffix"]["accepted"] > 0
    assert json.loads(second.stdout)["text"] == json.loads(first.stdout)["text"]
    status = quickdraft("suffix-index", "status", "-m", str(tiny_models.main), tmp_path=tmp_path)
    assert status.returncode == 0, status.stderr
    row = next(line for line in status.stdout.splitlines() if line.startswith(tiny_models.main.stem))
    assert row.split()[1] == "2" and row.endswith("ok")   # two documents, this model's vocabulary
    assert "suffix index: on, at most 64 MB" in status.stdout


def test_clear_empties_it(tiny_models, tmp_path):
    generate(tiny_models, tmp_path)
    cleared = quickdraft("suffix-index", "clear", tmp_path=tmp_path)
    assert cleared.returncode == 0 and "cleared every model's index" in cleared.stdout
    assert "no index yet" in quickdraft("suffix-index", "status", tmp_path=tmp_path).stdout
    assert "suffix" not in by_drafter(generate(tiny_models, tmp_path, "--drafter", "suffix"))


def test_off_stops_reads_and_writes_and_the_flag_overrides_it_for_one_run(tiny_models, tmp_path):
    off = quickdraft("suffix-index", "off", "--limit-mb", "8", tmp_path=tmp_path)
    assert off.returncode == 0 and "suffix index: off, at most 8 MB" in off.stdout
    generate(tiny_models, tmp_path)
    assert not (tmp_path / "data" / "data" / "suffix-index").exists()   # nothing written
    refused = generate(tiny_models, tmp_path, "--drafter", "suffix")
    assert refused.returncode == 1 and "suffix index is off" in refused.stderr
    generate(tiny_models, tmp_path, "--suffix-index", "on")   # this run only
    assert "suffix index: off" in quickdraft("suffix-index", "status", tmp_path=tmp_path).stdout
    assert by_drafter(generate(tiny_models, tmp_path, "--drafter", "suffix", "--suffix-index", "on"))["suffix"]["accepted"] > 0
    assert quickdraft("suffix-index", "on", tmp_path=tmp_path).returncode == 0
    assert "suffix index: on" in quickdraft("suffix-index", "status", tmp_path=tmp_path).stdout


def test_a_bad_limit_and_a_model_named_for_on_are_refused(tmp_path):
    bad = quickdraft("suffix-index", "status", "--limit-mb", "0", tmp_path=tmp_path)
    assert bad.returncode == 1 and "--limit-mb must be between 1 and 65536" in bad.stderr
    named = quickdraft("suffix-index", "off", "-m", "x.gguf", tmp_path=tmp_path)
    assert named.returncode == 1 and "applies to every model" in named.stderr


def test_the_default_asks_the_index_after_lookup_and_lookup_alone_never_does(tiny_models, tmp_path):
    plain = generate(tiny_models, tmp_path, "--drafter", "none")
    default = generate(tiny_models, tmp_path)   # no draft model: lookup, else the suffix index
    assert by_drafter(default)["suffix"]["accepted"] > 0
    assert json.loads(default.stdout)["text"] == json.loads(plain.stdout)["text"]
    assert "suffix" not in by_drafter(generate(tiny_models, tmp_path, "--drafter", "lookup"))


def test_bench_leaves_the_index_alone_unless_asked(tiny_models, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "p0", "messages": [{"role": "user", "content": "the cat sat"}]}))
    args = ("bench", "-m", str(tiny_models.main), "--prompts", str(prompts), "-n", "12", "--drafter", "lookup")
    assert quickdraft(*args, tmp_path=tmp_path).returncode == 0
    assert not (tmp_path / "data" / "data" / "suffix-index").exists()
    assert quickdraft(*args, "--suffix-index", "on", tmp_path=tmp_path).returncode == 0
    assert (tmp_path / "data" / "data" / "suffix-index").exists()
