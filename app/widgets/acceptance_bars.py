"""Per-position acceptance: P(proposal i is accepted | the first i were). Falls with i for most drafts;
the fall-off is what limits a useful k.

Each bar says how many times its position was reached (n): a rate from a handful of samples is drawn as a
pale hatched outline with no rate written, so "1.0 from a single sample" does not read like a measurement.
Each tick says its position's n, the bars their rates on one line, and the y range leaves room above a full
bar for its label at whatever height the plot has."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetricsF, QResizeEvent
from PySide6.QtWidgets import QWidget

from specscope.app.run_data import RunData
from specscope.app.theme import PLOT_COLOURS
from specscope.app.widgets.plot_base import (
    PLOT_MIN_HEIGHT,
    EmptyNote,
    grid_axes,
    plain_axes,
    show_grid,
)
from specscope.core.measure.snapshot import PositionStat

MIN_SAMPLES = 10  # a position reached fewer times than this is shown hatched: too few to read a rate
BAR_WIDTH = 0.7
TITLE = "Acceptance by draft position (n = times reached)"


def shown_positions(positions: tuple[PositionStat, ...], k: int) -> int:
    """How many positions the bars show: the run's k (the user's, or adaptive k's choice) and any further one
    reached often enough to read (``MIN_SAMPLES``), e.g. after the user lowered k. An exploration's few
    iterations at k = 16 do not stretch the axis to 16 (their positions, reached a handful of times, are
    what the hatched bars would say nothing with)."""
    readable = max((p.position + 1 for p in positions if p.reached >= MIN_SAMPLES), default=0)
    return min(len(positions), max(k, readable)) or len(positions)


def title_for(since: int) -> str:
    return TITLE if since == 0 else f"Acceptance by draft position since it. {since} (n = times reached)"


def count_text(n: int) -> str:
    """A sample size in at most three characters ("41", "999", "12k"), so a tick's width does not grow with it."""
    return str(n) if n < 1000 else f"{n // 1000}k"


# The widest tick the sample sizes can make at a given number of positions: whether the sizes fit under the
# bars is decided on this, not on the counts so far, so they do not vanish when a count reaches 100 (at k = 8 in
# a 1280-px window they did, mid-run) and come back when a column widens.
WIDEST_COUNT = "999"


def position_ticks(n: int, reached: list[int] | None = None) -> list[list[tuple[int, str]]]:
    """Integer ticks 1..n under the bars (pyqtgraph would put them at halves), each with its sample size
    ("3 n=41") when ``reached`` is given."""
    step = 1 if n <= 16 else 2
    return [[(i, f"{i} n={count_text(reached[i - 1])}" if reached else str(i)) for i in range(1, n + 1, step)], []]


def set_label(label: pg.TextItem, text: str) -> None:
    """A bar's label, set only when its text changes: setText lays the text out and repaints the plot even when
    the text is the same, and the bars redraw at every plot turn."""
    if label.toPlainText() != text:
        label.setText(text)


LABELS_AHEAD = 8  # rate labels made ahead: one per position up to k = 8 (more are made when a larger k needs them)


