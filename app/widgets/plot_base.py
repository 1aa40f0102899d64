"""Shared set-up for the live plots: fast defaults, an iteration x axis, and control-change markers."""

from __future__ import annotations

import html
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pyqtgraph as pg  # type: ignore[import-untyped]
from PySide6.QtCore import QRect, QRectF, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPen, QResizeEvent, QTextDocument
from PySide6.QtWidgets import QGraphicsItem, QLabel, QWidget

from specscope.app.run_data import Marker, RunData
from specscope.app.theme import PLOT_BACKGROUND, PLOT_FOREGROUND
from specscope.app.widgets.markers import ChangeMarkers

pg.setConfigOptions(antialias=False, background=PLOT_BACKGROUND, foreground=PLOT_FOREGROUND)


PEN_STYLES = {"solid": Qt.PenStyle.SolidLine, "dash": Qt.PenStyle.DashLine, "dot": Qt.PenStyle.DotLine,
              "dashdot": Qt.PenStyle.DashDotLine, "dashdotdot": Qt.PenStyle.DashDotDotLine,
              "fill": Qt.PenStyle.SolidLine}


def pen(colour: str, width: float = 1.5, style: str = "solid") -> object:
    return pg.mkPen(colour, width=width, style=PEN_STYLES[style])


# pyqtgraph's automatic downsampling starts at five points per pixel. The 1.5-2.5 px pens' stroke costs per
# point, and 'peak' keeps each bucket's lowest and highest value, so one bucket per pixel draws the same pixels
# with a fifth of the points (a live plot's repaint was the GUI thread's longest stretch, docs/bench-gui.md).
BUCKETS_PER_PIXEL = 1.0


def thin_out(item: pg.PlotDataItem) -> None:
    """Draw only the points in view, at most about one bucket (its lowest and highest point) per pixel."""
    item.setDownsampling(auto=True, method="peak")
    item.opts["autoDownsampleFactor"] = BUCKETS_PER_PIXEL  # no setter: pyqtgraph reads it at each redraw
    item.setClipToView(True)


IDLE_TEXT = "no data yet: press Start (F5) to decode the prompt"
ONE_ITERATION_TEXT = ("one iteration so far: a line needs two (its numbers are in the status bar, its tokens "
                      "below)")
PLOT_MIN_HEIGHT = 100  # three rows of plots must leave the token view a real share at 1280x720
KEY_GLYPHS = {"solid": "━━", "dash": "╍╍", "dot": "┅┅", "dashdot": "━╍", "dashdotdot": "━┅", "fill": "■"}
KEY_FONT_PT = 8
KEY_LINE_PX = 16  # one line of the key under the title
MIN_VIEW_PX = 60  # the key folds before the data area gets less than this
AXES_PX = 46  # the bottom axis with its title, and the plot's margins


@dataclass(frozen=True)
class KeyEntry:
    name: str
    colour: str
    style: str = "solid"
    group: str = ""  # entries of a group share one chunk of the key ("host: ━━ rss ╍╍ available")


@dataclass(frozen=True)
class KeyChunk:
    html: str
    plain: str  # measures the chunk's width
    count: int  # entries in it
    starts_group: bool = True  # a wider gap before it than between the entries of one group


def key_chunks(keys: list[KeyEntry]) -> list[KeyChunk]:
    """One chunk per entry, the entries of a group together (in order of the group's first entry) and the
    group's name in bold before its first one, so a long group can wrap between its entries."""
    order: list[str] = []
    members: dict[str, list[KeyEntry]] = {}
    for i, k in enumerate(keys):
        tag = k.group or f"\0{i}"
        if tag not in members:
            order.append(tag)
            members[tag] = []
        members[tag].append(k)
    chunks = []
    for tag in order:
        for j, k in enumerate(members[tag]):
            glyph = KEY_GLYPHS.get(k.style, "━━")
            chunk_html = f'<span style="color:{k.colour}">{glyph}</span>&nbsp;{html.escape(k.name)}'
            plain = f"{glyph} {k.name}"
            if j == 0 and k.group:
                chunk_html, plain = f"<b>{html.escape(k.group)}</b>&nbsp;{chunk_html}", f"{k.group} {plain}"
            chunks.append(KeyChunk(chunk_html, plain, 1, starts_group=j == 0))
    return chunks


