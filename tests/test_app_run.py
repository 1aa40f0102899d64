"""The desktop app on tiny pairs whose outcome is known: token fates, live controls, faults, export."""

from __future__ import annotations

import json
import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("pytestqt")

from .app_helpers import load_tiny, make_window, qt_binding_broken

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]

LONG = 100_000  # max new tokens for runs the test stops itself


@pytest.fixture
def window(qtbot, tmp_path):
    return make_window(qtbot, tmp_path)


def run_to_end(qtbot, window, max_new: int = 24, timeout: int = 120_000) -> str:
    window.panel.max_new.setValue(max_new)
    with qtbot.waitSignal(window.run_ended, timeout=timeout) as blocker:
        assert window.start_run()
    return str(blocker.args[0])


def start_long(qtbot, window, at_least: int = 3) -> None:
    window.panel.max_new.setValue(LONG)
    assert window.start_run()
    qtbot.waitUntil(lambda: len(window.data.records) >= at_least, timeout=60_000)


def statuses(window) -> set[str]:
    return {t.status.value for _, t in window.token_view.shown_tokens()}


def test_perfect_draft_shows_only_accepted_and_bonus(qtbot, window):
    load_tiny(qtbot, window, "perfect")
    assert run_to_end(qtbot, window) == "finished:max_new_tokens"
    assert statuses(window) <= {"accepted", "bonus", "target"}
    assert "accepted" in statuses(window)
    assert window.data.estimate is not None and window.data.estimate.alpha == 1.0
    assert window.data.records[-1].generated_len == 24
    assert window.state == "finished"


def test_useless_draft_shows_only_rejected_and_correction(qtbot, window):
    load_tiny(qtbot, window, "useless")
    run_to_end(qtbot, window, max_new=16)
    # Baselines are real plain iterations: their tokens are the target's own ("target") and kept. The last
    # iteration has room for one token only, so it drafts nothing either. Every iteration that drafted was
    # rejected at its first proposal.
    records = window.data.records
    drafted = {r.iteration for r in records if r.n_drafted}
    undrafted = {r.iteration for r in records if not r.n_drafted}
    assert drafted and {r.iteration for r in records if r.mode == "plain"} <= undrafted
    assert undrafted <= {r.iteration for r in records if r.mode == "plain"} | {records[-1].iteration}
    shown = window.token_view.shown_tokens()
    assert {t.status.value for it, t in shown if it in drafted} == {"rejected", "correction"}
    assert {t.status.value for it, t in shown if it in undrafted} == {"target"}
    assert window.data.estimate is not None and window.data.estimate.alpha == 0.0
    # Hiding rejected tokens leaves exactly the committed output.
    window.legend.show_rejected.setChecked(False)
    assert statuses(window) <= {"correction", "target"}
    assert window.legend.counts_text.endswith(f"target {len(undrafted)}")
    assert len(window.token_view.shown_tokens()) == 16


def test_k_changed_mid_run_reaches_records_and_plots(qtbot, window):
    load_tiny(qtbot, window, "perfect")
    start_k = window.panel.values().k  # the first launch's default for the demo's drafter
    assert start_k != 7
    start_long(qtbot, window)
    window.panel.k_spin.setValue(7)  # coalesced, applied at the next iteration boundary
    # exploration iterations run at another k on purpose (to time a verify length never seen): not the user's k
    qtbot.waitUntil(lambda: any(r.controls.k == 7 and not r.explore for r in window.data.records), timeout=30_000)
    with qtbot.waitSignal(window.run_ended, timeout=30_000):
        window.stop_run()
    chosen = [r for r in window.data.records if not r.explore]
    first_k7 = next(r.iteration for r in chosen if r.controls.k == 7)
    assert all(r.controls.k == start_k for r in chosen if r.iteration < first_k7)
    assert [(m.iteration, m.label) for m in window.data.markers] == [(first_k7, f"k {start_k}→7")]
    for plot in window.plots.live_plots:
        assert [m.value() for m in plot.markers] == [first_k7]
        assert plot.markers[0].label.textItem.toPlainText() == "1"  # a numbered badge, the words on hover
        assert plot.markers[0].label.toolTip() == f"1 · iteration {first_k7}: k {start_k}→7"


def test_pause_holds_the_loop_and_resume_continues(qtbot, window):
    load_tiny(qtbot, window, "perfect")
    start_long(qtbot, window)
    controls = window.host.controls
    parked = []
    original = controls.checkpoint

    def checkpoint():
        if controls.paused:
            parked.append(True)
        return original()

    controls.checkpoint = checkpoint  # the loop looks the method up on every boundary
    window.panel.pause_button.click()
    assert window.state == "paused" and window.panel.pause_button.text() == "Resume"
    qtbot.waitUntil(lambda: bool(parked), timeout=30_000)
    window.tick()
    n = len(window.data.records)
    window.tick()
    assert len(window.data.records) == n  # parked at the boundary: nothing new
    window.panel.pause_button.click()
    assert window.state == "running"
    qtbot.waitUntil(lambda: len(window.data.records) >= n + 3, timeout=30_000)
    with qtbot.waitSignal(window.run_ended, timeout=30_000) as blocker:
        window.panel.stop_button.click()
    assert blocker.args[0] == "finished:stop"


