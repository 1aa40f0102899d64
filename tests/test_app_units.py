"""App pieces that need no running model: start-up imports, settings, run data, views, advice, replay."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from datetime import datetime

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("pytestqt")

from specscope.app.pair_choice import PairChoice
from specscope.app.run_data import RunData
from specscope.core.controls import switched_drafter_controls
from specscope.core.drafter_catalogue import DEFAULT_K, DEMO_DRAFTER, default_k
from specscope.core.events import describe_change
from specscope.core.measure.run import feed_all, replay
from specscope.core.records import ControlValues

from .app_helpers import make_window, qt_binding_broken, synthetic_records, synthetic_stream

needs_qt = pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))


def test_app_modules_do_not_import_torch_at_module_level():
    code = (
        "import sys\n"
        "import specscope.app.main, specscope.app.window, specscope.app.worker, specscope.app.settings\n"
        "import specscope.app.widgets.plots_panel, specscope.app.widgets.model_picker\n"
        "bad = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "QT_QPA_PLATFORM": "offscreen"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ""


def test_bad_command_line_values_get_a_message(capsys):
    from specscope.app.main import main

    with pytest.raises(SystemExit) as refused:  # the parser's own one-line refusal (exit 2)
        main(["--max-new-tokens", "0"])
    assert refused.value.code == 2
    assert main(["--open-trace", "/nonexistent/trace.csv"]) == 2
    err = capsys.readouterr().err
    assert "argument --max-new-tokens: must be from 1 to 131,072" in err and "no such trace" in err
    assert "usage:" not in err


def test_pair_choice_validation_and_round_trip():
    assert PairChoice().problem() is None  # the demo
    assert "draft" in (PairChoice(target="/m", drafter="model").problem() or "")
    assert PairChoice(target="/m", drafter="lookup").problem() is None
    assert "target" in (PairChoice(target=" ").problem() or "")
    c = PairChoice(target="org/x", draft="org/y", target_device="cuda:0", draft_dtype="bfloat16")
    assert PairChoice.from_dict(c.to_dict()) == c


def test_run_data_columns_changes_bands_and_positions():
    values = [ControlValues(k=4)] * 3 + [ControlValues(k=6), ControlValues(k=6, temperature=0.7), ControlValues(k=4)]
    recs = synthetic_records(6, k=4, accept=lambda i: [4, 0, 2, 4, 1, 3][i], controls=values.__getitem__)
    first = recs[2].iteration  # two plain baseline iterations come first
    recs[first + 3] = replace(recs[first + 3], flags=["slow"])
    recs[first + 4] = replace(recs[first + 4], flags=["slow"])
    recs[-1] = replace(recs[-1], memory={**recs[-1].memory, "pcie0_rx_bytes_per_s": 1e6})
    events = synthetic_stream(recs)
    data = RunData()
    data.extend([(e, None) for e in events[:4]])
    data.extend([(e, None) for e in events[4:]])
    assert len(data) == 8 and data.version == 2
    assert data.started is events[0] and data.finished is events[-1] and data.events == events
    # the stream's control changes are the plots' labelled markers
    assert [(m.iteration, m.label) for m in data.markers] == [
        (first + 3, "k 4→6"), (first + 4, "T 0→0.7"), (first + 5, "k 6→4, T 0.7→0")]
    assert [(b.start, b.end, b.sentence) for b in data.flag_bands] == [(first + 3, first + 4, "slow")]
    # A memory key first seen at the last iteration is NaN before it.
    rx = data.memory["pcie0_rx_bytes_per_s"].view()
    assert len(rx) == 8 and all(x != x for x in rx[:7]) and rx[7] == 1e6
    # RunData estimates nothing: what it plots is the snapshot handed with each event (none here).
    assert data.estimate is None and all(x != x for x in data.col("measured_speedup"))
    assert all(x != x for x in data.col("alpha_run"))


def test_run_data_plots_the_snapshot_handed_with_each_iteration():
    events = synthetic_stream(synthetic_records(40, k=4, baseline_every=6))
    observed = list(feed_all(events))
    data = RunData()
    data.extend(observed)
    last_iteration = [s for e, s in observed if hasattr(e, "tokens")][-1]
    assert data.estimate is observed[-1][1]
    assert last_iteration is not None and data.last("alpha_run") == pytest.approx(last_iteration.alpha)
    assert data.last("alpha_window") == pytest.approx(last_iteration.alpha_window)


def test_describe_change_labels():
    a = ControlValues(k=4)
    assert describe_change(a, replace(a, k=8, temperature=0.5)) == "k 4→8, T 0→0.5"
    assert describe_change(a, replace(a, adaptive_k=True)) == "adaptive k on"


def test_the_verdict_says_plainly_when_speculation_loses():
    # Drafting 8 ms per token against a 9.5 ms plain step, nothing accepted: speculation must lose.
    events = synthetic_records(64, k=4, accept=lambda i: 0, draft_ms=8.0, baseline_every=8)
    est = replay(events).estimate()
    assert est is not None and est.measured is not None and est.measured.hi < 1
    verdict = est.verdict
    assert verdict is not None and "slower than plain decoding (×0.2" in verdict
    assert "a draft step costs 84% of a target step" in verdict
    assert "plain decoding is fastest at every k" in verdict
    # What the status bar shows is the snapshot handed with the last event: RunData only carries it.
    observed = list(feed_all(events))
    data = RunData()
    data.extend(observed)
    assert data.estimate is observed[-1][1] and data.estimate is not None and data.estimate.verdict == verdict
    # A cheap draft that is always accepted wins: no verdict, best k above 1.
    good = replay(synthetic_records(64, k=4, accept=lambda i: 4, draft_ms=0.5, baseline_every=8)).estimate()
    assert good is not None and good.verdict is None and good.best_k is not None and good.best_k > 1


@needs_qt
def test_controls_are_coalesced(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    emitted: list[ControlValues] = []
    w.panel.controls_changed.connect(emitted.append)
    with qtbot.waitSignal(w.panel.controls_changed, timeout=2000):
        for k in (5, 6, 7):
            w.panel.k_spin.setValue(k)
        w.panel.temp_slider.setValue(70)
    assert len(emitted) == 1 and emitted[0].k == 7 and emitted[0].temperature == pytest.approx(0.7)


@needs_qt
def test_token_view_styles_hover_and_hide(qtbot, tmp_path):
    from specscope.app.theme import STATUS_STYLES
    from specscope.app.widgets.legend import legend_html

    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_records(3, k=4, accept=lambda i: [4, 1, 0][i]))
    shown = w.token_view.shown_tokens()
    # the baseline's two plain iterations commit their tokens ("target"), then the speculative ones
    assert [t.status.value for _, t in shown] == ["target"] * 2 + ["accepted"] * 4 + [
        "bonus", "accepted", "rejected", "correction", "rejected", "correction"]
    starts = w.token_view._starts
    tip = w.token_view.tooltip_for_offset(starts[2]) or ""
    assert "iteration 2" in tip and "accepted" in tip and "p(x) = 0.9000" in tip and "q(x) = 0.8000" in tip
    assert "min(1, p/q) = 1.0000" in tip and "id 10" in tip  # no tokenizer: top-5 shown as ids
    assert "min(1, p/q) = 0.1429" in (w.token_view.tooltip_for_offset(starts[8]) or "")
    fmt = w.token_view._formats["rejected"]
    assert fmt.fontStrikeOut() and fmt.foreground().color().name().upper() == STATUS_STYLES["rejected"].colour
    for status in ("accepted", "rejected", "correction", "bonus"):
        assert STATUS_STYLES[status].colour in legend_html()
    w.legend.show_rejected.setChecked(False)
    assert "rejected" not in {t.status.value for _, t in w.token_view.shown_tokens()}


@needs_qt
def test_plots_show_memory_flags_and_advice(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    events = synthetic_records(80, k=4, flag_every=20, baseline_every=8)
    est = replay(events).estimate()  # what the session puts on live records
    w.ingest(events)
    assert set(w.plots.memory.series) == {"host_rss_bytes", "gpu0_used_bytes"}
    assert len(w.plots.memory.bands) == 4
    assert "paging" in w.plots.memory.bands[0].toolTip()
    # the window's measurement, fed the same events, gives the same snapshot as a batch replay
    assert w.plots.k_advisor.estimate == est and est is not None and est.measured is not None
    # the status bar shows the estimate's numbers, the measured speed-up with its interval
    assert f"{est.tokens_per_s:.1f} tok/s" in w.status.metrics.text()
    assert est.measured.text() in w.status.metrics.text() and f"α {est.alpha:.2f}" in w.status.metrics.text()
    assert w.status.memory.text() == "gpu0 used 1.86 GiB"
    warning = w.run_panel.warning  # the last warning in full, wrapping, in the run panel
    assert warning.isVisible() and "paging" in warning.text() and warning.wordWrap()


@needs_qt
def test_settings_persist_between_launches(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.panel.k_spin.setValue(9)
    w.panel.temp_spin.setValue(0.8)
    w.panel.set_prompt_text("remember me")
    w.panel.max_new.setValue(77)
    w.pair_choice = PairChoice(target="demo", drafter="lookup")
    w.close()
    w2 = make_window(qtbot, tmp_path)
    assert w2.panel.values().k == 9 and w2.panel.values().temperature == pytest.approx(0.8)
    assert w2.panel.prompt_text() == "remember me" and w2.panel.max_new.value() == 77
    assert w2.pair_choice.drafter == "lookup"


@needs_qt
def test_first_launch_starts_at_the_demo_drafters_k(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    assert w.pair_choice.drafter == DEMO_DRAFTER
    assert w.panel.values().k == default_k(DEMO_DRAFTER) != DEFAULT_K


def test_switching_drafters_moves_only_an_untouched_k():
    at_default = ControlValues(k=default_k("eagle"))
    assert switched_drafter_controls(at_default, "eagle", "model").k == DEFAULT_K
    assert switched_drafter_controls(ControlValues(k=DEFAULT_K), "model", "eagle").k == default_k("eagle")
    chosen = ControlValues(k=7, temperature=0.5)
    assert switched_drafter_controls(chosen, "model", "eagle") == chosen
    to_lookup = switched_drafter_controls(ControlValues(k=DEFAULT_K), "model", "lookup")
    assert to_lookup.adaptive_k and to_lookup.k == default_k("lookup")
    # adaptive k the user turned on is not turned off by a switch
    assert switched_drafter_controls(ControlValues(adaptive_k=True), "lookup", "model").adaptive_k


@needs_qt
def test_interrupted_session_is_offered_and_opens(qtbot, tmp_path):
    from specscope.core.trace.autosave import SessionRecorder

    rec = SessionRecorder(tmp_path / "data" / "sessions",
                          {"prompt": "Copy these lines\nand crash", "pair_description": "demo with lookup drafter"},
                          background_flush=False)
    for e in synthetic_records(10):
        rec.append(e)
    rec.flush()
    marker = rec.folder / "RUNNING"
    info = json.loads(marker.read_text())
    info.update(pid=2**22 + 12345, process_created=None)  # a process that is not running
    marker.write_text(json.dumps(info))
    w = make_window(qtbot, tmp_path, check_interrupted=True)
    qtbot.waitUntil(lambda: w.banner.isVisible(), timeout=5000)
    offer = w.banner.label.text()
    # The offer names when, what and with which pair, not a folder id.
    assert "“Copy these lines and crash”" in offer and "demo with lookup drafter" in offer
    assert datetime.now().strftime("%-d %b") in offer
    with qtbot.waitSignal(w.trace_opened, timeout=5000):
        w.banner.action.click()
    assert w.replay_path is not None and len(w.data.records) == 12  # 10 speculative, 2 plain
    assert "(replay)" in w.windowTitle()
    assert not marker.exists()  # not offered again


@needs_qt
def test_model_picker_round_trips_a_choice(qtbot):
    from specscope.app.widgets.model_picker import ModelPicker

    for choice in (PairChoice(),
                   PairChoice(target="/models/big", draft="org/small", drafter="model", target_device="cuda:0",
                              draft_device="cuda:1", target_dtype="bfloat16", draft_dtype="float16"),
                   PairChoice(target="org/big", drafter="lookup", target_device="cpu")):
        picker = ModelPicker(choice)
        qtbot.addWidget(picker)
        assert picker.choice() == choice
    picker = ModelPicker(PairChoice(target="/models/big", drafter="model"))
    qtbot.addWidget(picker)
    picker._accept()
    assert "draft model" in picker.problem.text() and not picker.result()


@needs_qt
def test_model_picker_names_a_bad_config_field_when_the_folder_is_chosen(qtbot, tmp_path, monkeypatch):
    import json

    from PySide6.QtWidgets import QFileDialog

    from specscope.app.widgets.model_picker import ModelPicker

    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": "oops"}))
    said = f'{bad / "config.json"}: "hidden_size" is "oops", not a whole number'
    picker = ModelPicker(PairChoice(target="org/big", drafter="lookup"))
    qtbot.addWidget(picker)
    picker.show()
    assert picker.target.edit.width() >= picker.target.edit.fontMetrics().horizontalAdvance("x" * 40)  # a path fits
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a: str(bad))
    picker.target.kind.setCurrentIndex(picker.target.kind.findData("dir"))
    picker.target.browse.click()  # said as soon as the folder is chosen, before any load
    assert picker.problem.text() == f"the target model: {said}"
    picker._accept()
    assert not picker.result()
    (bad / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 32}))
    picker.target.edit.editingFinished.emit()
    assert picker.problem.text() == ""
    # the draft folder of the model drafter too, and the same sentence where a choice is loaded from elsewhere
    (bad / "config.json").write_text(json.dumps({"model_type": "llama", "num_hidden_layers": 1.5}))
    choice = PairChoice(target="org/big", draft=str(bad), drafter="model")
    assert choice.problem() == f'the draft model: {bad / "config.json"}: "num_hidden_layers" is 1.5, not a whole number'


def test_session_folders_are_pruned_to_the_newest_finished_ones(tmp_path):
    from specscope.app.session_folders import prune_sessions
    from specscope.core.trace.autosave import SessionRecorder

    root = tmp_path / "sessions"
    folders = []
    for i in range(5):
        rec = SessionRecorder(root, {"prompt": f"p{i}"}, background_flush=False)
        rec.close(ok=i != 1, fsync=False)
        folders.append(rec.folder)
    live = SessionRecorder(root, {"prompt": "running"}, background_flush=False)  # marked RUNNING
    (root / "not-a-session").mkdir()
    deleted = prune_sessions(root, keep=2)
    left = sorted(p.name for p in root.iterdir())
    assert live.folder.name in left and "not-a-session" in left
    finished_left = [p for p in left if p not in (live.folder.name, "not-a-session")]
    assert len(finished_left) == 2 and set(deleted).isdisjoint(root.iterdir())
    live.close(ok=True, fsync=False)
