"""Why a model does not load on this machine, found in one call: llama.cpp's own tool on the same file,
then a load through llama-cpp-python with one of Quickdraft's choices added at a time, each in its own
process with a native backtrace on a crash (a SIGSEGV handler preloaded; its frames read back with
addr2line), and the shared libraries each process mapped.

Run by measure.py's ``doctor`` stage; by hand:

    PYTHONPATH=SITE:. python3 scripts/gpu/doctor.py MODEL TOOLS_DIR OUT_DIR [--gpu-layers N]
"""

from __future__ import annotations

import argparse
import ctypes
import faulthandler
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

# Each check adds one thing to the plainest load (llama-cpp-python's defaults, llama.cpp's own logger):
# the first that crashes names the cause.
CHECKS = {
    "cpu": "the plainest load with every layer in RAM: this Python and these libraries, no GPU",
    "gpu": "the plainest load with every layer on the GPU",
    "gpu-python-log": "... with llama-cpp-python's Python log callback",
    "gpu-quickdraft": "... through Quickdraft's start (its log callback, its backend loading, its device list)",
}
# Tried only when a check crashes: each is an environment for the whole process that could stop the
# crash, so the run can go on with the first one under which Quickdraft's own load works.
FIXES = {
    "same-c++-runtime": "the system's libstdc++ preloaded, so every library binds to that one C++ runtime (a toolchain "
                        "that links libstdc++ into each library leaves a copy in each, and two copies' locales mix)",
    "one-blas-thread": "numpy's OpenBLAS and OpenMP held to one thread (their threads started before CUDA's)",
    "cuda-eager": "CUDA's modules loaded at start (CUDA_MODULE_LOADING=EAGER)",
}
LIBRARIES = re.compile(r"lib(stdc\+\+|gcc_s|gomp|cuda|cudart|cublas|cublasLt|ggml[\w-]*|llama[\w-]*|python[\d.]*)\.so")

HANDLER_C = r"""
#define _GNU_SOURCE
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static void on_fault(int sig, siginfo_t *info, void *ctx) {
    char line[96];
    int n = snprintf(line, sizeof line, "native fault: signal %d at address %p\n", sig, info->si_addr);
    write(2, line, n);
    void *frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), 2);
    signal(sig, SIG_DFL);
    raise(sig);
}
__attribute__((constructor)) static void install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_fault;
    sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
    sigaction(SIGSEGV, &sa, 0);
    sigaction(SIGBUS, &sa, 0);
    sigaction(SIGILL, &sa, 0);
}
"""


def load(check: str, model: str, gpu_layers: int) -> None:
    """One load, in this process: the child side of a check."""
    import llama_cpp

    if check == "gpu-quickdraft":
        from app.core.llama import library
        from app.core.llama.devices import DeviceList, choose_device
        library.ensure_backend()
        devices = DeviceList(choose_device("auto"))
    else:
        from app.core.llama import backends
        if check != "gpu-python-log":
            llama_cpp.llama_log_set(ctypes.cast(None, llama_cpp.llama_log_callback), None)   # llama.cpp's stderr logger
        ggml = backends.ggml()
        ggml.ggml_backend_load_all_from_path.argtypes = [ctypes.c_char_p]
        ggml.ggml_backend_load_all_from_path(str(backends.llama_lib_dir()).encode())
        llama_cpp.llama_backend_init()
        devices = None
    print("mapped: " + " ".join(sorted(mapped_libraries())), flush=True)
    params = llama_cpp.llama_model_default_params()
    params.n_gpu_layers = 0 if check == "cpu" else gpu_layers
    if devices is not None:
        params.devices = devices.pointer
    loaded = llama_cpp.llama_model_load_from_file(model.encode(), params)
    print(f"{check}: {'loaded' if loaded else 'llama.cpp returned NULL'}", flush=True)


def mapped_libraries() -> set[str]:
    with open("/proc/self/maps", encoding="utf-8") as maps:
        return {line.split()[-1] for line in maps if LIBRARIES.search(line.split()[-1])}


def diagnose(model: str, tools: Path, out: Path, gpu_layers: int, env: dict | None = None,
             python: str = sys.executable) -> dict:
    """Every check in its own process with ``env`` (PYTHONPATH naming the build's packages)."""
    out.mkdir(parents=True, exist_ok=True)
    handler = compile_handler(out)
    env = dict(env or os.environ, PYTHONFAULTHANDLER="1")
    if handler:
        env["LD_PRELOAD"] = str(handler)
    report = {"handler": bool(handler)}
    report["llama-bench"] = run_check("llama-bench", [str(tools / "llama-bench"), "-m", model, "-ngl", str(gpu_layers),
                                                      "-p", "16", "-n", "16", "-r", "1"], env, out)
    report["llama-bench"]["libraries"] = linked_libraries(tools / "llama-bench")
    for check in CHECKS:
        report[check] = run_check(check, check_argv(python, check, model, gpu_layers), env, out)
    if any(report[check]["exit"] != 0 for check in CHECKS):
        seen = report["llama-bench"]["libraries"] + [lib for check in CHECKS for lib in report[check]["mapped"]]
        report["fixes"] = try_fixes(model, gpu_layers, env, out, python, seen)
    return report


