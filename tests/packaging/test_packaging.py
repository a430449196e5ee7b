"""Packaging, checked fast: what the spec bundles, the icons, the desktop entry, the installer scripts,
the frozen entry point and the smoke self-test hook (in-process, on tiny models). No PyInstaller
build here: packaging/smoke_test.py does that against a real bundle."""

from __future__ import annotations

import ast
import configparser
import importlib.util
import json
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from app import __version__
from app.core.gguf.tiny import TinySpec, write_tiny_model
from app.gui import smoke
from app.paths import app_paths
from app.storage.settings import Settings, SettingsStore

ROOT = Path(__file__).resolve().parents[2]
PACKAGING = ROOT / "packaging"
ICONS = ROOT / "resources" / "icons"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
OFFSCREEN_NOISE = r"This plugin does not support propagateSizeHints\(\)"
SMOKE_SETTINGS = Settings(threads=1, n_ctx=2048, temperature=0.0, max_tokens=24, draft_max=4, draft_policy="fixed")


def load(name: str) -> ModuleType:
    """A module from packaging/ (not a package: its name would shadow the `packaging` library)."""
    module_name = f"quickdraft_packaging_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, PACKAGING / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def png_size(data: bytes) -> tuple[int, int]:
    assert data.startswith(PNG_SIGNATURE)
    return struct.unpack(">II", data[16:24])


# --- what the bundle holds ----------------------------------------------------------------------


def test_version_comes_from_the_one_version_source():
    cfg = load("bundle_config")
    assert cfg.version() == __version__
    assert cfg.version_tuple("1.2.3") == (1, 2, 3, 0)
    assert cfg.version_tuple("2.0") == (2, 0, 0, 0)


def test_the_spec_parses_and_uses_only_what_bundle_config_defines():
    source = (PACKAGING / "quickdraft.spec").read_text(encoding="utf-8")
    ast.parse(source)
    cfg = load("bundle_config")
    used = set(re.findall(r"\bcfg\.([A-Za-z_]+)", source))
    assert used and all(hasattr(cfg, name) for name in used), used - set(dir(cfg))
    assert "collect_submodules(\"app\")" in source   # app.gui loads the model manager with importlib
    assert "launcher.py" in source and (PACKAGING / "launcher.py").is_file()


def test_llama_cpp_libraries_are_bundled_once_each_where_its_loader_looks(tmp_path):
    cfg = load("bundle_config")
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libllama.so", "libllama.so.0", "libllama.so.0.5.0", "libggml.so", "libggml.so.0",
                 "libggml.so.0.25.3", "libggml-cpu.so.0", "libggml-cuda.so.0", "libmtmd.so", "libmtmd.so.0"):
        (lib / name).write_bytes(b"\x7fELF")
    bundled = {Path(src).name: dest for src, dest in cfg.llama_binaries(lib, platform="linux")}
    assert bundled == dict.fromkeys(["libggml-cpu.so.0", "libggml-cuda.so.0", "libggml.so.0", "libllama.so.0"],
                                    "llama_cpp/lib")
    assert cfg.llama_links(lib, platform="linux") == [("llama_cpp/lib/libllama.so", "libllama.so.0", "SYMLINK")]
    assert cfg.llama_links(lib, platform="win32") == []


def test_backend_modules_are_bundled_beside_the_library_that_loads_them(tmp_path):
    """A build with dynamic backends: one module per CPU variant and per GPU backend, never linked,
    so no SONAME copy; the linked libraries keep their SONAME copy only."""
    cfg = load("bundle_config")
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("libllama.so", "libllama.so.0", "libggml.so", "libggml.so.0", "libggml.so.0.25.3",
                 "libggml-base.so", "libggml-base.so.0", "libggml-cpu-haswell.so", "libggml-cpu-zen4.so",
                 "libggml-vulkan.so", "libggml-cuda.so"):
        (lib / name).write_bytes(b"\x7fELF")
    bundled = sorted(Path(src).name for src, _ in cfg.llama_binaries(lib, platform="linux"))
    assert bundled == ["libggml-base.so.0", "libggml-cpu-haswell.so", "libggml-cpu-zen4.so", "libggml-cuda.so",
                       "libggml-vulkan.so", "libggml.so.0", "libllama.so.0"]