GROUP_GAP = "&nbsp;&nbsp;&nbsp;&nbsp;"
ENTRY_GAP = "&nbsp;&nbsp;"


PACK_SLACK_PX = 2.0  # pieces measured one by one add up a fraction of a pixel short of the line drawn


def pack_key_lines(chunks: list[KeyChunk], width_px: float, measure: Callable[[str], float]) -> list[list[KeyChunk]]:
    """The chunks greedily packed into lines no wider than ``width_px`` (a chunk wider than a line gets a
    line of its own); ``measure`` gives the width of a piece of the key's HTML as the title draws it."""
    lines: list[list[KeyChunk]] = []
    used = 0.0
    for chunk in chunks:
        w = measure(chunk.html)
        gap = measure(GROUP_GAP if chunk.starts_group else ENTRY_GAP)
        if lines and used + gap + w <= width_px - PACK_SLACK_PX:
            lines[-1].append(chunk)
            used += gap + w
        else:
            lines.append([chunk])
            used = w
    return lines


def key_line_html(line: list[KeyChunk]) -> str:
    return "".join((("" if i == 0 else GROUP_GAP if c.starts_group else ENTRY_GAP) + c.html)
                   for i, c in enumerate(line))


# A key line with nothing to show: a key glyph in the background's colour, so that it is as tall as a line of
# entries (the glyphs come from a taller fallback font than the text's).
BLANK_KEY_LINE = f"<span style='color:{PLOT_BACKGROUND}'>{KEY_GLYPHS['solid']}</span>"


def title_html(title: str, lines: list[list[KeyChunk]], folded: int = 0, headline: str = "",
               headline_line: bool = False, key_lines: int = 0) -> str:
    """The plot's title, the snapshot's headline number on its own line (so neither is cut), and its key on
    the next line(s); ``folded`` entries are left to the tooltip. ``headline_line``: the headline's line is
    there (blank) before the headline is, so its arrival changes no height; ``key_lines``: as many key lines
    are there (blank where the key has fewer), for the same reason."""
    head = (f"<br><span style='font-size:{KEY_FONT_PT}pt'>{html.escape(headline) or '&nbsp;'}</span>"
            if headline or headline_line else "")
    rows = [key_line_html(line) for line in lines]
    rows += [BLANK_KEY_LINE] * (key_lines - len(rows))
    if not rows:
        hint = f" <span style='font-size:{KEY_FONT_PT}pt'><i>(key: hover the title)</i></span>" if folded else ""
        return f"<b>{html.escape(title)}</b>{hint}{head}"
    if folded and lines:
        rows[-1] += f"&nbsp;&nbsp;&nbsp;&nbsp;<i>… {folded} more (hover the title)</i>"
    return (f"<b>{html.escape(title)}</b>{head}<br><span style='font-size:{KEY_FONT_PT}pt'>" + "<br>".join(rows)
            + "</span>")


def fit_title(label: pg.LabelItem, width_px: float) -> float:
    """Wrap a plot's title at ``width_px`` when it is wider (centred), and return its height. pyqtgraph
    makes a title's natural width the plot's minimum width, so a long title made a plot in a narrow column
    wider than the column, its right side cut off."""
    item = label.item
    item.setTextWidth(-1)
    if item.boundingRect().width() > width_px:
        item.setTextWidth(width_px)
        option = item.document().defaultTextOption()
        option.setAlignment(Qt.AlignmentFlag.AlignHCenter)
        item.document().setDefaultTextOption(option)
    label.updateMin()
    label.resizeEvent(None)
    return float(item.boundingRect().height())