def test_stop_ends_the_run_and_keeps_the_trace(qtbot, window):
    load_tiny(qtbot, window, "perfect")
    start_long(qtbot, window)
    with qtbot.waitSignal(window.run_ended, timeout=30_000) as blocker:
        window.panel.stop_button.click()
    assert blocker.args[0] == "finished:stop"
    assert len(window.data.records) >= 3 and window.data.records[-1].generated_len < LONG
    assert window.state == "stopped" and window.panel.start_button.isEnabled()
    sessions = list((window.data_dir / "sessions").iterdir())
    assert len(sessions) == 1 and not (sessions[0] / "RUNNING").exists()


def test_model_raising_mid_run_leaves_app_usable(qtbot, window, tmp_path):
    load_tiny(qtbot, window, "partial", fail_after=40)  # the first baseline takes ~12 calls
    ended = run_to_end(qtbot, window, max_new=200)
    assert ended.startswith("error:") and "simulated device failure" in ended
    assert window.last_error is not None and "simulated device failure" in window.last_error
    assert window.banner.isVisible()
    kept = len(window.data.records)
    assert kept >= 1
    assert window.files.export_trace(tmp_path / "after_error.csv")
    # The app goes on: a fresh pair loads and runs.
    load_tiny(qtbot, window, "perfect")
    assert run_to_end(qtbot, window, max_new=8) == "finished:max_new_tokens"


def test_export_then_reopen_gives_the_same_data(qtbot, window, tmp_path):
    load_tiny(qtbot, window, "perfect")
    window.panel.k_spin.setValue(3)
    run_to_end(qtbot, window, max_new=30)
    before = [(r.iteration, r.controls.k, r.n_accepted, r.draft_ms, [(t.token_id, t.status.value, t.p)
                                                                       for t in r.tokens])
              for r in window.data.records]
    shown = [(it, t.token_id, t.status.value) for it, t in window.token_view.shown_tokens()]
    n_baselines = len(window.data.baselines)
    assert window.files.export_trace(tmp_path / "run.csv")
    assert window.files.export_chrome_trace(tmp_path / "run.json")
    assert window.files.export_png(tmp_path / "plots.png")
    assert json.loads((tmp_path / "run.json").read_text())["traceEvents"]
    assert (tmp_path / "plots.png").stat().st_size > 1000

    with qtbot.waitSignal(window.trace_opened, timeout=10_000):
        assert window.files.open_trace(tmp_path / "run.csv")
    after = [(r.iteration, r.controls.k, r.n_accepted, r.draft_ms, [(t.token_id, t.status.value, t.p)
                                                                      for t in r.tokens])
             for r in window.data.records]
    assert after == before
    assert [(it, t.token_id, t.status.value) for it, t in window.token_view.shown_tokens()] == shown
    assert len(window.data.baselines) == n_baselines
    assert window.replay_path is not None
    assert window.token_view.tooltip_for_offset(0) is not None  # hover works without a model


def test_corrupt_trace_gets_a_clear_message(qtbot, window, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,age\nalice,31\n")
    assert not window.files.open_trace(bad)
    assert window.last_message is not None
    title, text = window.last_message
    assert title == "Cannot open trace" and text
    assert window.state == "no model"


def test_closing_during_a_run_stops_the_worker(qtbot, window):
    load_tiny(qtbot, window, "perfect")
    start_long(qtbot, window)
    host = window.host
    window.close()
    assert host.worker_thread.isFinished()
    assert host.controls.stop_requested
    sessions = list((window.data_dir / "sessions").iterdir())
    assert sessions and not (sessions[0] / "RUNNING").exists()


def test_the_controller_walks_the_run_states_in_order(qtbot, window):
    seen: list[str] = []
    window.controller.state_changed.connect(lambda s: seen.append(s.value))
    load_tiny(qtbot, window, "perfect")
    assert window.panel.start_button.isEnabled() and not window.panel.stop_button.isEnabled()
    start_long(qtbot, window)
    window.panel.pause_button.click()
    window.panel.pause_button.click()
    with qtbot.waitSignal(window.run_ended, timeout=30_000):
        window.panel.stop_button.click()
    assert seen == ["loading", "ready", "running", "paused", "running", "stopped"]
    assert run_to_end(qtbot, window, max_new=8) == "finished:max_new_tokens"
    assert window.state == "finished" and seen[-2:] == ["running", "finished"]


def test_a_failed_load_is_a_failed_state_without_a_pair(qtbot, window):
    def broken(progress):
        raise ValueError("no config.json in /nowhere")

    with qtbot.waitSignal(window.pair_failed, timeout=30_000):
        window.load_pair(broken)
    assert window.state == "failed" and not window.panel.start_button.isEnabled()
    assert "no config.json" in (window.last_error or "")
