"""'What k should I use': the measurement's predicted speed-up versus k (one cost model: the verify fit, the
draft step and acceptance by position), with the best k and the current k marked. k=0 is plain decoding.

The title's three lines (best k, α, the measured speed-up and what adaptive k did) are elided to the plot's
width, the full text on hover: pyqtgraph makes a title's natural width the plot's minimum width, so adaptive
k's longer explanations ran past the plot's right edge. Where the plot is short (its row at 1280x720 is ~110 px)
the title keeps only its headline, the α and measured lines on hover: three lines there left the curve 20 px
and its axis labels overlapping, and the run panel above already shows both figures."""

from __future__ import annotations

import html

import numpy as np
import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QWidget

from specscope.app.theme import PLOT_COLOURS
from specscope.app.widgets.elided_label import Span, elide_spans
from specscope.app.widgets.plot_base import (
    PLOT_MIN_HEIGHT,
    EmptyNote,
    grid_axes,
    pen,
    plain_axes,
    room_for_last_tick,
    settle,
    show_grid,
    step_up,
)
from specscope.core.measure.measurement import Estimate

TITLE_HEIGHT = 48
ONE_LINE_TITLE_HEIGHT = 20  # the headline alone, where the plot is short
DATA_MIN_PX = 80  # under the title: the bottom axis (~35 px) and a data area of ~45 px, the least worth reading
TITLE = "Predicted speed-up vs k (cost model)"
HEADLINE_PT, LINE_PT = 9, 8  # the title's first line, and the two under it
TITLE_MARGIN_PX = 24  # the title row's padding and the view's border, beside the axes
K_SHOWN_MIN = 4  # the k axis spans at least 0..4, and two past the k in use and the best k
K_MARGIN = 2


def k_span(est: Estimate | None) -> int:
    """The largest k the axis shows: two past the k in use and the best k (the k the advice is between). A fixed
    0..8 left k = 3 in the left third; explorations price verify lengths up to 16, and an axis stretched to
    them squeezed the k that matter the same way; the rest is a pan away."""
    if est is None:
        return K_SHOWN_MIN
    return max(K_SHOWN_MIN, est.k + K_MARGIN, (est.best_k or 0) + K_MARGIN)


def next_k_span(shown: int, est: Estimate | None, k_before: int | None) -> int:
    """The span to show now, given the one ``shown``: it grows at once when the k in use or the best k needs
    more, and shrinks only when the k in use changed (a control change, adaptive k's step) or the run is over,
    so a best k that moves between two values between frames does not make the axis jump."""
    wanted = k_span(est)
    if est is None or shown < 0 or wanted >= shown or est.k != k_before:
        return wanted
    return shown


K_LABEL_TOP = 0.97  # where "k in use" sits along its line (0 = the bottom of the view)


def label_at_top(est: Estimate, y_range: tuple[float, float] | None = None) -> bool:
    """Whether "k in use" goes at the top of its line: yes unless the curve at that k is in the upper half of
    ``y_range`` (the view's; by default the span of the curve and the 1.0 line)."""
    values = [p.speedup for p in est.curve if p.speedup is not None]
    at_k = next((p.speedup for p in est.curve if p.k == est.k), None)
    if at_k is None or not values:
        return True
    low, high = y_range if y_range is not None else (min([*values, 1.0]), max([*values, 1.0]))
    return high <= low or (at_k - low) / (high - low) <= 0.5


Y_SHRINK_BELOW = 0.5  # the y axis comes down only when the curve's top needs less than half of it


def held_y_top(shown: float | None, highest: float) -> float:
    """The top of the advisor's y axis (its bottom is 0, as in the speed-up plot) for a curve reaching
    ``highest``, given the top ``shown``: it grows at once to a round bound, and shrinks only when the curve
    would fill less than half of it. pyqtgraph's auto-range followed every new curve, so the left axis
    re-rendered its picture at each of the advisor's turns (3-5 ms of a words tick, issue 40)."""
    wanted = step_up(max(highest, 1.0))  # the 1.0 line (plain decoding) always in view
    if shown is None or wanted > shown or wanted <= shown * Y_SHRINK_BELOW:
        return wanted
    return shown


def k_ticks(k_max: int) -> list[list[tuple[float, str]]]:
    """Whole k only (an empty axis read 0.1 … 0.9)."""
    return [[(float(k), str(k)) for k in range(0, k_max + 1)], []]


