"""Render ``resources/icons/specscope.svg`` to the PNG sizes desktops and PyInstaller need.

Uses Qt's own SVG renderer (QtSvg ships with PySide6-Essentials), so no extra tool is needed:

    QT_QPA_PLATFORM=offscreen .venv/bin/python packaging/render_icons.py
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ICON_SIZES = (16, 32, 48, 64, 128, 256)
ICONS_DIR = Path(__file__).resolve().parent.parent / "resources" / "icons"
SVG_NAME = "specscope.svg"


def png_name(size: int) -> str:
    return f"specscope-{size}.png"


def render(svg: Path, out_dir: Path, sizes: tuple[int, ...] = ICON_SIZES) -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise ValueError(f"not a valid SVG: {svg}")
    written = []
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        path = out_dir / png_name(size)
        if not image.save(str(path)):  # format from the .png suffix
            raise OSError(f"could not write {path}")
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--svg", type=Path, default=ICONS_DIR / SVG_NAME)
    parser.add_argument("--out", type=Path, default=ICONS_DIR)
    args = parser.parse_args(argv)
    if not args.svg.is_file():
        print(f"render_icons: no such SVG: {args.svg}", file=sys.stderr)
        return 2
    try:
        for path in render(args.svg, args.out):
            print(path)
    except (ValueError, OSError) as exc:
        print(f"render_icons: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