def check_argv(python: str, check: str, model: str, gpu_layers: int) -> list[str]:
    return [python, __file__, "--check", check, model, "--gpu-layers", str(gpu_layers)]


def try_fixes(model: str, gpu_layers: int, env: dict, out: Path, python: str, libraries: list[str]) -> dict:
    """Quickdraft's own load under each fix's environment; a fix that loads carries its environment
    (``env``: only the variables it sets) for the caller to run everything else with."""
    fixes = {}
    for name, what in FIXES.items():
        extra = fix_env(name, libraries)
        if extra is None:
            continue
        with_handler = {**env, **extra}
        if "LD_PRELOAD" in extra and env.get("LD_PRELOAD"):
            with_handler["LD_PRELOAD"] = f"{extra['LD_PRELOAD']} {env['LD_PRELOAD']}"
        result = run_check(f"fix-{name}", check_argv(python, "gpu-quickdraft", model, gpu_layers), with_handler, out)
        fixes[name] = {**result, "what": what, "env": extra}
    return fixes


def fix_env(name: str, libraries: list[str]) -> dict | None:
    """``libraries``: what llama-bench links and the checks mapped (the system's libstdc++ among them)."""
    if name == "same-c++-runtime":
        runtime = next((lib for lib in libraries if re.search(r"/libstdc\+\+\.so", lib)), None)
        return {"LD_PRELOAD": runtime} if runtime else None
    if name == "one-blas-thread":
        return {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    return {"CUDA_MODULE_LOADING": "EAGER"}


def compile_handler(out: Path) -> Path | None:
    cc = shutil.which("cc") or shutil.which("gcc")
    if not cc:
        return None
    source, library = out / "fault_handler.c", out / "fault_handler.so"
    source.write_text(HANDLER_C, encoding="utf-8")
    done = subprocess.run([cc, "-shared", "-fPIC", "-O0", "-o", str(library), str(source)], capture_output=True, text=True)
    return library if done.returncode == 0 else None


def run_check(name: str, argv: list[str], env: dict, out: Path) -> dict:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120)
        code, text = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        code, text = "timeout", f"{exc.stdout or ''}{exc.stderr or ''}"
    (out / f"{name}.log").write_text(f"$ {' '.join(argv)}\n{text}\nexit {code}\n", encoding="utf-8")
    result = {"exit": code, "what": CHECKS.get(name, "llama.cpp's own llama-bench"),
              "mapped": next((line[8:].split() for line in text.splitlines() if line.startswith("mapped: ")), [])}
    frames = native_frames(text)
    if frames:
        result["native_frames"] = frames
    if code != 0:
        result["tail"] = [line for line in text.splitlines() if not line.startswith(("create_tensor", "llama_model_loader"))][-30:]
    print(f"  {name}: exit {code}" + (f", crashed in {frames[0]}" if frames else ""), flush=True)
    return result


def native_frames(text: str) -> list[str]:
    """The handler's frames, each resolved: 'lib(symbol+off)' is demangled, 'lib(+off)' read with addr2line."""
    frames = []
    for m in re.finditer(r"^(/[^\s(]+)\(([^)]*)\) ?\[0x[0-9a-f]+\]$", text, re.M):
        path, where = m.group(1), m.group(2)
        frame = f"{Path(path).name} {resolve(path, where)}"
        if not frame.startswith("fault_handler.so") and "__restore_rt" not in frame:   # the handler's own
            frames.append(frame)
    return frames


def resolve(path: str, where: str) -> str:
    if where.startswith("+") and shutil.which("addr2line"):
        done = subprocess.run(["addr2line", "-f", "-C", "-e", path, where[1:]], capture_output=True, text=True)
        return f"{where} {' '.join(done.stdout.split())}"
    if where and shutil.which("c++filt"):
        symbol, _, offset = where.partition("+")
        done = subprocess.run(["c++filt", symbol], capture_output=True, text=True)
        return f"{done.stdout.strip()}+{offset}"
    return where


def linked_libraries(binary: Path) -> list[str]:
    done = subprocess.run(["ldd", str(binary)], capture_output=True, text=True)
    return [line.split("=>")[-1].split("(")[0].strip() for line in done.stdout.splitlines() if LIBRARIES.search(line)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", choices=tuple(CHECKS))
    parser.add_argument("model")
    parser.add_argument("tools", nargs="?")
    parser.add_argument("out", nargs="?")
    parser.add_argument("--gpu-layers", type=int, default=99)
    args = parser.parse_args()
    if args.check:
        faulthandler.enable()
        load(args.check, args.model, args.gpu_layers)
        return 0
    report = diagnose(args.model, Path(args.tools), Path(args.out), args.gpu_layers)
    (Path(args.out) / "doctor.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
