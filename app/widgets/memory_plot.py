"""Plot 3: memory residency per iteration — whatever byte counters the sampler joined to the records
(device used/free, each model's weights and KV cache, host RSS) on the left axis in GiB, transfer rates
(PCIe RX/TX) on the right in MiB/s — with paging-detector flags as shaded bands (hover for the sentence)."""

from __future__ import annotations

import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtWidgets import QWidget

from specscope.app.run_data import FlagBand, RunData
from specscope.app.theme import MEMORY_OWNER_COLOURS, MEMORY_SPARE_COLOURS, MEMORY_STYLES, PAGING_BAND_RGBA
from specscope.app.widgets.flag_bands import FlagBandsItem, ShadedBand
from specscope.app.widgets.plot_base import LivePlot, RangeFollower, pen, settle, thin_out
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


# Per-record constants and ever-growing counters: in the trace, not on the plot (they would flatten it).
NOT_PLOTTED = ("_step_read_bytes", "_bandwidth_bytes_per_s", "host_read_bytes", "host_rchar_bytes",
               "io_rchar_bytes")


def plotted(key: str) -> bool:
    return "bytes" in key and not key.endswith(NOT_PLOTTED)


def is_rate(key: str) -> bool:
    return key.endswith("_per_s")


SPARE_SERIES = 12  # curves made ahead: every memory counter a CPU run reports, and most of a GPU run's


def band_tooltip(band: FlagBand) -> str:
    text = f"iterations {band.start}–{band.end}: {band.sentence}"
    if band.count > 1:
        text += f"\n… {band.count} flags in this band; the last: {band.last_sentence}"
    return text


class MemoryPlot(LivePlot):
    title_text = "Memory residency (GiB; rates MiB/s right)"

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
        self.owner_colours: dict[str, str] = {}
        self.band_item = FlagBandsItem(PAGING_BAND_RGBA)
        self.band_item.setZValue(-10)
        pi.addItem(self.band_item, ignoreBounds=True)
        pi.hideAxis("right")  # shown once a rate series (PCIe MiB/s) exists: on CPU there is none

    def empty_text(self, data: RunData | None) -> str | None:
        if data is not None and len(data) and not any(plotted(k) for k in data.memory):
            return "no memory samples in these records"
        return super().empty_text(data)

    def _sync_views(self) -> None:
        self.right.setGeometry(self.plot_item.vb.sceneBoundingRect())
        self.right.linkedViewChanged(self.plot_item.vb, self.right.XAxis)

    def _new_curve(self) -> pg.PlotDataItem:
        item = pg.PlotDataItem([], [])
        thin_out(item)
        self.plot_item.addItem(item)
        return item

    def _series(self, key: str) -> pg.PlotDataItem:
        item = self.series.get(key)
        if item is None:
            owner = series_owner(key)
            colour, style = self._style_for(owner)
            name = series_name(key, owner)
            item = self._spare.pop() if self._spare else self._new_curve()
            item.setPen(pen(colour, 1.5, style))
            if is_rate(key):
                self.plot_item.removeItem(item)
                self.plot_item.showAxis("right")
                self.right.addItem(item)
            self.add_key(name, colour, style, group=owner, show=False)  # update_from lays the key out once
            self.series[key] = item
        return item

    def _style_for(self, owner: str) -> tuple[str, str]:
        """The owner's colour and the next dash pattern not yet used in its group."""
        if owner not in self.owner_colours:
            named = MEMORY_OWNER_COLOURS.get(owner)
            spare = [c for c in MEMORY_SPARE_COLOURS if c not in self.owner_colours.values()]
            self.owner_colours[owner] = named or (spare[0] if spare else MEMORY_SPARE_COLOURS[0])
        used = sum(1 for k in self.keys if k.group == owner)
        return self.owner_colours[owner], MEMORY_STYLES[used % len(MEMORY_STYLES)]

    def update_from(self, data: RunData) -> None:
        x = data.col("iteration")
        if len(x) < self._drawn:  # another run's records: the ranges start over as the points do
            self.follower.reset()
            self.right_follower.reset()
        self._drawn = len(x)
        n_keys = len(self.keys)
        for key, column in data.memory.items():
            if not plotted(key):
                continue
            points = self._points.get(key)
            if points is None:
                points = self._points[key] = TurningPoints(MIB if is_rate(key) else GIB)
            added = points.update(column, x)
            self._series(key).setData(points.x, points.y, connect="finite")
            (self.right_follower if is_rate(key) else self.follower).include(added)
        if len(self.keys) != n_keys:  # new series: their key, laid out once for all of them
            self._show_keys()
        self.right_follower.apply(float(x[-1]) if len(x) else 0.0)
        settle(self.right)
        self._sync_bands(data.flag_bands)

    @property
    def bands(self) -> list[ShadedBand]:
        return self.band_item.bands

    def _sync_bands(self, bands: list[FlagBand]) -> None:
        # The last band may still be growing: update it in place, then add new ones.
        shown = self.band_item.bands
        fresh = [ShadedBand(b.start - 0.5, b.end + 0.5, band_tooltip(b))
                 for b in bands[max(0, len(shown) - 1):]]
        if fresh and fresh != shown[-1:]:
            shown[max(0, len(shown) - 1):] = fresh
            self.band_item.changed()

    def reset(self) -> None:
        super().reset()
        self.right_follower.reset()
        self.band_item.clear()
        self._points.clear()
        self._drawn = 0
        for item in self.series.values():
            item.setData([], [])
        if not any(is_rate(k) for k in self.series):
            self.plot_item.hideAxis("right")
