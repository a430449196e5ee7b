"""Rasterize resources/icons/quickdraft.svg into the PNG, ICO and ICNS files the installers use.

    python packaging/make_icons.py [--out DIR]

Writes quickdraft-{16..512}.png, quickdraft.ico (Windows: PNG entries 16..256) and quickdraft.icns
(macOS: PNG entries 16..1024) next to the SVG, or into DIR. Rendering uses PySide6's QSvgRenderer on
the offscreen platform; the two container formats are written here with struct (both are a small
header, a table and PNG payloads), so nothing beyond PySide6 is needed.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ICONS_DIR = ROOT / "resources" / "icons"
SVG = ICONS_DIR / "quickdraft.svg"
NAME = "quickdraft"
PNG_SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ICO_SIZES = (16, 24, 32, 48, 64, 128, 256)
# ICNS element types holding PNG data, and the pixel size each one holds
ICNS_TYPES = (
    (b"icp4", 16), (b"icp5", 32), (b"icp6", 64), (b"ic07", 128), (b"ic08", 256), (b"ic09", 512),
    (b"ic10", 1024), (b"ic11", 32), (b"ic12", 64), (b"ic13", 256), (b"ic14", 512),
)
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def render_png(svg: Path, size: int) -> bytes:
    """The SVG drawn into a size x size transparent image, as PNG bytes."""
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt
    from PySide6.QtGui import QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"{svg} is not a valid SVG")
    image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
    renderer.render(painter)
    painter.end()
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    if not image.save(buffer, "PNG"):
        raise OSError(f"could not encode a {size}px PNG")
    buffer.close()
    return bytes(data.data())


def ico_bytes(pngs: dict[int, bytes]) -> bytes:
    """An ICO file: ICONDIR, one ICONDIRENTRY per size, then the PNG payloads (Windows Vista+)."""
    sizes = sorted(pngs)
    header = struct.pack("<HHH", 0, 1, len(sizes))
    offset = len(header) + 16 * len(sizes)
    entries, payloads = [], []
    for size in sizes:
        data = pngs[size]
        side = 0 if size >= 256 else size  # 0 means 256 in the one-byte width and height fields
        entries.append(struct.pack("<BBBBHHII", side, side, 0, 0, 1, 32, len(data), offset))
        payloads.append(data)
        offset += len(data)
    return header + b"".join(entries) + b"".join(payloads)


def icns_bytes(pngs: dict[int, bytes]) -> bytes:
    """An ICNS file: 'icns' + total length, then (type, length, PNG) elements, all big-endian."""
    elements = b"".join(kind + struct.pack(">I", 8 + len(pngs[size])) + pngs[size] for kind, size in ICNS_TYPES)
    return b"icns" + struct.pack(">I", 8 + len(elements)) + elements


def ensure_gui_application():
    """QPainter needs a QGuiApplication; the offscreen platform needs no display."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtGui import QGuiApplication

    return QGuiApplication.instance() or QGuiApplication(sys.argv[:1])


def make_icons(svg: Path = SVG, out: Path = ICONS_DIR) -> list[Path]:
    """Write every PNG size, the ICO and the ICNS; returns the paths written."""
    app = ensure_gui_application()  # noqa: F841 -- kept alive while rendering
    out.mkdir(parents=True, exist_ok=True)
    needed = set(PNG_SIZES) | set(ICO_SIZES) | {size for _kind, size in ICNS_TYPES}
    pngs = {size: render_png(svg, size) for size in sorted(needed)}
    written = []
    for size in PNG_SIZES:
        written.append(_write(out / f"{NAME}-{size}.png", pngs[size]))
    written.append(_write(out / f"{NAME}.ico", ico_bytes({s: pngs[s] for s in ICO_SIZES})))
    written.append(_write(out / f"{NAME}.icns", icns_bytes(pngs)))
    return written


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--svg", type=Path, default=SVG, help="the source SVG")
    parser.add_argument("--out", type=Path, default=ICONS_DIR, help="where to write the icons")
    args = parser.parse_args(argv)
    for path in make_icons(args.svg, args.out):
        print(f"{path} ({path.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
