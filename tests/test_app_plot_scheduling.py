"""Plot range following, flag bands and the capped tick: the pieces that keep redraws cheap."""

from __future__ import annotations

import itertools

import pytest

pytest.importorskip("pytestqt")

from specscope.app.widgets.plot_base import X_HEADROOM, X_MIN_SPAN, step_up, x_bound

from .app_helpers import make_window, qt_binding_broken, synthetic_records

needs_qt = pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))


def test_step_up_gives_a_round_bound_with_headroom():
    assert step_up(0) == 1.0
    assert step_up(95) == 100.0
    assert step_up(96) == 120.0
    assert step_up(0.031) == 0.04
    # Growing one by one crosses a bound only now and then.
    bounds = {step_up(n) for n in range(1, 20_001)}
    assert len(bounds) < 50


def test_the_iteration_axis_steps_coarsely_and_keeps_the_newest_point_off_the_edge():
    bounds = [x_bound(n) for n in range(20_001)]
    assert all(b >= max(X_MIN_SPAN, n * X_HEADROOM) for n, b in enumerate(bounds))  # the newest point in view
    assert bounds == sorted(bounds)  # it never comes back
    assert x_bound(0) == x_bound(27) == X_MIN_SPAN  # a run's first iterations move no axis
    assert len(set(bounds)) <= 20  # 0 to 20,000 iterations: step_up's bounds were twice as many
    assert len(set(bounds)) < len({step_up(n) for n in range(1, 20_001)}) / 2
    steps = sorted(set(bounds))
    assert all(b / a <= 2.0 for a, b in itertools.pairwise(steps))  # no view twice too wide


def paint_now(plot) -> None:
    """Deliver the scene's pending updates and paint the plot now, as the next frame would."""
    from PySide6.QtWidgets import QApplication

    QApplication.processEvents()
    plot.viewport().repaint()


def live_turns(w, events) -> None:
    """Feed ``events`` and draw one live period's worth of plot turns: each live plot once (and the advisor)."""
    w.controller.feed(events)
    for _ in range(5):
        w.plots.refresh_one(w.data)


@needs_qt
def test_a_plot_turn_that_crosses_no_step_keeps_every_axis_picture(qtbot, tmp_path):
    """pyqtgraph re-renders an axis' tick text (its picture) when its range changes or the view is resized (a
    title or side axis laid out anew): on a shared machine that was most of a live plot's paint (issue 40)."""
    w = make_window(qtbot, tmp_path)
    w.resize(1600, 1000)  # as the bench: in a small window the titles wrap as their numbers change
    events = synthetic_records(120, k=4)
    live_turns(w, events[:40])
    w.plots.refresh_titles(w.data)
    for plot in w.plots.live_plots:  # twice: the first paint fits the side axes' width to their tick labels
        paint_now(plot)
        paint_now(plot)
    kept = {plot: {side: plot.plot_item.getAxis(side).picture for side in ("bottom", "left")}
            for plot in w.plots.live_plots}
    assert all(picture is not None for sides in kept.values() for picture in sides.values())
    bound = x_bound(w.data.col("iteration")[-1])
    n = 40
    while x_bound(w.data.col("iteration")[-1] + 2) == bound:  # turns short of the next step
        live_turns(w, events[n:n + 1])
        w.plots.refresh_titles(w.data)
        n += 1
        for plot in w.plots.live_plots:
            paint_now(plot)
            for side in ("bottom", "left"):
                assert plot.plot_item.getAxis(side).picture is kept[plot][side], (type(plot).__name__, side)
    assert n > 41  # the loop drew some turns
    live_turns(w, events[n:n + 8])  # across the step
    timing = w.plots.timing
    paint_now(timing)
    assert timing.plot_item.getAxis("bottom").picture is not kept[timing]["bottom"]
    newest = w.data.col("iteration")[-1]
    x0, x1 = timing.plot_item.vb.viewRange()[0]
    assert x0 <= 0 and newest * X_HEADROOM <= x1 <= 2 * newest


@needs_qt
def test_a_finished_run_is_fitted_closer_than_a_live_one_in_every_plot(qtbot, tmp_path):
    """The live steps leave up to 45% of the width empty ahead of the data; once the run stops growing (the
    views' non-live frame) every plot fits it with step_up, even a plot whose last turn drew the last record."""
    w = make_window(qtbot, tmp_path)
    live_turns(w, synthetic_records(300, k=4))
    newest = w.data.col("iteration")[-1]
    for plot in w.plots.live_plots:
        assert plot.plot_item.vb.viewRange()[0][1] == pytest.approx(x_bound(newest) * 1.02)  # padding 2%
    assert w.plots.live_ranges
    w.views.on_frame(True)  # not live: the controller is not running
    assert not w.plots.live_ranges
    for plot in w.plots.live_plots:
        assert plot.plot_item.vb.viewRange()[0][1] == pytest.approx(step_up(newest) * 1.02)
    assert step_up(newest) < x_bound(newest)


