"""How a GGUF file is handed to llama.cpp: its llama_model_params (the device and the layers offloaded
to it, mapped or read into memory, the MTP layers, the load's progress callback) and the message for a
load llama.cpp refused."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from app.core.gguf.info import read_gguf_info
from app.core.llama.devices import DeviceList, free_bytes
from app.core.llama.library import lib
from app.core.llama.placement import plan_gpu_layers
from app.core.params import AUTO, ModelParams


class LoadProgress:
    """llama.cpp's load progress callback, asked as it reads each tensor: it returns false, which aborts
    the load, once ``cancelled`` says so; ``stopped`` says whether it did."""

    def __init__(self, cancelled: Callable[[], bool]):
        self.cancelled = cancelled
        self.stopped = False
        self.callback = lib().llama_progress_callback(self._progress)   # alive as long as this object

    def _progress(self, _progress: float, _data) -> bool:
        self.stopped = self.stopped or bool(self.cancelled())
        return not self.stopped


def model_params(params: ModelParams, device, progress: LoadProgress | None):
    """(llama_model_params, what must stay alive while llama.cpp loads with them: the device list). Only
    the chosen device (or none) is listed: left to itself llama.cpp spreads a model over every GPU it
    sees, and one card seen by two backends is not always told apart. ``progress``: None for llama.cpp's own."""
    mparams = lib().llama_model_default_params()
    mparams.n_gpu_layers = layers_to_offload(params, device)
    mparams.load_mode = load_mode(params)
    mparams.load_mtp = params.load_mtp   # MTP (nextn) layers: only when the model drafts for itself
    devices = DeviceList(device)
    mparams.devices = devices.pointer
    if progress is not None:
        mparams.progress_callback = progress.callback
    return mparams, devices


def load_mode(params: ModelParams) -> int:
    """Memory-map the file where the device can (llama.cpp's AUTO falls back to reading it for devices
    without mmap support), or read it into memory: ``--no-mmap``, for files on slow or network disks.
    llama.cpp replaced use_mmap with load_mode; the old field is gone from llama_model_params."""
    llama_cpp = lib()
    return llama_cpp.LLAMA_LOAD_MODE_AUTO if params.use_mmap else llama_cpp.LLAMA_LOAD_MODE_NONE


def layers_to_offload(params: ModelParams, device) -> int:
    layers = params.n_gpu_layers
    if device is None:
        return 0
    if layers == AUTO:  # one model on its own (the engine resolves a pair's layers together)
        layers = plan_gpu_layers(params, read_gguf_info(params.path), None, None, free_bytes(device)).main_layers
    return int(layers) if int(layers) >= 0 else 0x7FFFFFFF


def failure_message(path: str, log: str) -> str:
    name = Path(path).name
    lowered = log.lower()
    if "unknown model architecture" in lowered:
        arch = log.split("unknown model architecture:", 1)[-1].strip().split()[0].strip("'\"")
        return (f"{name} uses the architecture '{arch}', which this version of llama.cpp does not "
                f"know. Update Quickdraft or choose another model.")
    if "alloc" in lowered or "memory" in lowered:
        return f"Not enough memory to load {name}. Offload fewer layers to the GPU or choose a smaller model. ({log})"
    return f"llama.cpp could not load {name}." + (f" It said: {log}" if log else "")
