"""What llama.cpp runs on here: the backends loaded, those that failed and why, the devices they found,
and the one device the models are put on.

Backends are loaded at start from this install's modules (app/core/llama/backends.py); ggml's device
registry then says which devices each found and how much memory each has free.
"""

from __future__ import annotations

import ctypes
import dataclasses
from dataclasses import dataclass, field
from functools import lru_cache

from app.core.errors import QuickdraftError
from app.core.llama import backends
from app.core.llama.library import ensure_backend, lib
from app.core.params import AUTO, ModelParams

# enum ggml_backend_dev_type (ggml-backend.h)
_DEVICE_KINDS = {0: "CPU", 1: "GPU", 2: "integrated GPU", 3: "accelerator", 4: "meta"}
GPU_KINDS = ("GPU", "integrated GPU")
CPU_ONLY = "cpu"   # the device setting that keeps every layer in RAM
# Vulkan drivers that are CPU cores pretending to be a GPU: usable, never preferred
_SOFTWARE_RENDERERS = ("llvmpipe", "lavapipe", "swiftshader")
# the vendor's own backend before Vulkan for the same card
_BACKEND_PREFERENCE = ("CUDA", "Metal", "ROCm", "HIP", "SYCL", "MUSA", "CANN", "Vulkan", "OpenCL")


@dataclass(frozen=True)
class Device:
    name: str          # llama.cpp's name: CUDA0, Vulkan0, MTL0, CPU
    description: str   # what the driver calls it: "NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)"
    kind: str          # CPU | GPU | integrated GPU | accelerator
    backend: str       # the backend that registered it: CUDA, Vulkan, Metal, CPU
    free_bytes: int
    total_bytes: int
    device_id: str = ""  # PCI bus id where the backend knows it: one card seen by CUDA and Vulkan shares it

    @property
    def is_gpu(self) -> bool:
        return self.kind in GPU_KINDS

    @property
    def is_software(self) -> bool:
        return any(s in self.description.lower() for s in _SOFTWARE_RENDERERS)

    def describe(self) -> str:
        memory = (f"{_gib(self.free_bytes)} free of {_gib(self.total_bytes)}" if self.total_bytes
                  else "memory unknown")
        return f"{self.name}: {self.description} ({self.kind}, {memory})"


@dataclass(frozen=True)
class SystemInfo:
    backends: tuple[str, ...]    # loaded, e.g. ("CUDA", "Vulkan", "CPU")
    devices: tuple[Device, ...]
    cpu_features: str            # llama_print_system_info()
    load: backends.BackendLoad = field(default_factory=lambda: backends.BackendLoad(False, ()))

    @property
    def gpu_backends(self) -> tuple[str, ...]:
        return tuple(b for b in self.backends if b not in ("CPU", "BLAS", "RPC"))

    @property
    def gpus(self) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.is_gpu)

    def summary(self) -> str:
        """One line for a status bar: what the models can run on."""
        best = preferred_gpu(self.gpus)
        if best is not None:
            others = len(self.gpus) - 1
            more = f" (+{others} more)" if others else ""
            return f"{best.backend}: {best.description} ({_gib(best.free_bytes)} free){more}"
        if self.gpu_backends:
            return f"{'/'.join(self.gpu_backends)} loaded, no usable GPU found: running on the CPU"
        if not self.load.dynamic:
            return "CPU build: running on the CPU"
        failed = [m.name for m in self.load.failed if m.backend != "cpu"]
        return (f"CPU only ({self.load.cpu_variant or 'no'} variant"
                + (f"; {', '.join(failed)} did not load)" if failed else ")"))

    def problem(self) -> str | None:
        """What a user should know when a GPU backend has nothing to run on or did not load."""
        failed_gpu = [m for m in self.load.failed if m.backend != "cpu"]
        if self.gpu_backends and not self.gpus:
            return (f"The {'/'.join(self.gpu_backends)} backend found no usable GPU, so every layer runs on "
                    f"the CPU. Check the GPU driver (for Vulkan: `vulkaninfo --summary`).")
        if failed_gpu and not self.gpus:
            reasons = "; ".join(m.describe() for m in failed_gpu)
            return f"No GPU backend could start, so every layer runs on the CPU ({reasons})."
        return None

    def details(self) -> list[str]:
        """Every line worth a tooltip or `info`: backends loaded and failed, the CPU variant, devices."""
        lines = [f"llama.cpp backends: {', '.join(self.backends) or 'none'}"]
        if self.load.dynamic:
            lines.append(f"CPU variant: {self.load.cpu_variant or 'none loaded'}"
                         + (f" (of {', '.join(self.load.cpu_variants)})" if self.load.cpu_variants else ""))
        lines += [f"not loaded: {m.describe()}" for m in self.load.failed]
        lines += [d.describe() for d in self.devices]
        if self.problem():
            lines.append(self.problem())
        return lines


@lru_cache(maxsize=1)
def system_info() -> SystemInfo:
    """The backends and devices of this process's llama.cpp (read once: devices do not come and go)."""
    return read_system_info()


