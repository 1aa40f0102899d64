"""Plot 3: memory residency per iteration — the models' own bytes (each model's weights by place, its KV cache,
what sits behind offload hooks) on the left axis in GiB, what each step read (offload hooks, storage) and
transfer rates (PCIe RX/TX) on the right in MiB/s — with paging, the drill and a busy machine as bands in
lanes of their own (hover for the sentence).

The machine's totals (host RSS and available memory, swap, a device's used and free) are drawn on request
(the "machine totals" box): host available memory is tens of GiB, and on the same axis a model's weights
and a drill's move from host to disk lay flat along the bottom."""

from __future__ import annotations

import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QCheckBox, QWidget

from specscope.app.run_data import RunData
from specscope.app.theme import MEMORY_OWNER_COLOURS, MEMORY_SPARE_COLOURS, MEMORY_STYLES, MEMORY_TOTAL_COLOURS
from specscope.app.widgets.flag_bands import FlagLanes, ShadedBand
from specscope.app.widgets.plot_base import KeyEntry, LivePlot, RangeFollower, pen, settle, thin_out
from specscope.app.widgets.turning_points import TurningPoints
from specscope.core.units import GIB, MIB


def series_label(key: str) -> str:
    """'gpu0_used_bytes' -> 'gpu0 used'; 'pcie0_rx_bytes_per_s' -> 'pcie0 rx'."""
    name = key.removesuffix("_bytes_per_s").removesuffix("_per_s").removesuffix("_bytes")
    return name.replace("_", " ")


def series_owner(key: str) -> str:
    """Whose memory a series is, the group it has in the key: 'target_kv_bytes' -> 'target',
    'swap_used_bytes' -> 'host', 'gpu0_used_bytes' -> 'device', 'pcie0_rx_bytes_per_s' -> 'pcie'."""
    head = key.split("_", 1)[0]
    if head in ("host", "swap"):
        return "host"
    if head.startswith(("gpu", "cuda", "device", "nvml", "mps")):
        return "device"
    if head.startswith("pcie"):
        return "pcie"
    return head


def series_name(key: str, owner: str) -> str:
    """The series' name inside its owner's group: 'target_kv_bytes' -> 'kv'; a rate says so."""
    label = series_label(key)
    short = label.removeprefix(owner + " ") if owner in ("target", "draft", "host", "io") else label
    return short + ("/s (right)" if is_rate(key) else "")


# Per-record constants and ever-growing counters: in the trace, not on the plot (they would flatten it). The
# bytes a step read are plotted as their rate (``{model}_read_bytes_per_s``, core.memory.detector), not as a
# count in GiB beside the weights.
NOT_PLOTTED = ("_step_read_bytes", "_bandwidth_bytes_per_s", "host_read_bytes", "host_rchar_bytes",
               "io_rchar_bytes", "_offload_read_bytes", "io_read_bytes")
TOTAL_OWNERS = ("host", "device")  # the machine's totals, not a model's bytes: drawn on request


def plotted(key: str) -> bool:
    return "bytes" in key and not key.endswith(NOT_PLOTTED)


def is_rate(key: str) -> bool:
    return key.endswith("_per_s")


def is_total(key: str) -> bool:
    """The machine's memory (host RSS and available, swap, a device's used and free), not a model's."""
    return series_owner(key) in TOTAL_OWNERS


SPARE_SERIES = 16  # curves made ahead: every memory counter a CPU run reports, and most of a GPU run's
# and rate curves made ahead in the right-hand view: a CPU run's 13-14 series have two rates (host reads and
# rchar; a model's reads under offload), and a curve made or moved between the views at the first records
# were 20 of the 85 profiled ms of the window's longest tick after Start (issue 40, docs/bench-gui.md)
SPARE_RATE_SERIES = 2


TOTALS_TEXT = "machine totals"


