"""Plot 4: measured (with its confidence band) versus predicted speed-up over plain decoding; above the 1.0
line speculation pays."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import Qt

from specscope.app.run_data import RunData
from specscope.app.theme import PLOT_COLOURS
from specscope.app.widgets.plot_base import LivePlot


class SpeedupPlot(LivePlot):
    title_text = "Speed-up over plain decoding (×)"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.plot_item.setLabel("left", "×")
        dash = pg.mkPen(PLOT_COLOURS["break_even"], width=1.5, style=Qt.PenStyle.DashLine)
        # Named in the key, not by a label on the line: at either end of the view a curve near 1.0 ran
        # through the words (the measured line starts late, but a view that follows a long run is full).
        self.one = pg.InfiniteLine(pos=1.0, angle=0, movable=False, pen=dash)
        self.plot_item.addItem(self.one)
        self.predicted = self.curve("predicted", PLOT_COLOURS["predicted_speedup"], width=2, style="dash")
        self.measured = self.curve("measured", PLOT_COLOURS["measured_speedup"], width=2.5)
        self.add_key("1.0 = plain", PLOT_COLOURS["break_even"], "dash")
        self.measured.setZValue(1)  # on top: when the model predicts well the two curves coincide
        # The measured speed-up's confidence interval as a band (plain steps paired with the passes around them).
        self.band_lo = pg.PlotDataItem([], [], pen=None)
        self.band_hi = pg.PlotDataItem([], [], pen=None)
        colour = pg.mkColor(PLOT_COLOURS["measured_speedup"])
        colour.setAlpha(50)
        self.band = pg.FillBetweenItem(self.band_lo, self.band_hi, brush=pg.mkBrush(colour))
        self.plot_item.addItem(self.band)

    def empty_text(self, data: RunData | None) -> str | None:
        if data is not None and len(data) and not (np.isfinite(data.col("measured_speedup")).any()
                                                   or np.isfinite(data.col("predicted_speedup")).any()):
            reason = data.estimate.measured_reason if data.estimate is not None else ""
            return f"no speed-up yet: {reason or 'it needs plain-step baselines to compare with'}"
        return super().empty_text(data)

    def headline_for(self, data: RunData) -> str:
        est = data.estimate
        # a withheld number (its interval too wide) says so too: the plot has no line for it
        return (f"measured {est.speedup_text()}" if est is not None and (est.measured or est.measured_withheld)
                else "")

    def update_from(self, data: RunData) -> None:
        x = data.col("iteration")
        self.measured.setData(x, data.col("measured_speedup"), connect="finite")
        lo, hi = data.col("measured_speedup_lo"), data.col("measured_speedup_hi")
        ok = np.isfinite(lo) & np.isfinite(hi)
        self.band_lo.setData(x[ok], lo[ok])
        self.band_hi.setData(x[ok], hi[ok])
        self.predicted.setData(x, data.col("predicted_speedup"), connect="finite")
        self.follower.observe(data.col("measured_speedup"), data.col("predicted_speedup"))
