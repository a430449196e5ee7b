"""What goes into the frozen bundle: read by quickdraft.spec and by the packaging tests.

Plain Python with no PyInstaller import, so the tests can check every rule without a build.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
APP_NAME = "Quickdraft"
GUI_EXECUTABLE = "quickdraft"
CLI_EXECUTABLE = "quickdraft-cli"         # a console twin, on Windows only: elsewhere `quickdraft --cli`
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
        "Qt3DAnimation", "Qt3DCore", "Qt3DExtras", "Qt3DInput", "Qt3DLogic", "Qt3DRender", "QtAxContainer",
        "QtBluetooth", "QtCanvasPainter", "QtConcurrent", "QtDataVisualization", "QtDBus", "QtDesigner",
        "QtGraphs", "QtGraphsWidgets", "QtHelp", "QtHttpServer", "QtLabsStyleKit", "QtLocation",
        "QtMultimedia", "QtMultimediaWidgets", "QtNetworkAuth", "QtNfc", "QtPdf", "QtPdfWidgets",
        "QtPositioning", "QtPrintSupport", "QtQml", "QtQmlFeatures", "QtQuick", "QtQuick3D",
        "QtQuickControls2", "QtQuickTest", "QtQuickWidgets", "QtRemoteObjects", "QtScxml", "QtSensors",
        "QtSerialBus", "QtSerialPort", "QtSpatialAudio", "QtSql", "QtStateMachine", "QtTest",
        "QtTextToSpeech", "QtUiTools", "QtWebChannel", "QtWebEngineCore", "QtWebEngineQuick",
        "QtWebEngineWidgets", "QtWebSockets", "QtWebView", "QtXml",
    )
]
# Python packages the app does not need at run time (test and build tools, llama_cpp's HTTP server).
PYTHON_EXCLUDES = ["tkinter", "pytest", "pytestqt", "_pytest", "PyInstaller", "setuptools", "pip",
                   "llama_cpp.server", "llama_cpp.mtmd_cpp", "llama_cpp.llava_cpp", "IPython", "matplotlib"]
UNUSED_QT_PLUGIN = re.compile(
    r"/plugins/(egldeviceintegrations|generic|networkinformation)/"
    r"|/plugins/platforminputcontexts/(lib)?qtvirtualkeyboardplugin"
    r"|/plugins/platforms/(lib)?q(eglfs|minimalegl|linuxfb|vnc|vkkhrdisplay|minimal)\.")
SONAME = re.compile(r"lib[\w-]+\.so\.\d+")   # libggml.so.0: what the dynamic linker opens
UNUSED_QT_LIBRARY = re.compile(r"Qt6?(Qml|Quick|VirtualKeyboard|EglFS|EglFs)")
# the GPU driver's side of each backend: the Vulkan loader, the CUDA driver API, NVIDIA's driver libraries
DRIVER_LIBRARY = re.compile(r"(^|/)(libvulkan\.so|libcuda\.so|libnvidia-|vulkan-1\.dll$|nvcuda\.dll$)", re.I)


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
    """(source, destination folder) pairs for llama.cpp's shared library, ggml and its backend modules.

    Leaves out libmtmd (multimodal, which Quickdraft never loads). On Linux a wheel holds three
    copies of each linked library (libx.so, libx.so.0, libx.so.0.1.2); only the SONAME copy, the name
    the dynamic linker resolves, is bundled, and llama_links() adds the name the ctypes loader opens.
    Backend modules (libggml-cpu-haswell.so, libggml-vulkan.so: loaded at run time by their path,
    never linked) have no versioned copy and are bundled as they are."""
    lib_dir = lib_dir or llama_lib_dir()
    files = sorted(p for p in lib_dir.iterdir() if p.is_file() and _is_library(p.name, platform)
                   and not _is_unused(p.name))
    if platform.startswith("linux"):
        names = {p.name for p in files}
        files = [p for p in files if SONAME.fullmatch(p.name) or _is_module(p.name, names)]
    if not any("llama" in p.name for p in files):
        raise FileNotFoundError(f"no llama.cpp library in {lib_dir}")
    return [(str(p), LLAMA_LIB_DEST) for p in files]


def _is_module(name: str, names: set[str]) -> bool:
    """A backend module: libggml-<backend>[-<variant>].so with no SONAME copy beside it."""
    return (name.startswith("libggml-") and name.endswith(".so")
            and not any(SONAME.fullmatch(n) and n.startswith(name + ".") for n in names))


def llama_links(lib_dir: Path | None = None, platform: str = sys.platform) -> list[tuple[str, str, str]]:
    """PyInstaller SYMLINK entries: on Linux llama_cpp opens lib/libllama.so, a link to its SONAME copy."""
    if not platform.startswith("linux"):
        return []
    lib_dir = lib_dir or llama_lib_dir()
    sonames = sorted(p.name for p in lib_dir.glob("libllama.so.*") if SONAME.fullmatch(p.name))
    if not sonames:
        raise FileNotFoundError(f"no libllama.so.N in {lib_dir}")
    return [(f"{LLAMA_LIB_DEST}/libllama.so", sonames[0], "SYMLINK")]


def _is_library(name: str, platform: str) -> bool:
    if platform == "win32":
        return name.lower().endswith(".dll")
    if platform == "darwin":
        return name.endswith((".dylib", ".so"))
    return ".so" in name


def _is_unused(name: str) -> bool:
    return re.match(r"(lib)?(mtmd|llava)\b", name) is not None


def datas(root: Path = ROOT) -> list[tuple[str, str]]:
    """(source, destination) pairs for the data files: everything under resources/."""
    resources = root / "resources"
    return [(str(resources), "resources")]


def wants_cli_executable(platform: str = sys.platform) -> bool:
    """Windows needs a second, console-subsystem executable for the command line (the desktop one
    has no console). Elsewhere `quickdraft --cli` prints to the terminal; a second executable would
    only carry a second copy of the ~10 MB Python archive PyInstaller appends to each one."""
    return platform == "win32"


def icon_file(platform: str = sys.platform) -> str | None:
    """The executables' icon; Linux executables carry none (the .desktop file names it)."""
    suffix = {"win32": ".ico", "darwin": ".icns"}.get(platform)
    return str(ICONS_DIR / f"quickdraft{suffix}") if suffix else None


def keep_data(dest: str) -> bool:
    """False for collected data the app never uses: Qt's translations (the app installs no
    QTranslator, its interface is English)."""
    parts = PurePosixPath(dest.replace("\\", "/")).parts
    return not ("PySide6" in parts and "translations" in parts)


def keep_binary(dest: str) -> bool:
    """False for Qt plugins for other kinds of devices (embedded EGL, framebuffers, VNC, evdev
    input, the QML virtual keyboard) and the QML/Quick libraries only those plugins load; and for the
    GPU drivers' own libraries, which the backend modules link but must come from the user's system
    (a bundled Vulkan loader or libcuda would not match the installed driver)."""
    path = dest.replace("\\", "/")
    return not (UNUSED_QT_PLUGIN.search(path) or UNUSED_QT_LIBRARY.search(path) or DRIVER_LIBRARY.search(path))


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