class MemoryPlot(LivePlot):
    title_text = "Models' memory (GiB; reads MiB/s right)"
    reserved_key_lines = 2  # the draft's, the target's and the reads' entries, found in the first records
    totals_toggled = Signal(bool)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pi = self.plot_item
        pi.setLabel("left", "GiB")
        self.right = pg.ViewBox()
        pi.showAxis("right")
        pi.scene().addItem(self.right)
        pi.getAxis("right").linkToView(self.right)
        pi.getAxis("right").setLabel("MiB/s")
        self.right.setXLink(pi)
        pi.vb.sigResized.connect(self._sync_views)
        self.right_follower = RangeFollower(self.right, x=False)
        self.series: dict[str, pg.PlotDataItem] = {}
        # Each series as the points where it turns (app/widgets/turning_points.py), and the records drawn.
        self._points: dict[str, TurningPoints] = {}
        self._drawn = 0
        # Curves made with the window, given a key when the first records say which counters there are:
        # making and adding a dozen at once was the longest stretch of the GUI thread after Start.
        self._spare = [self._new_curve() for _ in range(SPARE_SERIES)]
        self._spare_rates = [self._new_curve(self.right) for _ in range(SPARE_RATE_SERIES)]
        self.owner_colours: dict[str, str] = {}
        self._entries: dict[str, KeyEntry] = {}  # each series' key entry (the key lists the series drawn)
        self.lanes = FlagLanes(pi)
        self.band_item = self.lanes.paging
        self.show_totals = False
        self.totals_box = QCheckBox(TOTALS_TEXT, self)
        self.totals_box.setToolTip("Also draw the machine's memory: host RSS and available memory, swap, and a "
                                   "device's used and free memory (the left axis then spans them)")
        self.totals_box.setStyleSheet("QCheckBox { font-size: 8pt; background: rgba(255,255,255,200); }")
        self.totals_box.toggled.connect(self.set_show_totals)
        self.totals_box.adjustSize()
        pi.hideAxis("right")  # shown once a rate series (what a step read, PCIe) exists, or a run is live
        self._live = False

    def empty_text(self, data: RunData | None) -> str | None:
        if data is not None and len(data) and not any(plotted(k) for k in data.memory):
            return "no memory samples in these records"
        if data is not None and len(data) > 1 and not any(plotted(k) and self._drawn_series(k) for k in data.memory):
            return f"these records hold only the machine's memory: tick '{TOTALS_TEXT}' to draw it"
        return super().empty_text(data)

    def resizeEvent(self, ev: object) -> None:
        super().resizeEvent(ev)  # type: ignore[arg-type]
        if "totals_box" in self.__dict__:
            box = self.totals_box
            box.move(self.width() - box.width() - 4, self.height() - box.height() - 2)

    def set_show_totals(self, on: bool) -> None:
        """Draw the machine's totals too (or again only the models' bytes): the axes span what is drawn."""
        if on == self.show_totals:
            return
        self.show_totals = on
        if self.totals_box.isChecked() != on:
            self.totals_box.setChecked(on)
        self.follower.reset()
        self.right_follower.reset()
        for key, item in self.series.items():
            shown = self._drawn_series(key)
            item.setVisible(shown)
            points = self._points.get(key)
            if shown and points is not None:
                item.setData(points.x, points.y, connect="finite")  # hidden, its curve was not kept up to date
                (self.right_follower if is_rate(key) else self.follower).include(points.y)
        self._sync_keys()
        self._version = -1  # the next frame redraws: the empty note and ranges follow what is drawn now
        self.follower.apply(self.follower.x_max)
        self.right_follower.apply(self.follower.x_max)
        self.totals_toggled.emit(on)

    def _drawn_series(self, key: str) -> bool:
        return self.show_totals or not is_total(key)

    def _sync_keys(self) -> None:
        self.keys = [entry for key, entry in self._entries.items() if self._drawn_series(key)]
        self._show_keys()

    def _sync_views(self) -> None:
        self.right.setGeometry(self.plot_item.vb.sceneBoundingRect())
        self.right.linkedViewChanged(self.plot_item.vb, self.right.XAxis)

    def _new_curve(self, view: pg.ViewBox | None = None) -> pg.PlotDataItem:
        """A curve in ``view`` (the right-hand one for rates; by default the plot's own, on the left axis)."""
        item = pg.PlotDataItem([], [])
        thin_out(item)
        (view or self.plot_item).addItem(item)
        return item

    def _series(self, key: str) -> pg.PlotDataItem:
        item = self.series.get(key)
        if item is None:
            owner = series_owner(key)
            colour, style = self._style_for(owner)
            name = series_name(key, owner)
            if is_rate(key):
                item = self._spare_rates.pop() if self._spare_rates else self._new_curve(self.right)
                if not self.plot_item.getAxis("right").isVisible():
                    self.plot_item.showAxis("right")
            else:
                item = self._spare.pop() if self._spare else self._new_curve()
            item.setPen(pen(colour, 2.0 if is_rate(key) else 1.5, style))
            item.setVisible(self._drawn_series(key))
            self._entries[key] = KeyEntry(name, colour, style, owner)  # update_from lays the key out once
            self.series[key] = item
        return item

    def _style_for(self, owner: str) -> tuple[str, str]:
        """The owner's colour and the next dash pattern not yet used in its group; each of the machine's totals
        a colour of its own (solid)."""
        if owner in TOTAL_OWNERS:
            used = sum(1 for k in self._entries if is_total(k))
            return MEMORY_TOTAL_COLOURS[used % len(MEMORY_TOTAL_COLOURS)], "solid"
        if owner not in self.owner_colours:
            named = MEMORY_OWNER_COLOURS.get(owner)
            spare = [c for c in MEMORY_SPARE_COLOURS if c not in self.owner_colours.values()]
            self.owner_colours[owner] = named or (spare[0] if spare else MEMORY_SPARE_COLOURS[0])
        used = sum(1 for k in self._entries.values() if k.group == owner)
        return self.owner_colours[owner], MEMORY_STYLES[used % len(MEMORY_STYLES)]

    def update_from(self, data: RunData) -> None:
        x = data.col("iteration")
        if len(x) < self._drawn:  # another run's records: the ranges start over as the points do
            self.follower.reset()
            self.right_follower.reset()
        self._drawn = len(x)
        n_entries = len(self._entries)
        for key, column in data.memory.items():
            if not plotted(key):
                continue
            points = self._points.get(key)
            if points is None:
                points = self._points[key] = TurningPoints(MIB if is_rate(key) else GIB)
            added = points.update(column, x)
            item = self._series(key)
            if not self._drawn_series(key):
                continue  # a hidden total: its points are kept, and handed to its curve when it is shown
            if len(added):  # a turn that added no record to this series leaves its curve as drawn
                item.setData(points.x, points.y, connect="finite")
                (self.right_follower if is_rate(key) else self.follower).include(added)
        if len(self._entries) != n_entries:  # new series: their key, laid out once for all of them
            self._sync_keys()
        self.right_follower.apply(float(x[-1]) if len(x) else 0.0)
        settle(self.right)
        self.lanes.sync(data)

    def expect_rates(self, live: bool) -> None:
        """While a run can start or is live the right (MiB/s) axis is there before its first rate: appearing
        with the first records it re-laid the plot out (every axis and curve drawn again) in a run's first
        second. With no rate series once the run is over, it goes."""
        self._live = live
        shown = self.plot_item.getAxis("right").isVisible()
        if live and not shown:  # pyqtgraph redraws an axis' picture at every showAxis, shown or not
            self.plot_item.showAxis("right")
        elif not live and shown and not any(is_rate(k) for k in self.series):
            self.plot_item.hideAxis("right")

    @property
    def bands(self) -> list[ShadedBand]:
        """The paging bands drawn (busy and drill bands are in ``lanes``)."""
        return self.lanes.paging.bands

    def reset(self) -> None:
        super().reset()
        self.right_follower.reset()
        self.lanes.clear()
        self._points.clear()
        self._drawn = 0
        for item in self.series.values():
            item.setData([], [])
        if not self._live and not any(is_rate(k) for k in self.series):
            self.plot_item.hideAxis("right")
