"""The area under a curve, down to y = 0, drawn as one line per pixel column.

pyqtgraph fills a curve's area as polygons of 50 points each, and Qt's raster engine fills a jagged polygon
slowly (each scanline crosses many of its edges): the stacked time plot's three areas of ~1,000 points were
5 of its repaint's 8 ms, the longest paint of a live run's steady state (issue 40; docs/bench-gui.md). At the
screen's resolution an area is, in each pixel column, the pixels from the baseline up to the curve's top
there; drawn as that many one-pixel lines (one per column, ~640 in a plot) it looks the same without
antialiasing, which the plots do not use, and costs a fraction.

A column's top is the curve's height at the column's centre (between two points: the line joining them) or
the highest point inside the column, whichever is higher: a spike narrower than a pixel is drawn, as
pyqtgraph's peak downsampling keeps it. A gap in the curve (a NaN) leaves its columns empty.
"""

from __future__ import annotations

import math

import numpy as np
import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen


class ColumnArea(pg.GraphicsObject):
    """The area between y = 0 and the curve ``(x, y)`` in one colour. ``x`` is ascending (a run's iterations):
    a column's points are found by bisection."""

    def __init__(self, colour: QColor) -> None:
        super().__init__()
        self._pen = QPen(colour)
        self._pen.setCosmetic(True)
        self._pen.setWidth(1)
        self._x = np.zeros(0)
        self._y = np.zeros(0)
        self._bounds = QRectF()
        self._path: QPainterPath | None = None
        self._path_key: tuple[float, ...] = ()

    def setData(self, x: np.ndarray, y: np.ndarray) -> None:
        x = np.asarray(x, dtype=float)
        y = np.asarray(y, dtype=float)
        self._x, self._y = x, y
        self._path = None
        finite = np.isfinite(x) & np.isfinite(y)
        self.prepareGeometryChange()
        if finite.any():
            xs, ys = x[finite], y[finite]
            y_lo, y_hi = min(0.0, float(ys.min())), max(0.0, float(ys.max()))
            self._bounds = QRectF(float(xs[0]), y_lo, float(xs[-1] - xs[0]), y_hi - y_lo)
        else:
            self._bounds = QRectF()
        self.informViewBoundsChanged()
        self.update()

    def dataBounds(self, ax: int, frac: float = 1.0, orthoRange: object = None) -> tuple[float | None, float | None]:
        if self._bounds.isNull():
            return None, None
        if ax == 0:
            return self._bounds.left(), self._bounds.right()
        return self._bounds.top(), self._bounds.bottom()

    def boundingRect(self) -> QRectF:
        return self._bounds

    def columns(self, scale: float, offset: float, left: float, right: float) -> tuple[np.ndarray, np.ndarray]:
        """The columns to draw where a data x maps to the device x ``scale * x + offset`` and the view spans
        device x from ``left`` to ``right``: each column's centre (data x) and its top (data y)."""
        x, y = self._x, self._y
        if len(x) == 0 or scale <= 0:
            return np.zeros(0), np.zeros(0)
        device = scale * x + offset
        first = max(math.floor(device[0]), math.floor(left))
        last = min(math.ceil(device[-1]), math.ceil(right))  # one past the last column
        if last <= first:
            return np.zeros(0), np.zeros(0)
        centres = (np.arange(first, last) + 0.5 - offset) / scale
        tops = np.interp(centres, x, y, left=np.nan, right=np.nan)
        # the points inside each column (x ascending: a column's points are consecutive)
        lo, hi = np.searchsorted(device, [first, last])
        if hi > lo:
            column = np.floor(device[lo:hi]).astype(np.int64) - first
            starts = np.flatnonzero(np.r_[True, column[1:] != column[:-1]])
            peaks = np.fmax.reduceat(y[lo:hi], starts)
            tops[column[starts]] = np.fmax(tops[column[starts]], peaks)
        drawn = np.isfinite(tops)
        return centres[drawn], tops[drawn]

    def paint(self, p: QPainter, *args: object) -> None:
        if len(self._x) == 0:
            return
        view = self.getViewBox()
        if view is None:
            return
        x_range = view.viewRange()[0]
        transform = p.transform()  # this item's coordinates to the device's pixels
        scale, offset = transform.m11(), transform.dx()
        key = (scale, offset, *x_range)
        if self._path is None or key != self._path_key:
            left, right = sorted((scale * x_range[0] + offset, scale * x_range[1] + offset))
            centres, tops = self.columns(scale, offset, left, right)
            xs = np.repeat(centres, 2)
            ys = np.zeros(len(xs))
            ys[1::2] = tops
            self._path = pg.arrayToQPath(xs, ys, connect="pairs", finiteCheck=False)
            self._path_key = key
        p.setRenderHint(QPainter.RenderHint.Antialiasing, False)
        p.setPen(self._pen)
        p.drawPath(self._path)
