"""What llama.cpp runs on here: the backends compiled into this build and the devices they found.

llama.cpp chooses its backends when it is built (CUDA, Metal, Vulkan, CPU); ggml's device registry
says which of them found a device at run time and how much memory each has free.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from functools import lru_cache

from . import llama

# enum ggml_backend_dev_type (ggml-backend.h)
_DEVICE_KINDS = {0: "CPU", 1: "GPU", 2: "integrated GPU", 3: "accelerator", 4: "meta"}
GPU_KINDS = ("GPU", "integrated GPU")


@dataclass(frozen=True)
class Device:
    name: str          # llama.cpp's name: CUDA0, Vulkan0, MTL0, CPU
    description: str   # what the driver calls it: "NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)"
    kind: str          # CPU | GPU | integrated GPU | accelerator
    backend: str       # the backend that registered it: CUDA, Vulkan, Metal, CPU
    free_bytes: int
    total_bytes: int

    @property
    def is_gpu(self) -> bool:
        return self.kind in GPU_KINDS

    def describe(self) -> str:
        memory = (f"{_gib(self.free_bytes)} free of {_gib(self.total_bytes)}" if self.total_bytes
                  else "memory unknown")
        return f"{self.name}: {self.description} ({self.kind}, {memory})"


@dataclass(frozen=True)
class SystemInfo:
    backends: tuple[str, ...]    # compiled into this build, e.g. ("CUDA", "CPU")
    devices: tuple[Device, ...]
    cpu_features: str            # llama_print_system_info()

    @property
    def gpu_backends(self) -> tuple[str, ...]:
        return tuple(b for b in self.backends if b not in ("CPU", "BLAS", "RPC"))

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.is_gpu)

    @property
    def gpu_free_bytes(self) -> int:
        return sum(d.free_bytes for d in self.gpus)

    def summary(self) -> str:
        """One line for a status bar: what the models can run on."""
        if self.gpus:
            names = ", ".join(f"{d.description} ({_gib(d.free_bytes)} free)" for d in self.gpus)
            return f"{'/'.join(self.gpu_backends)}: {names}"
        if self.gpu_backends:
            return f"{'/'.join(self.gpu_backends)} build, no usable GPU found: running on the CPU"
        return "CPU build: running on the CPU"

    def problem(self) -> str | None:
        """What a user should know when a GPU build has nothing to run on."""
        if self.gpu_backends and not self.gpus:
            return (f"This {'/'.join(self.gpu_backends)} build of llama.cpp found no usable GPU, so every "
                    f"layer runs on the CPU. Check the GPU driver (for Vulkan: `vulkaninfo --summary`).")
        return None


@lru_cache(maxsize=1)
def system_info() -> SystemInfo:
    """The backends and devices of this process's llama.cpp (read once: devices do not come and go)."""
    return read_system_info()


def read_system_info() -> SystemInfo:
    llama.ensure_backend()
    ggml = _ggml()
    backends = tuple(ggml.ggml_backend_reg_name(ggml.ggml_backend_reg_get(i)).decode()
                     for i in range(ggml.ggml_backend_reg_count()))
    devices = tuple(_device(ggml, ggml.ggml_backend_dev_get(i)) for i in range(ggml.ggml_backend_dev_count()))
    features = llama._llama().llama_print_system_info().decode("utf-8", "replace").strip()
    return SystemInfo(backends, devices, features)


def free_gpu_bytes() -> int:
    """Free memory on the GPUs now (not cached: it changes as models load)."""
    info = system_info()
    if not info.gpus:
        return 0
    return read_system_info().gpu_free_bytes


def _device(ggml, dev) -> Device:
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    ggml.ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    reg = ggml.ggml_backend_dev_backend_reg(dev)
    return Device(
        name=ggml.ggml_backend_dev_name(dev).decode("utf-8", "replace"),
        description=(ggml.ggml_backend_dev_description(dev) or b"").decode("utf-8", "replace"),
        kind=_DEVICE_KINDS.get(ggml.ggml_backend_dev_type(dev), "unknown"),
        backend=ggml.ggml_backend_reg_name(reg).decode("utf-8", "replace") if reg else "",
        free_bytes=int(free.value),
        total_bytes=int(total.value),
    )


@lru_cache(maxsize=1)
def _ggml():
    """ggml's device registry through ctypes (llama-cpp-python loads the library but binds none of it).
    It lies beside libllama, wherever LLAMA_CPP_LIB_PATH or the package put that."""
    from llama_cpp import llama_cpp as bindings
    from llama_cpp._ctypes_extensions import load_shared_library

    lib = load_shared_library("ggml", bindings._base_path)

    p = ctypes.c_void_p
    signatures = {
        "ggml_backend_reg_count": ([], ctypes.c_size_t),
        "ggml_backend_reg_get": ([ctypes.c_size_t], p),
        "ggml_backend_reg_name": ([p], ctypes.c_char_p),
        "ggml_backend_dev_count": ([], ctypes.c_size_t),
        "ggml_backend_dev_get": ([ctypes.c_size_t], p),
        "ggml_backend_dev_name": ([p], ctypes.c_char_p),
        "ggml_backend_dev_description": ([p], ctypes.c_char_p),
        "ggml_backend_dev_type": ([p], ctypes.c_int),
        "ggml_backend_dev_memory": ([p, ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)], None),
        "ggml_backend_dev_backend_reg": ([p], p),
    }
    for name, (args, result) in signatures.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, result
    return lib


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"
