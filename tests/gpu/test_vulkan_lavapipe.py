"""The GPU offload path on a Vulkan build, run on Mesa's lavapipe (a Vulkan device made of CPU cores),
from the source tree and from the frozen bundle a user installs.

Opt-in, like the real-model tier. QUICKDRAFT_VULKAN_PYTHON names a Python whose llama-cpp-python was
built with Vulkan; QUICKDRAFT_VULKAN_BUNDLE names the frozen app built from it (README: "Proving GPU
offload without a GPU"):

    sudo apt install libvulkan-dev glslc spirv-headers mesa-vulkan-drivers   # Debian 12: VULKAN_SDK too
    ./scripts/setup.sh --backend vulkan --venv .venv-vulkan
    .venv-vulkan/bin/pip install -e ".[packaging]"
    .venv-vulkan/bin/pyinstaller --noconfirm --distpath dist-vulkan --workpath build/pyinstaller-vulkan packaging/quickdraft.spec
    QUICKDRAFT_VULKAN_PYTHON=.venv-vulkan/bin/python QUICKDRAFT_VULKAN_BUNDLE=dist-vulkan/quickdraft/quickdraft \
        .venv/bin/python -m pytest -m vulkan tests/gpu

Each test runs once per build named (the source tree's, the bundle's). llama.cpp skips CPU-type
Vulkan devices unless GGML_VK_VISIBLE_DEVICES names them, which is what a user with only lavapipe
sees: a GPU build that finds no usable GPU and says so.
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
VULKAN_BUNDLE = os.environ.get("QUICKDRAFT_VULKAN_BUNDLE")

pytestmark = [
    pytest.mark.vulkan,
    pytest.mark.skipif(not (VULKAN_PYTHON or VULKAN_BUNDLE),
                       reason="QUICKDRAFT_VULKAN_PYTHON or QUICKDRAFT_VULKAN_BUNDLE (a Vulkan build) not set"),
]


@pytest.fixture(params=["source", "bundle"])
def vulkan(request) -> list[str]:
    """The command that runs the Vulkan build's command line: the source tree's or the frozen app's."""
    if request.param == "source":
        if not VULKAN_PYTHON:
            pytest.skip("QUICKDRAFT_VULKAN_PYTHON not set")
        return [VULKAN_PYTHON, "-m", "app.cli"]
    if not VULKAN_BUNDLE:
        pytest.skip("QUICKDRAFT_VULKAN_BUNDLE not set")
    return [str(Path(VULKAN_BUNDLE).resolve()), "--cli"]


CPU_BUILD = [sys.executable, "-m", "app.cli"]


def run(command: list[str], *args: str, tmp_path: Path, lavapipe: bool = True) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "GGML_VK_VISIBLE_DEVICES"}
    if lavapipe:
        env["GGML_VK_VISIBLE_DEVICES"] = "0"
    r = subprocess.run([*command, "--data-dir", str(tmp_path / "data"), *args],
                       capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_info_reports_the_vulkan_backend_and_the_lavapipe_device(vulkan, tmp_path):
    system = run(vulkan, "info", "--json", tmp_path=tmp_path)["system"]
    assert "Vulkan" in system["backends"]
    [gpu] = [d for d in system["devices"] if d["backend"] == "Vulkan"]
    assert "llvmpipe" in gpu["description"] and gpu["total_bytes"] > 0
    assert system["gpu_offload_supported"] and system["problem"] is None and system["device"] == "Vulkan0"
    assert system["dynamic_backends"] and system["cpu_variant"] in system["cpu_variants"]
    assert {"vulkan", f"cpu-{system['cpu_variant']}"} == {m["name"] for m in system["modules_loaded"]}


def test_a_vulkan_build_without_a_usable_device_says_so_and_runs_on_the_cpu(vulkan, tiny_models, tmp_path):
    system = run(vulkan, "info", "--json", tmp_path=tmp_path, lavapipe=False)["system"]
    assert "Vulkan" in system["backends"] and not system["gpu_offload_supported"]
    assert "found no usable GPU" in system["problem"]
    out = run(vulkan, "generate", "-m", str(tiny_models.main), "-p", "the cat", "-n", "8", "--json",
              tmp_path=tmp_path, lavapipe=False)
    assert out["generated_tokens"] == 8 and "all layers on the CPU" in out["placement"]["main"]


def test_all_layers_offloaded_to_lavapipe_give_the_cpu_builds_greedy_answer(vulkan, tiny_models, tmp_path):
    args = ["generate", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "-p", "the cat sat on",
            "-n", "48", "--drafter", "model", "--policy", "fixed", "--draft-max", "4", "--json"]
    on_gpu = run(vulkan, *args, "-ngl", "-1", "-ngld", "-1", tmp_path=tmp_path)
    on_cpu = run(CPU_BUILD, *args, "-ngl", "0", "-ngld", "0", tmp_path=tmp_path)
    layers = tiny_models_layers(tiny_models.main)
    for where in on_gpu["placement"].values():  # the token embeddings stay in RAM, as llama.cpp places them
        assert where.startswith(f"{layers}/{layers} layers on the GPU Vulkan0 (") and "Vulkan0 " in where, where
    assert on_gpu["token_ids"] == on_cpu["token_ids"] and len(on_gpu["token_ids"]) >= 16
    # the same weights draft: both backends accept the same drafts (all but those after the end token)
    assert (on_gpu["drafted"], on_gpu["accepted"]) == (on_cpu["drafted"], on_cpu["accepted"])
    assert on_gpu["accepted"] >= on_gpu["drafted"] - 4 > 0


def test_auto_gpu_layers_put_the_whole_pair_on_lavapipe(vulkan, tiny_models, tmp_path):
    out = run(vulkan, "info", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "--json",
              tmp_path=tmp_path)
    layers = tiny_models_layers(tiny_models.main)
    for where in out["placement"].values():
        assert where.startswith(f"{layers}/{layers} layers on the GPU")


def test_device_cpu_keeps_every_layer_in_ram_beside_a_usable_gpu(vulkan, tiny_models, tmp_path):
    out = run(vulkan, "generate", "-m", str(tiny_models.main), "-md", str(tiny_models.same), "--device", "cpu",
              "-p", "the cat", "-n", "8", "--json", tmp_path=tmp_path)
    assert all(where.startswith("all layers on the CPU") for where in out["placement"].values()), out["placement"]


@pytest.mark.skipif(not VULKAN_BUNDLE, reason="QUICKDRAFT_VULKAN_BUNDLE not set")
def test_the_frozen_app_chats_on_lavapipe_through_its_window():
    env = {**os.environ, "GGML_VK_VISIBLE_DEVICES": "0", "QT_QPA_PLATFORM": "offscreen"}
    r = subprocess.run([sys.executable, str(ROOT / "packaging" / "smoke_test.py"), str(Path(VULKAN_BUNDLE).resolve()),
                        "--expect-backend", "Vulkan"], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0 and "models go on Vulkan0" in r.stdout, r.stdout[-3000:]


def tiny_models_layers(path: Path) -> int:
    from app.core.gguf.info import read_gguf_info

    return read_gguf_info(path).n_layers + 1  # llama.cpp counts the output layer too
