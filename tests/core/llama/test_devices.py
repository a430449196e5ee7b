"""Which device the models go on: the one a user would pick, or the one named."""

from __future__ import annotations

import pytest

from app.core.errors import QuickdraftError
from app.core.llama.backends import BackendLoad, BackendModule
from app.core.llama.devices import CPU_ONLY, Device, SystemInfo, choose_device, preferred_gpu

GIB = 2**30
CPU = Device("CPU", "AMD EPYC", "CPU", "CPU", 20 * GIB, 24 * GIB)


def gpu(name: str, description: str, free_gib: float, kind: str = "GPU", backend: str | None = None,
        device_id: str = "") -> Device:
    return Device(name, description, kind, backend or name.rstrip("0123456789"), int(free_gib * GIB), 24 * GIB, device_id)


def system(*gpus: Device, load: BackendLoad | None = None) -> SystemInfo:
    backends = tuple(dict.fromkeys([d.backend for d in gpus] + ["CPU"]))
    return SystemInfo(backends, (*gpus, CPU), "AVX2 = 1", load or BackendLoad(True, ()))


def test_a_discrete_gpu_before_an_integrated_one_with_more_memory():
    igpu = gpu("Vulkan0", "Intel(R) Iris Xe Graphics", 30, kind="integrated GPU")
    dgpu = gpu("Vulkan1", "AMD Radeon RX 7900 XTX", 20)
    assert preferred_gpu((igpu, dgpu)) == dgpu


def test_real_hardware_before_a_software_renderer():
    lavapipe = gpu("Vulkan0", "llvmpipe (LLVM 15.0.6, 256 bits)", 60)
    igpu = gpu("Vulkan1", "AMD Radeon 780M", 4, kind="integrated GPU")
    assert preferred_gpu((lavapipe, igpu)) == igpu


def test_the_card_with_the_most_free_memory_then_the_vendors_backend_for_the_same_card():
    small, big = gpu("CUDA0", "RTX 3060", 11), gpu("CUDA1", "RTX 4090", 23)
    assert preferred_gpu((small, big)) == big
    same_card = (gpu("Vulkan0", "NVIDIA GeForce RTX 4090", 23, device_id="0000:01:00.0"),
                 gpu("CUDA0", "NVIDIA GeForce RTX 4090", 23, device_id="0000:01:00.0"))
    assert preferred_gpu(same_card).backend == "CUDA"
    assert preferred_gpu(()) is None


def test_auto_cpu_or_a_name_in_any_case():
    info = system(gpu("CUDA0", "RTX 4090", 23), gpu("Vulkan0", "RTX 4090", 23))
    assert choose_device("auto", info).name == "CUDA0"
    assert choose_device(CPU_ONLY, info) is None and choose_device("CPU", info) is None
    assert choose_device("vulkan0", info).name == "Vulkan0"
    assert choose_device("auto", system()) is None  # no GPU: the CPU


def test_a_device_that_is_not_here_is_refused_with_the_ones_that_are():
    with pytest.raises(QuickdraftError) as caught:
        choose_device("CUDA1", system(gpu("Vulkan0", "Radeon", 8)))
    assert "no GPU named 'CUDA1'" in str(caught.value) and "auto, cpu, Vulkan0" in str(caught.value)


def test_a_gpu_backend_that_did_not_load_is_the_problem_named():
    failed = BackendModule("cuda", None, "/x/libggml-cuda.so", False, "needs libcuda.so.1, which is not installed")
    load = BackendLoad(True, (BackendModule("cpu", "zen4", "/x/libggml-cpu-zen4.so", True), failed), ("zen4",))
    info = system(load=load)
    assert info.summary() == "CPU only (zen4 variant; cuda did not load)"
    assert "cuda: needs libcuda.so.1" in info.problem()
    details = info.details()
    assert "CPU variant: zen4 (of zen4)" in details and any(line.startswith("not loaded: cuda: needs") for line in details)


def test_the_status_line_names_the_gpu_the_models_go_on():
    info = system(gpu("Vulkan0", "Intel Arc A770", 15), gpu("Vulkan1", "Intel UHD 770", 30, kind="integrated GPU"))
    assert info.summary() == "Vulkan: Intel Arc A770 (15.0 GiB free) (+1 more)"


def test_the_model_manager_counts_the_memory_of_the_gpu_the_models_go_on_once(monkeypatch):
    from app.core.llama import devices
    from app.models import memory

    card = dict(free_gib=20, device_id="0000:01:00.0")
    twins = system(gpu("CUDA0", "NVIDIA GeForce RTX 4090", **card), gpu("Vulkan0", "NVIDIA GeForce RTX 4090", **card),
                   gpu("Vulkan1", "Intel UHD 770", 30, kind="integrated GPU"))
    monkeypatch.setattr(devices, "system_info", lambda: twins)
    memory.machine_memory.cache_clear()
    try:
        machine = memory.machine_memory()
        assert (machine.vram_total, machine.vram_free) == (24 * GIB, 20 * GIB)
        assert machine.gpu_name == "NVIDIA GeForce RTX 4090"
    finally:
        memory.machine_memory.cache_clear()