class EmptyNote(QLabel):
    """A readable sentence over the middle of an empty plot ("no data yet"), in place of bare axes.

    A widget on top of the plot, not a scene item, so it stays centred and unclipped whatever the view range
    and ignores the mouse. It is centred on the data area, between the axes: centred on the whole plot it
    covered the left axis' tick labels ("0.█")."""

    STYLE = "color:#555; background:rgba(255,255,255,215); padding:4px 10px; border:1px solid #ccc;"
    SIDE_GAP_PX = 6  # between the note and the data area's edges

    def __init__(self, plot: QWidget, text: str) -> None:
        super().__init__(text, plot)
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.setStyleSheet(self.STYLE)
        self.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self._place()  # the plot calls place() again from its resizeEvent (no event filter: see there)

    def set_text(self, text: str) -> None:
        if text != self.text():
            self.setText(text)
            self._place()

    def place(self) -> None:
        self._place()

    def _place(self) -> None:
        parent = self.parentWidget()
        if parent is None:
            return
        area = data_area(parent)
        width = min(max(160, area.width() - 2 * self.SIDE_GAP_PX), 420)
        self.setFixedWidth(width)
        # the height its lines take at that width (adjustSize kept the one-line height of a wider note, and a
        # narrow data area's three lines were cut top and bottom)
        self.setFixedHeight(max(self.heightForWidth(width), self.minimumSizeHint().height()))
        x = area.x() + (area.width() - self.width()) // 2
        y = area.y() + (area.height() - self.height()) // 2
        # where the data area is narrower or shorter than the sentence, it stays on the plot
        self.move(max(0, min(x, parent.width() - self.width())), max(0, min(y, parent.height() - self.height())))


def data_area(plot: QWidget) -> QRect:
    """The data area (the view box, between the axes) of a plot widget, in its coordinates; the whole widget
    less a margin where it is not a plot or not laid out yet."""
    if isinstance(plot, pg.PlotWidget):
        item = plot.getPlotItem()
        item.layout.activate()  # a resize lays the plot out on the next event: the view box's place now
        rect = plot.mapFromScene(item.vb.sceneBoundingRect()).boundingRect()
        if rect.width() > 40 and rect.height() > 10 and plot.rect().contains(rect.center()):
            return rect
    return plot.rect().adjusted(20, 0, -20, 0)


RIGHT_MARGIN_PX = 12  # half the last tick label ("20", "1.0") past the data area's right edge


def room_for_last_tick(plot_item: pg.PlotItem) -> None:
    """A right margin for the bottom axis' last label: centred on the data area's edge, its right half was cut
    by the plot's border in the right-hand column."""
    left, top, _, bottom = plot_item.layout.getContentsMargins()
    plot_item.layout.setContentsMargins(left, top, RIGHT_MARGIN_PX, bottom)


GRID_ALPHA = 0.2  # the grid's strength: the axis colour at this opacity over the plot's background


def opaque_over_background(colour: QColor, background: QColor) -> QColor:
    """The opaque colour that ``colour`` (with its alpha) shows over ``background``."""
    a = colour.alphaF()
    return QColor(*(round(b + (c - b) * a) for c, b in ((colour.red(), background.red()),
                                                       (colour.green(), background.green()),
                                                       (colour.blue(), background.blue()))))


