"""Control-change markers a user can read: each change is a dashed vertical line with a small numbered badge
hanging from the top of the plot (the full text on hover), and the plots panel lists every change by its
number in one line above the plots.

Full sentences on the lines were cut by the plot's top edge and ran into each other; a badge is a digit or
two wide. Badges that would touch drop to a lower row, so neighbours never overlap while the plot is tall
enough for the rows (beyond that the list and the tooltips still say everything)."""

from __future__ import annotations

import html
from dataclasses import dataclass

import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import Qt
from PySide6.QtGui import QFontMetricsF
from PySide6.QtWidgets import QWidget

from specscope.app.run_data import Marker
from specscope.app.theme import PLOT_COLOURS
from specscope.app.widgets.elided_label import ElidedLabel, Span

BADGE_GAP_PX = 3  # between neighbouring badges, and between rows
BADGE_ROWS_MAX = 4


def change_text(number: int, change: Marker) -> str:
    return f"{number} · iteration {change.iteration}: {change.label}"


@dataclass
class Badge:
    """One badge on the plot: the changes it stands for (consecutive numbers, from 0), its row and centre."""

    members: list[int]
    row: int
    x_px: float

    def text(self) -> str:
        first, last = self.members[0] + 1, self.members[-1] + 1
        return str(first) if first == last else f"{first}–{last}"


def place_badges(xs_px: list[float], width_px: float, rows: int) -> list[Badge]:
    """Badges for changes at ``xs_px`` (in order, left to right), each ``width_px`` wide at most: a change
    goes in the first row with room at its x; when no row has room it joins the badge before it ("3–5")."""
    right_edge = [float("-inf")] * max(1, rows)
    badges: list[Badge] = []
    for i, x in enumerate(xs_px):
        row = next((r for r, edge in enumerate(right_edge) if x - width_px / 2 >= edge + BADGE_GAP_PX), None)
        if row is None and badges:
            badges[-1].members.append(i)
            continue
        row = row or 0
        badges.append(Badge([i], row, x))
        right_edge[row] = x + width_px / 2
    return badges


class ChangeMarkers:
    """The numbered marker lines of one plot."""

    def __init__(self, plot_item: pg.PlotItem) -> None:
        self.plot_item = plot_item
        self.lines: list[pg.InfiniteLine] = []
        self.changes: list[Marker] = []
        self._layout_key: tuple[float, ...] | None = None
        plot_item.vb.sigResized.connect(self.relayout)
        plot_item.vb.sigXRangeChanged.connect(self.relayout)

    def sync(self, changes: list[Marker]) -> None:
        """Add lines for changes not shown yet (numbered from 1 in the order they happened)."""
        added = changes[len(self.lines):]
        for change in added:
            number = len(self.lines) + 1
            line = pg.InfiniteLine(
                pos=change.iteration, angle=90, movable=False,
                pen=pg.mkPen(PLOT_COLOURS["marker"], width=1, style=Qt.PenStyle.DashLine),
                label=str(number),
                labelOpts={"position": 1.0, "color": PLOT_COLOURS["marker"], "anchors": [(0.5, 0), (0.5, 0)],
                           "fill": (255, 255, 255, 230), "border": pg.mkPen(PLOT_COLOURS["marker"])},
            )
            tip = change_text(number, change)
            line.setToolTip(tip)
            line.label.setToolTip(tip)
            self.plot_item.addItem(line, ignoreBounds=True)
            self.lines.append(line)
            self.changes.append(change)
        if added:
            self.relayout()

    def clear(self) -> None:
        for line in self.lines:
            self.plot_item.removeItem(line)
        self.lines.clear()
        self.changes.clear()
        self._layout_key = None

    def relayout(self, *_: object) -> None:
        """Give each change a badge, or a share of its neighbour's, so that no two badges overlap at the
        view's present scale and none is cut by its edges."""
        if not self.lines:
            return
        vb = self.plot_item.vb
        (x0, x1), _ = vb.viewRange()
        width, height = vb.width(), vb.height()
        key = (x0, x1, width, height, len(self.lines))
        if key == self._layout_key or width <= 0 or height <= 0 or x1 <= x0:
            return
        self._layout_key = key
        labels = [line.label for line in self.lines]
        text_item = labels[0].textItem
        n = len(labels)
        # Wide enough for the widest text a badge can get ("12–14"), so a grown badge still fits its room.
        badge_w = (QFontMetricsF(text_item.font()).horizontalAdvance(f"{n}–{n}")
                   + 2 * text_item.document().documentMargin() + 2)
        badge_h = max(label.boundingRect().height() for label in labels)
        rows = max(1, min(BADGE_ROWS_MAX, int((height * 0.6) // (badge_h + BADGE_GAP_PX))))
        xs = [(c.iteration - x0) / (x1 - x0) * width for c in self.changes]
        for badge in place_badges(xs, badge_w, rows):
            first = labels[badge.members[0]]
            for i in badge.members[1:]:
                labels[i].setVisible(False)
            first.setFormat(badge.text())
            first.setToolTip("\n".join(change_text(i + 1, self.changes[i]) for i in badge.members))
            half = badge_w / 2
            anchor = (0.0, 0.0) if badge.x_px < half else (1.0, 0.0) if badge.x_px > width - half else (0.5, 0.0)
            first.anchors = [anchor, anchor]
            first.setVisible(True)
            first.setPosition(1.0 - badge.row * (badge_h + BADGE_GAP_PX) / height)


class ChangeList(ElidedLabel):
    """Every control change of the run on one line, by the numbers the plots' badges show. When the line is
    too short the oldest give way ("…" on the left); the tooltip lists them all."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("", parent, mode=Qt.TextElideMode.ElideLeft)
        self.setStyleSheet("color:#333; padding:0 4px")
        self._shown_count = 0
        self.hide()

    def show_changes(self, changes: list[Marker]) -> None:
        if len(changes) == self._shown_count:
            return
        self._shown_count = len(changes)
        self.setVisible(bool(changes))
        entries = [change_text(i + 1, c) for i, c in enumerate(changes)]
        self.set_spans([Span("control changes:  ", bold=True), Span("   ".join(entries), elide=True)]
                       if entries else [])
        self.setToolTip("<br>".join(html.escape(e) for e in entries))
