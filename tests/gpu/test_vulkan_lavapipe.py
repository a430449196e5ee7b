"""The GPU offload path on a Vulkan build, run on Mesa's lavapipe (a Vulkan device made of CPU cores).

Opt-in, like the real-model tier: it needs a second environment whose llama-cpp-python was built with
Vulkan, named by QUICKDRAFT_VULKAN_PYTHON (README: "Proving GPU offload without a GPU"):

    sudo apt install libvulkan-dev glslc spirv-headers mesa-vulkan-drivers
    ./scripts/setup.sh --backend vulkan --venv .venv-vulkan
    QUICKDRAFT_VULKAN_PYTHON=.venv-vulkan/bin/python .venv/bin/python -m pytest -m vulkan tests/gpu

llama.cpp skips CPU-type Vulkan devices unless GGML_VK_VISIBLE_DEVICES names them, which is what a
user with only lavapipe sees: a GPU build that finds no usable GPU and says so.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VULKAN_PYTHON = os.environ.get("QUICKDRAFT_VULKAN_PYTHON")

pytestmark = [
    pytest.mark.vulkan,
    pytest.mark.skipif(not VULKAN_PYTHON, reason="QUICKDRAFT_VULKAN_PYTHON (a Vulkan build of llama-cpp-python) not set"),
]


def run(python: str, *args: str, tmp_path: Path, lavapipe: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    if lavapipe:
        env["GGML_VK_VISIBLE_DEVICES"] = "0"
    r = subprocess.run([python, "-m", "app.cli", "--data-dir", str(tmp_path / "data"), *args],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_info_reports_the_vulkan_backend_and_the_lavapipe_device(tmp_path):
    system = run(VULKAN_PYTHON, "info", "--json", tmp_path=tmp_path)["system"]
    assert "Vulkan" in system["backends"]
    [gpu] = [d for d in system["devices"] if d["backend"] == "Vulkan"]
    assert "llvmpipe" in gpu["description"] and gpu["total_bytes"] > 0
    assert system["gpu_offload_supported"] and system["problem"] is None


def test_a_vulkan_build_without_a_usable_device_says_so_and_runs_on_the_cpu(tiny_models, tmp_path):
    system = run(VULKAN_PYTHON, "info", "--json", tmp_path=tmp_path, lavapipe=False)["system"]
    assert "Vulkan" in system["backends"] and not system["gpu_offload_supported"]
    assert "found no usable GPU" in system["problem"]
    out = run(VULKAN_PYTHON, "generate", "-m", str(tiny_models.main), "-p", "the cat", "-n", "8", "--json",
              tmp_path=tmp_path, lavapipe=False)
    assert out["generated_tokens"] == 8 and "all layers on the CPU" in out["placement"]["main"]


def test_all_layers_offloaded_to_lavapipe_give_the_cpu_builds_greedy_answer(tiny_models, tmp_path):
    args = ["generate", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "-p", "the cat sat on",
            "-n", "48", "--drafter", "model", "--policy", "fixed", "--draft-max", "4", "--json"]
    on_gpu = run(VULKAN_PYTHON, *args, "-ngl", "-1", "-ngld", "-1", tmp_path=tmp_path)
    on_cpu = run(sys.executable, *args, "-ngl", "0", "-ngld", "0", tmp_path=tmp_path)
    layers = tiny_models_layers(tiny_models.main)
    for where in on_gpu["placement"].values():  # the token embeddings stay in RAM, as llama.cpp places them
        assert where.startswith(f"{layers}/{layers} layers on the GPU Vulkan0 (") and "Vulkan0 " in where, where
    assert on_gpu["token_ids"] == on_cpu["token_ids"] and len(on_gpu["token_ids"]) >= 16
    # the same weights draft: both backends accept the same drafts (all but those after the end token)
    assert (on_gpu["drafted"], on_gpu["accepted"]) == (on_cpu["drafted"], on_cpu["accepted"])
    assert on_gpu["accepted"] >= on_gpu["drafted"] - 4 > 0


def test_auto_gpu_layers_put_the_whole_pair_on_lavapipe(tiny_models, tmp_path):
    out = run(VULKAN_PYTHON, "info", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "--json",
              tmp_path=tmp_path)
    layers = tiny_models_layers(tiny_models.main)
    for where in out["placement"].values():
        assert where.startswith(f"{layers}/{layers} layers on the GPU")


def tiny_models_layers(path: Path) -> int:
    from app.core.gguf_info import read_gguf_info

    return read_gguf_info(path).n_layers + 1  # llama.cpp counts the output layer too
