"""`quickdraft info`: the build's backends and devices, a file's metadata, where a pair's layers went."""

from __future__ import annotations

import json

from tests.cli.test_cli import quickdraft


def test_info_names_the_backends_and_devices_of_this_build(tmp_path):
    r = quickdraft("info", "--json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    system = json.loads(r.stdout)["system"]
    assert "CPU" in system["backends"]
    assert any(d["kind"] == "CPU" for d in system["devices"])
    text = quickdraft("info", tmp_path=tmp_path).stdout
    assert "backends:" in text and "runs on:" in text and "device 0:" in text


def test_info_brief_is_one_line(tmp_path):
    r = quickdraft("info", "--brief", tmp_path=tmp_path)
    assert r.returncode == 0 and len(r.stdout.strip().splitlines()) == 1
    assert r.stdout.startswith("llama.cpp backends: ")


def test_info_with_a_pair_says_where_the_layers_went(tiny_models, tmp_path):
    r = quickdraft("info", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "--json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    placement = json.loads(r.stdout)["placement"]
    assert set(placement) == {"main", "draft"}
    # a CPU build offloads nothing; its weights sit in a CPU buffer that llama.cpp names
    assert all("CPU" in where for where in placement.values()), placement


def test_generate_json_reports_placement_and_backend(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "-p", "the cat", "-n", "4", "--json", tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert "main" in out["placement"] and out["backend"]


def test_gpu_layers_accept_auto_all_and_numbers_only(tiny_models, tmp_path):
    for value in ("auto", "-1", "0", "3"):
        r = quickdraft("generate", "-m", str(tiny_models.main), "-ngl", value, "-p", "a", "-n", "2", tmp_path=tmp_path)
        assert r.returncode == 0, (value, r.stderr)
    bad = quickdraft("generate", "-m", str(tiny_models.main), "-ngl", "most", "-p", "a", tmp_path=tmp_path)
    assert bad.returncode == 1 and bad.stderr.startswith("error:") and "GPU layers must be 'auto'" in bad.stderr