class GridAxis(pg.AxisItem):
    """An axis whose grid lines are drawn in opaque colours (the shade pyqtgraph's translucent lines show over
    the plot's background), under the data rather than over it.

    Qt's raster engine draws a translucent one-pixel line about ten times slower than an opaque one: with
    pyqtgraph's translucent grid, regenerating an axis picture (each time its range steps) cost 8-12 ms in a
    760x300 plot, and 3 ms with these lines (docs/bench-gui.md)."""

    def generateDrawSpecs(self, p: object) -> object:
        specs = super().generateDrawSpecs(p)
        if specs is None or self.grid is False:
            return specs
        axis_spec, tick_specs, text_specs = specs
        return axis_spec, [(self._opaque(tick_pen), p1, p2) for tick_pen, p1, p2 in tick_specs], text_specs

    _opaque_pens: ClassVar[dict[tuple[int, int], QPen]] = {}  # (a translucent pen's rgba, its width): opaque

    def _opaque(self, tick_pen: QPen) -> QPen:
        colour = tick_pen.color()
        if colour.alpha() == 255:
            return tick_pen
        key = (colour.rgba(), tick_pen.width())
        opaque = self._opaque_pens.get(key)
        if opaque is None:
            opaque = QPen(tick_pen)
            opaque.setColor(opaque_over_background(colour, QColor(PLOT_BACKGROUND)))
            self._opaque_pens[key] = opaque
        return opaque


def grid_axes() -> dict[str, GridAxis]:
    """The axes a plot with a grid is made with: ``pg.PlotWidget(axisItems=grid_axes())``."""
    return {"left": GridAxis("left"), "bottom": GridAxis("bottom")}


AXES_UNDER_VIEW_Z = -200.0  # pyqtgraph puts its view box at -100 and the axes at 0.5 (over the data)


def show_grid(plot_item: pg.PlotItem, x: bool = True, y: bool = True) -> None:
    """The grid of a plot made with ``grid_axes()``, opaque and drawn under the curves, bars and bands."""
    plot_item.showGrid(x=x, y=y, alpha=GRID_ALPHA)
    for name in ("left", "bottom"):
        plot_item.getAxis(name).setZValue(AXES_UNDER_VIEW_Z)


def plain_axes(plot_item: pg.PlotItem) -> None:
    """Every plot's axes:
    - no automatic SI prefix: the axis label already gives the unit, and pyqtgraph would turn ×0.5 into
      "500 (x0.001)";
    - painted from a pixmap cache: replaying the axis picture, text included, costs more than the curves, and
      an axis only changes when its range does;
    - keeping the room their widest tick text needed (pyqtgraph gives it back when the text narrows): an axis
      that narrows or widens re-lays out its plot, the view moves and every axis picture and curve is drawn
      again. A run's first records narrowed the empty plot's '0.8' to '5' in all six plots at once, the longest
      stretch of a run's first second (issue 40)."""
    for axis in plot_item.axes.values():
        item = axis["item"]
        item.enableAutoSIPrefix(False)
        item.setCacheMode(QGraphicsItem.CacheMode.DeviceCoordinateCache)
        item.setStyle(autoReduceTextSpace=False)


def settle(view: pg.ViewBox) -> None:
    """Apply a view's pending range and transform now. pyqtgraph defers them to the paint, where the items
    they move ask for a second paint of the whole plot on the next frame."""
    view.prepareForPaint()


ROUND_MANTISSAS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0)


def round_up(value: float, mantissas: tuple[float, ...] = ROUND_MANTISSAS) -> float:
    """The least round number (a mantissa times a power of ten) at or above ``value`` (1.0 for none above 0)."""
    if not value > 0:
        return 1.0
    base = 10.0 ** math.floor(math.log10(value))
    return next(m * base for m in mantissas if m * base >= value * (1 - 1e-12))


def step_up(value: float) -> float:
    """A round bound at least 5% above ``value`` (so a growing series crosses it only now and then)."""
    return round_up(value * 1.05) if value > 0 else 1.0


# The live plots' x axis (iterations) in coarse steps, each about 1.5 times the last: a step re-renders every
# axis picture of the plot (its tick text, 3-6 ms each on 2 busy cores) and every curve's clipped, downsampled
# points, and with step_up's finer bounds a run at 13-46 iterations/s crossed one at most plot turns of its first
# seconds (the memory and stacked time plots' paints, p99 ~23 ms, were the window's dearest; docs/bench-gui.md).
X_MANTISSAS = (1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0)
X_HEADROOM = 1.1  # the newest iteration is never in the right tenth of the plot
X_MIN_SPAN = 30.0  # the first 27 iterations cross no step (a run's first second or two)


