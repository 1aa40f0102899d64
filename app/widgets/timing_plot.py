"""Plot 1: where each iteration's time goes — drafting, verification, rollback (stacked) — against the
target's plain step time (the cost of one token without speculation). An attached engine does not split
its passes: their whole time, as the client saw it, is drawn as one line with its own key."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg  # type: ignore[import-untyped]

from specscope.app.run_data import RunData
from specscope.app.theme import PLOT_COLOURS
from specscope.app.widgets.column_area import ColumnArea
from specscope.app.widgets.flag_bands import FlagLanes
from specscope.app.widgets.plot_base import LivePlot, pen, thin_out

ENGINE_KEY = "engine pass (not split)"


class TimingPlot(LivePlot):
    title_text = "Time per iteration (ms, stacked)"

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.plot_item.setLabel("left", "ms")
        # Stacked areas: each curve is a running sum, drawn back to front so the bands read bottom-up.
        # Created back to front (rollback on top of the stack is drawn first); the key reads bottom-up.
        self.stack: list[tuple[pg.PlotDataItem, ColumnArea]] = []  # each curve with its area, back to front
        self.total = self._area("rollback", PLOT_COLOURS["rollback"])
        self.draft_verify = self._area("verify", PLOT_COLOURS["verify"])
        self.draft = self._area("draft", PLOT_COLOURS["draft"])
        self.keys.reverse()
        self.plain = self.curve("plain step", PLOT_COLOURS["plain_step"], width=2, style="dash")
        self.engine_pass = self.plot_item.plot([], [], pen=pen(PLOT_COLOURS["engine_pass"], 2.0, "solid"))
        thin_out(self.engine_pass)
        self._engine_key = False  # its key is added the first time an engine pass is drawn
        # the same paging, drill and busy bands as the memory plot: a slow step and its cause line up
        self.lanes = FlagLanes(self.plot_item)

    def _area(self, name: str, colour: str):
        """A stacked curve: its area (pixel columns, see ColumnArea) and, over it, its outline."""
        area = ColumnArea(pg.mkColor(colour).lighter(130))
        self.plot_item.addItem(area)
        curve = self.curve(name, colour, width=1, style="fill")
        self.stack.append((curve, area))
        return curve

    def reset(self) -> None:
        super().reset()
        self.lanes.clear()
        if self._engine_key:  # a local run after an attached one has no engine passes to name
            self.remove_key(ENGINE_KEY)
            self._engine_key = False

    def update_from(self, data: RunData) -> None:
        x = data.col("iteration")
        d = data.col("draft_ms")
        dv = d + data.col("verify_ms")
        total = dv + data.col("rollback_ms")
        for (curve, area), y in zip(self.stack, (total, dv, d), strict=True):  # the order they were made in
            curve.setData(x, y)
            area.setData(x, y)
        whole = data.col("iteration_ms")
        unsplit = np.isnan(d) & np.isfinite(whole)  # an attached engine's pass: no draft/verify split
        if unsplit.any() and not self._engine_key:
            self.add_key(ENGINE_KEY, PLOT_COLOURS["engine_pass"])
            self._engine_key = True
        self.engine_pass.setData(x[unsplit], whole[unsplit])
        total = np.where(unsplit, whole, total)
        plain = data.col("plain_step_ms")
        self.follower.observe(total, plain)
        ok = ~np.isnan(plain)
        if ok.any():
            self.plain.setData(x[ok], plain[ok])
        else:
            self.plain.setData([], [])
        self.lanes.sync(data)
