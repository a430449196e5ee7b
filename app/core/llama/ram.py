"""This machine's RAM, on Linux, macOS and Windows: the engine refuses a pair that cannot fit, and the
model manager judges what fits, with the same numbers."""

from __future__ import annotations

import os
import subprocess
import sys


def total_memory_bytes() -> int | None:
    """Physical memory in bytes, or None when this system does not say."""
    return ram()[0]


def ram() -> tuple[int | None, int | None]:
    """(total, available now) in bytes; either is None when unknown."""
    meminfo = _proc_meminfo()
    if meminfo:
        return meminfo.get("MemTotal"), meminfo.get("MemAvailable")
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"), None
    except (AttributeError, ValueError, OSError):  # Windows has no os.sysconf
        pass
    if sys.platform == "darwin":
        return _sysctl_memsize(), None
    if sys.platform == "win32":
        return _windows_ram()
    return None, None


def _proc_meminfo() -> dict[str, int]:
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            lines = f.read().splitlines()
    except OSError:
        return {}
    out = {}
    for line in lines:
        key, _, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            out[key] = int(fields[0]) * (1024 if fields[1:] == ["kB"] else 1)
    return out


def _sysctl_memsize() -> int | None:
    try:
        out = subprocess.run(["sysctl", "-n", "hw.memsize"], capture_output=True, text=True, timeout=5)
        return int(out.stdout.strip())
    except (OSError, ValueError, subprocess.SubprocessError):
        return None


def _windows_ram() -> tuple[int | None, int | None]:
    import ctypes

    class MemoryStatus(ctypes.Structure):
        _fields_ = [("dwLength", ctypes.c_ulong), ("dwMemoryLoad", ctypes.c_ulong),
                    ("ullTotalPhys", ctypes.c_ulonglong), ("ullAvailPhys", ctypes.c_ulonglong),
                    ("ullTotalPageFile", ctypes.c_ulonglong), ("ullAvailPageFile", ctypes.c_ulonglong),
                    ("ullTotalVirtual", ctypes.c_ulonglong), ("ullAvailVirtual", ctypes.c_ulonglong),
                    ("ullAvailExtendedVirtual", ctypes.c_ulonglong)]

    status = MemoryStatus()
    status.dwLength = ctypes.sizeof(MemoryStatus)
    if not ctypes.windll.kernel32.GlobalMemoryStatusEx(ctypes.byref(status)):  # type: ignore[attr-defined]
        return None, None
    return int(status.ullTotalPhys), int(status.ullAvailPhys)