def x_bound(last: float) -> float:
    """The right end of a live plot's iteration axis while its newest point is ``last``: a step function of
    ``last``, at least ``X_HEADROOM`` times it, so the axis stays as it is (its picture cached) between steps.
    A run that is not growing (finished, replayed, opened) is fitted closer, with ``step_up``."""
    return max(X_MIN_SPAN, round_up(last * X_HEADROOM, X_MANTISSAS))


class SharedXRange:
    """The per-iteration plots show one iteration range, without pyqtgraph's ``setXLink``.

    A link repaints every linked plot in the frame the range steps: four full paints, axes included, in one
    tick, which was the window's p99 event-loop lateness (about 100 ms on 2 cores). Here each plot's follower
    computes the same round bound and applies it at the plot's own redraw turn, so a step costs one plot's
    paint per tick. A user's zoom or pan in any plot is an interaction, not a tick: it is copied to the
    others at once, and x stops following in all of them until an auto-range ('A') button is pressed."""

    def __init__(self) -> None:
        self.following = True
        self.plots: list[LivePlot] = []

    def add(self, plot: LivePlot) -> None:
        self.plots.append(plot)
        plot.follower.shared_x = self
        plot.plot_item.vb.sigRangeChangedManually.connect(lambda *_: self.copy_from(plot))
        # After pyqtgraph's own handler (connected first): the clicked plot has auto-range on by then.
        plot.plot_item.autoBtn.clicked.connect(lambda *_: self.resume())

    def copy_from(self, source: LivePlot) -> None:
        self.following = False
        x_range = source.plot_item.vb.viewRange()[0]
        for plot in self.plots:
            if plot is not source:
                plot.plot_item.vb.setXRange(*x_range, padding=0)

    def resume(self) -> None:
        """An auto-range button: every plot follows the data's x range again, now (not at its next turn)."""
        self.following = True
        for plot in self.plots:
            plot.follower.shown = None
            plot.follower.apply(plot.follower.x_max)


