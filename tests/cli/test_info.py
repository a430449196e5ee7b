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


def test_info_lists_the_modules_loaded_and_the_cpu_variant_chosen(tmp_path):
    system = json.loads(quickdraft("info", "--json", tmp_path=tmp_path).stdout)["system"]
    text = quickdraft("info", tmp_path=tmp_path).stdout
    assert system["device"] == "cpu" and "models go on: the CPU" in text  # no GPU on this machine
    if not system["dynamic_backends"]:
        assert "none: the backends are built into this llama.cpp" in text
        return
    variant = system["cpu_variant"]
    assert variant in system["cpu_variants"] and f"cpu-{variant}" in [m["name"] for m in system["modules_loaded"]]
    assert f"CPU variant: {variant} (of {len(system['cpu_variants'])}:" in text
    assert all(m["reason"] for m in system["modules_failed"])


def test_a_device_is_chosen_by_name_and_an_unknown_one_is_refused(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "--device", "cpu", "-p", "a", "-n", "2", "--json",
                   tmp_path=tmp_path)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["placement"]["main"].startswith("all layers on the CPU")
    bad = quickdraft("generate", "-m", str(tiny_models.main), "--device", "CUDA7", "-p", "a", tmp_path=tmp_path)
    assert bad.returncode == 1 and bad.stderr.startswith("error: There is no GPU named 'CUDA7'")
    info = quickdraft("info", "--device", "Vulkan3", tmp_path=tmp_path)
    assert info.returncode == 1 and "choose one of: auto, cpu" in info.stderr


def test_gpu_layers_asked_for_on_the_cpu_are_said_to_stay_there(tiny_models, tmp_path):
    r = quickdraft("generate", "-m", str(tiny_models.main), "--device", "cpu", "-ngl", "-1", "-p", "a", "-n", "2",
                   tmp_path=tmp_path)
    assert r.returncode == 0 and "warning: GPU layers were asked for, but the models run on the CPU" in r.stderr


def test_info_on_a_file_says_its_memory_and_whether_it_can_draft_for_itself(tmp_path):
    from app.core.gguf.tiny import TinySpec, write_tiny_model

    qwen35 = write_tiny_model(tmp_path / "qwen35.gguf", TinySpec(architecture="qwen35", name="tiny-qwen35"))
    text = quickdraft("info", str(qwen35), tmp_path=tmp_path).stdout
    assert "MTP layers: 1: it can draft for itself (--drafter mtp)" in text
    assert "memory: hybrid model: tokens it must take back" in text
    data = json.loads(quickdraft("info", str(qwen35), "--json", tmp_path=tmp_path).stdout)["file"]
    assert data["mtp_layers"] == 1 and data["memory"] == "hybrid"
