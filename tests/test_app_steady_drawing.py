"""The window's cheap redraws while a run is live: labels whose new text re-lays out the window only when they
need another size, and a plot grid drawn in opaque colours under the data (issue 40's latency)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QColor, QImage, QPainter
from PySide6.QtWidgets import QLabel, QWidget

from .app_helpers import in_column, qt_binding_broken

pytestmark = pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))


class LayoutRequests(QObject):
    """Counts the layout requests a widget receives."""

    def __init__(self, widget: QWidget) -> None:
        super().__init__()
        self.count = 0
        widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.LayoutRequest:
            self.count += 1
        return False


def _column(qtbot, label: QWidget) -> tuple[QWidget, LayoutRequests]:
    window = in_column(qtbot, label, width=400, height=120)
    qtbot.waitExposed(window)
    return window, LayoutRequests(window)


def _settle(qtbot) -> None:
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    QApplication.processEvents()


def test_a_steady_label_relays_only_a_new_size(qtbot):
    from specscope.app.widgets.steady_label import SteadyLabel

    label = SteadyLabel("α 0.51 · speed-up ×1.40")
    _window, requests = _column(qtbot, label)
    _settle(qtbot)
    requests.count = 0
    label.hold(True)
    for text in ("α 0.52 · speed-up ×1.41", "α 0.5 · speed-up ×1.4", "α 0.53 · speed-up ×1.38"):
        label.setText(text)  # no longer than the first: the held room is enough
        _settle(qtbot)
    assert requests.count == 0
    assert label.text() == "α 0.53 · speed-up ×1.38" and label.label.text() == label.text()

    label.setText("α 0.53 · speed-up ×1.38 (1.10–1.71) · tokens per iteration 2.31")  # needs more room
    _settle(qtbot)
    assert requests.count >= 1
    assert label.width() >= label.label.sizeHint().width()  # the layout gave it the room

    wide = label.sizeHint().width()
    label.setText("α 0.5")
    assert label.sizeHint().width() == wide  # held: the room stays while a run is live
    label.hold(False)
    assert label.sizeHint().width() < wide  # released: it follows the text again


def test_a_plain_label_asks_the_window_for_a_layout_at_every_new_text(qtbot):
    """What the steady label is for: the same changes made to a QLabel re-lay out the window each time."""
    label = QLabel("α 0.51 · speed-up ×1.40")
    _window, requests = _column(qtbot, label)
    _settle(qtbot)
    requests.count = 0
    for text in ("α 0.52 · speed-up ×1.41", "α 0.5 · speed-up ×1.4", "α 0.53 · speed-up ×1.38"):
        label.setText(text)
        _settle(qtbot)
    assert requests.count >= 3


def test_a_wrapping_steady_label_grows_when_its_text_needs_another_line(qtbot):
    from specscope.app.widgets.steady_label import SteadyLabel

    label = SteadyLabel("k in use: 4 · α 0.52")
    label.setWordWrap(True)
    _window, requests = _column(qtbot, label)
    _settle(qtbot)
    one_line = label.height()
    label.setText(" ".join(["α 0.52 · speed-up ×1.41 (1.10–1.71)"] * 6))  # wraps at 400 px
    _settle(qtbot)
    assert requests.count >= 1
    assert label.height() > one_line
    assert label.label.height() == label.height()  # the inner label fills its host


def test_the_grid_is_opaque_and_under_the_curves(qtbot):
    import pyqtgraph as pg  # type: ignore[import-untyped]

    from specscope.app.theme import PLOT_BACKGROUND
    from specscope.app.widgets.plot_base import GRID_ALPHA, grid_axes, opaque_over_background, show_grid

    plot = pg.PlotWidget(axisItems=grid_axes())
    qtbot.addWidget(plot)
    plot.resize(400, 300)
    item = plot.getPlotItem()
    show_grid(item)
    item.setXRange(0, 10, padding=0)
    item.setYRange(0, 10, padding=0)
    curve_colour = "#D55E00"
    item.plot([5, 5], [0, 10], pen=pg.mkPen(curve_colour, width=3))  # along the x = 5 grid line
    plot.show()
    qtbot.waitExposed(plot)

    bottom = item.getAxis("bottom")
    image = QImage(400, 300, QImage.Format.Format_ARGB32_Premultiplied)
    painter = QPainter(image)
    _, tick_specs, _ = bottom.generateDrawSpecs(painter)
    painter.end()
    assert tick_specs and all(pen.color().alpha() == 255 for pen, _, _ in tick_specs)
    grey = opaque_over_background(QColor(0, 0, 0, round(255 * GRID_ALPHA)), QColor(PLOT_BACKGROUND))
    assert grey.red() == grey.green() == grey.blue() == round(255 * (1 - GRID_ALPHA))

    shot = plot.grab().toImage()
    view = plot.mapFromScene(item.vb.sceneBoundingRect()).boundingRect()
    x = plot.mapFromScene(item.vb.mapViewToScene(pg.Point(5, 5))).x()
    middle = view.center().y()
    seen = {shot.pixelColor(x + dx, middle).name() for dx in (-1, 0, 1)}
    assert curve_colour.lower() in seen  # the grid line at x = 5 is drawn under the curve, not over it


def test_a_live_runs_first_records_move_no_plot(qtbot, tmp_path):
    """Issue 40: in a run's first second all six plots were laid out again (each then repaints whole, its axes
    included): their side axes narrowed from the empty plot's '0.8' to the data's labels, the memory plot's
    right (MiB/s) axis and two lines of key appeared with its first records."""
    from dataclasses import replace

    from PySide6.QtWidgets import QApplication

    from specscope.app.run_state import RunState

    from .app_helpers import make_window, synthetic_records

    w = make_window(qtbot, tmp_path)
    w.resize(1600, 1000)
    w.views.render_state(RunState.RUNNING)  # as at Start: the run panel's room held, the plots laid out ahead
    qtbot.wait(50)
    plots = [*w.plots.live_plots, w.plots.positions, w.plots.k_advisor]

    def views() -> list[tuple[float, float, float, float]]:
        QApplication.processEvents()
        return [p.getPlotItem().vb.geometry().getRect() for p in plots]

    before = views()
    counters = {"host_rss_bytes": 5e8, "target_weights_bytes": 2.6e8, "draft_weights_bytes": 6e7,
                "target_kv_bytes": 4e7, "draft_kv_bytes": 1e7, "read_bytes_per_s": 3e5}
    w.ingest([replace(e, memory={k: v * (1 + 0.01 * (e.iteration % 5)) for k, v in counters.items()})
              if hasattr(e, "tokens") else e for e in synthetic_records(40, k=4, baseline_every=10)])
    memory = w.plots.memory
    assert memory.keys and any(name.startswith("read") for name in (k.name for k in memory.keys))
    assert memory.plot_item.getAxis("right").isVisible()
    after = views()
    moved = [(type(p).__name__, b, a) for p, b, a in zip(plots, before, after, strict=True) if a != b]
    assert not moved, moved

    right = memory.plot_item.getAxis("right")
    memory.viewport().repaint()
    picture = right.picture
    assert picture is not None
    w.views.render_state(RunState.RUNNING)  # the views render the state again and again: the axis is kept
    assert right.picture is picture  # (pyqtgraph's showAxis drops the picture even of a shown axis)

    w.views.render_state(RunState.FINISHED)  # over: a rate was drawn, so its axis stays
    assert memory.plot_item.getAxis("right").isVisible()


def title_width(plot) -> float:
    import html

    from PySide6.QtGui import QTextDocument

    doc = QTextDocument()
    doc.setDocumentMargin(0)
    doc.setDefaultFont(plot.plot_item.titleLabel.item.font())
    doc.setHtml(f"<span style='font-size:9pt'><b>{html.escape(plot.title_text)}</b></span>")
    return float(doc.idealWidth())


def test_a_key_line_fits_the_title_without_wrapping(qtbot, tmp_path):
    """The key's lines are packed by the width the title draws them at (bold group names, glyphs from a
    fallback font): measured with the text font's metrics, a line was wider than the title and wrapped
    mid-entry ("draft ━━ weights cpu ╍╍" / "offloaded")."""
    from dataclasses import replace

    from .app_helpers import make_window, synthetic_records

    w = make_window(qtbot, tmp_path)
    counters = {"target_weights_bytes": 2.6e8, "target_offloaded_bytes": 0.0, "target_kv_bytes": 4e7,
                "target_rollback_bytes": 1e6, "draft_weights_bytes": 6e7, "draft_offloaded_bytes": 0.0,
                "draft_kv_bytes": 1e7, "draft_rollback_bytes": 1e5, "read_bytes_per_s": 3e5}
    w.ingest([replace(e, memory=dict(counters)) if hasattr(e, "tokens") else e for e in synthetic_records(10, k=4)])
    memory = w.plots.memory
    title = memory.plot_item.titleLabel.item
    checked = 0
    for width in range(1250, 1700, 30):  # narrower, the title itself wraps (fit_title centres it)
        w.resize(width, 1000)
        qtbot.waitUntil(lambda width=width: w.width() == width)
        qtbot.wait(20)
        memory._show_keys()
        if "offloaded" not in memory.plot_item.titleLabel.text:
            continue  # folded into the tooltip at this size
        column = memory.width() - 24.0 - memory._axes_width()  # the title's room (LivePlot._show_keys)
        if title_width(memory) > column:
            continue  # the title's own line wraps (fit_title centres it): not the key's doing
        wrapped_at = title.textWidth()

        def shown_lines() -> int:
            return title.document().begin().layout().lineCount()  # one block: title, headline, key lines

        title.setTextWidth(-1)
        unwrapped = shown_lines()
        title.setTextWidth(wrapped_at)
        assert shown_lines() == unwrapped, width  # no key line wraps (mid-entry) in the title's room
        checked += 1
    assert checked >= 2


def test_a_finished_runs_k_line_keeps_its_wrapped_height(qtbot):
    """Seen at 1280x720: when a run finished, the run panel set the k line's size policy (its room no longer
    held); the policy had no height-for-width flag, the label then asked for its unwrapped size hint (four
    lines of a narrow 'nice' width) and the panel grew by 56 px, the plots shrinking under it."""
    from PySide6.QtWidgets import QSizePolicy

    from specscope.app.run_state import RunState
    from specscope.app.widgets.run_panel import RunPanel

    panel = RunPanel()
    _holder = in_column(qtbot, panel, width=1000)  # kept: the panel goes with it
    panel.show_state(RunState.RUNNING)
    panel.show_k(3, False, "", "α 0.54 (run) · speed-up ×1.28 (1.14–1.43), run · measurement overhead 3.0%")
    qtbot.wait(20)
    running = panel.height()
    panel.show_state(RunState.FINISHED)
    qtbot.wait(20)
    assert panel.k_in_use.hasHeightForWidth() and panel.k_in_use.label.hasHeightForWidth()
    assert panel.height() == running - panel.note_line_px()  # only the note line's room, held while live, goes

    panel.k_in_use.setSizePolicy(QSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred))
    assert panel.k_in_use.sizePolicy().hasHeightForWidth()  # a policy handed in keeps the wrap flag


def test_a_runs_first_verdict_or_warning_moves_nothing_below_the_run_panel(qtbot):
    """The first note line of a run (the verdict or a warning) takes room held for it from Start: the panel
    keeps its height, so the plots below it are not moved and repainted whole in the middle of the run."""
    from specscope.app.run_state import RunState
    from specscope.app.widgets.run_panel import RunPanel

    for note in ("verdict", "warning"):
        panel = RunPanel()
        holder = in_column(qtbot, panel, width=1000)
        below = holder.layout().itemAt(1).widget()  # the plots, in the window
        qtbot.waitExposed(holder)
        panel.show_state(RunState.RUNNING)
        panel.show_k(3, False, "", "α 0.54 (run) · speed-up ×0.82 (0.70–0.95), run")
        qtbot.wait(20)
        height, top = panel.height(), below.y()
        if note == "verdict":
            panel.show_verdict("Speculation is slower than plain decoding (×0.82 (0.70–0.95), run)")
        else:
            panel.show_warning("draft: 3 of 3 layers on disk", 120)
        qtbot.wait(20)
        assert (panel.height(), below.y()) == (height, top), note
        line = panel.verdict if note == "verdict" else panel.warning
        assert line.isVisible() and line.height() >= line.fontMetrics().lineSpacing()
        # a second note line is not held for: the panel grows (and keeps that height while the run is live)
        other = panel.warning if note == "verdict" else panel.verdict
        other.setText("a second line")
        other.show()
        qtbot.wait(20)
        assert panel.height() > height


def test_a_plots_turn_is_painted_after_the_timers_due_meanwhile(qtbot):
    """A live plot's new points and its repaint are two stretches of the GUI thread with a pass of the event
    loop's timers between them (paint_later): timers and input due meanwhile wait for one half, not both."""
    from PySide6.QtCore import QCoreApplication, QElapsedTimer, QTimer

    from specscope.app.widgets.paint_later import paint_after_queued

    class Counted(QWidget):
        def __init__(self) -> None:
            super().__init__()
            self.paints: list[str] = []

        def paintEvent(self, event) -> None:
            self.paints.append("paint")

    widget = Counted()
    qtbot.addWidget(widget)
    widget.resize(200, 100)
    widget.show()
    qtbot.waitExposed(widget)
    qtbot.wait(20)
    widget.paints.clear()
    due = QTimer()  # a timer that comes due while the turn is being computed
    due.setSingleShot(True)
    due.timeout.connect(lambda: widget.paints.append("timer"))
    due.start(1)
    paint_after_queued(widget)
    clock = QElapsedTimer()
    clock.start()
    while clock.elapsed() < 5:  # the turn's work
        pass
    widget.update()
    QCoreApplication.sendPostedEvents()  # the pass that painted at once before
    assert widget.paints == []
    qtbot.waitUntil(lambda: "paint" in widget.paints, timeout=1000)
    assert widget.paints[0] == "timer" and widget.updatesEnabled()