@pytest.mark.parametrize("dest, kept", [
    ("libvulkan.so.1", False), ("llama_cpp/lib/libcuda.so.1", False), ("libnvidia-ml.so.1", False),
    ("vulkan-1.dll", False), ("nvcuda.dll", False),
    ("libcudart.so.12", True), ("libcublas.so.12", True), ("cudart64_12.dll", True), ("libggml-vulkan.so", True),
])
def test_gpu_driver_libraries_are_left_to_the_users_system(dest, kept):
    assert load("bundle_config").keep_binary(dest) is kept


def test_windows_libraries_are_the_dlls_without_the_multimodal_one(tmp_path):
    cfg = load("bundle_config")
    for name in ("llama.dll", "ggml.dll", "ggml-base.dll", "ggml-cpu.dll", "mtmd.dll", "llama.lib"):
        (tmp_path / name).write_bytes(b"MZ")
    names = sorted(Path(src).name for src, _ in cfg.llama_binaries(tmp_path, platform="win32"))
    assert names == ["ggml-base.dll", "ggml-cpu.dll", "ggml.dll", "llama.dll"]


def test_this_machines_llama_cpp_libraries_are_found():
    cfg = load("bundle_config")
    names = {Path(src).name for src, _ in cfg.llama_binaries()}
    assert any(name.startswith("libllama") or name.startswith("llama") for name in names)
    assert all(Path(src).is_file() for src, _ in cfg.llama_binaries())


def test_qt_modules_the_app_imports_are_not_excluded():
    cfg = load("bundle_config")
    imported = set()
    for path in (ROOT / "app").rglob("*.py"):
        imported |= set(re.findall(r"PySide6\.(Qt\w+)", path.read_text(encoding="utf-8")))
    assert {"QtCore", "QtGui", "QtWidgets", "QtCharts"} <= imported
    excluded = {name.removeprefix("PySide6.") for name in cfg.QT_EXCLUDES}
    assert not imported & excluded
    assert {"QtWebEngineCore", "Qt3DCore", "QtMultimedia", "QtQuick"} <= excluded
    assert "QtSvg" not in excluded


@pytest.mark.parametrize("dest, kept", [
    ("PySide6/Qt/plugins/platforms/libqxcb.so", True),
    ("PySide6/Qt/plugins/platforms/libqwayland.so", True),
    ("PySide6/Qt/plugins/platforms/libqoffscreen.so", True),
    ("PySide6/plugins/platforms/qwindows.dll", True),
    ("PySide6/Qt/lib/libQt6Charts.so.6", True),
    ("PySide6/Qt/plugins/platforms/libqeglfs.so", False),
    ("PySide6/Qt/plugins/generic/libqevdevmouseplugin.so", False),
    ("PySide6/Qt/plugins/platforminputcontexts/libqtvirtualkeyboardplugin.so", False),
    ("PySide6/plugins/platforminputcontexts/qtvirtualkeyboardplugin.dll", False),
    ("PySide6/Qt/lib/libQt6Quick.so.6", False),
    ("PySide6/Qt6Qml.dll", False),
    ("PySide6/Qt/lib/QtQml.framework/Versions/A/QtQml", False),
])
def test_unused_qt_plugins_and_their_libraries_are_dropped(dest, kept):
    assert load("bundle_config").keep_binary(dest) is kept


def test_qt_translations_are_dropped_and_resources_kept():
    cfg = load("bundle_config")
    assert not cfg.keep_data("PySide6/Qt/translations/qtbase_de.qm")
    assert not cfg.keep_data("PySide6\\translations\\qtbase_de.qm")
    assert cfg.keep_data("resources/icons/quickdraft.svg")
    assert [Path(src) for src, dest in cfg.datas()] == [ROOT / "resources"]


