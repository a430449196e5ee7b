"""The status bar says what llama.cpp runs on and where the loaded pair's layers went."""

from __future__ import annotations

from app.core.devices import Device, SystemInfo
from app.core.params import AUTO
from app.gui.hardware_status import HardwareStatus
from app.gui.settings_panel import AUTO_LAYERS, SettingsPanel
from app.storage.settings import Settings


def test_status_bar_shows_the_backend_then_the_loaded_pairs_placement(loaded_window):
    text = loaded_window.hardware.full_text
    assert "CPU build: running on the CPU" in text
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
