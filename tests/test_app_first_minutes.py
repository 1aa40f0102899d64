"""The first minutes: a clear first step, shortcuts, the way back after a failed load, housekeeping."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QKeySequence

from specscope.app.pair_choice import PairChoice

from .app_helpers import load_tiny, make_window, qt_binding_broken

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]


def test_empty_plots_name_the_first_step_and_run_keys_exist(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    assert "load a pair" in w.plots.timing.empty.text()  # Start is grey: the first step is loading a pair
    menus = w.menus
    keys = {a.text(): a.shortcut().toString() for a in (menus.start_action, menus.pause_action, menus.stop_action)}
    assert keys == {"&Start": "F5", "&Pause / resume": "F6", "S&top": "Shift+F5"}
    assert w.arrangement.full_screen_action.shortcut() == QKeySequence(QKeySequence.StandardKey.FullScreen)
    assert not w.menus.start_action.isEnabled()  # nothing loaded yet
    load_tiny(qtbot, w, "perfect")
    assert w.menus.start_action.isEnabled()
    assert "Start (F5)" in w.plots.timing.empty.text()
    w.panel.max_new.setValue(8)
    with qtbot.waitSignal(w.run_ended, timeout=60_000):
        w.menus.start_action.trigger()
    assert w.state == "finished"


def test_a_failed_load_offers_the_demo_and_the_dialog_keeps_what_was_typed(qtbot, tmp_path):
    from specscope.app.widgets.model_picker import ModelPicker

    w = make_window(qtbot, tmp_path)
    typed = PairChoice(target=str(tmp_path / "no-such-model"), drafter="lookup")
    with qtbot.waitSignal(w.pair_failed, timeout=120_000):
        w.load_pair(typed)
    assert w.state == "failed" and w.banner.isVisible()
    assert w.banner.action.text() == "Load the embedded demo" and w.banner.action.isVisible()
    dialog = ModelPicker(w.pair_choice, w)
    assert dialog.choice() == typed  # reopening the dialog shows what the user typed
    loads = []
    w.controller.load = lambda what: loads.append(what) or True
    w.banner.action.click()
    assert loads == [PairChoice()]


def test_a_live_run_after_a_replay_drops_replay_from_the_title(qtbot, tmp_path):
    from .app_helpers import synthetic_records

    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_records(10))
    assert w.files.export_trace(tmp_path / "t.csv")
    load_tiny(qtbot, w, "perfect")
    assert w.files.open_trace(tmp_path / "t.csv") and "(replay)" in w.windowTitle()
    w.panel.max_new.setValue(8)
    with qtbot.waitSignal(w.run_ended, timeout=60_000):
        w.start_run()
    assert "(replay)" not in w.windowTitle() and w.replay_path is None


def test_open_trace_lists_only_files_it_opens(qtbot, tmp_path):
    from specscope.app.trace_dialog import is_openable_trace

    from .app_helpers import synthetic_records

    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_records(5))
    assert w.files.export_trace(tmp_path / "run.csv") and w.files.export_chrome_trace(tmp_path / "run.json")
    assert w.files.export_png(tmp_path / "run.png")
    listed = sorted(p.name for p in tmp_path.iterdir() if p.is_file() and is_openable_trace(p.name))
    assert listed == ["run.csv", "run.events.jsonl", "run.session.json"]  # the event log is the trace
    for name in listed:
        assert w.files.open_trace(tmp_path / name)


def test_runs_prune_old_session_folders_to_the_setting(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.settings.set_keep_sessions(2)
    load_tiny(qtbot, w, "perfect")
    w.panel.max_new.setValue(4)
    for _ in range(4):
        with qtbot.waitSignal(w.run_ended, timeout=60_000):
            w.start_run()
    assert len(list((w.data_dir / "sessions").iterdir())) == 2


def test_a_run_waiting_for_its_first_iteration_says_so(qtbot, tmp_path, monkeypatch):
    """Issue 29 item 6: "no data yet: press Start (F5)" stayed for the first seconds while the state said running."""
    import threading

    from specscope.core.controls import Controls

    gate = threading.Event()
    original = Controls.checkpoint

    def held(self):  # the loop's first boundary, after the prefill: held until the test has looked
        gate.wait(60)
        return original(self)

    monkeypatch.setattr(Controls, "checkpoint", held)
    w = make_window(qtbot, tmp_path)
    load_tiny(qtbot, w, "perfect")
    prompt = "a prompt of 23 letters."
    w.panel.set_prompt_text(prompt)  # the tiny pair's tokenizer: one token per character
    w.panel.max_new.setValue(8)
    try:
        assert w.start_run()
        assert w.state == "running" and not w.data.records
        note = w.plots.timing.empty
        assert note.isVisible() and "Start (F5)" not in note.text()
        assert note.text().startswith("running: waiting for the first iteration (prefill")
        # once the run says what it is, the note names the prompt's length
        qtbot.waitUntil(lambda: f"prefill of {len(prompt)} prompt tokens…)" in note.text(), timeout=30_000)
        assert all("waiting for the first iteration" in p.empty.text() for p in w.plots.live_plots)
    finally:
        gate.set()
    with qtbot.waitSignal(w.run_ended, timeout=60_000):
        pass
    assert w.state == "finished" and not w.plots.timing.empty.isVisible()


def test_stopping_after_one_iteration_leaves_a_sentence_not_a_blank_plot(qtbot, tmp_path, monkeypatch):
    """Issue 29 item 12: one point draws no line; the plots say so."""
    from specscope.app.widgets.plot_base import ONE_ITERATION_TEXT
    from specscope.core.controls import Controls

    original = Controls.checkpoint
    calls: dict[int, int] = {}

    def stop_after_one(self):  # the second boundary: one iteration ran
        calls[id(self)] = calls.get(id(self), 0) + 1
        if calls[id(self)] == 2:
            self.stop()
        return original(self)

    monkeypatch.setattr(Controls, "checkpoint", stop_after_one)
    w = make_window(qtbot, tmp_path)
    load_tiny(qtbot, w, "perfect")
    w.panel.max_new.setValue(100)
    with qtbot.waitSignal(w.run_ended, timeout=60_000):
        assert w.start_run()
    assert w.state == "stopped" and len(w.data.records) == 1
    assert w.plots.timing.empty.isVisible() and w.plots.timing.empty.text() == ONE_ITERATION_TEXT
    assert "1 iteration." in w.status.message.text()
