"""scripts/setup.sh picks llama.cpp's backend from the toolchains it finds, and says which."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ("bash", "dirname", "sed", "grep", "tr", "cat")


def fake_bin(tmp_path: Path, *, nvcc=False, glslc=False, nvidia_smi=False, libcuda=False,
             uname=("Linux", "x86_64")) -> Path:
    """A PATH holding only what the script needs, plus the toolchains and drivers a test pretends to have."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True)
    for tool in TOOLS:
        (bin_dir / tool).symlink_to(shutil.which(tool))
    (bin_dir / "uname").write_text(f'#!/bin/sh\n[ "$1" = -m ] && echo {uname[1]} || echo {uname[0]}\n')
    for name, present in (("nvcc", nvcc), ("glslc", glslc)):
        if present:
            (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
    if nvidia_smi:
        (bin_dir / "nvidia-smi").write_text("#!/bin/sh\necho 'GPU 0: NVIDIA GeForce RTX 4090 (UUID: GPU-1)'\n")
    # the system's library cache, with or without the NVIDIA driver's libcuda.so.1
    cuda_line = "echo '\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1'\n" if libcuda else ""
    (bin_dir / "ldconfig").write_text("#!/bin/sh\necho '\tlibc.so.6 (libc6,x86-64) => /lib/libc.so.6'\n" + cuda_line)
    for f in bin_dir.iterdir():
        if not f.is_symlink():
            f.chmod(0o755)
    return bin_dir


def plan(tmp_path: Path, *args: str, vulkan_sdk: Path | None = None, cmake_args: str | None = None,
         **fake) -> dict[str, str]:
    """setup.sh --print-backend's plan: "backends" (the summary), "cmake" (the flags), and a line of
    why for each GPU backend it weighed."""
    r = run_setup(tmp_path, "--print-backend", *args, vulkan_sdk=vulkan_sdk, cmake_args=cmake_args, **fake)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].startswith("setup.sh: llama.cpp backends: "), r.stdout
    out = {"backends": lines[0].split("backends: ", 1)[1]}
    for line in lines[1:]:
        key, _, why = line.removeprefix("setup.sh:").strip().partition(": ")
        out["cmake" if key == "CMake flags" else key] = why
    return out


def run_setup(tmp_path: Path, *args: str, vulkan_sdk: Path | None = None, cmake_args: str | None = None,
              **fake) -> subprocess.CompletedProcess:
    env = {"PATH": str(fake_bin(tmp_path, **fake)), "CUDA_SEARCH_DIRS": "", "HOME": str(tmp_path)}
    if vulkan_sdk:
        env["VULKAN_SDK"] = str(vulkan_sdk)
    if cmake_args:
        env["CMAKE_ARGS"] = cmake_args
    return subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), *args],
                          capture_output=True, text=True, env=env, timeout=30)


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


CPU_VARIANTS = "-DGGML_BACKEND_DL=ON -DGGML_CPU_ALL_VARIANTS=ON -DGGML_NATIVE=OFF -DCMAKE_INSTALL_BINDIR=llama_cpp/lib"


def test_every_build_carries_the_cpu_variants_as_modules(tmp_path):
    out = plan(tmp_path)
    assert out["backends"] == "CPU (every instruction-set level, chosen at start)"
    assert out["cmake"] == CPU_VARIANTS


def test_nvcc_without_a_driver_does_not_mean_cuda_and_says_why(tmp_path):
    out = plan(tmp_path, nvcc=True)
    assert "CUDA" not in out["backends"] and "GGML_CUDA" not in out["cmake"]
    assert out["cuda"].startswith("skipped: nvcc was found") and "no NVIDIA driver" in out["cuda"]
    assert "--backend cuda builds it anyway" in out["cuda"]


def test_nvcc_with_a_driver_means_cuda(tmp_path):
    for where, driver in (("a", {"nvidia_smi": True}), ("b", {"libcuda": True})):
        out = plan(tmp_path / where, nvcc=True, **driver)
        assert out["backends"].endswith("+ CUDA"), out
        assert out["cmake"].startswith(CPU_VARIANTS + " -DGGML_CUDA=ON -DCMAKE_CUDA_COMPILER=")
        assert out["cuda"].startswith("built: nvcc was found")
    assert "nvidia-smi lists a GPU" in plan(tmp_path / "c", nvcc=True, nvidia_smi=True)["cuda"]
    assert "libcuda.so.1 is installed" in plan(tmp_path / "d", nvcc=True, libcuda=True)["cuda"]


def test_a_driver_without_nvcc_cannot_build_cuda(tmp_path):
    out = plan(tmp_path, nvidia_smi=True)
    assert "CUDA" not in out["backends"] and out["cuda"] == "skipped: no CUDA compiler (nvcc) was found"


def test_cuda_asked_for_by_name_is_built_without_a_driver(tmp_path):
    out = plan(tmp_path, "--backend", "cuda", nvcc=True)
    assert out["backends"].endswith("+ CUDA") and "-DGGML_CUDA=ON" in out["cmake"]
    assert out["vulkan"] == "not asked for"


def test_apple_silicon_means_metal_built_in(tmp_path):
    out = plan(tmp_path, uname=("Darwin", "arm64"))
    assert out["backends"] == "CPU + Metal" and out["cmake"] == "-DGGML_NATIVE=OFF -DGGML_METAL=ON"
    assert "cuda" not in out and "vulkan" not in out


