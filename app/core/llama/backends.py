"""llama.cpp's backends, loaded at start from the modules this install carries.

A build with dynamic backends (GGML_BACKEND_DL) links no backend into libggml: each is a module beside
it (libggml-cpu-haswell.so, libggml-vulkan.so, ggml-cuda.dll, ...), loaded at run time. Quickdraft loads
every module it finds before llama.cpp starts, so one install runs on whatever the machine has: of the
CPU modules, one per instruction-set level, the best this CPU runs; of the GPU modules, each whose driver
is there. A module that does not load is kept with the dynamic linker's or llama.cpp's reason, so
`quickdraft info` and the status bar can say why a GPU is not used.

A build without dynamic backends (llama-cpp-python's default) has its backends built in: nothing to load.

The ggml library must be the very file libllama links to: a wheel holds libggml.so, libggml.so.0 and
libggml.so.0.x.y as three copies, not links, and opening another copy than libllama's gives a second,
empty backend registry.
"""

from __future__ import annotations

import ctypes
import os
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@dataclass(frozen=True)
class BackendModule:
    """One backend module file and what became of it."""

    backend: str              # ggml's name for the backend in the file name: cpu, cuda, vulkan, metal
    variant: str | None       # for the CPU: the instruction-set level (haswell, zen4, ...)
    path: str
    loaded: bool
    reason: str = ""          # why it did not load

    @property
    def name(self) -> str:
        return f"{self.backend}-{self.variant}" if self.variant else self.backend

    def describe(self) -> str:
        return self.name if self.loaded else f"{self.name}: {self.reason}"


@dataclass(frozen=True)
class BackendLoad:
    """What happened when the backends were loaded."""

    dynamic: bool                        # the build loads its backends from modules
    modules: tuple[BackendModule, ...]   # the modules tried (CPU: only the variant chosen)
    cpu_variants: tuple[str, ...] = ()   # the CPU variants this install carries
    folders: tuple[str, ...] = ()        # where modules were looked for

    @property
    def loaded(self) -> tuple[BackendModule, ...]:
        return tuple(m for m in self.modules if m.loaded)

    @property
    def failed(self) -> tuple[BackendModule, ...]:
        return tuple(m for m in self.modules if not m.loaded)

    @property
    def cpu_variant(self) -> str | None:
        """The CPU module chosen for this CPU (None for a build with the CPU built in)."""
        return next((m.variant or "generic" for m in self.loaded if m.backend == "cpu"), None)


# --- the ggml library libllama links to ---------------------------------------------------------

def llama_lib_dir() -> Path:
    """Where llama-cpp-python loads libllama from (its package's lib/, LLAMA_CPP_LIB_PATH, or the
    frozen bundle's copy of it)."""
    from llama_cpp import llama_cpp as bindings

    return Path(bindings._base_path)


def linked_ggml_file(lib_dir: Path, platform: str = sys.platform) -> Path:
    """The copy of ggml that libllama's dynamic linker opens: the SONAME copy on Linux (libggml.so.0),
    the install name on macOS (libggml.0.dylib), ggml.dll on Windows."""
    if platform == "win32":
        candidates = [lib_dir / "ggml.dll", lib_dir / "libggml.dll"]
    else:
        versioned = (re.compile(r"libggml\.\d+\.dylib") if platform == "darwin"
                     else re.compile(r"libggml\.so\.\d+"))
        names = sorted(p.name for p in lib_dir.iterdir() if versioned.fullmatch(p.name)) if lib_dir.is_dir() else []
        plain = "libggml.dylib" if platform == "darwin" else "libggml.so"
        candidates = [lib_dir / n for n in names] + [lib_dir / plain]
    for path in candidates:
        if path.is_file():
            return path
    raise FileNotFoundError(f"no ggml library beside libllama in {lib_dir}")


@lru_cache(maxsize=1)
def ggml():
    """ggml's backend and device registry through ctypes (llama-cpp-python binds none of it). The
    library is already in the process, loaded with libllama: this opens the same copy."""
    import llama_cpp  # noqa: F401  (loads libllama, and with it ggml)

    lib = ctypes.CDLL(str(linked_ggml_file(llama_lib_dir())))
    p = ctypes.c_void_p
    signatures = {
        "ggml_backend_load": ([ctypes.c_char_p], p),
        "ggml_backend_reg_count": ([], ctypes.c_size_t),
        "ggml_backend_reg_get": ([ctypes.c_size_t], p),
        "ggml_backend_reg_name": ([p], ctypes.c_char_p),
        "ggml_backend_dev_count": ([], ctypes.c_size_t),
        "ggml_backend_dev_get": ([ctypes.c_size_t], p),
        "ggml_backend_dev_name": ([p], ctypes.c_char_p),
        "ggml_backend_dev_get_props": ([p, ctypes.c_void_p], None),
        "ggml_backend_dev_backend_reg": ([p], p),
    }
    for name, (args, result) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result
    return lib


# --- finding and loading modules ------------------------------------------------------------------

_MODULE_PREFIX = {"win32": "ggml-"}
_MODULE_SUFFIX = {"win32": ".dll"}          # .so elsewhere: ggml names its modules so on macOS too
_NOT_MODULES = {"base"}                     # ggml-base is a plain library every module links


