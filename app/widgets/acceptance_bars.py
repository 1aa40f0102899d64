"""Per-position acceptance: P(proposal i is accepted | the first i were). Falls with i for most drafts;
the fall-off is what limits a useful k.

Each bar says how many times its position was reached (n): a rate from a handful of samples is drawn
hatched and pale, with no rate written, so "1.0 from a single sample" does not read like a measurement."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QWidget

from ..run_data import RunData
from ..theme import PLOT_COLOURS
from .plot_base import PLOT_MIN_HEIGHT, EmptyNote, cache_axes, plain_axes

MIN_SAMPLES = 10  # a position reached fewer times than this is shown hatched: too few to read a rate
BAR_WIDTH = 0.7


def position_ticks(n: int) -> list[list[tuple[int, str]]]:
    """Integer ticks 1..n under the bars (pyqtgraph would put them at halves)."""
    step = 1 if n <= 16 else 2
    return [[(i, str(i)) for i in range(1, n + 1, step)], []]


class AcceptanceBars(pg.PlotWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pi = self.getPlotItem()
        pi.setTitle("Acceptance by draft position", size="9pt")
        pi.setLabel("left", "P(accept | reached)")
        pi.setLabel("bottom", "draft position (1 = first proposal; n = times reached)")
        # Room above a full bar for its "rate n=…" label at the plot's usual ~60 px height.
        pi.setYRange(0, 1.45, padding=0)
        pi.getAxis("left").setTicks([[(0.0, "0"), (0.5, "0.5"), (1.0, "1")]])
        pi.enableAutoRange(axis="y", enable=False)
        pi.showGrid(y=True, alpha=0.2)
        pi.setMouseEnabled(x=False, y=False)
        plain_axes(pi)
        cache_axes(pi)
        self.setMinimumHeight(PLOT_MIN_HEIGHT)
        self.bars = pg.BarGraphItem(x=[], height=[], width=BAR_WIDTH, brush=PLOT_COLOURS["bars"], pen=None)
        thin = pg.mkColor(PLOT_COLOURS["bars"])
        self.thin_bars = pg.BarGraphItem(x=[], height=[], width=BAR_WIDTH,
                                         brush=pg.mkBrush(thin, style=Qt.BrushStyle.BDiagPattern),
                                         pen=pg.mkPen(thin, width=1, style=Qt.PenStyle.DashLine))
        pi.addItem(self.bars)
        pi.addItem(self.thin_bars)
        self.labels: list[pg.TextItem] = []
        self.empty = EmptyNote(self, "no proposals yet: bars appear once the drafter proposes")
        self._version = -1
        self._positions = 0

    def _label(self, i: int) -> pg.TextItem:
        while len(self.labels) <= i:
            item = pg.TextItem("", color="#333", anchor=(0.5, 1.0))
            self.getPlotItem().addItem(item, ignoreBounds=True)
            self.labels.append(item)
        return self.labels[i]

    def resizeEvent(self, ev: QResizeEvent) -> None:
        super().resizeEvent(ev)
        if "empty" in self.__dict__:  # resized during construction, before the note exists
            self.empty.place()

    def refresh(self, data: RunData) -> None:
        if data.version == self._version:
            return
        self._version = data.version
        # The measurement's acceptance by position (core.measurement), with its sample sizes.
        positions = data.estimate.positions if data.estimate is not None else ()
        rates = np.array([np.nan if p.rate is None else p.rate for p in positions])
        reached = np.array([p.reached for p in positions], dtype=np.int64)
        x = np.arange(1, len(rates) + 1)
        ok = ~np.isnan(rates)
        solid = ok & (reached >= MIN_SAMPLES)
        thin = ok & (reached < MIN_SAMPLES)
        self.bars.setOpts(x=x[solid], height=rates[solid], width=BAR_WIDTH)
        self.thin_bars.setOpts(x=x[thin], height=rates[thin], width=BAR_WIDTH)
        for i in range(len(rates)):
            label = self._label(i)
            n = int(reached[i])
            if not ok[i]:
                label.setText("")
                continue
            text = f"n={n}" if n < MIN_SAMPLES else f"{rates[i]:.2f} n={n}"
            label.setText(text)
            label.setPos(float(x[i]), float(rates[i]) + 0.01)
        for label in self.labels[len(rates):]:
            label.setText("")
        self.empty.setVisible(not ok.any())
        if len(x) and len(x) != self._positions:  # a new range re-renders the axis: only when k grew
            self._positions = len(x)
            pi = self.getPlotItem()
            pi.setXRange(0.4, len(x) + 0.6, padding=0)
            pi.getAxis("bottom").setTicks(position_ticks(len(x)))

    def reset(self) -> None:
        self._version = -1
        self._positions = 0
        self.bars.setOpts(x=[], height=[])
        self.thin_bars.setOpts(x=[], height=[])
        for label in self.labels:
            label.setText("")
        self.empty.setVisible(True)