@needs_qt
def test_ranges_follow_the_data_until_the_user_zooms(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    events = synthetic_records(400, k=4)
    w.ingest(events[:200])
    timing = w.plots.timing
    (_, x1), (y0, y1) = timing.plot_item.vb.viewRange()
    total = timing.total.getData()[1]
    assert x1 >= 199 and y0 <= 0 and y1 >= total.max()
    timing.plot_item.vb.sigRangeChangedManually.emit([True, True])  # what a mouse zoom emits
    w.plots.timing.plot_item.vb.setXRange(10, 20, padding=0)
    w.ingest(events[200:])
    assert timing.plot_item.vb.viewRange()[0] == pytest.approx([10, 20])
    timing.plot_item.enableAutoRange()  # the 'A' button
    w.ingest(synthetic_records(402, k=4)[401:])  # iterations 402 and 403 (two plain ones came first)
    assert timing.plot_item.vb.viewRange()[0][1] >= 400


@needs_qt
def test_flag_bands_share_one_item_and_name_the_band_under_the_mouse(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_records(100, k=4, flag_every=20))
    memory = w.plots.memory
    assert len(memory.bands) == len(w.data.flag_bands) > 1
    first = w.data.flag_bands[0]
    assert memory.band_item.band_at(first.start) is memory.bands[0]
    assert memory.band_item.band_at(first.end + 5) is None
    memory.reset()
    assert memory.bands == []


def test_flag_bands_closer_than_a_pixel_are_painted_as_one():
    from specscope.app.widgets.flag_bands import ShadedBand, merged_spans

    bands = [ShadedBand(0.5, 1.5, ""), ShadedBand(1.9, 2.5, ""), ShadedBand(5.5, 6.5, ""), ShadedBand(50, 51, "")]
    assert merged_spans(bands, 0, 40, gap=0.5) == [(0.5, 2.5), (5.5, 6.5)]  # 0.4 apart: one; 3 apart: two
    assert merged_spans(bands, 0, 40, gap=0.1) == [(0.5, 1.5), (1.9, 2.5), (5.5, 6.5)]  # zoomed in: all apart
    assert merged_spans(bands, 0, 100, gap=10) == [(0.5, 6.5), (50, 51)]
    assert merged_spans(bands, 3, 4, gap=0.5) == []  # none in view


@needs_qt
def test_tick_ingests_a_backlog_over_several_ticks_without_dropping(qtbot, tmp_path, monkeypatch):
    import specscope.app.run_controller as controller_module

    w = make_window(qtbot, tmp_path)
    w.controller.timer.stop()
    monkeypatch.setattr(controller_module, "TICK_BUDGET_S", 0.0)  # one chunk per tick
    events = synthetic_records(100, k=4)
    for e in events:
        w.host.buffer.push(e)  # without snapshots: the views draw gaps, nothing is dropped
    w.tick()
    assert 0 < len(w.data.records) < 99
    while w.controller._pending:
        w.tick()
    assert [r.iteration for r in w.data.records] == [e.iteration for e in events]


@needs_qt
def test_plots_share_one_x_range_applied_at_each_plots_own_turn(qtbot, tmp_path):
    """No pyqtgraph x link: a range step repaints one plot per tick, and a zoom still reaches every plot."""
    w = make_window(qtbot, tmp_path)
    events = synthetic_records(400, k=4)
    w.ingest(events[:100])
    plots = w.plots.live_plots
    timing, alpha = w.plots.timing, w.plots.alpha
    before = alpha.plot_item.vb.viewRange()[0]
    w.controller.feed(events[100:300])  # no redraw: the data crossed several round bounds
    timing.refresh(w.data)
    assert timing.plot_item.vb.viewRange()[0][1] >= 299
    assert alpha.plot_item.vb.viewRange()[0] == pytest.approx(before)  # its turn has not come
    alpha.refresh(w.data)
    assert alpha.plot_item.vb.viewRange()[0] == pytest.approx(timing.plot_item.vb.viewRange()[0])

    # A zoom in the α plot: every plot shows that range, x stops following, y still follows elsewhere.
    alpha.plot_item.vb.setXRange(10, 20, padding=0)
    alpha.plot_item.vb.sigRangeChangedManually.emit([True, False])
    for plot in plots:
        assert plot.plot_item.vb.viewRange()[0] == pytest.approx([10, 20])
    y_before = timing.plot_item.vb.viewRange()[1]
    w.ingest(events[300:])
    for plot in plots:
        assert plot.plot_item.vb.viewRange()[0] == pytest.approx([10, 20])
    assert timing.plot_item.vb.viewRange()[1] != y_before or timing.total.getData()[1].max() <= y_before[1]

    w.plots.memory.plot_item.autoBtn.clicked.emit(w.plots.memory.plot_item.autoBtn)  # 'A': all follow again
    for plot in plots:
        assert plot.plot_item.vb.viewRange()[0][1] >= 400


@needs_qt
def test_loading_a_pair_does_the_first_starts_imports_and_bandwidth_probe(qtbot, tmp_path):
    """The first Start used to import the decode modules and measure bandwidth on the worker, freezing the
    window for 0.4-0.5 s; a load does both now, while the window says it is loading."""
    import sys

    from specscope.core.memory import bandwidth

    from .app_helpers import load_tiny

    bandwidth.forget_bandwidth()
    w = make_window(qtbot, tmp_path)
    load_tiny(qtbot, w)
    assert "cpu" in bandwidth._cache
    assert "specscope.core.session" in sys.modules


@needs_qt
def test_a_live_periods_text_plot_and_words_are_drawn_on_three_ticks_not_one(qtbot, tmp_path, monkeypatch):
    """Together they were the GUI thread's longest stretch while a fast pair decodes (docs/bench-gui.md); the
    words (titles, numbers, bars) with the plot were the longest beside a CPU hog (issue 40)."""
    from types import SimpleNamespace

    w = make_window(qtbot, tmp_path)
    records = [e for e in synthetic_records(60, k=4) if hasattr(e, "tokens")]
    w.ingest(records[:30])
    views = w.views
    monkeypatch.setattr(views, "_controller", SimpleNamespace(state=SimpleNamespace(active=True), data=w.data))
    calls: list[str] = []
    monkeypatch.setattr(w.plots, "stale", lambda data: True)
    monkeypatch.setattr(w.plots, "refresh_one", lambda data: calls.append("plot"))
    real_append = w.token_view.append_records
    monkeypatch.setattr(w.token_view, "append_records", lambda recs: (calls.append("text"), real_append(recs)))
    views._shown_at = -1e9
    views.add_records(records[30:40])
    monkeypatch.setattr(w.plots, "refresh_words", lambda data: (calls.append("words"), lambda: None)[1])
    views.on_frame(True)
    assert calls == ["text"]  # the period's text, and its plot waits for the next tick
    views.on_frame(True)
    assert calls == ["text", "plot"]
    views.on_frame(True)  # the period's titles, numbers and bars: a tick of their own
    assert calls == ["text", "plot", "words"]
    views.on_frame(True)  # within the period: nothing
    assert calls == ["text", "plot", "words"]


@needs_qt
def test_after_a_words_tick_every_surface_shows_one_snapshot(qtbot, tmp_path, monkeypatch):
    """Issue 40: one frame had the advisor's α at 0.61 and the status bar's at 0.59, and the acceptance bars an
    iteration behind: the plot tick drew the newest snapshot while the numbers kept the previous tick's. The
    words have a tick of their own now; between the ticks no surface with a number changes."""
    import html
    from types import SimpleNamespace

    w = make_window(qtbot, tmp_path)
    views = w.views
    monkeypatch.setattr(views, "_controller", SimpleNamespace(state=SimpleNamespace(active=True), data=w.data))
    checked = 0
    for e in synthetic_records(80, k=4):
        views._shown_at = -1e9
        views.on_frame(True)  # a text tick
        w.controller.feed([e])  # a record arrives between the ticks
        words_before = [w.run_panel.k_in_use.text(), w.plots.k_advisor.title_text,
                        *(p.plot_item.titleLabel.text for p in w.plots.live_plots)]
        views.on_frame(True)  # the plot tick: a curve, no number
        assert [w.run_panel.k_in_use.text(), w.plots.k_advisor.title_text,
                *(p.plot_item.titleLabel.text for p in w.plots.live_plots)] == words_before
        views.on_frame(True)  # the words tick
        est = w.data.estimate
        if est is None or est.alpha is None:
            continue
        numbers = html.unescape(w.run_panel.k_in_use.text())
        assert est.alpha_text() in numbers
        # the plots' titles are set when the words are painted, a pass of the event loop later
        qtbot.waitUntil(lambda est=est: est.alpha_text() in w.plots.alpha.plot_item.titleLabel.text, timeout=1000)
        if w.plots.k_advisor.estimate is est:  # the advisor's turn: its title and the numbers agree
            assert est.alpha_text() in w.plots.k_advisor.title_text
            checked += 1
        assert w.plots.positions._version == w.data.version  # the bars show this snapshot, not an older one
    assert checked > 3


@needs_qt
def test_the_k_advisors_star_marks_the_best_k_its_title_names_between_its_turns(qtbot, tmp_path):
    """Titles follow every frame, curves redraw in turn: the advisor's title named best k=10 while its star,
    drawn at an older turn, marked k=5 (seen in the README screenshot)."""
    w = make_window(qtbot, tmp_path)
    events = synthetic_records(300, k=4)
    changes = 0
    for e in events:
        before = w.data.estimate.best_k if w.data.estimate is not None else None
        w.controller.feed([e])
        w.plots.refresh_titles(w.data)  # a frame whose plot turn is not the advisor's
        est = w.data.estimate
        if est is None or est.best_k is None or w.plots.k_advisor.estimate is None:
            w.plots.k_advisor.show_estimate(est)
            continue
        changes += before is not None and before != est.best_k
        xs, _ = w.plots.k_advisor.best.getData()
        assert list(xs) == [est.best_k], f"the title says {est.best_k_text()}, the star marks k={list(xs)}"
    assert changes > 0


def thinned_curve(qtbot, x_range: tuple[float, float]) -> tuple[list[float], list[float], float]:
    """A live plot's curve through 20,000 noisy points with two one-point spikes, viewed over ``x_range``: the
    x and y it draws, and the view's width in pixels (plain values: no Qt object outlives the plot)."""
    import numpy as np

    from specscope.app.widgets.plot_base import LivePlot

    plot = LivePlot()
    qtbot.addWidget(plot)
    plot.resize(640, 300)
    plot.show()
    qtbot.waitExposed(plot)
    item = plot.curve("noise", "#000000", width=2)
    x = np.arange(20_000, dtype=float)
    y = np.random.default_rng(0).normal(size=len(x))
    y[12_345], y[777] = 9.0, -9.0
    item.setData(x, y)
    plot.plot_item.vb.setRange(xRange=x_range, yRange=(-10, 10), padding=0)
    shown_x, shown_y = item.getData()
    return shown_x.tolist(), shown_y.tolist(), float(plot.plot_item.vb.width())


@needs_qt
def test_a_long_curve_is_drawn_from_one_bucket_per_pixel_with_its_extremes(qtbot):
    shown_x, shown_y, pixels = thinned_curve(qtbot, (0, 20_000))
    assert len(shown_x) <= 2 * pixels + 8  # pyqtgraph's own default would keep up to five points a pixel
    assert max(shown_y) == 9.0 and min(shown_y) == -9.0  # one-point spikes: the line still reaches them
    shown_x, _, _ = thinned_curve(qtbot, (1000, 1100))  # zoomed in: every point in view, none left out
    assert {1000.0, 1050.0, 1100.0} <= set(shown_x)


@needs_qt
def test_a_full_redraw_shows_the_latest_title_on_a_plot_drawn_on_its_live_turn(qtbot, tmp_path):
    """A live plot turn draws the curves and leaves the title to the words tick; a full redraw in between
    (redraw_all) found the plot's data version already drawn and kept the older snapshot's words. The
    every-surface check of test_app_replay failed on it when the machine was loaded."""
    w = make_window(qtbot, tmp_path)
    records = synthetic_records(60, k=4, baseline_every=6, accept=lambda i: i % 5 if i < 30 else 4)
    w.ingest(records[:30])
    speedup = w.plots.speedup
    assert speedup._headline == speedup.headline_for(w.data) != ""
    w.controller.feed(records[30:])  # the estimate moves; nothing redrawn yet
    moved = speedup.headline_for(w.data)
    assert moved != speedup._headline
    w.plots._turn = w.plots.live_plots.index(speedup)
    w.plots.refresh_one(w.data)  # its live turn: the curves, not the title
    assert speedup._version == w.data.version and speedup._headline != moved
    w.views.redraw_all()
    assert speedup._headline == moved


@needs_qt
def test_the_words_titles_shown_late_never_cover_a_newer_snapshots(qtbot, tmp_path):
    """The live plots' titles of a words tick are shown when the words are painted, a pass of the event loop
    later; if the run ends meanwhile and every title is refreshed with the final snapshot, the older ones are
    dropped, not shown over it."""
    w = make_window(qtbot, tmp_path)
    events = synthetic_records(40, k=4)
    w.controller.feed(events[:20])
    show_older = w.plots.refresh_words(w.data)
    older = w.plots.alpha.headline_for(w.data)
    w.controller.feed(events[20:])
    w.plots.refresh_titles(w.data)  # the run ended: everything drawn at once, the final snapshot
    newer = w.plots.alpha.headline_for(w.data)
    assert newer != older
    show_older()
    assert newer in w.plots.alpha.plot_item.titleLabel.text and older not in w.plots.alpha.plot_item.titleLabel.text