def read_system_info() -> SystemInfo:
    load = ensure_backend()
    ggml = backends.ggml()
    names = tuple(ggml.ggml_backend_reg_name(ggml.ggml_backend_reg_get(i)).decode()
                  for i in range(ggml.ggml_backend_reg_count()))
    devices = tuple(_device(ggml, ggml.ggml_backend_dev_get(i)) for i in range(ggml.ggml_backend_dev_count()))
    features = lib().llama_print_system_info().decode("utf-8", "replace").strip()
    return SystemInfo(names, devices, features, load)


# --- which device the models go on ----------------------------------------------------------------

def preferred_gpu(gpus: tuple[Device, ...]) -> Device | None:
    """The GPU a user would pick: a discrete one before an integrated one, real hardware before a
    software renderer, the vendor's backend before Vulkan for the same card, then the most free memory."""
    if not gpus:
        return None

    def rank(d: Device):
        backend = _BACKEND_PREFERENCE.index(d.backend) if d.backend in _BACKEND_PREFERENCE else len(_BACKEND_PREFERENCE)
        return (not d.is_software, d.kind == "GPU", d.free_bytes, -backend)

    return max(gpus, key=rank)


def choose_device(wanted: str | None = AUTO, system: SystemInfo | None = None) -> Device | None:
    """The device the models go on: ``auto`` picks the preferred GPU, ``cpu`` none (every layer in RAM),
    a device name (``CUDA0``, ``Vulkan1``; any case) that one. None means the CPU."""
    system = system or system_info()
    wanted = (wanted or AUTO).strip()
    if wanted.lower() == AUTO:
        return preferred_gpu(system.gpus)
    if wanted.lower() == CPU_ONLY:
        return None
    for device in system.gpus:
        if device.name.lower() == wanted.lower():
            return device
    names = ", ".join(["auto", CPU_ONLY] + [d.name for d in system.gpus])
    raise QuickdraftError(f"There is no GPU named {wanted!r} here; choose one of: {names} "
                          f"(`quickdraft info` lists the devices).")


def free_bytes(device: Device | None) -> int:
    """Free memory on ``device`` now (read again: it changes as models load); 0 for the CPU."""
    if device is None:
        return 0
    current = {d.name: d for d in read_system_info().devices}
    return current[device.name].free_bytes if device.name in current else device.free_bytes


class DeviceList:
    """The NULL-terminated ggml_backend_dev_t array llama_model_params.devices takes: one device, or
    none (the CPU only). Kept alive while the model loads; llama.cpp copies it."""

    def __init__(self, device: Device | None):
        ggml = backends.ggml()
        handles = [] if device is None else [_handle(ggml, device.name)]
        self.array = (ctypes.c_void_p * (len(handles) + 1))(*handles, None)

    @property
    def pointer(self) -> int:
        return ctypes.addressof(self.array)


def _handle(ggml, name: str) -> int:
    for i in range(ggml.ggml_backend_dev_count()):
        dev = ggml.ggml_backend_dev_get(i)
        if ggml.ggml_backend_dev_name(dev).decode("utf-8", "replace") == name:
            return dev
    raise QuickdraftError(f"The device {name} is gone.")


# --- reading ggml's registry -----------------------------------------------------------------------

class _Caps(ctypes.Structure):
    _fields_ = [("async_", ctypes.c_bool), ("host_buffer", ctypes.c_bool),
                ("buffer_from_host_ptr", ctypes.c_bool), ("events", ctypes.c_bool), ("mmap_support", ctypes.c_bool)]


class _Props(ctypes.Structure):  # struct ggml_backend_dev_props
    _fields_ = [("name", ctypes.c_char_p), ("description", ctypes.c_char_p), ("memory_free", ctypes.c_size_t),
                ("memory_total", ctypes.c_size_t), ("type", ctypes.c_int), ("device_id", ctypes.c_char_p),
                ("caps", _Caps)]


def _device(ggml, dev) -> Device:
    props = _Props()
    ggml.ggml_backend_dev_get_props(dev, ctypes.byref(props))
    reg = ggml.ggml_backend_dev_backend_reg(dev)
    return Device(
        name=(props.name or b"").decode("utf-8", "replace"),
        description=(props.description or b"").decode("utf-8", "replace"),
        kind=_DEVICE_KINDS.get(props.type, "unknown"),
        backend=ggml.ggml_backend_reg_name(reg).decode("utf-8", "replace") if reg else "",
        free_bytes=int(props.memory_free),
        total_bytes=int(props.memory_total),
        device_id=(props.device_id or b"").decode("utf-8", "replace"),
    )


def _gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def on_device(params: ModelParams | None, device: "Device | None") -> ModelParams | None:
    """``params`` bound to the one device the pair runs on (the CPU when ``device`` is None)."""
    if params is None:
        return None
    return dataclasses.replace(params, device=device.name if device else CPU_ONLY)


def device_notes(main: ModelParams, draft: ModelParams | None, device: "Device | None") -> tuple[str, ...]:
    """GPU layers asked for by number where no GPU is used: they stay in RAM, say so."""
    asked = [p for p in (main, draft) if p is not None and p.n_gpu_layers not in (0, AUTO)]
    if device is not None or not asked:
        return ()
    return ("GPU layers were asked for, but the models run on the CPU (no usable GPU, or device 'cpu' chosen)",)
