"""Backends loaded at run time: which ggml copy is opened, which module files count, which CPU variant
is chosen, and why a module that does not load did not. Modules are compiled here with the C compiler
(a CPU variant that scores itself, a GPU module that needs a driver library this machine lacks)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from app.core.llama import backends
from app.core.llama.devices import system_info

needs_cc = pytest.mark.skipif(shutil.which("cc") is None or not sys.platform.startswith("linux"),
                              reason="needs a C compiler on Linux to make module files")


def touch(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"\x7fELF")
    return folder


def test_the_ggml_opened_is_the_copy_libllama_links_to(tmp_path):
    three_copies = touch(tmp_path / "linux", "libggml.so", "libggml.so.0", "libggml.so.0.25.3", "libggml-base.so.0")
    assert backends.linked_ggml_file(three_copies, "linux").name == "libggml.so.0"
    mac = touch(tmp_path / "mac", "libggml.dylib", "libggml.0.dylib", "libggml.0.25.3.dylib")
    assert backends.linked_ggml_file(mac, "darwin").name == "libggml.0.dylib"
    assert backends.linked_ggml_file(touch(tmp_path / "win", "ggml.dll", "ggml-base.dll"), "win32").name == "ggml.dll"
    assert backends.linked_ggml_file(touch(tmp_path / "links", "libggml.so"), "linux").name == "libggml.so"
    with pytest.raises(FileNotFoundError):
        backends.linked_ggml_file(touch(tmp_path / "none", "libllama.so"), "linux")


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads /proc/self/maps")
def test_this_process_holds_one_ggml_and_it_has_the_backends():
    """Opening another copy of ggml than libllama's (the wheel's libggml.so instead of libggml.so.0)
    maps a second library with its own, empty registry: the frozen app then had no backend at all."""
    info = system_info()
    assert "CPU" in info.backends and any(d.kind == "CPU" for d in info.devices)
    maps = Path("/proc/self/maps").read_text()
    ggml_files = {line.split()[-1] for line in maps.splitlines() if Path(line.split()[-1]).name.startswith("libggml.so")}
    assert len(ggml_files) == 1, ggml_files


def test_a_build_with_modules_names_the_cpu_variant_it_chose():
    load = system_info().load
    if not load.dynamic:
        pytest.skip("this llama-cpp-python has its backends built in (not built by scripts/setup.sh)")
    assert load.cpu_variant in load.cpu_variants and len(load.cpu_variants) > 1
    assert [m.backend for m in load.loaded].count("cpu") == 1


def test_module_files_are_found_by_backend_and_variant(tmp_path):
    lib = touch(tmp_path / "lib", "libggml.so", "libggml.so.0", "libggml-base.so", "libggml-cpu-haswell.so",
                "libggml-cpu-zen4.so", "libggml-vulkan.so", "libggml-cpu-zen4.so.0", "libllama.so")
    bin_dir = touch(tmp_path / "bin", "libggml-cpu-sse42.so", "libggml-cuda.so")
    found = backends.find_modules([lib, bin_dir], "linux")
    assert {b: [(v, p.name) for v, p in files] for b, files in found.items()} == {
        "cpu": [("haswell", "libggml-cpu-haswell.so"), ("zen4", "libggml-cpu-zen4.so")],  # the first folder's
        "vulkan": [(None, "libggml-vulkan.so")],
        "cuda": [(None, "libggml-cuda.so")],
    }
    windows = backends.find_modules([touch(tmp_path / "win", "ggml.dll", "ggml-base.dll", "ggml-cpu-x64.dll",
                                           "ggml-cuda.dll", "llama.dll")], "win32")
    assert sorted(windows) == ["cpu", "cuda"] and windows["cpu"][0][0] == "x64"


def test_modules_are_looked_for_beside_libllama_then_where_llama_cpp_pythons_build_puts_them(tmp_path):
    lib = touch(tmp_path / "site-packages" / "llama_cpp" / "lib", "libllama.so")
    assert backends.module_folders(lib) == [lib]
    touch(tmp_path / "site-packages" / "bin", "libggml-cpu-zen4.so")
    assert backends.module_folders(lib) == [lib, tmp_path / "site-packages" / "bin"]


class FakeGgml:
    """ggml_backend_load as ggml answers it: a registry for a module that starts, NULL for one that
    does not; records what it was asked to load."""

    def __init__(self, starts: bool = True):
        self.starts = starts
        self.asked: list[str] = []

    def ggml_backend_load(self, path: bytes):
        self.asked.append(Path(path.decode()).name)
        return 0x1234 if self.starts else None


def compile_module(folder: Path, name: str, source: str, *link: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    c = folder / f"{name}.c"
    c.write_text(source)
    out = folder / name
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(out), str(c), f"-L{folder}", *link], check=True)
    return out


def scored(score: int) -> str:
    return f"int ggml_backend_score(void) {{ return {score}; }}\n"


@needs_cc
def test_the_cpu_variant_this_machine_scores_best_is_loaded(tmp_path):
    files = [("sse42", compile_module(tmp_path, "libggml-cpu-sse42.so", scored(5))),
             ("zen4", compile_module(tmp_path, "libggml-cpu-zen4.so", scored(0))),      # lacks AVX-512 here
             ("haswell", compile_module(tmp_path, "libggml-cpu-haswell.so", scored(9)))]
    ggml = FakeGgml()
    module = backends._load_best(ggml, "cpu", files)
    assert module.loaded and module.variant == "haswell" and ggml.asked == ["libggml-cpu-haswell.so"]
    assert backends.BackendLoad(True, (module,), ("sse42", "zen4", "haswell")).cpu_variant == "haswell"


@needs_cc
def test_no_variant_this_cpu_can_run_is_said_so(tmp_path):
    files = [("zen4", compile_module(tmp_path, "libggml-cpu-zen4.so", scored(0)))]
    module = backends._load_best(FakeGgml(), "cpu", files)
    assert not module.loaded and "this CPU lacks" in module.reason


@needs_cc
def test_a_gpu_module_whose_driver_is_missing_says_which_library_it_needs(tmp_path):
    driver = compile_module(tmp_path, "libcuda.so.1", "int cuInit(unsigned f) { return f; }\n", "-Wl,-soname,libcuda.so.1")
    (tmp_path / "libcuda.so").symlink_to(driver.name)
    cuda = compile_module(tmp_path, "libggml-cuda.so", "int cuInit(unsigned);\nint start(void) { return cuInit(0); }\n",
                          "-lcuda")
    driver.unlink()  # the machine the app runs on has no NVIDIA driver
    ggml = FakeGgml()
    module = backends._load_best(ggml, "cuda", [(None, cuda)])
    assert not module.loaded and ggml.asked == []
    assert module.reason == "needs libcuda.so.1, which is not installed (the NVIDIA driver)"
    assert module.describe() == f"cuda: {module.reason}"


@needs_cc
def test_a_gpu_module_that_opens_but_finds_nothing_to_run_on_says_so(tmp_path):
    vulkan = compile_module(tmp_path, "libggml-vulkan.so", "int nothing(void) { return 0; }\n")
    module = backends._load_best(FakeGgml(starts=False), "vulkan", [(None, vulkan)])
    assert not module.loaded and module.reason == "it loaded but did not start: no usable driver or device for it"


def test_a_file_that_is_not_a_library_is_reported_not_loaded(tmp_path):
    broken = touch(tmp_path, "libggml-vulkan.so") / "libggml-vulkan.so"
    module = backends._load_best(FakeGgml(), "vulkan", [(None, broken)])
    assert not module.loaded and module.reason and str(broken) not in module.reason


def test_windows_says_a_dependency_is_missing_without_naming_it_and_the_driver_is_named():
    message = ("Could not find module 'C:\\Quickdraft\\_internal\\llama_cpp\\lib\\ggml-cuda.dll' (or one of its "
               "dependencies). Try using the full path with constructor syntax.")
    path = Path("C:\\Quickdraft\\_internal\\llama_cpp\\lib\\ggml-cuda.dll")
    assert backends._linker_reason(message, path) == "a library it needs is not installed (the NVIDIA driver)"
    vulkan = Path("/opt/quickdraft/_internal/llama_cpp/lib/libggml-vulkan.so")
    linux = f"{vulkan}: libvulkan.so.1: cannot open shared object file: No such file or directory"
    assert backends._linker_reason(linux, vulkan) == "needs libvulkan.so.1, which is not installed (a Vulkan driver and loader)"


def test_gpu_backends_load_before_the_cpu_and_cuda_before_vulkan():
    assert sorted(["cpu", "vulkan", "cuda", "blas"], key=backends._load_order) == ["cuda", "vulkan", "blas", "cpu"]