class AcceptanceBars(pg.PlotWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, axisItems=grid_axes())
        pi = self.getPlotItem()
        # No axis titles: at 1280x720 the view is ~55 px tall, and the titles were cut and took the room the
        # bars' labels need. The plot's title says what the bars and ticks are; the full meaning is on hover.
        pi.setTitle(TITLE, size="9pt")
        self.title = TITLE
        self.setToolTip("P(proposal i is accepted | proposals 1..i-1 were), per draft position i (1 = first "
                        f"proposal); n = times position i was reached. Pale hatched bars: n < {MIN_SAMPLES}, "
                        "too few to read a rate.")
        self._y_top = 1.45  # until the first resize says how tall the view is
        pi.setYRange(0, self._y_top, padding=0)
        pi.getAxis("left").setTicks([[(0.0, "0"), (0.5, "0.5"), (1.0, "1")]])
        self.tick_font = QFont(self.font())
        self.tick_font.setPointSizeF(max(7.0, self.font().pointSizeF() - 1))  # "8 n=120" under a k=8 bar
        pi.getAxis("bottom").setStyle(tickFont=self.tick_font)
        pi.enableAutoRange(axis="y", enable=False)
        show_grid(pi, x=False)
        pi.setMouseEnabled(x=False, y=False)
        plain_axes(pi)
        self.setMinimumHeight(PLOT_MIN_HEIGHT)
        self.bars = pg.BarGraphItem(x=[], height=[], width=BAR_WIDTH, brush=PLOT_COLOURS["bars"], pen=None)
        pale = pg.mkColor(PLOT_COLOURS["bars"])
        pale.setAlpha(90)
        self.thin_bars = pg.BarGraphItem(x=[], height=[], width=BAR_WIDTH,
                                         brush=pg.mkBrush(pale, style=Qt.BrushStyle.BDiagPattern),
                                         pen=pg.mkPen(pale, width=1, style=Qt.PenStyle.DotLine))
        pi.addItem(self.bars)
        pi.addItem(self.thin_bars)
        self.labels: list[pg.TextItem] = []
        self._version = -1
        self._positions = 0
        self._ticks: list[list[tuple[int, str]]] | None = None
        self._rates = np.zeros(0)
        self._reached = np.zeros(0, dtype=np.int64)
        for i in range(LABELS_AHEAD):  # made with the window, not in the tick that draws the first bars
            self._label(i)
        self.empty = EmptyNote(self, "no proposals yet: bars appear once the drafter proposes")  # last: see resize

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
            self._place_text()

    def _column_px(self) -> float:
        vb = self.getPlotItem().vb
        span = vb.viewRange()[0]
        return float(vb.width()) / max(1e-9, span[1] - span[0])

    def _fits(self, text: str, font: QFont | None = None) -> bool:
        return QFontMetricsF(font or self.font()).horizontalAdvance(text) + 6 <= self._column_px()

    def _fit_labels(self) -> None:
        """The y range's top: a full bar (1.0) plus its one-line label at the view's height now."""
        vb = self.getPlotItem().vb
        label_px = QFontMetricsF(self.font()).lineSpacing() + 12  # the text item's margins and a gap
        height = max(float(vb.height()), 1.0)
        top = min(3.0, max(1.15, 1.0 / max(1e-3, 1.0 - label_px / height)))
        if abs(top - self._y_top) > 0.01:
            self._y_top = top
            self.getPlotItem().setYRange(0, top, padding=0)

    def refresh(self, data: RunData) -> None:
        if data.version == self._version:
            return
        self._version = data.version
        est = data.estimate
        # the measurement's counts start over at a sampling change (temperature, top-k, top-p): say since when
        title = title_for(est.positions_since if est is not None else 0)
        if title != self.title:
            self.title = title
            self.getPlotItem().setTitle(title, size="9pt")
        # The measurement's acceptance by position (core.measure.measurement), with its sample sizes.
        positions = est.positions if est is not None else ()
        positions = positions[:shown_positions(positions, est.k)] if est is not None else ()
        rates = np.array([np.nan if p.rate is None else p.rate for p in positions])
        reached = np.array([p.reached for p in positions], dtype=np.int64)
        x = np.arange(1, len(rates) + 1)
        ok = ~np.isnan(rates)
        solid = ok & (reached >= MIN_SAMPLES)
        thin = ok & (reached < MIN_SAMPLES)
        if not (np.array_equal(rates, self._rates, equal_nan=True) and np.array_equal(reached, self._reached)):
            # the bars' rectangles only when a rate or its sample size moved: each setOpts repaints the plot
            self.bars.setOpts(x=x[solid], height=rates[solid], width=BAR_WIDTH)
            self.thin_bars.setOpts(x=x[thin], height=rates[thin], width=BAR_WIDTH)
        if len(x) and len(x) != self._positions:
            self._positions = len(x)
            self.getPlotItem().setXRange(0.4, len(x) + 0.6, padding=0)
        self._rates, self._reached = rates, reached
        self._place_text()
        self.empty.setVisible(not ok.any())

    def _place_text(self) -> None:
        """Ticks and rate labels for the view's size now: the sample sizes go under the bars, in the ticks,
        where there is room for any count (k up to 8 at 1280x720: see WIDEST_COUNT); the axis re-renders only
        when a tick's text changes. A rate from fewer than MIN_SAMPLES is not written: the pale bar and its n say so."""
        rates, reached = self._rates, self._reached
        counts = [int(n) for n in reached]
        widest = f"{len(counts)} n={WIDEST_COUNT}"
        ticks = position_ticks(len(counts), counts if counts and self._fits(widest, self.tick_font) else None)
        if ticks != self._ticks:
            self._ticks = ticks
            self.getPlotItem().getAxis("bottom").setTicks(ticks)
        self._fit_labels()
        rates_fit = self._fits("0.00")
        for i, rate in enumerate(rates):
            label = self._label(i)
            if np.isnan(rate) or reached[i] < MIN_SAMPLES or not rates_fit:
                set_label(label, "")
                continue
            set_label(label, f"{rate:.2f}")
            position = (float(i + 1), float(rate) + 0.01)
            if (label.pos().x(), label.pos().y()) != position:
                label.setPos(*position)
        for label in self.labels[len(rates):]:
            set_label(label, "")

    def reset(self) -> None:
        if self.title != TITLE:
            self.title = TITLE
            self.getPlotItem().setTitle(TITLE, size="9pt")
        self._version = -1
        self._positions = 0
        self._ticks = None
        self._rates = np.zeros(0)
        self._reached = np.zeros(0, dtype=np.int64)
        self.bars.setOpts(x=[], height=[])
        self.thin_bars.setOpts(x=[], height=[])
        for label in self.labels:
            label.setText("")
        self.empty.setVisible(True)
