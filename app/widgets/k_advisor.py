"""'What k should I use': the cost model's predicted speed-up versus k at the window's α and measured
costs, with the best k and the current k marked."""

from __future__ import annotations

import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from ..estimates import Advice
from ..theme import PLOT_COLOURS
from .plot_base import PLOT_MIN_HEIGHT, EmptyNote, cache_axes, pen, plain_axes


class KAdvisorPlot(pg.PlotWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pi = self.getPlotItem()
        pi.setTitle("Predicted speed-up vs k (cost model)", size="9pt")
        pi.setLabel("bottom", "k")
        pi.setLabel("left", "×")
        pi.showGrid(x=True, y=True, alpha=0.2)
        plain_axes(pi)
        cache_axes(pi)
        self.setMinimumHeight(PLOT_MIN_HEIGHT)
        self.curve = pi.plot([], [], pen=pen(PLOT_COLOURS["predicted_speedup"], 2), symbol="o", symbolSize=5,
                             symbolBrush=PLOT_COLOURS["predicted_speedup"])
        self.one = pg.InfiniteLine(pos=1.0, angle=0, movable=False,
                                   pen=pg.mkPen(PLOT_COLOURS["break_even"], style=Qt.PenStyle.DashLine))
        pi.addItem(self.one)
        self.best = pg.ScatterPlotItem([], [], symbol="star", size=16, brush=PLOT_COLOURS["best_k"], pen=None)
        pi.addItem(self.best)
        self.current = pg.InfiniteLine(pos=0, angle=90, movable=False,
                                       pen=pg.mkPen(PLOT_COLOURS["marker"], style=Qt.PenStyle.DotLine),
                                       label="current k", labelOpts={"position": 0.1, "color": "#555"})
        self.current.setVisible(False)
        pi.addItem(self.current)
        self.note = EmptyNote(self, "no data yet: the curve needs a baseline and a few iterations")
        self.advice: Advice | None = None

    def show_advice(self, advice: Advice | None) -> None:
        if advice == self.advice:
            return  # unchanged (advice is recomputed twice a second; redrawing it costs a full repaint)
        self.advice = advice
        self.note.setVisible(advice is None)
        if advice is None:
            self.curve.setData([], [])
            self.best.setData([], [])
            self.current.setVisible(False)
            return
        ks = [k for k, _ in advice.curve]
        self.curve.setData(ks, [s for _, s in advice.curve])
        self.best.setData([advice.best_k], [advice.best_speedup])
        self.best.setToolTip(
            f"best k = {advice.best_k}: ×{advice.best_speedup:.2f} at α = {advice.alpha:.2f}")
        self.current.setPos(advice.k)
        self.current.setVisible(True)
        self.getPlotItem().setTitle(
            f"Predicted speed-up vs k at α={advice.alpha:.2f} — best k={advice.best_k} "
            f"(×{advice.best_speedup:.2f})", size="9pt")
