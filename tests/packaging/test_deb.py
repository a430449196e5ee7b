"""The .deb's control file depends on every system library Qt's xcb platform plugin loads, so an
installed Quickdraft never stops with "Could not load the Qt platform plugin xcb" (a fresh Debian 12
lacks libxcb-cursor0 and others). Checked against ldd of the plugin whenever this machine can run it."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BUILD_DEB = ROOT / "packaging" / "linux" / "build_deb.sh"
XCB_SONAME = re.compile(r"^lib(xcb|xkbcommon|X11)[-.\w]*\.so\.\d+$")
# What a fresh Debian 12 lacked when the window would not open (issue 12).
NAMED_IN_THE_ISSUE = ["libxcb-cursor0", "libxcb-icccm4", "libxcb-image0", "libxcb-keysyms1", "libxcb-randr0",
                      "libxcb-render-util0", "libxcb-shape0", "libxcb-xkb1", "libxkbcommon-x11-0"]

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def declared_libraries() -> dict[str, str]:
    """build_deb.sh's QT_XCB_LIBRARIES: soname -> Debian package."""
    text = BUILD_DEB.read_text(encoding="utf-8")
    value = re.search(r'^QT_XCB_LIBRARIES="([^"]*)"', text, re.M).group(1)
    pairs = [entry.split(":", 1) for entry in value.split()]
    return {soname: package for package, soname in pairs}


def control_depends(tmp_path: Path) -> list[str]:
    """The Depends of the control file build_deb.sh writes (its functions, sourced: no bundle needed)."""
    stage = tmp_path / "stage"
    stage.mkdir()
    subprocess.run(["bash", "-c", f'source "{BUILD_DEB}" && write_control "{stage}" 1.0 amd64 2.34'], check=True,
                   cwd=ROOT)
    control = (stage / "DEBIAN" / "control").read_text(encoding="utf-8")
    depends = re.search(r"^Depends: (.*)$", control, re.M).group(1)
    return [re.sub(r"\s*\(.*\)", "", d).strip() for d in depends.split(",")]


def xcb_plugin() -> Path:
    if not sys.platform.startswith("linux"):
        pytest.skip("the xcb platform plugin is Linux's")
    import PySide6

    plugin = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    if not plugin.is_file():
        pytest.skip("this PySide6 has no xcb platform plugin")
    return plugin


def linked_xcb_libraries(plugin: Path) -> dict[str, str | None]:
    """soname -> the file ldd resolved it to (None when this machine lacks it), for the X11/xcb
    libraries the plugin loads, directly or through Qt's own libraries."""
    if shutil.which("ldd") is None:
        pytest.skip("needs ldd")
    out = subprocess.run(["ldd", str(plugin)], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        match = re.match(r"\s*(\S+) => (not found|\S+)", line)
        if match and XCB_SONAME.match(match.group(1)):
            found[match.group(1)] = None if match.group(2) == "not found" else match.group(2)
    return found


def test_the_control_file_depends_on_every_declared_xcb_library(tmp_path):
    depends = control_depends(tmp_path)
    declared = declared_libraries()
    assert set(declared.values()) <= set(depends)
    assert set(NAMED_IN_THE_ISSUE) <= set(depends)
    assert len(depends) == len(set(depends)), "each package once"


def test_every_xcb_library_the_plugin_links_against_is_declared():
    linked = linked_xcb_libraries(xcb_plugin())
    assert {"libxcb.so.1", "libxcb-cursor.so.0", "libxkbcommon-x11.so.0"} <= set(linked), linked
    missing = sorted(set(linked) - set(declared_libraries()))
    assert not missing, f"add these to QT_XCB_LIBRARIES in packaging/linux/build_deb.sh: {missing}"


def test_declared_packages_are_the_ones_that_own_the_libraries():
    if shutil.which("dpkg") is None:
        pytest.skip("needs dpkg")
    declared = declared_libraries()
    checked = 0
    for soname, path in linked_xcb_libraries(xcb_plugin()).items():
        if path is None:
            continue
        owner = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True)
        if owner.returncode != 0:
            continue   # installed outside dpkg (a container image, a manual build)
        package = owner.stdout.split(":", 1)[0]
        assert declared[soname] == package, soname
        checked += 1
    if not checked:
        pytest.skip("no xcb library here belongs to a dpkg package")
