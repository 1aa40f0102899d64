"""Issue 29's decorations, read at 1280x720: numbered control-change badges that are neither cut nor
overlapping, with the full text on hover and in a list; the memory key; acceptance bars from few samples;
tokens beside the plots only when there is room."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QFontMetricsF

from specscope.core.records import ControlValues

from .app_helpers import make_window, qt_binding_broken, synthetic_records, synthetic_stream

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]


def with_changes(n: int, changes: dict[int, ControlValues]) -> list:
    """A synthetic run whose controls change at the given iterations (and keep the new values), with the
    control-change events a session emits for them."""
    values = ControlValues(k=4)
    out = []
    for e in synthetic_records(n, k=4):
        values = changes.get(e.iteration, values)
        out.append(replace(e, controls=values))
    return synthetic_stream(out)


def badge_numbers(text: str) -> range:
    first, _, last = text.partition("–")
    return range(int(first), int(last or first) + 1)


def test_control_changes_are_numbered_badges_that_are_not_cut_and_do_not_overlap(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    # Three changes on adjacent iterations (a drag of the k slider), then a temperature change.
    w.ingest(with_changes(150, {40: ControlValues(k=5), 41: ControlValues(k=6), 42: ControlValues(k=7),
                                100: ControlValues(k=7, temperature=0.8)}))
    qtbot.wait(50)
    changes = w.data.markers
    assert len(changes) == 4
    for plot in w.plots.live_plots:
        badges = [m.label for m in plot.markers if m.label.isVisible()]
        view = plot.plot_item.vb.sceneBoundingRect()
        rects = [b.sceneBoundingRect() for b in badges]
        for r in rects:  # half a pixel of slack: a badge hung from the view's top edge sits on it, in floats
            assert view.adjusted(-0.5, -0.5, 0.5, 0.5).contains(r), f"{type(plot).__name__}: a badge is cut"
        for i, a in enumerate(rects):
            for b in rects[i + 1:]:
                assert not a.intersects(b), f"{type(plot).__name__}: badges overlap"
        # Every change is on some badge, by number ("2" or "1–3"), and its full text is on that badge's hover.
        for number, change in enumerate(changes, start=1):
            badge = next(b for b in badges if number in badge_numbers(b.toPlainText()))
            assert f"{number} · iteration {change.iteration}: {change.label}" in badge.toolTip()
        assert plot.markers[3].label.toPlainText() == "4"  # far from the others: a badge of its own
    listed = w.plots.change_list
    assert listed.isVisible()
    for i, c in enumerate(changes, start=1):
        assert f"{i} · iteration {c.iteration}: {c.label}" in listed.full_text
        assert f"{i} · iteration {c.iteration}: {c.label}" in listed.toolTip()
    w.plots.reset()
    assert not listed.isVisible() and not w.plots.timing.markers


def test_acceptance_labels_fit_at_k8_and_few_samples_are_pale(qtbot, tmp_path):
    from specscope.app.widgets.acceptance_bars import MIN_SAMPLES
    from specscope.core.measure.run import replay

    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    # k=6 accepting 5 every time (positions 1-5 at 1.00, n=60; position 6 near 0), then one iteration at
    # k=8 that accepts everything: positions 7 and 8 reached once, at rate 1.0 from a single sample.
    events = synthetic_records(60, k=6, accept=lambda i: 5)
    last = next(r for r in synthetic_records(1, k=8, accept=lambda i: 8) if r.mode == "speculative")
    events.append(replace(last, iteration=len(events)))
    replay(events)
    w.ingest(events)
    qtbot.wait(50)
    bars = w.plots.positions
    pi = bars.getPlotItem()
    view = pi.vb.sceneBoundingRect()
    shown = [lab for lab in bars.labels if lab.textItem.toPlainText()]
    assert [lab.textItem.toPlainText() for lab in shown] == ["1.00"] * 5 + ["0.02"]  # 1 of 61 at position 6
    rects = [lab.sceneBoundingRect() for lab in shown]
    for lab, r in zip(shown, rects, strict=True):
        assert view.contains(r), f"label {lab.textItem.toPlainText()!r} is clipped"
    for i, a in enumerate(rects):
        for b in rects[i + 1:]:
            assert not a.intersects(b), "labels overlap"
    # n < MIN_SAMPLES: a pale hatched outline, no rate written; every position's n is in its tick
    assert list(bars.thin_bars.opts["x"]) == [7, 8] and MIN_SAMPLES > 1
    assert bars.thin_bars.opts["brush"].color().alpha() < 128
    ticks = [t for _, t in pi.getAxis("bottom")._tickLevels[0]]
    assert ticks[0] == "1 n=61" and ticks[6:] == ["7 n=1", "8 n=1"]
    axis = pi.getAxis("bottom")
    font = QFontMetricsF(axis.style["tickFont"])
    column = pi.vb.width() / 8
    assert all(font.horizontalAdvance(t) < column for t in ticks)  # the tick texts do not run together
    # no axis title to cut (the plot's title says what the bars and ticks are)
    assert not pi.getAxis("left").label.isVisible() and not pi.getAxis("bottom").label.isVisible()
    assert "n = times reached" in pi.titleLabel.text


# What a CPU demo run records (core.memory), plotted and not: the twelve series of the screenshot.
DEMO_MEMORY = {
    "host_rss_bytes": 1.67e9, "host_available_bytes": 1.9e10, "swap_used_bytes": 0.0, "host_major_faults": 100.0,
    "host_read_bytes": 1.6e8, "host_rchar_bytes": 2.6e8, "target_weights_cpu_bytes": 1.08e9,
    "target_offloaded_bytes": 0.0, "draft_weights_cpu_bytes": 4.4e7, "draft_offloaded_bytes": 0.0,
    "target_kv_bytes": 4.7e6, "draft_kv_bytes": 0.0, "host_read_bytes_per_s": 0.0, "host_rchar_bytes_per_s": 3e4,
    "target_step_read_bytes": 5.4e8, "target_bandwidth_bytes_per_s": 3.2e10, "io_read_bytes": 0.0,
    "io_rchar_bytes": 3e4,
}


@pytest.mark.parametrize("size", [(1280, 720), (1600, 1000)])
def test_memory_series_are_distinct_grouped_and_leave_the_plot_its_height(qtbot, tmp_path, size):
    from specscope.app.widgets.memory_plot import plotted
    from specscope.app.widgets.plot_base import MIN_VIEW_PX

    w = make_window(qtbot, tmp_path)
    w.resize(*size)
    events = [replace(e, memory={k: v * (1 + 0.001 * e.iteration) for k, v in DEMO_MEMORY.items()})
              if hasattr(e, "tokens") else e for e in synthetic_records(40, k=4)]
    w.plots.memory.totals_box.setChecked(True)  # the machine's totals too: every series of the demo drawn
    w.ingest(events)
    qtbot.wait(50)
    plot = w.plots.memory
    # io_read_bytes is drawn as its rate (io_read_bytes_per_s)
    names = [k for k in w.data.memory if plotted(k)]
    assert len(names) == 12 and len(plot.series) == 12 and "io_read_bytes_per_s" in names
    pens = {(k, item.opts["pen"].color().name(), item.opts["pen"].style()) for k, item in plot.series.items()}
    assert len({(colour, style) for _, colour, style in pens}) == 12  # no two series look alike
    groups = {k.group for k in plot.keys}
    assert groups == {"target", "draft", "host", "io"}
    # The data area keeps its minimum height, with its y ticks; what the key cannot show is on hover.
    assert plot.plot_item.vb.height() >= MIN_VIEW_PX - 2
    assert plot.plot_item.getAxis("left").tickValues(*plot.plot_item.vb.viewRange()[1], plot.plot_item.vb.height())
    tip = plot.plot_item.titleLabel.toolTip()
    assert all(k.name in tip for k in plot.keys)
    title = plot.plot_item.titleLabel.text
    if size == (1280, 720):
        assert "more (hover the title)" in title  # folded: one line shown, the rest on hover
        assert 1 <= title.count("<br>") <= 2
    assert title.count("<br>") <= 3


def test_tokens_go_beside_the_plots_only_when_both_fit(qtbot, tmp_path):
    from PySide6.QtCore import Qt

    from specscope.app.arrangement import BESIDE_MIN_WIDTH, MIN_PLOT_COLUMN_PX

    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    w.ingest([replace(e, memory=DEMO_MEMORY) if hasattr(e, "tokens") else e for e in synthetic_records(30, k=4)])
    w.arrangement.beside_action.trigger()
    qtbot.wait(50)
    assert w.arrangement.beside_action.isChecked()  # the wish is kept...
    assert w.centralWidget().width() < BESIDE_MIN_WIDTH
    assert w.splitter.orientation() == Qt.Orientation.Vertical  # ...but at 1280x720 the tokens stay below
    assert "beside them needs" in w.status.message.text()
    for plot in w.plots.live_plots:
        assert plot.width() >= MIN_PLOT_COLUMN_PX  # no crushed columns
    w.resize(1600, 1000)
    qtbot.waitUntil(lambda: w.splitter.orientation() == Qt.Orientation.Horizontal)
    qtbot.wait(50)
    for plot in w.plots.live_plots:
        assert plot.width() >= MIN_PLOT_COLUMN_PX - 5
        # nothing inside (a long key line, say) makes the plot wider than its column: its right edge shows
        assert plot.plot_item.geometry().width() <= plot.width() + 1, type(plot).__name__
    w.splitter.setSizes([100, 2000])  # a drag of the handle cannot crush them either
    qtbot.wait(20)
    assert all(plot.width() >= MIN_PLOT_COLUMN_PX - 5 for plot in w.plots.live_plots)
    w.resize(1280, 720)
    qtbot.waitUntil(lambda: w.splitter.orientation() == Qt.Orientation.Vertical)
    w.close()
    assert w.settings.token_layout() == (True, [])  # the wish is saved, not the narrow layout's sizes


def test_the_k_advisors_title_stays_within_the_plot_with_the_rest_on_hover(qtbot, tmp_path):
    """Adaptive k's explanation under the k advisor's title ran past the plot's right edge at 1280x720; and
    there its three lines left the curve ~20 px with its axis labels overlapping."""
    from specscope.app.widgets.k_advisor import DATA_MIN_PX
    from specscope.core.measure.run import replay

    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    note = "exploring k=5 to measure the next position and pass length"
    events = [replace(e, controls=replace(e.controls, adaptive_k=True), k_note=note)
              for e in synthetic_records(80, k=4, baseline_every=8)]
    w.ingest(events)
    est = w.data.estimate
    assert est == replay(events).estimate() and est is not None and est.controller_text().endswith(note)
    plot = w.plots.k_advisor
    qtbot.wait(50)
    label = plot.getPlotItem().titleLabel
    assert plot.geometry().right() <= w.plots.width()  # the plot keeps to its column...
    assert label.item.boundingRect().width() <= plot.width()  # ...and its title to the plot
    # At 1280x720 the plot is short: the headline alone, the α and measured lines (and the controller) on hover
    assert plot.height() < 150
    shown = label.text
    assert est.best_k_text() in shown and est.alpha_text() not in shown and "<br>" not in shown
    assert all(line in label.toolTip() for line in (est.best_k_text(), est.alpha_text(), est.controller_text()))
    assert plot.getPlotItem().vb.height() >= 45  # the curve keeps a data area worth reading
    w.resize(1280, 1000)  # taller: three lines, and what gives way to the width is the controller's words
    qtbot.waitUntil(lambda: est.alpha_text() in label.text, timeout=5000)
    assert plot.getPlotItem().vb.height() >= DATA_MIN_PX - 40  # the bottom axis takes the rest
    shown = label.text
    assert "…" in shown and note not in shown and est.best_k_text() in shown
    assert est.controller_text() in label.toolTip() and plot.title_text.endswith(est.controller_text())
    w.resize(2400, 1000)  # room for all of it: nothing elided, no tooltip needed
    qtbot.waitUntil(lambda: note in label.text, timeout=5000)
    assert "…" not in label.text and label.toolTip() == ""
