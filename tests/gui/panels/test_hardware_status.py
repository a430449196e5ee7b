"""The status bar says what llama.cpp runs on and where the loaded pair's layers went."""

from __future__ import annotations

from app.core.llama.devices import Device, SystemInfo, system_info
from app.core.params import AUTO
from app.gui.panels.hardware_status import HardwareStatus
from app.gui.panels.settings_panel import AUTO_LAYERS, SettingsPanel
from app.storage.settings import Settings


def test_status_bar_shows_the_backend_then_the_loaded_pairs_placement(loaded_window):
    text = loaded_window.hardware.full_text
    load = system_info().load
    assert text.startswith(f"CPU only ({load.cpu_variant} variant)" if load.dynamic else "CPU build: running on the CPU")
    assert "main: all layers on the CPU" in text and "draft: all layers on the CPU" in text
    assert "backends: CPU" in loaded_window.hardware.toolTip()
    assert "main: all layers on the CPU" in loaded_window.hardware.toolTip()


def gpu_system(free_gib: float, gpus: int = 1) -> SystemInfo:
    devices = [Device("Vulkan0", "<b>llvmpipe</b>", "GPU", "Vulkan", int(free_gib * 2**30), 8 * 2**30)][:gpus]
    devices.append(Device("CPU", "AMD EPYC", "CPU", "CPU", 0, 0))
    return SystemInfo(("Vulkan", "CPU"), tuple(devices), "AVX2 = 1")


def test_a_gpu_is_named_with_its_free_memory_as_plain_text(qtbot):
    status = HardwareStatus()
    qtbot.addWidget(status)
    status.resize(900, 20)
    status.show_system(gpu_system(6.5))
    assert status.full_text == "Vulkan: <b>llvmpipe</b> (6.5 GiB free)"
    assert status.text() == status.full_text  # plain text: markup from a driver is shown, not rendered
    assert "&lt;b&gt;llvmpipe&lt;/b&gt;" in status.toolTip()  # and in the tooltip, escaped


def test_a_gpu_build_without_a_usable_device_says_so(qtbot):
    status = HardwareStatus()
    qtbot.addWidget(status)
    status.show_system(gpu_system(0, gpus=0))
    assert "no usable GPU found: running on the CPU" in status.full_text
    assert "found no usable GPU" in status.toolTip()


def test_a_long_status_is_elided_to_the_window(qtbot):
    status = HardwareStatus()
    qtbot.addWidget(status)
    status.resize(200, 20)
    status.show_placement(("main: " + "x" * 300,))
    assert status.text().endswith("…") and len(status.text()) < 100


def test_gpu_layer_settings_default_to_auto_and_edit_as_numbers(qtbot):
    panel = SettingsPanel(Settings())
    qtbot.addWidget(panel)
    editor = panel.editors["main_gpu_layers"]
    assert editor.value() == AUTO_LAYERS and editor.text() == "auto"
    seen = []
    panel.changed.connect(seen.append)
    editor.setValue(-1)
    editor.setValue(12)
    editor.setValue(AUTO_LAYERS)
    assert [s.main_gpu_layers for s in seen] == [-1, 12, AUTO]


def test_the_device_setting_offers_auto_the_cpu_and_each_gpu(qtbot):
    gpus = (Device("Vulkan0", "Intel UHD 770", "integrated GPU", "Vulkan", 2**30, 2**31),
            Device("Vulkan1", "Radeon RX 7600", "GPU", "Vulkan", 2**33, 2**33))
    panel = SettingsPanel(Settings(), gpus=gpus)
    qtbot.addWidget(panel)
    items = [panel.device.itemText(i) for i in range(panel.device.count())]
    assert items == ["auto (Vulkan1: Radeon RX 7600)", "CPU only", "Vulkan0: Intel UHD 770", "Vulkan1: Radeon RX 7600"]
    seen = []
    panel.changed.connect(seen.append)
    panel.device.setCurrentIndex(2)
    assert seen[-1].device == "Vulkan0" and seen[-1].main_params("m.gguf").device == "Vulkan0"


def test_a_saved_device_that_is_gone_is_shown_as_such_not_replaced(qtbot):
    panel = SettingsPanel(Settings(device="CUDA1"), gpus=())
    qtbot.addWidget(panel)
    assert panel.device.currentText() == "CUDA1 (not found)" and panel.device.itemText(0) == "auto (no GPU found: CPU)"
