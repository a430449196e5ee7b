"""scripts/setup.sh picks llama.cpp's backend from the toolchains it finds, and says which."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("bash", "dirname", "sed", "grep", "tr", "cat")


def fake_bin(tmp_path: Path, *, nvcc=False, glslc=False, uname=("Linux", "x86_64")) -> Path:
    """A PATH holding only what the script needs, plus the toolchains a test pretends to have."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "uname").write_text(f'#!/bin/sh\n[ "$1" = -m ] && echo {uname[1]} || echo {uname[0]}\n')
    for name, present in (("nvcc", nvcc), ("glslc", glslc)):
        if present:
            (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    for f in bin_dir.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    return bin_dir


def backend(tmp_path: Path, *args: str, vulkan_sdk: Path | None = None, cmake_args: str | None = None, **fake) -> str:
    env = {"PATH": str(fake_bin(tmp_path, **fake)), "CUDA_SEARCH_DIRS": "", "HOME": str(tmp_path)}
    if vulkan_sdk:
        env["VULKAN_SDK"] = str(vulkan_sdk)
    if cmake_args:
        env["CMAKE_ARGS"] = cmake_args
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--print-backend", *args],
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("setup.sh: llama.cpp backend: ")
    return r.stdout.split("backend: ", 1)[1].strip()


def sdk(tmp_path: Path, spirv: bool = True, new_enough: bool = True) -> Path:
    headers = {"vulkan/vulkan.h": "/* a Vulkan SDK */",
               "vulkan/vulkan_core.h": "#define VK_EXT_layer_settings 1" if new_enough else "/* 1.3.239 */"}
    if spirv:
        headers["spirv/unified1/spirv.hpp"] = "/* SPIR-V */"
    for header, text in headers.items():
        path = tmp_path / "sdk" / "include" / header
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "sdk"


def test_nvcc_means_cuda(tmp_path):
    assert backend(tmp_path, nvcc=True, glslc=True).startswith("cuda (the CUDA compiler was found")


def test_apple_silicon_means_metal(tmp_path):
    assert backend(tmp_path, uname=("Darwin", "arm64")).startswith("metal")


def test_vulkan_needs_its_headers_and_glslc(tmp_path):
    assert backend(tmp_path / "a", glslc=True, vulkan_sdk=sdk(tmp_path / "a")).startswith("vulkan")
    without_glslc = backend(tmp_path / "b", vulkan_sdk=sdk(tmp_path / "b"))
    assert without_glslc.startswith("cpu (no GPU toolchain was found")
    if not Path("/usr/include/spirv/unified1/spirv.hpp").exists():  # this machine's own headers would count
        assert backend(tmp_path / "c", glslc=True, vulkan_sdk=sdk(tmp_path / "c", spirv=False)).startswith("cpu")


def test_vulkan_headers_too_old_for_this_llama_cpp_are_named(tmp_path):
    chosen = backend(tmp_path, glslc=True, vulkan_sdk=sdk(tmp_path, new_enough=False))
    assert chosen.startswith("cpu (the Vulkan headers found are too old for this llama.cpp")


def test_a_flag_or_cmake_args_override_the_choice(tmp_path):
    assert backend(tmp_path / "a", "--backend", "cpu", nvcc=True) == "cpu (asked for with --backend)"
    assert backend(tmp_path / "b", cmake_args="-DGGML_HIP=on", nvcc=True) == \
        "custom (CMAKE_ARGS is set: -DGGML_HIP=on)"


@pytest.mark.parametrize("bad", ["rocm", "gpu"])
def test_an_unknown_backend_is_refused(tmp_path, bad):
    env = {"PATH": str(fake_bin(tmp_path)), "CUDA_SEARCH_DIRS": ""}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--backend", bad, "--print-backend"],
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 2 and "setup.sh:" in r.stderr


def test_ci_builds_for_the_cpu():
    assert "setup.sh --backend cpu" in (ROOT / ".ci" / "run").read_text()
    assert os.access(ROOT / "scripts" / "setup.sh", os.X_OK)


def test_missing_qt_window_libraries_are_named_in_one_apt_command(tmp_path):
    bin_dir = fake_bin(tmp_path)
    (bin_dir / "ldconfig").write_text("#!/bin/sh\necho '\tlibxcb-icccm.so.4 (libc6,x86-64) => /usr/lib/libxcb-icccm.so.4'\n"
                                      "echo '\tlibEGL.so.1 (libc6,x86-64) => /usr/lib/libEGL.so.1'\n")
    (bin_dir / "ldconfig").chmod(0o755)
    r = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--check-qt"], capture_output=True, text=True,
                       env={"PATH": str(bin_dir), "CUDA_SEARCH_DIRS": ""}, timeout=30)
    assert r.returncode == 0, r.stderr
    [apt] = [line.strip() for line in r.stdout.splitlines() if "apt install" in line]
    assert apt.startswith("sudo apt install libxcb-cursor0 ") and "libxkbcommon-x11-0" in apt
    assert "libxcb-icccm4" not in apt and "libegl1" not in apt  # present ones are not asked for