class RangeFollower:
    """Keeps a view box showing all the data without pyqtgraph's per-frame auto-range, which rescans every
    curve and moves the range on each new point, so the axes (their tick text is the costliest part of a
    repaint) re-render every frame. Here ranges grow in round steps and axes re-render only when a step is
    crossed. Extremes are tracked incrementally: only samples not seen before are scanned.

    Following stops when the user zooms or pans, and resumes when they press the view's auto-range button."""

    def __init__(self, vb: pg.ViewBox, x: bool = True, y: bool = True) -> None:
        self.vb = vb
        self.follow_x = x  # False for a view whose x is linked to another's
        self.follow_y = y
        self.shared_x: SharedXRange | None = None  # x is one range across plots: see SharedXRange
        self.x_max = 0.0  # the last data extent applied
        self.live = False  # the data grows while shown: x in x_bound's coarse steps (else fitted with step_up)
        vb.sigRangeChangedManually.connect(self.stop)
        self.reset()

    def stop(self, *_: object) -> None:
        self.following = False

    def reset(self) -> None:
        self.seen = 0
        self.lo = math.inf
        self.hi = -math.inf
        self.shown: tuple[float, float, float] | None = None
        self.following = True
        self.vb.enableAutoRange(x=False, y=False)

    def observe(self, *columns: np.ndarray) -> None:
        """Fold the unseen tail of each y column (all the same length) into the running extremes."""
        n = min((len(c) for c in columns), default=0)
        if n < self.seen:
            self.reset()
        for c in columns:
            tail = c[self.seen:n]
            if len(tail):
                finite = tail[np.isfinite(tail)]
                if len(finite):
                    self.lo = min(self.lo, float(finite.min()))
                    self.hi = max(self.hi, float(finite.max()))
        self.seen = n

    def include(self, *values: np.ndarray) -> None:
        """Fold the extremes of ``values`` in (for series kept in their own buffers, not columns of the run)."""
        for v in values:
            finite = v[np.isfinite(v)]
            if len(finite):
                self.lo = min(self.lo, float(finite.min()))
                self.hi = max(self.hi, float(finite.max()))

    def apply(self, x_max: float) -> None:
        """Set the range if the data outgrew it (or the user asked for auto-range again)."""
        self.x_max = x_max
        auto = self.vb.autoRangeEnabled()
        if auto[0] or auto[1]:
            self.following = True  # the 'A' button: take over from pyqtgraph again
            if self.shared_x is not None:
                self.shared_x.following = True
            self.vb.enableAutoRange(x=False, y=False)
            self.shown = None
        # x follows the shared range when there is one (a zoom in any plot holds it); y this plot's own zoom.
        x_follows = self.follow_x and (self.shared_x.following if self.shared_x is not None else self.following)
        y_follows = self.follow_y and self.following
        y_lo, y_hi = 0.0, 1.0
        if math.isfinite(self.lo):
            y_lo = 0.0 if self.lo >= 0 else -step_up(-self.lo)
            y_hi = step_up(self.hi)
        old = self.shown or (math.nan, math.nan, math.nan)
        x_hi = x_bound(x_max) if self.live else step_up(x_max)
        new = (x_hi if x_follows else math.nan, y_lo if y_follows else math.nan,
               y_hi if y_follows else math.nan)
        x_moves = x_follows and new[0] != old[0]
        y_moves = y_follows and new[1:] != old[1:]
        self.shown = new
        if not (x_moves or y_moves):
            return
        if x_moves:
            self.vb.setXRange(0.0, new[0], padding=0.02)
        if y_moves:
            self.vb.setYRange(y_lo, y_hi, padding=0)