def test_icons_and_plist_for_each_platform():
    cfg = load("bundle_config")
    assert Path(cfg.icon_file("win32")).name == "quickdraft.ico" and Path(cfg.icon_file("win32")).is_file()
    assert Path(cfg.icon_file("darwin")).name == "quickdraft.icns" and Path(cfg.icon_file("darwin")).is_file()
    assert cfg.icon_file("linux") is None
    plist = cfg.mac_info_plist("1.2.3")
    assert plist["CFBundleIdentifier"] == cfg.BUNDLE_ID
    assert plist["CFBundleShortVersionString"] == "1.2.3"
    assert plist["CFBundleExecutable"] == cfg.GUI_EXECUTABLE
    assert cfg.wants_cli_executable("win32") and not cfg.wants_cli_executable("linux")


# --- the frozen entry point ---------------------------------------------------------------------


@pytest.mark.parametrize("executable, argv, cli", [
    ("/opt/quickdraft/quickdraft", [], False),
    ("/opt/quickdraft/quickdraft", ["--data-dir", "x"], False),
    ("/opt/quickdraft/quickdraft", ["--cli", "info", "m.gguf"], True),
    ("C:\\Program Files\\Quickdraft\\quickdraft-cli.exe", ["info", "m.gguf"], True),
    ("/opt/quickdraft/quickdraft", ["info", "--cli"], False),
])
def test_launcher_picks_the_gui_or_the_command_line(executable, argv, cli):
    launcher = load("launcher")
    assert launcher.wants_cli(executable, argv) is cli
    assert launcher.cli_arguments(["--cli", "info", "m.gguf"]) == ["info", "m.gguf"]


# --- icons --------------------------------------------------------------------------------------


def test_make_icons_writes_valid_png_ico_and_icns(qapp, tmp_path):
    make_icons = load("make_icons")  # renders with the test session's QApplication
    written = {path.name: path.read_bytes() for path in make_icons.make_icons(out=tmp_path)}
    for size in make_icons.PNG_SIZES:
        assert png_size(written[f"quickdraft-{size}.png"]) == (size, size)
    check_ico(written["quickdraft.ico"], make_icons.ICO_SIZES)
    check_icns(written["quickdraft.icns"], make_icons.ICNS_TYPES)


def check_ico(data: bytes, sizes: tuple[int, ...]) -> None:
    reserved, kind, count = struct.unpack("<HHH", data[:6])
    assert (reserved, kind, count) == (0, 1, len(sizes))
    for i, size in enumerate(sorted(sizes)):
        width, height, _, _, planes, bits, length, offset = struct.unpack("<BBBBHHII", data[6 + 16 * i:22 + 16 * i])
        assert (width or 256, height or 256, planes, bits) == (size, size, 1, 32)
        assert png_size(data[offset:offset + length]) == (size, size)


def check_icns(data: bytes, types: tuple[tuple[bytes, int], ...]) -> None:
    assert data[:4] == b"icns" and struct.unpack(">I", data[4:8])[0] == len(data)
    position, seen = 8, []
    while position < len(data):
        kind, length = data[position:position + 4], struct.unpack(">I", data[position + 4:position + 8])[0]
        seen.append((kind, png_size(data[position + 8:position + length])[0]))
        position += length
    assert seen == list(types)


def test_the_committed_icons_exist_and_are_valid():
    make_icons = load("make_icons")
    assert (ICONS / "quickdraft.svg").read_text(encoding="utf-8").lstrip().startswith("<?xml")
    for size in make_icons.PNG_SIZES:
        assert png_size((ICONS / f"quickdraft-{size}.png").read_bytes()) == (size, size)
    check_ico((ICONS / "quickdraft.ico").read_bytes(), make_icons.ICO_SIZES)
    check_icns((ICONS / "quickdraft.icns").read_bytes(), make_icons.ICNS_TYPES)


# --- the desktop entry and the installer scripts ------------------------------------------------


def test_desktop_entry_has_the_required_keys():
    parser = configparser.ConfigParser(interpolation=None)
    parser.optionxform = str  # keys are case-sensitive
    parser.read(ROOT / "resources" / "quickdraft.desktop", encoding="utf-8")
    entry = parser["Desktop Entry"]
    assert entry["Type"] == "Application"
    assert entry["Name"] == "Quickdraft"
    assert entry["Exec"].split()[0] == "quickdraft"
    assert entry["Icon"] == "quickdraft"
    assert entry["Terminal"] == "false"
    assert {"Development", "Utility"} <= set(filter(None, entry["Categories"].split(";")))
    assert entry["Categories"].endswith(";")


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@pytest.mark.parametrize("script", ["linux/build_deb.sh", "macos/build_dmg.sh"])
def test_shell_scripts_parse(script):
    subprocess.run(["bash", "-n", str(PACKAGING / script)], check=True)