def test_vulkan_needs_its_headers_and_glslc(tmp_path):
    out = plan(tmp_path / "a", glslc=True, vulkan_sdk=sdk(tmp_path / "a"))
    assert out["backends"].endswith("+ Vulkan") and out["cmake"] == CPU_VARIANTS + " -DGGML_VULKAN=ON"
    without_glslc = plan(tmp_path / "b", vulkan_sdk=sdk(tmp_path / "b"))
    assert "Vulkan" not in without_glslc["backends"] and without_glslc["vulkan"].startswith("skipped: the Vulkan")
    if not Path("/usr/include/spirv/unified1/spirv.hpp").exists():  # this machine's own headers would count
        assert "Vulkan" not in plan(tmp_path / "c", glslc=True, vulkan_sdk=sdk(tmp_path / "c", spirv=False))["backends"]


def test_cuda_and_vulkan_are_built_side_by_side(tmp_path):
    out = plan(tmp_path, nvcc=True, nvidia_smi=True, glslc=True, vulkan_sdk=sdk(tmp_path))
    assert out["backends"].endswith("+ CUDA + Vulkan")
    assert "-DGGML_CUDA=ON" in out["cmake"] and "-DGGML_VULKAN=ON" in out["cmake"]


def test_vulkan_headers_too_old_for_this_llama_cpp_are_named(tmp_path):
    out = plan(tmp_path, glslc=True, vulkan_sdk=sdk(tmp_path, new_enough=False))
    assert out["vulkan"].startswith("skipped: the Vulkan headers found are too old for this llama.cpp")


def test_a_flag_or_cmake_args_override_the_choice(tmp_path):
    cpu = plan(tmp_path / "a", "--backend", "cpu", nvcc=True, nvidia_smi=True)
    assert cpu["cmake"] == CPU_VARIANTS and cpu["cuda"] == "not built (--backend cpu)"
    custom = plan(tmp_path / "b", cmake_args="-DGGML_HIP=on", nvcc=True)
    assert custom["backends"] == "custom (CMAKE_ARGS is set: -DGGML_HIP=on)" and custom["cmake"] == "-DGGML_HIP=on"


def test_print_cmake_prints_the_plans_flags_alone(tmp_path):
    """scripts/gpu/measure.py builds the GPU measurement with exactly these flags."""
    r = run_setup(tmp_path / "a", "--print-cmake", "--backend", "cuda", nvcc=True)
    assert r.returncode == 0, r.stderr
    flags = plan(tmp_path / "b", "--backend", "cuda", nvcc=True)["cmake"]
    assert "-DGGML_CUDA=ON" in flags
    assert r.stdout.replace(str(tmp_path / "a"), "").splitlines() == [flags.replace(str(tmp_path / "b"), "")]


@pytest.mark.parametrize("bad", ["rocm", "gpu", "cuda,rocm"])
def test_an_unknown_backend_is_refused(tmp_path, bad):
    r = run_setup(tmp_path, "--backend", bad, "--print-backend")
    assert r.returncode == 2 and "setup.sh: unknown backend" in r.stderr


def test_a_backend_asked_for_that_cannot_be_built_here_is_refused_with_the_reason(tmp_path):
    r = run_setup(tmp_path, "--backend", "vulkan", "--print-backend")
    assert r.returncode == 1 and "--backend vulkan cannot be built here: the Vulkan and SPIR-V headers" in r.stderr


def test_ci_builds_for_the_cpu_rehearses_the_gpu_measurement_then_smoke_tests_the_bundle():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "setup.sh --backend cpu" in ci
    steps = ["python -m pytest -q", "scripts/gpu/pack.sh", "scripts/gpu/measure.py --cpu", ".venv/bin/pyinstaller",
             "packaging/quickdraft.spec", "packaging/smoke_test.py dist/quickdraft/quickdraft"]
    assert all(step in ci for step in steps) and [ci.index(step) for step in steps] == sorted(ci.index(s) for s in steps)
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


def test_every_script_a_user_runs_names_its_interpreter():
    """README says ./scripts/setup.sh: without a first line naming bash, a shell other than bash (zsh,
    nohup, a file manager) hands it to /bin/sh, which stops at 'set -o pipefail'."""
    scripts = [ROOT / ".ci" / "run", *sorted((ROOT / "scripts").rglob("*.sh")), *sorted((ROOT / "packaging").rglob("*.sh"))]
    for script in scripts:
        assert script.read_text().startswith("#!/usr/bin/env bash\n"), script


def test_the_llama_cpp_compile_shows_its_steps_as_they_go():
    """The compile took minutes with nothing on the screen: pip -v passes the build's steps on, and
    setup.sh shows every 25th and the last (ninja's [n/N]) or every 5% (make's [ p%])."""
    import re

    script = (ROOT / "scripts" / "setup.sh").read_text()
    assert re.search(r"pip wheel -v .*\n.*\| tee \"\$WHEELS.log\" \| compile_progress", script)
    function = re.search(r"^compile_progress\(\) \{.*?^\}", script, re.S | re.M).group(0)
    build = "".join(f"[{n}/60] Building C object ggml-cpu/x{n}.o\n" for n in range(1, 61)) + \
        "noise\n[  4%] Building a\n[  5%] Building b\n[  5%] Building c\n[ 10%] Linking\n"
    shown = subprocess.run(["bash", "-c", function + "\ncompile_progress"], input=build, capture_output=True,
                           text=True, timeout=30).stdout.splitlines()
    assert shown == [f"setup.sh:   compiling llama.cpp: {step}" for step in
                     ("step 25 of 60", "step 50 of 60", "step 60 of 60", "5%", "10%")]