class LivePlot(pg.PlotWidget):
    """A PlotWidget whose curves redraw from RunData columns; subclasses implement ``update_from``."""

    title_text = ""
    # Key lines kept under the title before the key has entries: a key that comes with the first records
    # (the memory plot's series) then changes no height (a taller title re-lays out the plot and repaints it
    # whole, its axes included, in a run's first second).
    reserved_key_lines = 0

    def __init__(self, parent: QWidget | None = None, x_label: str = "iteration") -> None:
        super().__init__(parent, axisItems=grid_axes())
        self.plot_item = self.getPlotItem()
        self.plot_item.setTitle(self.title_text, size="9pt")
        show_grid(self.plot_item)
        self.plot_item.setLabel("bottom", x_label)
        self.plot_item.setDownsampling(auto=True, mode="peak")
        self.plot_item.setClipToView(True)
        plain_axes(self.plot_item)
        # The key sits under the title, outside the data: a legend box inside the view covered the first
        # bars, the host-available line and the control-change labels.
        self.keys: list[KeyEntry] = []
        self._key_font = QFont(self.font())
        self._key_font.setPointSizeF(KEY_FONT_PT)
        self._key_layout: tuple[int, ...] | None = None
        self._key_widths: dict[str, float] = {}  # a key chunk's HTML -> its width in the title (_key_width)
        self.setMinimumHeight(PLOT_MIN_HEIGHT)
        self.change_markers = ChangeMarkers(self.plot_item)
        self._headline = ""  # as shown: the snapshot's headline number under the title, if any
        self.idle_text = IDLE_TEXT  # what an empty plot says: the window sets it from the run's state
        self._version = -1
        self.follower = RangeFollower(self.plot_item.vb)
        self.empty = EmptyNote(self, self.empty_text(None) or "")

    def resizeEvent(self, ev: QResizeEvent) -> None:
        # A resize handler, not an event filter: a Python event filter on a plot being destroyed crashed
        # PySide6 when the window closed.
        super().resizeEvent(ev)
        if "empty" in self.__dict__:  # resized during construction, before the note exists
            self.empty.place()
            self._show_keys(force=False)  # fewer or more key lines for the new size

    def empty_text(self, data: RunData | None) -> str | None:
        """The sentence the plot shows while it has nothing to draw, or None once it has data."""
        if data is None or not len(data):
            return self.idle_text
        return ONE_ITERATION_TEXT if len(data) == 1 else None

    def set_idle_text(self, text: str, data: RunData | None) -> None:
        """What the plot says while the run has no iteration yet (press Start; waiting for the prefill...)."""
        self.idle_text = text
        self.show_empty(data)

    def show_empty(self, data: RunData | None) -> None:
        text = self.empty_text(data)
        self.empty.setVisible(bool(text))
        if text:
            self.empty.set_text(text)

    def add_key(self, name: str, colour: str, style: str = "solid", group: str = "", show: bool = True) -> None:
        """One more entry in the key; ``show=False`` leaves laying out the title to the caller (one layout for
        many entries: each costs a title layout and a plot re-layout)."""
        self.keys.append(KeyEntry(name, colour, style, group))
        if show:
            self._show_keys()

    def remove_key(self, name: str) -> None:
        self.keys = [k for k in self.keys if k.name != name]
        self._show_keys()

    def _axes_width(self) -> float:
        """The side axes' width: the title and key sit in the data area's column, between them."""
        width = 0.0
        for side in ("left", "right"):
            axis = self.plot_item.getAxis(side)
            if axis.isVisible():
                width += max(float(axis.minimumWidth()), float(axis.geometry().width()), 30.0)
        return width

    def headline_for(self, data: RunData) -> str:
        """The snapshot's headline number under the title, in the one wording every surface uses ('' = none)."""
        return ""

    @property
    def has_headline(self) -> bool:
        """The plot shows a headline once the snapshot has one: its line is kept from the start, so the title
        row never grows mid-run (a taller title re-lays out the plot and repaints its axes)."""
        return type(self).headline_for is not LivePlot.headline_for

    def title_for(self, data: RunData) -> str:
        """The title as it reads: the fixed title and the snapshot's headline (shown on its own line)."""
        headline = self.headline_for(data)
        return f"{self.title_text}: {headline}" if headline else self.title_text

    def refresh_title(self, data: RunData) -> None:
        """Show the snapshot's headline now (every frame: cheap when unchanged), so the titles agree with the
        status bar while the curves redraw at their own turn."""
        self.show_headline(self.headline_for(data))

    def show_headline(self, headline: str) -> None:
        if headline != self._headline:
            self._headline = headline
            self._show_keys()

    def _key_width(self, key_html: str) -> float:
        """A piece of the key as wide as the title draws it: its bold group names, the glyphs from a fallback
        font and the gaps measured by a text layout, not by the text font's metrics (which made a line of the
        key wrap in the title, mid-entry)."""
        width = self._key_widths.get(key_html)
        if width is None:
            doc = QTextDocument()
            doc.setDocumentMargin(0)
            doc.setDefaultFont(self.plot_item.titleLabel.item.font())
            doc.setHtml(f"<span style='font-size:{KEY_FONT_PT}pt; white-space:pre'>{key_html}</span>")
            width = self._key_widths[key_html] = float(doc.idealWidth())
        return width

    def _show_keys(self, force: bool = True) -> None:
        """The key under the title, in as many lines as the plot's height allows while its data area keeps
        MIN_VIEW_PX; what does not fit is folded into the title's tooltip, which always holds the whole key."""
        metrics = QFontMetricsF(self._key_font)
        measure = self._key_width
        chunks = key_chunks(self.keys)
        width = max(100.0, self.width() - 24.0 - self._axes_width())
        # a line of the title has the column less the text item's margins (fit_title wraps at the column)
        line_room = width - 2 * self.plot_item.titleLabel.item.document().documentMargin()
        lines = pack_key_lines(chunks, line_room, measure)
        head_lines = 1 + self.has_headline  # the title, and the headline's line
        room = max(0, int((self.height() - KEY_LINE_PX * head_lines - 4 - AXES_PX - MIN_VIEW_PX) // KEY_LINE_PX))
        layout_key = (len(self.keys), len(lines), room if len(lines) > room else -1, int(width) // 8)
        if not force and layout_key == self._key_layout:
            return
        self._key_layout = layout_key
        folded = 0
        if len(lines) > room:
            # The lines that fit, each leaving room at its end for "… N more: hover" on the last one.
            note = metrics.horizontalAdvance("    … 99 more (hover the title)")
            lines = pack_key_lines(chunks, max(50.0, line_room - note), measure)[:room]
            folded = len(self.keys) - sum(c.count for line in lines for c in line)
        key_lines = max(len(lines), min(self.reserved_key_lines, room))
        self.plot_item.setTitle(title_html(self.title_text, lines, folded, self._headline, self.has_headline,
                                           key_lines), size="9pt")
        title_height = fit_title(self.plot_item.titleLabel, width)
        self.plot_item.titleLabel.setToolTip("<br>".join(key_line_html(line)
                                                         for line in pack_key_lines(chunks, 420.0, measure)))
        # pyqtgraph fixes the title row at 30 px: room for the title and each line of keys (at least the lines
        # kept for a key that comes with the first records, where the plot has room for them).
        height = max(KEY_LINE_PX * (head_lines + key_lines) + 4, title_height)
        self.plot_item.titleLabel.setMaximumHeight(height)
        self.plot_item.layout.setRowFixedHeight(0, height)
        # The view set the plot's geometry at its old minimum width (a longer title): set it again.
        if self.plot_item.geometry().width() > self.width():
            self.plot_item.setGeometry(QRectF(0, 0, self.width(), self.height()))

    def curve(self, name: str, colour: str, width: float = 1.5, style: str = "solid", **kw: object):
        self.add_key(name, colour, style)
        item = self.plot_item.plot([], [], pen=pen(colour, width, style), **kw)
        thin_out(item)
        return item

    @property
    def markers(self) -> list[pg.InfiniteLine]:
        return self.change_markers.lines

    def sync_markers(self, changes: list[Marker]) -> None:
        """One vertical line with a numbered badge per control change (only new ones are added)."""
        self.change_markers.sync(changes)

    def reset(self) -> None:
        self.change_markers.clear()
        self._version = -1
        self.follower.reset()
        self.show_empty(None)

    def refresh(self, data: RunData, title: bool = True, live: bool = False) -> None:
        """Redraw from ``data``; ``title=False`` leaves the title to the next ``refresh_title`` (a live plot
        turn: the titles follow with the status bar's numbers, all of one snapshot); ``live``: the run is
        growing, its x axis steps coarsely (``x_bound``)."""
        if data.version == self._version:
            # Drawn on a live turn, this plot has these curves but the title of the snapshot before (a live
            # turn leaves it to the words tick): a full redraw shows the latest words too.
            if title:
                self.refresh_title(data)
            if live != self.follower.live:  # the run stopped (or resumed) after this plot's last turn
                self.follower.live = live
                self.follower.apply(self.follower.x_max)
                settle(self.plot_item.vb)
            return
        self._version = data.version
        self.follower.live = live
        if title:
            self.refresh_title(data)
        self.update_from(data)
        self.show_empty(data)
        self.sync_markers(data.markers)
        x = data.col("iteration")
        self.follower.apply(float(x[-1]) if len(x) else 0.0)
        settle(self.plot_item.vb)

    def update_from(self, data: RunData) -> None:
        raise NotImplementedError

