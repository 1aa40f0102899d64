"""Shared set-up for the live plots: fast defaults, an iteration x axis, and control-change markers."""

from __future__ import annotations

import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QWidget

from ..run_data import ControlChange, RunData
from ..theme import PLOT_BACKGROUND, PLOT_COLOURS, PLOT_FOREGROUND

pg.setConfigOptions(antialias=False, background=PLOT_BACKGROUND, foreground=PLOT_FOREGROUND)


PEN_STYLES = {"solid": Qt.PenStyle.SolidLine, "dash": Qt.PenStyle.DashLine, "dot": Qt.PenStyle.DotLine,
              "dashdot": Qt.PenStyle.DashDotLine}


def pen(colour: str, width: float = 1.5, style: str = "solid") -> object:
    return pg.mkPen(colour, width=width, style=PEN_STYLES[style])


class LivePlot(pg.PlotWidget):
    """A PlotWidget whose curves redraw from RunData columns; subclasses implement ``update_from``."""

    title_text = ""

    def __init__(self, parent: QWidget | None = None, x_label: str = "iteration") -> None:
        super().__init__(parent)
        self.plot_item = self.getPlotItem()
        self.plot_item.setTitle(self.title_text, size="9pt")
        self.plot_item.showGrid(x=True, y=True, alpha=0.2)
        self.plot_item.setLabel("bottom", x_label)
        self.plot_item.setDownsampling(auto=True, mode="peak")
        self.plot_item.setClipToView(True)
        self.plot_item.addLegend(offset=(5, 5), labelTextSize="8pt", verSpacing=-6,
                                 brush=(255, 255, 255, 190))
        self.setMinimumHeight(150)
        self.markers: list[pg.InfiniteLine] = []
        self._version = -1

    def curve(self, name: str, colour: str, width: float = 1.5, style: str = "solid", **kw: object):
        item = self.plot_item.plot([], [], name=name, pen=pen(colour, width, style), **kw)
        item.setDownsampling(auto=True, method="peak")
        item.setClipToView(True)
        return item

    def sync_markers(self, changes: list[ControlChange]) -> None:
        """One labelled vertical line per control change (only new ones are added)."""
        for change in changes[len(self.markers):]:
            line = pg.InfiniteLine(
                pos=change.iteration, angle=90, movable=False,
                pen=pg.mkPen(PLOT_COLOURS["marker"], width=1, style=Qt.PenStyle.DashLine),
                label=change.label,
                labelOpts={"position": 0.92, "color": PLOT_COLOURS["marker"], "anchors": [(0, 1), (0, 1)],
                           "fill": (255, 255, 255, 200)},
            )
            line.setToolTip(f"iteration {change.iteration}: {change.label}")
            self.plot_item.addItem(line, ignoreBounds=True)
            self.markers.append(line)

    def reset(self) -> None:
        for m in self.markers:
            self.plot_item.removeItem(m)
        self.markers.clear()
        self._version = -1

    def refresh(self, data: RunData) -> None:
        if data.version == self._version:
            return
        self._version = data.version
        self.update_from(data)
        self.sync_markers(data.control_changes)

    def update_from(self, data: RunData) -> None:
        raise NotImplementedError