def test_inno_setup_script_takes_its_version_from_a_define():
    iss = (PACKAGING / "windows" / "quickdraft.iss").read_text(encoding="utf-8")
    assert "#ifndef AppVersion" in iss and "AppVersion={#AppVersion}" in iss
    assert __version__ not in iss.replace("/DAppVersion=0.1.0", "")   # no hard-coded version
    assert re.search(r"^Name: \"\{group\}\\\{#AppName\}\"; Filename: \"\{app\}\\\{#AppExe\}\"", iss, re.M)
    assert "{uninstallexe}" in iss
    assert "SetupIconFile=..\\..\\resources\\icons\\quickdraft.ico" in iss


# --- the smoke self-test hook, in-process -------------------------------------------------------


def test_no_smoke_without_the_environment_variable():
    assert smoke.config_from_env({}) is None
    config = smoke.config_from_env({smoke.SMOKE_ENV: "out/report.json", smoke.MAIN_ENV: "m.gguf",
                                    smoke.T0_ENV: "12.5", smoke.TIMEOUT_ENV: "30"})
    assert config.main == "m.gguf" and config.draft is None and config.launched_at == 12.5
    assert config.timeout_s == 30 and config.screenshot.name == "report.png"


def test_check_shown_names_what_is_missing():
    finished = {"answer": "hi", "footer": "12 tok/s", "stats": {"tps_message": "12.0", "drafted": "8"},
                "draft": "d.gguf", "error": ""}
    assert smoke.check_shown(finished) == []
    empty = {"answer": " ", "footer": "", "stats": {"tps_message": smoke.NO_VALUE, "drafted": "0"},
             "draft": "d.gguf", "error": "boom"}
    assert len(smoke.check_shown(empty)) == 5


@pytest.fixture
def smoke_window(qtbot, tmp_path):
    from app.gui.main_window import MainWindow

    paths = app_paths(tmp_path / "data")
    SettingsStore(paths.settings_file).save(SMOKE_SETTINGS)
    window = MainWindow(paths, SettingsStore(paths.settings_file))
    qtbot.addWidget(window)
    window.show()
    return window


@pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)
def test_smoke_hook_chats_through_the_window_and_reports_it(smoke_window, qtbot, tmp_path):
    main = write_tiny_model(tmp_path / "main.gguf", TinySpec(seed=0))
    draft = write_tiny_model(tmp_path / "draft.gguf", TinySpec(seed=0))
    out = tmp_path / "smoke" / "report.json"
    codes: list[int] = []
    env = {smoke.SMOKE_ENV: str(out), smoke.MAIN_ENV: str(main), smoke.DRAFT_ENV: str(draft)}
    assert smoke.maybe_start_smoke(smoke_window, env=env, on_exit=codes.append)
    qtbot.waitUntil(lambda: bool(codes), timeout=60_000)
    report = json.loads(out.read_text(encoding="utf-8"))
    assert codes == [0] and report["ok"] and report["problems"] == []
    assert report["answer"].strip() and report["footer"]
    assert int(report["stats"]["accepted"]) > 0
    assert report["window_visible"] and report["messages_shown"] == 2
    assert out.with_suffix(".png").read_bytes().startswith(PNG_SIGNATURE)


@pytest.mark.qt_log_ignore(OFFSCREEN_NOISE)
def test_smoke_hook_reports_a_model_that_cannot_load(smoke_window, qtbot, tmp_path):
    out = tmp_path / "report.json"
    codes: list[int] = []
    env = {smoke.SMOKE_ENV: str(out), smoke.MAIN_ENV: str(tmp_path / "missing.gguf")}
    assert smoke.maybe_start_smoke(smoke_window, env=env, on_exit=codes.append)
    qtbot.waitUntil(lambda: bool(codes), timeout=30_000)
    report = json.loads(out.read_text(encoding="utf-8"))
    assert codes == [1] and not report["ok"]
    assert "missing.gguf" in " ".join(report["problems"])
