"""What goes into the frozen bundle: read by quickdraft.spec and by the packaging tests.

Plain Python with no PyInstaller import, so the tests can check every rule without a build.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
APP_NAME = "Quickdraft"
GUI_EXECUTABLE = "quickdraft"
CLI_EXECUTABLE = "quickdraft-cli"
BUNDLE_DIR = "quickdraft"                 # dist/quickdraft/ (one-folder build)
BUNDLE_ID = "org.quickdraft.Quickdraft"   # macOS CFBundleIdentifier
ICONS_DIR = ROOT / "resources" / "icons"
LLAMA_LIB_DEST = "llama_cpp/lib"          # where llama_cpp's ctypes loader looks, relative to the bundle

# Qt modules Quickdraft never imports. PyInstaller only collects what is imported, but listing them
# keeps a stray import (a hook, an optional dependency) from pulling hundreds of megabytes in.
# Kept: QtCore, QtGui, QtWidgets, QtCharts (the charts), QtSvg (the icon), QtOpenGL/QtOpenGLWidgets and
# QtNetwork (QtCharts and QtGui link them).
QT_EXCLUDES = [
    f"PySide6.{name}" for name in (
        "Qt3DAnimation", "Qt3DCore", "Qt3DExtras", "Qt3DInput", "Qt3DLogic", "Qt3DRender",
        "QtBluetooth", "QtCanvasPainter", "QtConcurrent", "QtDataVisualization", "QtDBus", "QtDesigner",
        "QtGraphs", "QtGraphsWidgets", "QtHelp", "QtHttpServer", "QtLabsStyleKit", "QtLocation", "QtMultimedia",
        "QtMultimediaWidgets", "QtNetworkAuth", "QtNfc", "QtPdf", "QtPdfWidgets", "QtPositioning",
        "QtPrintSupport", "QtQml", "QtQmlFeatures", "QtQuick", "QtQuick3D", "QtQuickControls2", "QtQuickTest", "QtQuickWidgets",
        "QtRemoteObjects", "QtScxml", "QtSensors", "QtSerialBus", "QtSerialPort", "QtSpatialAudio",
        "QtSql", "QtStateMachine", "QtTest", "QtTextToSpeech", "QtUiTools", "QtWebChannel",
        "QtWebEngineCore", "QtWebEngineQuick", "QtWebEngineWidgets", "QtWebSockets", "QtWebView",
        "QtXml", "QtAxContainer",
    )
]
# Python packages the app does not need at run time (test and build tools, llama_cpp's HTTP server).
PYTHON_EXCLUDES = ["tkinter", "pytest", "pytestqt", "_pytest", "PyInstaller", "setuptools", "pip",
                   "llama_cpp.server", "IPython", "matplotlib"]
# Qt translations other than Qt's own base strings: Quickdraft's interface is English.
KEEP_TRANSLATION_PREFIXES = ("qtbase_",)


def version(init_file: Path = ROOT / "app" / "__init__.py") -> str:
    """__version__ from app/__init__.py, read without importing the app."""
    tree = ast.parse(init_file.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__version__" for t in node.targets):
            return str(ast.literal_eval(node.value))
    raise ValueError(f"no __version__ in {init_file}")


def version_tuple(text: str) -> tuple[int, int, int, int]:
    """'1.2.3' -> (1, 2, 3, 0): the numeric form Windows version resources want."""
    numbers = [int(n) for n in re.findall(r"\d+", text)[:4]]
    return tuple(numbers + [0] * (4 - len(numbers)))  # type: ignore[return-value]


def llama_lib_dir() -> Path:
    spec = importlib.util.find_spec("llama_cpp")
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError("llama_cpp (llama-cpp-python) is not installed in this Python")
    return Path(spec.origin).parent / "lib"


def llama_binaries(lib_dir: Path | None = None, platform: str = sys.platform) -> list[tuple[str, str]]:
    """(source, destination) pairs for llama.cpp's shared libraries and ggml backends.

    On Linux a wheel holds three copies of each library (libx.so, libx.so.0, libx.so.0.1.2); the
    bundle needs the name llama_cpp's ctypes loader opens (libllama.so, libmtmd.so) and the SONAME
    the dynamic linker resolves (libggml.so.0 ...), not the fully versioned copy."""
    lib_dir = lib_dir or llama_lib_dir()
    files = sorted(p for p in lib_dir.iterdir() if p.is_file() and _is_library(p.name, platform))
    if platform.startswith("linux"):
        files = [p for p in files if _linux_name_needed(p.name)]
    if not files:
        raise FileNotFoundError(f"no llama.cpp libraries in {lib_dir}")
    return [(str(p), LLAMA_LIB_DEST) for p in files]


def _is_library(name: str, platform: str) -> bool:
    if platform == "win32":
        return name.lower().endswith(".dll")
    if platform == "darwin":
        return name.endswith((".dylib", ".so"))
    return ".so" in name


def _linux_name_needed(name: str) -> bool:
    loaded_by_ctypes = re.fullmatch(r"lib(llama|mtmd|llava)\.so", name) is not None
    soname = re.fullmatch(r"lib[\w-]+\.so\.\d+", name) is not None
    return loaded_by_ctypes or soname


def datas(root: Path = ROOT) -> list[tuple[str, str]]:
    """(source, destination) pairs for the data files: everything under resources/."""
    resources = root / "resources"
    return [(str(resources), "resources")]


def icon_file(platform: str = sys.platform) -> str:
    suffix = {"win32": ".ico", "darwin": ".icns"}.get(platform, "-256.png")
    return str(ICONS_DIR / f"quickdraft{suffix}")


def keep_data(dest: str) -> bool:
    """False for collected data the app never uses (foreign-language Qt translations)."""
    parts = Path(dest).parts
    if "translations" in parts and "PySide6" in parts:
        return Path(dest).name.startswith(KEEP_TRANSLATION_PREFIXES)
    return True


def mac_info_plist(app_version: str) -> dict:
    """Info.plist keys for the macOS .app, beyond those PyInstaller writes itself."""
    return {
        "CFBundleName": APP_NAME,
        "CFBundleDisplayName": APP_NAME,
        "CFBundleIdentifier": BUNDLE_ID,
        "CFBundleShortVersionString": app_version,
        "CFBundleVersion": app_version,
        "CFBundleExecutable": GUI_EXECUTABLE,
        "CFBundleIconFile": "quickdraft.icns",
        "CFBundlePackageType": "APPL",
        "LSApplicationCategoryType": "public.app-category.developer-tools",
        "LSMinimumSystemVersion": "11.0",
        "NSHighResolutionCapable": True,
        "NSRequiresAquaSystemAppearance": False,
        "NSHumanReadableCopyright": "Copyright © the Quickdraft authors. MIT License.",
    }
