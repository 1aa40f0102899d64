"""'What k should I use': the measurement's predicted speed-up versus k (one cost model: the verify fit, the
draft step and acceptance by position), with the best k and the current k marked. k=0 is plain decoding."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QWidget

from specscope.app.theme import PLOT_COLOURS
from specscope.app.widgets.plot_base import PLOT_MIN_HEIGHT, EmptyNote, cache_axes, pen, plain_axes, settle
from specscope.core.measure.measurement import Estimate

TITLE_HEIGHT = 48


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
        pi.titleLabel.setMaximumHeight(TITLE_HEIGHT)  # three lines once there is data: best k, α, measured
        pi.layout.setRowFixedHeight(0, TITLE_HEIGHT)
        self.note = EmptyNote(self, "no data yet: the curve needs a baseline and a few iterations")
        self.estimate: Estimate | None = None
        self._title = "Predicted speed-up vs k (cost model)"

    def resizeEvent(self, ev: QResizeEvent) -> None:
        super().resizeEvent(ev)
        if "note" in self.__dict__:
            self.note.place()

    def show_estimate(self, est: Estimate | None) -> None:
        """Draw the measurement's curve: a gap (not a zero) where a k has no prediction, and say why."""
        if est is self.estimate:
            return  # unchanged: redrawing costs a full repaint
        self.estimate = est
        pi = self.getPlotItem()
        known = [p for p in est.curve if p.speedup is not None] if est is not None else []
        self.note.setVisible(not known)
        if est is None or not known:
            self.curve.setData([], [])
            self.best.setData([], [])
            self.current.setVisible(False)
            reason = next((p.reason for p in est.curve if p.reason), "") if est is not None else ""
            self.note.set_text(f"no prediction yet: {reason}" if reason else
                               "no data yet: the curve needs a baseline and a few iterations")
            self.show_title(est)
            return
        ks = np.array([p.k for p in est.curve], dtype=float)
        ys = np.array([np.nan if p.speedup is None else p.speedup for p in est.curve])
        self.curve.setData(ks, ys, connect="finite")
        gaps = [p for p in est.curve if p.speedup is None]
        tip = "; ".join(f"k={p.k}: {p.reason}" for p in gaps[:1] + gaps[-1:]) if gaps else ""
        self.setToolTip(f"no prediction where the curve stops — {tip}" if tip else "")
        if est.best_k is not None and est.best_speedup is not None:
            self.best.setData([est.best_k], [est.best_speedup])
            best = "plain decoding (k=0)" if est.best_k == 0 else f"k={est.best_k}"
            self.best.setToolTip(f"best {best}: ×{est.best_speedup:.2f}")
        self.current.setPos(est.k)
        self.current.setVisible(True)
        self.show_title(est)
        settle(pi.vb)

    def show_title(self, est: Estimate | None) -> None:
        """The snapshot's words (every frame: cheap when unchanged, so the title agrees with the status bar while
        the curve redraws at its own turn): best k, then α, then the measured speed-up and the controller."""
        known = est is not None and any(p.speedup is not None for p in est.curve)
        if est is None or not known:
            title = "Predicted speed-up vs k (cost model)"
        else:
            controller = f" · {est.controller_text()}" if est.controller_text() else ""
            small = "<br><span style='font-size:8pt'>{}</span>"
            title = (f"<b>{html.escape(f'Predicted speed-up vs k — {est.best_k_text()}')}</b>"
                     + small.format(html.escape(est.alpha_text()))
                     + small.format(html.escape(f"measured {est.speedup_text()}{controller}")))
        if title != self._title:
            self._title = title
            pi = self.getPlotItem()
            pi.setTitle(title, size="9pt")
            # setTitle fixes the title row at 30 px: room for three lines
            pi.titleLabel.setMaximumHeight(TITLE_HEIGHT)
            pi.layout.setRowFixedHeight(0, TITLE_HEIGHT)
