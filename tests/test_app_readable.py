"""What the window shows can be read: the run panel's full sentences, the state in words, the k in use, the
token view's share of the window, keys outside the data, the drafter in the control panel, the top-5 text."""

from __future__ import annotations

import html

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt

from specscope.core.drafter_catalogue import DRAFTER_HELP, DRAFTER_KINDS
from specscope.core.records import TokenRecord, TokenStatus

from .app_helpers import load_tiny, make_window, qt_binding_broken, synthetic_records

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]

LONG_WARNING = ("target verify 5x its recent median with host memory nearly full: weights may be paging "
                "between host and device, slow, memory low; try a smaller model or dtype")


def test_verdict_and_warning_wrap_in_full_and_messages_stay_visible(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    events = synthetic_records(60, k=8, accept=lambda i: 0, draft_ms=4.0, flag_every=30, baseline_every=6)
    events[-1].flags = [LONG_WARNING]
    w.ingest(events)  # through the window's measurement, as a live session feeds its own
    panel = w.run_panel
    verdict = w.data.estimate.verdict if w.data.estimate is not None else None
    assert verdict
    assert panel.verdict.isVisible() and panel.verdict.text() == verdict  # the whole sentence
    assert panel.verdict.wordWrap() and panel.warning.wordWrap()
    assert LONG_WARNING in panel.warning.text()
    qtbot.waitUntil(lambda: panel.warning.height() > panel.warning.fontMetrics().height() * 1.5
                    or panel.warning.width() > panel.warning.fontMetrics().horizontalAdvance(LONG_WARNING))
    w.status.show_message("Trace written: /tmp/x.csv", 8000)
    assert w.status.message.isVisible()  # the verdict no longer hides transient messages
    # At 1280x720 the numbers on the right leave a long message too little room: it ends in "…", never cut
    # mid-word under them, and is whole on hover.
    w.resize(1280, 720)
    long = "Trace written: " + "/a/rather/long/folder" * 12 + "/run.csv (5 files beside it)"
    w.status.show_message(long)
    qtbot.waitUntil(lambda: w.status.message.is_elided)
    message = w.status.message
    assert message.shown_text.endswith("…") and message.text() == long and long in message.toolTip()
    assert message.geometry().right() <= w.status.metrics.geometry().left()


def test_token_view_has_a_real_share_and_the_layout_choice_is_remembered(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    qtbot.waitUntil(lambda: w.token_view.height() > 0)
    qtbot.wait(10)
    plots, tokens = w.splitter.sizes()
    assert tokens >= 0.29 * (plots + tokens)  # 40%, or 30% when the room is short
    assert w.splitter.handleWidth() >= 6
    w.resize(1600, 1000)  # beside the plots needs a wide window (tests/test_app_decorations.py)
    w.arrangement.beside_action.trigger()
    qtbot.waitUntil(lambda: w.splitter.orientation() == Qt.Orientation.Horizontal)
    w.splitter.setSizes([760, 400])
    w.splitter.moveSplitter(700, 1)  # a drag of the handle: the split the user chose is kept
    w.close()
    beside, saved = w.settings.token_layout()
    assert beside and saved == w.splitter.sizes()
    again = make_window(qtbot, tmp_path)
    assert again.arrangement.beside_action.isChecked()
    again.resize(1600, 1000)  # the offscreen screen is smaller than the saved geometry, which Qt clamps to it
    qtbot.waitUntil(lambda: again.splitter.orientation() == Qt.Orientation.Horizontal)  # once laid out wide


def test_plot_keys_sit_outside_the_data(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_records(20, k=4))
    for plot in w.plots.live_plots:
        assert plot.plot_item.legend is None  # no legend box inside the view
    title = w.plots.timing.plot_item.titleLabel.text
    assert all(name in title for name in ("draft", "verify", "rollback", "plain step"))
    memory = w.plots.memory
    # these records hold only the machine's totals: drawn, with their key, once asked for
    assert "machine totals" in memory.empty.text() and memory.empty.isVisible()
    memory.totals_box.setChecked(True)
    qtbot.waitUntil(lambda: not memory.empty.isVisible())
    memory_title = memory.plot_item.titleLabel.text
    key = memory_title.split("<br>", 1)[1]
    assert "<b>host</b>" in key and "rss" in key and "MB/s" not in key


def test_state_in_words_pair_and_drafter_and_the_k_in_use(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    assert "no model" in w.run_panel.state.text()
    load_tiny(qtbot, w, "perfect")
    assert "ready" in w.run_panel.state.text() and "Start (F5)" in w.run_panel.hint.text()
    assert "drafter: model" in w.run_panel.pair.text()
    w.panel.max_new.setValue(12)
    with qtbot.waitSignal(w.run_ended, timeout=60_000):
        w.start_run()
    assert "finished" in w.run_panel.state.text() and "max new tokens" in w.run_panel.state.text()
    # Adaptive k: the panel says the k the records ran with, not the slider's.
    events = synthetic_records(5, k=2)
    from dataclasses import replace

    from specscope.core.records import ControlValues

    adaptive = [replace(e, controls=ControlValues(k=1, adaptive_k=True)) if hasattr(e, "tokens") else e
                for e in events]
    w.panel.k_spin.setValue(6)
    w.panel.adaptive.setChecked(True)
    w.ingest(adaptive)
    assert "k in use: <b>1</b> (adaptive)" in w.run_panel.k_in_use.text()
    assert "k = 1" in w.panel.k_in_use.text()


def test_the_adaptive_k_note_goes_when_adaptive_is_unticked(qtbot, tmp_path):
    """Issue 29 item 8: "adaptive k is using k = 0" stayed after the user unticked adaptive k."""
    from dataclasses import replace

    from specscope.core.records import ControlValues

    w = make_window(qtbot, tmp_path)
    w.panel.adaptive.setChecked(True)
    events = [replace(e, controls=ControlValues(k=0, adaptive_k=True)) if e.mode == "speculative" else e
              for e in synthetic_records(5, k=2, accept=lambda i: 0)]
    w.ingest(events)
    note = w.panel.k_in_use
    assert note.isVisible() and "adaptive k is using k = 0" in note.text()
    w.panel.adaptive.setChecked(False)
    assert not note.isVisible() and note.text() == ""  # at once, not at the next frame
    w.tick()  # and the next frames do not bring it back
    w.views.redraw_all()
    assert not note.isVisible() and note.text() == ""


def test_measure_baseline_now_gives_feedback_and_a_marker(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    load_tiny(qtbot, w, "perfect")
    w.panel.max_new.setValue(100_000)
    assert w.start_run()
    qtbot.waitUntil(lambda: len(w.data.records) >= 3, timeout=60_000)
    w.panel.baseline_button.click()
    assert "Baseline requested" in w.status.message.text()
    qtbot.waitUntil(lambda: any(m.label.startswith("baseline") for m in w.data.markers), timeout=60_000)
    with qtbot.waitSignal(w.run_ended, timeout=30_000):
        w.stop_run()
    marker = next(m for m in w.data.markers if m.label.startswith("baseline"))
    # the baseline is real plain iterations that keep their tokens: the marker sits on one
    assert next(r for r in w.data.records if r.iteration == marker.iteration).mode == "plain"
    assert any(m.value() == marker.iteration for m in w.plots.timing.markers)


def test_drafter_choice_lives_in_the_control_panel(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    combo = w.panel.drafter
    assert [combo.itemData(i) for i in range(combo.count())] == list(DRAFTER_KINDS)
    assert combo.itemData(1, Qt.ItemDataRole.ToolTipRole) == DRAFTER_HELP[DRAFTER_KINDS[1]]
    asked = []
    w.controller.load = lambda what: asked.append(what) or True  # no real load: see what it would load
    combo.setCurrentIndex(DRAFTER_KINDS.index("lookup"))
    w.panel.drafter_changed.emit("lookup")  # what a pick in the list emits
    assert asked and asked[0].drafter == "lookup" and w.pair_choice.drafter == "lookup"


def test_top5_tooltip_shows_token_text_and_readable_special_tokens(qtbot, tmp_path):
    from specscope.app.widgets.token_view import tooltip_html, visible_text

    texts = {284: " the", 2: "<|im_end|>", 9: "\ufffd"}
    tok = TokenRecord(284, " the", TokenStatus.ACCEPTED, 0, p=0.9, q=0.8,
                      top5=[(284, 0.9983), (2, 0.001), (9, 0.0005)])
    tip = html.unescape(tooltip_html(0, tok, texts.get))
    assert "' the'" in tip and "id 284" in tip and "0.9983" in tip
    assert "⟨im_end⟩" in tip and "byte" in tip
    assert visible_text("<|im_end|>") == "⟨im_end⟩" and visible_text("</s>") == "⟨/s⟩"
    assert visible_text("\ufffd") == "⟨byte⟩"
    # A replay has no tokenizer: the top 5 are named from the tokens the trace itself holds.
    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_records(3, k=4))
    w.token_view.decode = None
    i = next(i for i, (_, t) in enumerate(w.token_view.shown_tokens()) if t.top5 and t.token_id == 50)
    tip = html.unescape(w.token_view.tooltip_for_offset(w.token_view._starts[i]) or "")
    assert "0.6000 \xa0 ' y' (id 50)" in tip
    # A new trace or a remote worker's record carries the alternatives' texts: none is unknown, with no decoder.
    carried = TokenRecord(284, " the", TokenStatus.ACCEPTED, 0, p=0.9, q=0.8,
                          top5=[(284, 0.9), (23297, 0.05), (31, 0.01)], top5_text=[" the", " a", "<|im_end|>"])
    tip = html.unescape(tooltip_html(0, carried, None))
    assert "unknown" not in tip and "' a' (id 23297)" in tip and "⟨im_end⟩" in tip
    tip = html.unescape(tooltip_html(0, carried, {23297: " wrong"}.get))
    assert "' a' (id 23297)" in tip  # the record's own text wins over a decoder's guess


def test_the_controls_fit_their_dock_with_the_adaptive_k_sentence_shown(qtbot, tmp_path):
    from dataclasses import replace

    from specscope.core.records import ControlValues

    w = make_window(qtbot, tmp_path)
    w.resize(1600, 1000)
    w.panel.adaptive.setChecked(True)
    events = [replace(e, controls=ControlValues(k=10, adaptive_k=True)) if hasattr(e, "tokens") else e
              for e in synthetic_records(5, k=4)]
    w.ingest(events)
    assert "k = 10" in w.panel.k_in_use.text()
    scroll = w.controls_dock.widget()
    # the whole panel is visible across: no sideways scrolling, nothing cut at the dock's edge
    assert w.panel.minimumSizeHint().width() <= scroll.viewport().width()
    qtbot.wait(50)
    assert not scroll.horizontalScrollBar().isVisible()


def test_measure_baseline_while_paused_says_at_once_when_it_will_run(qtbot, tmp_path):
    """Issue 29 item 9: F7 while paused gave no feedback until the run resumed."""
    w = make_window(qtbot, tmp_path)
    load_tiny(qtbot, w, "perfect")
    w.panel.max_new.setValue(100_000)
    assert w.start_run()
    qtbot.waitUntil(lambda: len(w.data.records) >= 3, timeout=60_000)
    w.panel.pause_button.click()
    assert w.state == "paused" and w.menus.baseline_action.isEnabled()
    w.menus.baseline_action.trigger()  # F7
    message = w.status.message.text()
    assert "Baseline requested" in message and "paused" in message and "resume (F6)" in message
    w.panel.pause_button.click()
    qtbot.waitUntil(lambda: any(m.label.startswith("baseline") for m in w.data.markers), timeout=60_000)
    assert "Baseline measured at iteration" in w.status.message.text()
    with qtbot.waitSignal(w.run_ended, timeout=30_000):
        w.stop_run()


def test_hovering_a_suffix_token_says_what_its_iteration_matched(qtbot, tmp_path):
    from dataclasses import replace

    from specscope.core.records import IterationRecord

    records = synthetic_records(3, k=4)
    iterations = [r for r in records if isinstance(r, IterationRecord)]
    records = [r if not isinstance(r, IterationRecord) else
               replace(r, drafter="suffix", match_len=5, expected_accepted=2.345) if r is iterations[1] else r
               for r in records]
    w = make_window(qtbot, tmp_path)
    w.ingest(records)
    view = w.token_view
    tips = {it: html.unescape(view.tooltip_for_offset(view._starts[i]) or "")
            for i, (it, _) in enumerate(view.shown_tokens())}
    assert "suffix match of 5 tokens, expected accepted 2.35 of" in tips[1]
    assert "match" not in tips[0] and "match" not in tips[2]  # the model drafter matches nothing