def _metrics(pt: int, bold: bool) -> QFontMetrics:
    font = QFont()
    font.setPointSize(pt)
    font.setBold(bold)
    return QFontMetrics(font)


class KAdvisorPlot(pg.PlotWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent, axisItems=grid_axes())
        pi = self.getPlotItem()
        pi.setTitle(TITLE, size=f"{HEADLINE_PT}pt")
        pi.setLabel("bottom", "k")
        pi.setLabel("left", "×")
        show_grid(pi)
        plain_axes(pi)
        room_for_last_tick(pi)
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
                                       label="k in use",
                                       # right of the line, on white, at the top or the bottom, away from
                                       # the curve (_label_away_from_curve): the curve fell through it
                                       labelOpts={"position": K_LABEL_TOP, "color": "#555",
                                                  "fill": (255, 255, 255, 220), "anchors": [(0, 0), (0, 0)]})
        self.current.setVisible(False)
        pi.addItem(self.current)
        pi.titleLabel.setMaximumHeight(TITLE_HEIGHT)  # three lines once there is data: best k, α, measured
        pi.layout.setRowFixedHeight(0, TITLE_HEIGHT)
        self.note = EmptyNote(self, "no data yet: the curve needs a baseline and a few iterations")
        self._k_max = -1
        self._show_k_range(K_SHOWN_MIN)
        self.estimate: Estimate | None = None
        self._k_in_use: int | None = None  # the k the axis was last fitted to
        self._lines: list[list[Span]] = [[Span(TITLE)]]
        self._stale_tip = ""  # which costs are stale and why, on hover over the title
        self._title_shown: tuple[object, ...] = ()  # what the title was last rendered from (lines, width)
        # y: a held range (held_y_top), not pyqtgraph's auto-range, until the user zooms or pans; 'A' resumes it
        self.y_top: float | None = None
        self.y_follows = True
        pi.enableAutoRange(axis="y", enable=False)
        pi.vb.sigRangeChangedManually.connect(self._stop_following_y)

    def resizeEvent(self, ev: QResizeEvent) -> None:
        super().resizeEvent(ev)
        if "note" in self.__dict__:
            self.note.place()
            self._render_title()

    def _show_k_range(self, k_max: int) -> None:
        if k_max == self._k_max:
            return
        self._k_max = k_max
        pi = self.getPlotItem()
        pi.getAxis("bottom").setTicks(k_ticks(k_max))
        pi.setXRange(-0.3, k_max + 0.3, padding=0)
        pi.enableAutoRange(axis="x", enable=False)

    def _stop_following_y(self, *_: object) -> None:
        self.y_follows = False

    def _follow_y(self, highest: float) -> None:
        """Hold the y range for a curve reaching ``highest`` (see held_y_top), unless the user zoomed or panned;
        the auto-range button ('A', which turns pyqtgraph's auto-range on) hands it back to the held range."""
        vb = self.getPlotItem().vb
        if vb.autoRangeEnabled()[1]:
            self.y_follows = True
            self.y_top = None
            vb.enableAutoRange(axis="y", enable=False)
        if not self.y_follows:
            return
        top = held_y_top(self.y_top, highest)
        if top != self.y_top:
            self.y_top = top
            vb.setYRange(0.0, top, padding=0)

    def show_estimate(self, est: Estimate | None) -> None:
        """Draw the measurement's curve: a gap (not a zero) where a k has no prediction, and say why."""
        if est is self.estimate:
            return  # unchanged: redrawing costs a full repaint
        self.estimate = est
        pi = self.getPlotItem()
        self._show_k_range(next_k_span(self._k_max, est, self._k_in_use))
        self._k_in_use = est.k if est is not None else None
        known = [p for p in est.curve if p.speedup is not None] if est is not None else []
        self.note.setVisible(not known)
        if est is None:  # a new run (or none): its range starts over and follows, as the live plots' do
            self.y_top, self.y_follows = None, True
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
        self._follow_y(float(np.nanmax(ys)))
        gaps = [p for p in est.curve if p.speedup is None]
        tip = "; ".join(f"k={p.k}: {p.reason}" for p in gaps[:1] + gaps[-1:]) if gaps else ""
        self.setToolTip(f"no prediction where the curve stops — {tip}" if tip else "")
        if est.best_k is not None and est.best_speedup is not None:
            self.best.setData([est.best_k], [est.best_speedup])
            best = "plain decoding (k=0)" if est.best_k == 0 else f"k={est.best_k}"
            self.best.setToolTip(f"best {best}: ×{est.best_speedup:.2f}")
        self.current.setPos(est.k)
        self.current.setVisible(True)
        self._label_away_from_curve(est)
        self.show_title(est)
        settle(pi.vb)

    def _label_away_from_curve(self, est: Estimate) -> None:
        """"k in use" at the top of its line, or at the bottom where the curve is high at that k: at the top
        it was written across the curve (and the star) when the k in use was the best."""
        label = self.current.label
        low, high = self.getPlotItem().vb.viewRange()[1]
        at_top = label_at_top(est, (low, high))
        if (label.orthoPos > 0.5) == at_top:
            return
        anchor = (0, 0) if at_top else (0, 1)  # hanging below the top, or standing on the bottom
        label.anchors = [anchor, anchor]
        label.setPosition(K_LABEL_TOP if at_top else 1.0 - K_LABEL_TOP)

    def show_title(self, est: Estimate | None) -> None:
        """The snapshot's words (every frame: cheap when unchanged, so the title agrees with the status bar while
        the curve redraws at its own turn): best k, then α, then the measured speed-up and the controller."""
        known = est is not None and any(p.speedup is not None for p in est.curve)
        self._stale_tip = est.costs.stale_text() if est is not None and known else ""
        if est is None or not known:
            self._lines = [[Span(TITLE)]]
        else:
            controller = f" · {est.controller_text()}" if est.controller_text() else ""
            # What gives way first when the plot is narrow: the controller's words, then the rest of a line;
            # the best k is never cut.
            # costs timed at another machine speed (a drill, a busy spell): a few words beside the prediction,
            # kept whole (the title's lead gives way first), the full sentence on hover
            stale = [Span(f" · {est.costs.stale_brief()}")] if est.costs.stale else []
            self._lines = [[Span("Predicted speed-up vs k — ", bold=True, elide=True),
                            Span(est.best_k_text(), bold=True), *stale],
                           [Span(est.alpha_text(), elide=True)],
                           [Span(f"measured {est.speedup_text()}", elide=True), Span(controller, elide=True)]]
        self._render_title()

    @property
    def title_text(self) -> str:
        """The title's whole text, a line each (what is on screen may end in "…"; the tooltip holds this)."""
        return "\n".join("".join(s.text for s in line) for line in self._lines)

    def _title_width(self) -> int:
        """The width of the data area's column, where pyqtgraph puts the title (between the side axes)."""
        pi = self.getPlotItem()
        axes = sum(max(int(pi.getAxis(side).geometry().width()), 30) for side in ("left", "right")
                   if pi.getAxis(side).isVisible())
        return max(60, self.width() - axes - TITLE_MARGIN_PX)

    def _roomy(self) -> bool:
        """Whether the title's three lines leave the data area DATA_MIN_PX (else it shows the headline alone)."""
        return self.height() >= TITLE_HEIGHT + DATA_MIN_PX

    def _render_title(self) -> None:
        width = self._title_width()
        roomy = self._roomy()
        shown_lines = len(self._lines) if roomy else 1
        key = (self.title_text, self._stale_tip, width, roomy)
        if key == self._title_shown:
            return
        self._title_shown = key
        rows: list[str] = []
        elided = shown_lines < len(self._lines)
        for n, line in enumerate(self._lines[:shown_lines]):
            pt = HEADLINE_PT if n == 0 else LINE_PT
            texts = elide_spans(line, width, _metrics(pt, False), _metrics(pt, True))
            elided |= texts != [s.text for s in line]
            row = "".join(f"<b>{html.escape(t)}</b>" if s.bold else html.escape(t)
                          for s, t in zip(line, texts, strict=True))
            rows.append(row if n == 0 else f"<span style='font-size:{LINE_PT}pt'>{row}</span>")
        pi = self.getPlotItem()
        pi.setTitle("<br>".join(rows), size=f"{HEADLINE_PT}pt")
        tip = "\n".join([*([self.title_text] if elided else []), *([self._stale_tip] if self._stale_tip else [])])
        pi.titleLabel.setToolTip(html.escape(tip).replace("\n", "<br>"))
        # setTitle fixes the title row at 30 px: room for three lines, or one
        height = TITLE_HEIGHT if roomy else ONE_LINE_TITLE_HEIGHT  # the rows reserved even before there is data
        pi.titleLabel.setMaximumHeight(height)
        pi.layout.setRowFixedHeight(0, height)
