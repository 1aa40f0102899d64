"""What keeps a live run from re-laying out the plots (each plot resized repaints from scratch, axes included):
the run panel's room held during a run, the splitter giving height changes to the token view, the plot titles'
headline line kept from the start, and the memory plot's curves made ahead of its first records."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from dataclasses import replace
from itertools import pairwise

import pytest

pytest.importorskip("pytestqt")

from .app_helpers import in_column, load_tiny, make_window, qt_binding_broken, synthetic_records

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]

VERDICT = ("Speculation is slower than plain decoding (×0.24 (0.22–0.26), run); a draft step costs 95% of a "
           "target step; break-even α at k=4 is 0.80, measured 0.00 (run); the cost model predicts plain decoding "
           "is fastest at every k, and this sentence is long enough to wrap onto a second line at this width")


def plot_sizes(w) -> list[tuple[int, int]]:
    return [(p.width(), p.height()) for p in (*w.plots.live_plots, w.plots.positions, w.plots.k_advisor)]


def test_a_live_runs_panel_lines_move_the_token_view_not_the_plots(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.resize(1400, 900)
    load_tiny(qtbot, w, "perfect")
    w.panel.max_new.setValue(100_000)
    assert w.start_run()
    qtbot.waitUntil(lambda: len(w.data.records) >= 3, timeout=60_000)
    w.panel.pause_button.click()  # still a live run (paused is active), and nothing else moves meanwhile
    w.controller.timer.stop()  # the tick would put the snapshot's own verdict back
    qtbot.wait(50)
    plots, panel, tokens = plot_sizes(w), w.run_panel.height(), w.token_view.height()
    # Lines longer than any the run shows by itself: on a loaded machine its own verdict and a slow-step warning
    # (two lines each) may already hold their room, which the panel keeps while the run is live
    w.run_panel.show_verdict(f"{VERDICT}; {VERDICT}")
    w.run_panel.show_warning(" ".join(["machine busy: paging suspected, draft: 3 of 3 layers on disk."] * 6), 12)
    qtbot.waitUntil(lambda: w.run_panel.height() > panel)
    qtbot.wait(50)
    assert plot_sizes(w) == plots  # the lines took their room from the token view
    assert w.token_view.height() < tokens
    grown = w.run_panel.height()
    w.run_panel.show_verdict(None)  # a line that goes leaves its room while the run is live
    w.run_panel.show_warning(None)
    qtbot.wait(50)
    assert w.run_panel.height() == grown and plot_sizes(w) == plots
    w.controller.timer.start()
    with qtbot.waitSignal(w.run_ended, timeout=30_000):
        w.panel.stop_button.click()
    qtbot.waitUntil(lambda: w.run_panel.height() < grown)  # the end gives the held room back
    assert all(h >= h0 for (_, h), (_, h0) in zip(plot_sizes(w), plots, strict=True))
    heights = [p.height() for p in w.plots.live_plots]
    w.resize(1400, 1000)  # between runs, a taller window grows the plots and the tokens again
    qtbot.waitUntil(lambda: [p.height() for p in w.plots.live_plots] != heights)
    assert all(p.height() > h for p, h in zip(w.plots.live_plots, heights, strict=True))


def test_the_run_panel_has_the_k_lines_room_from_start(qtbot):
    from specscope.app.run_controller import RunState
    from specscope.app.widgets.run_panel import RunPanel

    panel = RunPanel()
    _holder = in_column(qtbot, panel)  # kept: the panel goes with it
    panel.show_state(RunState.READY)
    qtbot.wait(20)
    ready = panel.height()
    panel.show_state(RunState.RUNNING)
    qtbot.waitUntil(lambda: panel.height() > ready)
    running = panel.height()
    panel.show_k(4, False, "", "α 0.80 (run) · speed-up ×1.9")  # the first snapshot fills the room
    qtbot.wait(20)
    assert panel.k_in_use.isVisible() and panel.height() == running
    panel.show_state(RunState.FINISHED)
    panel.show_k(None, False)
    qtbot.waitUntil(lambda: panel.height() == ready)


def test_a_plots_headline_arrives_without_growing_its_title(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.resize(1600, 1000)  # room for the headlines on one line (a narrower plot wraps a long one)
    qtbot.wait(50)
    alpha, speedup = w.plots.alpha, w.plots.speedup
    rows = [p.plot_item.layout.rowMaximumHeight(0) for p in (alpha, speedup)]
    w.ingest(synthetic_records(60, k=4, baseline_every=10))
    assert alpha.headline_for(w.data) and alpha.headline_for(w.data) in alpha.plot_item.titleLabel.text
    assert speedup.headline_for(w.data) and speedup.headline_for(w.data) in speedup.plot_item.titleLabel.text
    assert [p.plot_item.layout.rowMaximumHeight(0) for p in (alpha, speedup)] == rows


def test_memory_curves_made_ahead_take_their_series_style_and_axis(qtbot, tmp_path):
    """The first records hand the memory plot's curves made with the window their series: each its owner's
    colour and dash, and a rate (MiB/s) on the right axis, as a curve made then would be."""
    from specscope.app.widgets.memory_plot import SPARE_SERIES

    w = make_window(qtbot, tmp_path)
    memory = w.plots.memory
    made = list(memory.plot_item.vb.addedItems)
    made_rates = list(memory.right.addedItems)
    counters = {"host_rss_bytes": 5e8, "target_kv_bytes": 4e6, "draft_kv_bytes": 1e6,
                "pcie0_rx_bytes_per_s": 2e6}
    w.ingest([replace(e, memory={k: v * (1 + 0.01 * e.iteration) for k, v in counters.items()})
              if hasattr(e, "tokens") else e for e in synthetic_records(20, k=4)])
    assert set(memory.series) == set(counters)
    rate = memory.series["pcie0_rx_bytes_per_s"]
    assert rate in memory.right.addedItems and rate not in memory.plot_item.vb.addedItems
    assert memory.plot_item.getAxis("right").isVisible()
    assert [i for i in memory.plot_item.vb.addedItems if i not in made] == []  # no curve was made for them
    assert [i for i in memory.right.addedItems if i not in made_rates] == []  # nor moved to the right view
    colours = {k: item.opts["pen"].color().name() for k, item in memory.series.items()}
    assert colours["target_kv_bytes"] != colours["host_rss_bytes"] != colours["pcie0_rx_bytes_per_s"]
    assert len(memory.series) < SPARE_SERIES
    drawn = {k: item for k, item in memory.series.items() if item.isVisible()}
    assert set(drawn) == set(counters) - {"host_rss_bytes"}  # the machine's totals are drawn on request
    assert all(len(item.getData()[0]) for item in drawn.values())
    # a hidden total gets no setData at each turn (issue 40's latency): its points reach its curve when shown
    hidden = memory.series["host_rss_bytes"]
    assert not hidden.isVisible() and hidden.getData()[0] is None
    memory.set_show_totals(True)
    x, y = hidden.getData()
    assert hidden.isVisible() and x[-1] == w.data.records[-1].iteration
    assert y[-1] == pytest.approx(w.data.memory["host_rss_bytes"].view()[-1] / 2**30)


@pytest.mark.real_gc_freeze  # the window's own freezes, not the suite's no-op (conftest.py)
def test_the_window_freezes_its_objects_at_its_first_tick_and_as_a_run_grows(qtbot, tmp_path, monkeypatch):
    """A full collection on the GUI thread walks only what was made since the last freeze: the start-up
    objects (Qt, pyqtgraph, the widgets) at the first tick, then a run's records every so many iterations."""
    import gc

    import specscope.app.run_controller as controller_module
    import specscope.core.gc_freeze as gc_freeze

    monkeypatch.setattr(controller_module, "FREEZE_EVERY_ITERATIONS", 50)
    monkeypatch.setattr(controller_module, "TICK_BUDGET_S", 0.0)  # one chunk of records per tick
    gc.unfreeze()
    w = make_window(qtbot, tmp_path)
    w.controller.timer.stop()
    froze_at: list[int] = []  # iterations on screen at each freeze
    freeze = gc_freeze.freeze_what_is_loaded
    monkeypatch.setattr(gc_freeze, "freeze_what_is_loaded",
                        lambda collect=True: (froze_at.append(len(w.data.records)), freeze(collect=collect)))
    tracked = len(gc.get_objects())
    w.tick()
    assert froze_at == [0]
    assert gc.get_freeze_count() >= 0.9 * tracked  # what the window holds is out of the collector's walk
    events = synthetic_records(120, k=4)
    for e in events:
        w.host.buffer.push(e)
    w.tick()
    while w.controller._pending:
        w.tick()
    assert len(w.data.records) == len(events)
    assert len(froze_at) == 3 and all(b - a >= 50 for a, b in pairwise(froze_at))


def test_a_periodic_freeze_counts_from_its_first_call():
    import gc

    from specscope.core.gc_freeze import PeriodicFreeze

    freezer = PeriodicFreeze(every=10)
    try:
        assert freezer.count(0)  # the first call freezes whatever it counts
        assert [freezer.count(4), freezer.count(5), freezer.count(1), freezer.count(3)] == [False, False, True, False]
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()
