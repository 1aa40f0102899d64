"""Per-position acceptance: P(proposal i is accepted | the first i were). Falls with i for most drafts;
the fall-off is what limits a useful k."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtWidgets import QWidget

from ..run_data import RunData
from ..theme import PLOT_COLOURS
from .plot_base import cache_axes


class AcceptanceBars(pg.PlotWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pi = self.getPlotItem()
        pi.setTitle("Acceptance by draft position", size="9pt")
        pi.setLabel("left", "P(accept | reached)")
        pi.setLabel("bottom", "draft position (1 = first proposal)")
        pi.setYRange(0, 1.05)
        pi.enableAutoRange(axis="y", enable=False)
        pi.showGrid(y=True, alpha=0.2)
        cache_axes(pi)
        self.setMinimumHeight(150)
        self.bars = pg.BarGraphItem(x=[], height=[], width=0.7, brush=PLOT_COLOURS["bars"], pen=None)
        pi.addItem(self.bars)
        self._version = -1
        self._positions = 0

    def refresh(self, data: RunData) -> None:
        if data.version == self._version:
            return
        self._version = data.version
        positions = data.estimate.positions if data.estimate is not None else ()
        rates = np.array([np.nan if p.rate is None else p.rate for p in positions])
        x = np.arange(1, len(rates) + 1)
        ok = ~np.isnan(rates)
        self.bars.setOpts(x=x[ok], height=rates[ok], width=0.7)
        if len(x) and len(x) != self._positions:  # a new range re-renders the axis: only when k grew
            self._positions = len(x)
            self.getPlotItem().setXRange(0.4, len(x) + 0.6, padding=0)

    def reset(self) -> None:
        self._version = -1
        self._positions = 0
        self.bars.setOpts(x=[], height=[])
