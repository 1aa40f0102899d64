"""Paging-detector flags as shaded vertical bands, all drawn by one graphics item.

One ``LinearRegionItem`` per band cost a Python paint call, a bounds query and a scene insertion each; a
noisy machine flags hundreds of times a run, and those calls dominated live repaints. Here one item paints
every band as a plain rectangle (bands closer than a pixel as one), and the tooltip follows the band under the
mouse."""

from __future__ import annotations

from dataclasses import dataclass

import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import QRectF, Qt


@dataclass
class ShadedBand:
    start: float  # x of the left edge
    end: float  # x of the right edge
    tip: str

    def toolTip(self) -> str:  # the accessor a graphics item has
        return self.tip


def merged_spans(bands: list[ShadedBand], left: float, right: float, gap: float) -> list[tuple[float, float]]:
    """The visible bands as x spans, those less than ``gap`` apart (a pixel, in x units) drawn as one: a busy
    run's hundreds of bands are a few dozen rectangles to blend, and translucent ones never overlap."""
    spans: list[tuple[float, float]] = []
    for band in bands:
        if band.end < left or band.start > right:
            continue
        if spans and band.start - spans[-1][1] < gap:
            spans[-1] = (spans[-1][0], max(spans[-1][1], band.end))
        else:
            spans.append((band.start, band.end))
    return spans


class FlagBandsItem(pg.GraphicsObject):
    """Draws ``bands`` across the full height of its view; call ``changed()`` after editing the list."""

    def __init__(self, brush: object) -> None:
        super().__init__()
        self.bands: list[ShadedBand] = []
        self.brush = pg.mkBrush(brush)
        self.setAcceptHoverEvents(True)

    def changed(self) -> None:
        self.prepareGeometryChange()
        self.update()

    def clear(self) -> None:
        self.bands.clear()
        self.changed()

    def boundingRect(self) -> QRectF:
        if not self.bands:
            return QRectF()
        view = self.viewRect()
        if view is None:
            return QRectF()
        return QRectF(self.bands[0].start, view.top(), self.bands[-1].end - self.bands[0].start, view.height())

    def viewTransformChanged(self) -> None:
        self.prepareGeometryChange()  # the height follows the view
        super().viewTransformChanged()

    def paint(self, p: object, *args: object) -> None:
        view = self.viewRect()
        if view is None:
            return
        p.setPen(Qt.PenStyle.NoPen)  # type: ignore[attr-defined]
        p.setBrush(self.brush)  # type: ignore[attr-defined]
        spans = merged_spans(self.bands, view.left(), view.right(), self.pixelWidth() or 0.0)
        p.drawRects([QRectF(a, view.top(), b - a, view.height()) for a, b in spans])  # type: ignore[attr-defined]

    def band_at(self, x: float) -> ShadedBand | None:
        return next((b for b in self.bands if b.start <= x <= b.end), None)

    def hoverEvent(self, ev: object) -> None:
        band = None if ev.isExit() else self.band_at(ev.pos().x())  # type: ignore[attr-defined]
        self.setToolTip(band.tip if band else "")