def module_folders(lib_dir: Path) -> list[Path]:
    """Where modules are looked for: beside libllama, then site-packages/bin, where llama-cpp-python's
    own build installs them unless told otherwise (llama-cpp-python issue #2069)."""
    folders = [lib_dir, lib_dir.parent.parent / "bin"]
    return [f for f in dict.fromkeys(folders) if f.is_dir()]


def find_modules(folders: list[Path], platform: str = sys.platform) -> dict[str, list[tuple[str | None, Path]]]:
    """backend -> [(variant, file)], each backend from the first folder that has it."""
    prefix, suffix = _MODULE_PREFIX.get(platform, "libggml-"), _MODULE_SUFFIX.get(platform, ".so")
    found: dict[str, list[tuple[str | None, Path]]] = {}
    for folder in folders:
        here: dict[str, list[tuple[str | None, Path]]] = {}
        for path in sorted(folder.iterdir()):
            name = path.name
            if not (name.startswith(prefix) and name.endswith(suffix) and path.is_file()):
                continue
            backend, _, variant = name[len(prefix):-len(suffix)].partition("-")
            if backend in _NOT_MODULES:
                continue
            here.setdefault(backend, []).append((variant or None, path))
        for backend, files in here.items():
            found.setdefault(backend, files)
    return found


def load_backends() -> BackendLoad:
    """Load every backend module this install carries (once, before llama.cpp starts)."""
    lib = ggml()
    if lib.ggml_backend_reg_count() > 0:  # backends built into libggml: nothing to load
        return BackendLoad(dynamic=False, modules=())
    folders = module_folders(llama_lib_dir())
    found = find_modules(folders)
    modules = []
    for backend in sorted(found, key=_load_order):
        modules.append(_load_best(lib, backend, found[backend]))
    cpu_variants = tuple(v for v, _ in found.get("cpu", ()) if v)
    return BackendLoad(dynamic=True, modules=tuple(modules), cpu_variants=cpu_variants,
                       folders=tuple(str(f) for f in folders))


def _load_order(backend: str) -> tuple[int, str]:
    """GPU backends first and the CPU last, as ggml_backend_load_all does: llama.cpp lists devices in
    load order, and CUDA before Vulkan lets it drop the Vulkan twin of a CUDA card."""
    order = ["cuda", "hip", "metal", "sycl", "vulkan", "opencl", "musa", "blas", "rpc", "cpu"]
    return (order.index(backend) if backend in order else len(order) - 1, backend)


def _load_best(lib, backend: str, files: list[tuple[str | None, Path]]) -> BackendModule:
    """Of a backend's files, load the one this machine scores best (CPU variants score the instruction
    sets they need; 0 means this CPU lacks them)."""
    scored, reasons = [], []
    for variant, path in files:
        score, reason = _score(path)
        if reason:
            reasons.append((variant, path, reason))
        elif score > 0:
            scored.append((score, variant, path))
    if not scored:
        variant, path, reason = reasons[0] if reasons else (files[0][0], files[0][1], "")
        if not reason:
            reason = "this CPU lacks the instructions every variant needs" if backend == "cpu" else "it scored 0"
        return BackendModule(backend, None if len(files) > 1 else variant, str(path), False, reason)
    _, variant, path = max(scored, key=lambda s: s[0])
    reg = lib.ggml_backend_load(os.fsencode(path))
    if not reg:
        return BackendModule(backend, variant, str(path), False,
                             "it loaded but did not start: no usable driver or device for it")
    return BackendModule(backend, variant, str(path), True)


def _score(path: Path) -> tuple[int, str]:
    """(score, "") for a module the dynamic linker opens, (0, why) for one it cannot: a missing
    driver (libcuda.so.1, nvcuda.dll) or runtime (libvulkan.so.1) says so here."""
    try:
        module = ctypes.CDLL(str(path), mode=getattr(os, "RTLD_LOCAL", 0))
    except OSError as exc:
        return 0, _linker_reason(str(exc), path)
    try:
        score = getattr(module, "ggml_backend_score", None)
        if score is None:   # GPU modules do not score themselves: any that opens is a candidate
            return 1, ""
        score.restype = ctypes.c_int
        return int(score()), ""
    finally:
        _close(module)


def _close(module: ctypes.CDLL) -> None:
    """Let go of a module opened only to be scored (ggml opens the chosen one again)."""
    import _ctypes

    close = getattr(_ctypes, "FreeLibrary" if sys.platform == "win32" else "dlclose", None)
    if close is not None:
        close(module._handle)


_DRIVERS = {"cuda": "the NVIDIA driver", "vulkan": "a Vulkan driver and loader", "hip": "AMD's ROCm runtime",
            "sycl": "Intel's oneAPI runtime"}


def _linker_reason(message: str, path: Path) -> str:
    """The dynamic linker's message without the module's own path in front, naming the library that
    is missing where the linker says which (Linux, macOS; Windows only says "one of its dependencies")."""
    text = message.replace(str(path), "").strip(" :")
    missing = re.search(r"([\w.+-]+\.(?:so[.\d]*|dll|dylib)): cannot open shared object file", text)
    if missing:
        return f"needs {missing.group(1)}, which is not installed ({_driver(path)})"
    if "one of its dependencies" in text:  # Windows: LoadLibrary's error 126
        return f"a library it needs is not installed ({_driver(path)})"
    return text or "the dynamic linker could not open it"


def _driver(path: Path) -> str:
    backend = (re.findall(r"ggml-([a-z]+)", str(path)) or [""])[-1]
    return _DRIVERS.get(backend, "the driver or runtime for this backend")
