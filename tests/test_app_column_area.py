"""The stacked time plot's areas drawn as one line per pixel column (app/widgets/column_area.py): the same
pixels as pyqtgraph's polygon fill, a spike narrower than a pixel kept, a gap left empty."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QColor, QImage

from .app_helpers import qt_binding_broken

pytestmark = pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))

AREA = QColor(40, 120, 200)


def test_a_column_is_the_curve_at_its_centre_between_points():
    from specscope.app.widgets.column_area import ColumnArea

    area = ColumnArea(AREA)
    area.setData(np.array([0.0, 10.0]), np.array([0.0, 10.0]))
    centres, tops = area.columns(scale=1.0, offset=0.0, left=0.0, right=100.0)
    assert list(centres) == [i + 0.5 for i in range(10)]  # the data's columns, not the view's hundred
    assert np.allclose(tops, centres)


def test_a_spike_narrower_than_a_pixel_sets_its_columns_top():
    from specscope.app.widgets.column_area import ColumnArea

    x = np.arange(0.0, 20.0, 0.25)  # four points a pixel
    y = np.ones_like(x)
    y[41] = 9.0  # x = 10.25: inside column 10, and not at its centre
    area = ColumnArea(AREA)
    area.setData(x, y)
    centres, tops = area.columns(scale=1.0, offset=0.0, left=0.0, right=50.0)
    assert tops[list(centres).index(10.5)] == 9.0
    assert np.count_nonzero(tops > 1.5) == 1


def test_a_gap_in_the_curve_leaves_its_column_empty():
    from specscope.app.widgets.column_area import ColumnArea

    area = ColumnArea(AREA)
    area.setData(np.arange(6.0), np.array([1.0, 1.0, np.nan, np.nan, 1.0, 1.0]))
    centres, _ = area.columns(scale=1.0, offset=0.0, left=0.0, right=10.0)
    # columns 2 and 3 hold only the gap's points, and the line to them is no line
    assert 2.5 not in centres and 3.5 not in centres
    assert {0.5, 1.5, 4.5} <= set(centres)


def _render(qtbot, x: np.ndarray, y: np.ndarray, how: str, transform: bool = False):
    """The plot's pixels in the colour drawn: the area by ColumnArea ("columns") or pyqtgraph's fill ("fill");
    with ``transform``, also the item's map from data to the image's pixels."""
    import pyqtgraph as pg

    from specscope.app.widgets.column_area import ColumnArea

    plot = pg.PlotWidget()
    qtbot.addWidget(plot)
    plot.resize(400, 200)
    plot.hideAxis("left")
    plot.hideAxis("bottom")
    if how == "columns":
        item = ColumnArea(AREA)
        item.setData(x, y)
        plot.addItem(item)
    else:
        item = plot.plot(x, y, pen=None, fillLevel=0, brush=pg.mkBrush(AREA))
    plot.setXRange(0, float(x[-1]) * 1.1, padding=0)
    plot.setYRange(0, float(np.nanmax(y)) * 1.2, padding=0)
    plot.show()
    qtbot.waitExposed(plot)
    image = plot.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    width, height = image.width(), image.height()
    pixels = np.frombuffer(image.constBits(), np.uint8).reshape(height, image.bytesPerLine() // 4, 4)[:, :width]
    mask = (pixels[..., 2] == AREA.red()) & (pixels[..., 1] == AREA.green()) & (pixels[..., 0] == AREA.blue())
    return (mask, item.deviceTransform_()) if transform else mask


def _walk(n: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    y = 5 + np.cumsum(rng.normal(0, 0.5, n)).clip(-4, None) + (rng.random(n) < 0.02) * 6
    return np.arange(float(n)), y


def test_between_points_the_columns_are_the_polygon_fill(qtbot):
    x, y = _walk(40)  # ten pixels a point
    drawn = _render(qtbot, x, y, "columns")
    filled = _render(qtbot, x, y, "fill")
    assert filled.sum() > 5000
    # the same pixels but along the edge (a polygon's edge there, a step of one pixel here)
    assert (drawn ^ filled).sum() < 0.03 * filled.sum()


def test_with_many_points_a_pixel_each_column_reaches_the_highest_point_in_it(qtbot):
    x, y = _walk(3000)  # seven to eight points a pixel, spikes among them
    drawn, to_device = _render(qtbot, x, y, "columns", transform=True)
    filled = _render(qtbot, x, y, "fill")
    assert (filled & ~drawn).sum() < 0.01 * filled.sum()  # nothing a polygon fill covers is missing
    # the highest point in each pixel column, where the plot puts the data
    column = np.floor(to_device.m11() * x + to_device.dx()).astype(int)
    highest = {c: y[column == c].max() for c in np.unique(column)}
    rows = np.arange(drawn.shape[0])[:, None]
    area_top = np.where(drawn, rows, drawn.shape[0]).min(axis=0)
    expected = {c: to_device.m22() * top + to_device.dy() for c, top in highest.items()}
    off = [abs(area_top[c] - row) for c, row in expected.items() if 0 <= c < drawn.shape[1]]
    assert len(off) > 300
    assert max(off) <= 1.0  # a spike narrower than a pixel included
