"""This machine's RAM on every OS: the branches other systems take, by monkeypatching."""

from __future__ import annotations

import ctypes
import os
import types

import pytest

from app.core.engine import Engine
from app.core.errors import ModelLoadError
from app.core.llama import devices
from app.core.llama import ram
from app.core.params import ModelParams
from app.models.memory import machine_memory


def pretend_windows(monkeypatch, total: int, available: int) -> None:
    """No /proc/meminfo, no os.sysconf, and kernel32's GlobalMemoryStatusEx filling in the numbers."""
    def global_memory_status_ex(ref) -> int:
        ref._obj.ullTotalPhys, ref._obj.ullAvailPhys = total, available
        return 1

    monkeypatch.setattr(ram, "_proc_meminfo", dict)
    monkeypatch.delattr(os, "sysconf")
    monkeypatch.setattr(ram.sys, "platform", "win32")
    kernel32 = types.SimpleNamespace(GlobalMemoryStatusEx=global_memory_status_ex)
    monkeypatch.setattr(ctypes, "windll", types.SimpleNamespace(kernel32=kernel32), raising=False)


def test_windows_ram_comes_from_global_memory_status(monkeypatch):
    pretend_windows(monkeypatch, total=16 << 30, available=9 << 30)
    assert ram.total_memory_bytes() == 16 << 30
    assert ram.ram() == (16 << 30, 9 << 30)


def test_the_engine_refuses_a_pair_too_large_for_a_windows_machine(tiny_models, monkeypatch):
    devices.system_info()  # llama.cpp's libraries are loaded before sys.platform says win32
    pretend_windows(monkeypatch, total=100_000, available=50_000)
    with pytest.raises(ModelLoadError, match="needs about .* this machine has"):
        Engine.load(ModelParams(str(tiny_models.main)))


def test_the_model_manager_and_the_engine_count_the_same_ram(monkeypatch):
    pretend_windows(monkeypatch, total=32 << 30, available=20 << 30)
    machine_memory.cache_clear()
    try:
        assert (machine_memory().ram_total, machine_memory().ram_available) == (32 << 30, 20 << 30)
    finally:
        machine_memory.cache_clear()


def test_unknown_when_the_system_says_nothing(monkeypatch):
    monkeypatch.setattr(ram, "_proc_meminfo", dict)
    monkeypatch.delattr(os, "sysconf")
    monkeypatch.setattr(ram.sys, "platform", "plan9")
    assert ram.total_memory_bytes() is None
