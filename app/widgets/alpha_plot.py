"""Plot 2: acceptance α (the run's, the headline, and the recent window's, left axis) and tokens per iteration
(right axis); the title says the snapshot's α in the words every surface uses."""

from __future__ import annotations

import pyqtgraph as pg  # type: ignore[import-untyped]

from specscope.app.run_data import RunData
from specscope.app.theme import PLOT_COLOURS
from specscope.app.widgets.plot_base import LivePlot, RangeFollower, pen, settle


class AlphaPlot(LivePlot):
    title_text = "Acceptance and tokens per iteration"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        pi = self.plot_item
        pi.setLabel("left", "α")
        pi.setYRange(0, 1.05)
        self.follower.follow_y = False  # α is always 0..1
        # Solid, not dotted: a dashed pen along a zig-zag of thousands of points is the costliest paint here.
        self.tokens = pg.PlotDataItem([], [], pen=pen(PLOT_COLOURS["tokens_per_iteration"], 1))
        self.tokens.setDownsampling(auto=True, method="mean")
        self.tokens.setClipToView(True)
        # Tokens per iteration lives on a second view box bound to the right axis.
        self.right = pg.ViewBox()
        pi.showAxis("right")
        pi.scene().addItem(self.right)
        pi.getAxis("right").linkToView(self.right)
        pi.getAxis("right").setLabel("tokens / iteration")
        self.right.setXLink(pi)
        self.right.addItem(self.tokens)
        self.right_follower = RangeFollower(self.right, x=False)
        pi.vb.sigResized.connect(self._sync_views)
        self.add_key("tokens/iter (right)", PLOT_COLOURS["tokens_per_iteration"])
        self.run = self.curve("α run", PLOT_COLOURS["alpha_run"], width=2)
        self.window = self.curve("α recent window", PLOT_COLOURS["alpha_window"], width=1.5, style="dash")

    def headline_for(self, data: RunData) -> str:
        est = data.estimate
        return est.alpha_text() if est is not None and est.alpha is not None else ""

    def _sync_views(self) -> None:
        self.right.setGeometry(self.plot_item.vb.sceneBoundingRect())
        self.right.linkedViewChanged(self.plot_item.vb, self.right.XAxis)

    def update_from(self, data: RunData) -> None:
        x = data.col("iteration")
        self.run.setData(x, data.col("alpha_run"), connect="finite")
        self.window.setData(x, data.col("alpha_window"), connect="finite")
        tokens = data.col("tokens_per_iteration")
        self.tokens.setData(x, tokens)
        self.right_follower.observe(tokens)
        self.right_follower.apply(float(x[-1]) if len(x) else 0.0)
        settle(self.right)

    def reset(self) -> None:
        super().reset()
        self.right_follower.reset()
