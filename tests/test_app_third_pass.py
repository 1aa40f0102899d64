"""Issue 40's confusing moments, each as the user met it: the verdict that is no alarm, a killed session's end,
placeholders that point at a grey Start, words of the last run's drill, acceptance by position since a sampling
change, a drafter switch that would wipe the run on screen, and a replay's drafter against the one Start runs."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from specscope.core.events import RunFinished
from specscope.core.records import ControlValues, DrillEvent
from specscope.core.trace.files import write_trace

from .app_helpers import load_tiny, make_window, qt_binding_broken, synthetic_records, synthetic_stream

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]


def test_no_verdict_is_a_grey_note_and_a_losing_verdict_an_alarm(qtbot, tmp_path):
    from specscope.app.widgets.run_panel import NOTE_STYLE, VERDICT_STYLE

    w = make_window(qtbot, tmp_path)
    w.run_panel.show_verdict("No verdict: not enough quiet data (40 of 50 iterations busy)")
    assert w.run_panel.verdict.styleSheet() == NOTE_STYLE and "#A34400" not in NOTE_STYLE
    w.run_panel.show_verdict("Speculation is slower than plain decoding here: ×0.62 (0.55–0.70)")
    assert w.run_panel.verdict.styleSheet() == VERDICT_STYLE


def test_a_killed_session_replays_with_its_end_reason(qtbot, tmp_path):
    events = [e for e in synthetic_stream(synthetic_records(12, k=3)) if not isinstance(e, RunFinished)]
    paths = write_trace(tmp_path / "killed.csv", events, {"prompt": "p"})
    w = make_window(qtbot, tmp_path)
    assert w.files.open_trace(paths.iterations)
    assert w.controller.finish_reason == "killed"
    assert "without an end record (killed or crashed)" in w.run_panel.state.text()


def test_placeholders_do_not_point_at_a_grey_start_and_the_last_drill_does_not_carry_over(qtbot, tmp_path):
    from specscope.app.run_views import NO_PAIR_TEXT

    w = make_window(qtbot, tmp_path)
    assert not w.menus.start_action.isEnabled()
    assert w.plots.timing.empty.text() == NO_PAIR_TEXT and "F5" not in NO_PAIR_TEXT
    load_tiny(qtbot, w, "perfect")
    assert "Start (F5)" in w.plots.timing.empty.text()
    records = synthetic_records(20, k=3)
    events = synthetic_stream(records)
    events.insert(5, DrillEvent("start", "target", 2, 2, "disk", 4))
    w.ingest(events)
    assert "drill: target 2/2 layers" in w.drill_control.status.text()
    w.plots.memory.lanes.paging.setToolTip("paging, iteration 7: slow")  # what a hover left there
    w.controller.reset_data()  # the next run starts
    assert w.drill_control.status.text() == "No drill."
    assert w.plots.memory.lanes.paging.toolTip() == "" and not w.plots.memory.lanes.drill.bands


def test_acceptance_by_position_says_since_when_a_sampling_change_restarted_it(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    values = [ControlValues(k=3)] * 5 + [ControlValues(k=4)] * 5 + [ControlValues(k=4, temperature=0.7)] * 10
    records = synthetic_records(20, k=3, controls=values.__getitem__)
    w.ingest(synthetic_stream(records))
    changed_at = next(r.iteration for r in records if r.controls.temperature == 0.7)
    title = w.plots.positions.getPlotItem().titleLabel.text
    assert f"since it. {changed_at}" in title  # the k change (5 iterations earlier) did not restart it
    w.plots.reset()
    assert "since" not in w.plots.positions.getPlotItem().titleLabel.text


def test_a_drafter_switch_asks_before_wiping_the_run_on_screen(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    load_tiny(qtbot, w, "perfect")
    w.ingest(synthetic_stream(synthetic_records(10, k=3)))
    asked: list = []
    w.controller.load = lambda what: asked.append(what) or True  # see what would load, load nothing
    shown = len(w.data.records)
    w.change_drafter("lookup")
    assert not asked and len(w.data.records) == shown  # nothing reloaded, nothing wiped yet
    assert w.banner.isVisible() and "clears the run on screen" in w.banner.label.text()
    assert w.panel.drafter.currentData() == w.pair_choice.drafter  # the box shows what runs until then
    assert w.banner.action.text() == "Switch to lookup"
    w.banner.action.click()
    assert [a.drafter for a in asked] == ["lookup"]


def test_a_replay_says_which_drafter_start_runs_when_it_is_not_the_traces(qtbot, tmp_path):
    records = [replace(r, drafter="eagle") if r.mode == "speculative" else r for r in synthetic_records(8, k=3)]
    paths = write_trace(tmp_path / "eagle.csv", synthetic_stream(records, drafter="eagle"), {"prompt": "p"})
    w = make_window(qtbot, tmp_path)
    load_tiny(qtbot, w, "perfect")  # the window's choice: the default drafter, not the trace's
    w.pair_choice = replace(w.pair_choice, drafter="model")
    assert w.files.open_trace(paths.iterations)
    assert "drafter: eagle" in w.run_panel.pair.shown_text
    assert "runs the loaded pair with model, not eagle" in w.run_panel.hint.text()


def test_the_k_advisor_shows_whole_ks_and_the_ks_that_matter_not_every_explored_one(qtbot, tmp_path):
    from specscope.app.widgets.k_advisor import K_SHOWN_MIN, k_span

    w = make_window(qtbot, tmp_path)
    advisor = w.plots.k_advisor
    bottom = advisor.getPlotItem().getAxis("bottom")
    assert [label for _, label in bottom._tickLevels[0]] == [str(k) for k in range(K_SHOWN_MIN + 1)]  # not 0.1…
    w.ingest(synthetic_stream(synthetic_records(60, k=3, baseline_every=10)))
    est = w.data.estimate
    assert est is not None and max(p.k for p in est.curve) > K_SHOWN_MIN  # the curve runs to 16
    span = k_span(est)
    assert span == max(K_SHOWN_MIN, est.k + 2, (est.best_k or 0) + 2)
    assert advisor.getPlotItem().vb.viewRange()[0][1] == pytest.approx(span + 0.3)


def test_at_1280x720_the_controls_show_the_drill_without_scrolling_and_the_counts_are_whole(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    scroll = w.controls_dock.widget()
    qtbot.waitUntil(lambda: w.panel.compact)
    qtbot.waitUntil(lambda: scroll.verticalScrollBar().maximum() == 0)
    drill = w.drill_control
    bottom = drill.mapTo(scroll.viewport(), drill.rect().bottomLeft()).y()
    assert bottom <= scroll.viewport().height()
    assert w.panel.drafter_help.isHidden() and w.panel.drafter.toolTip()
    w.legend.set_counts({"accepted": 44, "rejected": 12, "correction": 12, "bonus": 44, "target": 3})
    assert "bonus&nbsp;44" in w.legend.label.text() and w.legend.counts_text.endswith("target 3")
    w.resize(1600, 1000)
    qtbot.waitUntil(lambda: not w.panel.compact)  # room again: the help is back


def test_the_bars_axis_follows_the_runs_k_not_an_exploration_at_16(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    records = synthetic_records(30, k=3, accept=lambda i: 2)
    explored = synthetic_records(1, k=16, accept=lambda i: 5, first_baseline=False)[0]
    records.append(replace(explored, iteration=len(records), explore=True))  # one exploration at k = 16
    w.ingest(records)
    est = w.data.estimate
    assert est is not None and est.k == 3 and len(est.positions) == 16  # the measurement keeps every position
    bars = w.plots.positions
    ticks = bars.getPlotItem().getAxis("bottom")._tickLevels[0]
    assert [v for v, _ in ticks] == [1, 2, 3]
    assert bars.getPlotItem().vb.viewRange()[0][1] == pytest.approx(3.6)
    # once the user lowers k, the positions read often enough stay on the axis
    lowered = synthetic_records(3, k=2, accept=lambda i: 1, first_baseline=False)
    w.ingest([replace(r, iteration=len(records) + i) for i, r in enumerate(lowered)])
    assert w.data.estimate is not None and w.data.estimate.k == 2
    assert [v for v, _ in bars.getPlotItem().getAxis("bottom")._tickLevels[0]] == [1, 2, 3]


def test_the_k_advisor_says_which_costs_are_stale_beside_its_prediction(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_stream(synthetic_records(40, k=3, baseline_every=10)))
    est = w.data.estimate
    assert est is not None and not est.costs.stale
    advisor = w.plots.k_advisor
    advisor.show_estimate(est)
    assert "stale" not in advisor.title_text and "stale" not in advisor.getPlotItem().titleLabel.toolTip()
    stale = replace(est, costs=replace(est.costs, stale=("plain step", "verify pass of 4"), speed_change=1.4))
    advisor.show_estimate(stale)
    headline = advisor.title_text.splitlines()[0]
    assert headline.endswith(f"{stale.best_k_text()} · stale: plain step +1")
    assert stale.costs.stale_text() in advisor.getPlotItem().titleLabel.toolTip()
    assert "×1.40 as long now" in advisor.getPlotItem().titleLabel.toolTip()
    w.resize(1280, 720)  # a short plot keeps the headline alone: the stale words are in it, whole
    qtbot.wait(50)
    advisor.show_title(stale)  # the window's own frames show its (fresh) snapshot meanwhile
    assert "stale: plain step +1" in advisor.getPlotItem().titleLabel.text
