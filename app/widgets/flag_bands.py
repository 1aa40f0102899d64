"""Flagged iterations as shaded vertical bands, one graphics item per kind, each in its own lane.

Paging is what the window is for, so it is the loudest thing on a plot when it happens: a translucent crimson
band over the whole height with a solid strip along the top. A busy machine (other programs took the CPU) is
a grey strip along the bottom only, never merged with paging: on a loaded machine busy flags come every few
iterations, and a shared shade hid the drill. A paging drill's iterations are hatched across the plot, so the
iterations a drill held layers away read as one block whatever the detectors said.

One ``LinearRegionItem`` per band cost a Python paint call, a bounds query and a scene insertion each; a
noisy machine flags hundreds of times a run, and those calls dominated live repaints. Here one item paints
every band of its kind as a plain rectangle (bands closer than a pixel as one), and the tooltip follows the
band under the mouse."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor

from specscope.app.run_data import DrillSpan, FlagBand, RunData
from specscope.app.theme import BUSY_LANE_RGBA, DRILL_HATCH_RGBA, PAGING_BAND_RGBA, PAGING_STRIP_RGBA


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
    """Draws ``bands`` in a lane of its view (``lane``: the bottom and top of it as fractions of the view's
    height), with an optional solid ``strip`` (a fraction of the view's height) along the lane's top; call
    ``changed()`` after editing the list."""

    def __init__(self, brush: object, lane: tuple[float, float] = (0.0, 1.0), strip: float = 0.0,
                 strip_brush: object = None) -> None:
        super().__init__()
        self.bands: list[ShadedBand] = []
        self.brush = brush if isinstance(brush, QBrush) else pg.mkBrush(brush)
        self.lane = lane
        self.strip = strip
        self.strip_brush = pg.mkBrush(strip_brush) if strip_brush is not None else None
        self.setAcceptHoverEvents(True)

    def _lane_rect(self, view: QRectF) -> tuple[float, float]:
        """(top, height) of the lane in view coordinates (the view's y grows upwards)."""
        low, high = self.lane
        bottom = view.top() + low * view.height()  # QRectF.top() of a view rect is its lowest y
        return bottom, (high - low) * view.height()

    def changed(self) -> None:
        self.prepareGeometryChange()
        self.update()

    def clear(self) -> None:
        self.bands.clear()
        self.setToolTip("")  # the last band hovered is not the next run's
        self.changed()

    def boundingRect(self) -> QRectF:
        if not self.bands:
            return QRectF()
        view = self.viewRect()
        if view is None:
            return QRectF()
        y, height = self._lane_rect(view)
        return QRectF(self.bands[0].start, y, self.bands[-1].end - self.bands[0].start, height)

    def viewTransformChanged(self) -> None:
        self.prepareGeometryChange()  # the height follows the view
        super().viewTransformChanged()

    def paint(self, p: object, *args: object) -> None:
        view = self.viewRect()
        if view is None:
            return
        y, height = self._lane_rect(view)
        p.setPen(Qt.PenStyle.NoPen)  # type: ignore[attr-defined]
        if self.brush.style() != Qt.BrushStyle.SolidPattern:
            # a pattern is laid in the item's coordinates: undone here, it is drawn in screen pixels instead
            # of being stretched by the view's scale (iterations by MiB)
            self.brush.setTransform(p.transform().inverted()[0])  # type: ignore[attr-defined]
            p.setBrushOrigin(QPointF(0, 0))  # type: ignore[attr-defined]
        p.setBrush(self.brush)  # type: ignore[attr-defined]
        spans = merged_spans(self.bands, view.left(), view.right(), self.pixelWidth() or 0.0)
        p.drawRects([QRectF(a, y, b - a, height) for a, b in spans])  # type: ignore[attr-defined]
        if self.strip_brush is not None and self.strip > 0:
            strip = self.strip * view.height()
            p.setBrush(self.strip_brush)  # type: ignore[attr-defined]
            p.drawRects([QRectF(a, y + height - strip, b - a, strip) for a, b in spans])  # type: ignore[attr-defined]

    def band_at(self, x: float) -> ShadedBand | None:
        return next((b for b in self.bands if b.start <= x <= b.end), None)

    def hoverEvent(self, ev: object) -> None:
        band = None if ev.isExit() else self.band_at(ev.pos().x())  # type: ignore[attr-defined]
        self.setToolTip(band.tip if band else "")

    def show(self, bands: list[ShadedBand]) -> None:
        """Make ``bands`` the ones drawn: only the tail that changed is replaced (the last band may still be
        growing), so a live run's repaint does not rebuild hundreds of bands."""
        shown = self.bands
        same = 0
        while same < min(len(shown), len(bands)) and (shown[same] is bands[same] or shown[same] == bands[same]):
            same += 1
        if same == len(shown) == len(bands):
            return
        shown[same:] = bands[same:]
        self.changed()


def band_tooltip(band: FlagBand) -> str:
    what = "paging" if band.kind == "paging" else "machine busy"
    span = f"iteration {band.start}" if band.start == band.end else f"iterations {band.start}–{band.end}"
    text = f"{what}, {span}: {band.sentence}"
    if band.count > 1:
        text += f"\n… {band.count} flags in this band; the last: {band.last_sentence}"
    return text


def drill_tooltip(drill: DrillSpan, last_iteration: int) -> str:
    end = drill.end if drill.end is not None else last_iteration
    held = "so far" if drill.end is None else ""
    return f"paging drill, iterations {drill.start}–{end} {held}: {drill.label}".replace("  ", " ")


# Lanes, as fractions of a plot's height from its bottom.
BUSY_LANE = (0.0, 0.05)
PAGING_STRIP = 0.07


def hatch_brush(rgba: tuple[int, int, int, int]) -> QBrush:
    return QBrush(QColor(*rgba), Qt.BrushStyle.BDiagPattern)


class FlagLanes:
    """The three kinds of band on one plot: paging (loudest, on top), the drill's hatching, busy (a grey strip
    at the bottom). The memory plot and the time plot each have one, fed the same ``RunData``, so both point
    at the same iterations."""

    def __init__(self, plot_item: pg.PlotItem) -> None:
        self.busy = FlagBandsItem(BUSY_LANE_RGBA, lane=BUSY_LANE)
        self.drill = FlagBandsItem(hatch_brush(DRILL_HATCH_RGBA))
        self.paging = FlagBandsItem(PAGING_BAND_RGBA, strip=PAGING_STRIP, strip_brush=PAGING_STRIP_RGBA)
        for z, item in enumerate((self.drill, self.busy, self.paging)):
            item.setZValue(-12 + z)  # behind the curves; paging's tooltip wins where lanes overlap
            plot_item.addItem(item, ignoreBounds=True)

    @property
    def items(self) -> list[FlagBandsItem]:
        return [self.paging, self.busy, self.drill]

    def sync(self, data: RunData) -> None:
        last = int(data.records[-1].iteration) if data.records else 0
        def flag_band(b: FlagBand) -> ShadedBand:
            return ShadedBand(b.start - 0.5, b.end + 0.5, band_tooltip(b))

        def drill_band(d: DrillSpan) -> ShadedBand:
            return ShadedBand(d.start - 0.5, (d.end if d.end is not None else last) + 0.5, drill_tooltip(d, last))

        shades: tuple[tuple[FlagBandsItem, Sequence[Any], Callable[[Any], ShadedBand]], ...] = (
            (self.paging, data.paging_bands, flag_band), (self.busy, data.busy_bands, flag_band),
            (self.drill, data.drills, drill_band))
        for item, spans, shade in shades:
            # A run's bands only grow at its end (a new band, or the last one longer): the shaded bands before
            # the last one drawn are kept, not rebuilt with their tooltips at every redraw of a noisy run.
            shown = item.bands
            kept = len(shown) - 1 if 0 < len(shown) <= len(spans) else 0
            if kept and shown[kept - 1].start != spans[kept - 1].start - 0.5:
                kept = 0  # another run's bands (a view not cleared): all of them anew
            item.show(shown[:kept] + [shade(s) for s in spans[kept:]])

    def clear(self) -> None:
        for item in self.items:
            item.clear()
