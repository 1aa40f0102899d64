"""What the window shows is right: the prompt lists follow the text, axes keep their units, empty plots say
so, iterations without proposals have their own token status, and acceptance bars carry their sample size."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from specscope.core.records import TokenStatus

from .app_helpers import make_window, qt_binding_broken, synthetic_records

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]


def _kinds_with_prompts(panel) -> list[str]:
    return [name for name, prompts in panel.prompt_sets.items() if prompts]


def test_choosing_a_kind_puts_its_first_prompt_in_the_box(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    panel = w.panel
    kinds = _kinds_with_prompts(panel)
    assert len(kinds) >= 2
    for kind in kinds:
        panel.set_combo.activated.emit(panel.set_combo.findText(kind))  # what a user's pick emits
        first = panel.prompt_sets[kind][0]
        assert panel.prompt_text() == first.text.strip()
        assert panel.set_combo.currentText() == kind and panel.prompt_combo.currentText() == first.title


def test_typed_text_shows_custom_and_a_pasted_preset_selects_its_kind(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    panel = w.panel
    kinds = _kinds_with_prompts(panel)
    panel.set_prompt_text("my own prompt about ferries")
    assert panel.prompt_combo.currentText() == "custom"
    other = panel.prompt_sets[kinds[-1]][-1]
    panel.set_prompt_text(other.text)  # pasting a preset's text
    assert panel.set_combo.currentText() == kinds[-1] and panel.prompt_combo.currentText() == other.title
    panel.prompt_combo.activated.emit(0)  # "custom" brings the typed text back
    assert panel.prompt_text() == "my own prompt about ferries"


def test_relaunch_shows_the_lists_of_the_remembered_prompt(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    kinds = _kinds_with_prompts(w.panel)
    remembered = w.panel.prompt_sets[kinds[0]][-1]
    w.panel.set_prompt_text(remembered.text)
    w.close()
    again = make_window(qtbot, tmp_path)
    assert again.panel.prompt_text() == remembered.text.strip()
    assert again.panel.set_combo.currentText() == kinds[0]
    assert again.panel.prompt_combo.currentText() == remembered.title


def test_axes_keep_their_units_without_si_prefixes(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    plots = [*w.plots.live_plots, w.plots.positions, w.plots.k_advisor]
    for plot in plots:
        for name, axis in plot.getPlotItem().axes.items():
            assert axis["item"].autoSIPrefix is False, (type(plot).__name__, name)
    # A speed-up of 0.5 stays "0.5" under "×" (pyqtgraph would write 500 and "(x0.001)").
    events = synthetic_records(40, k=4, accept=lambda i: 0, draft_ms=5.0)
    w.ingest(events)
    axis = w.plots.speedup.plot_item.getAxis("left")
    assert "x0.001" not in axis.labelString() and axis.autoSIPrefixScale == 1.0


def test_every_empty_plot_says_so_until_it_has_data(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    plots = [*w.plots.live_plots, w.plots.positions]
    assert all(p.empty.isVisible() for p in plots)
    assert w.plots.k_advisor.note.isVisible()
    assert "no data yet" in w.plots.timing.empty.text()
    events = synthetic_records(50, k=4, memory=False, baseline_every=6)
    w.ingest(events)
    assert not any(p.empty.isVisible() for p in (w.plots.timing, w.plots.alpha, w.plots.speedup,
                                                   w.plots.positions))
    # Records without memory samples: the memory plot says that, in full, not "…les in these records".
    assert w.plots.memory.empty.isVisible()
    assert w.plots.memory.empty.text() == "no memory samples in these records"
    assert not w.plots.memory.plot_item.getAxis("right").isVisible()  # no MB/s series: no MB/s axis


def _no_proposal_records():
    from dataclasses import replace

    events = synthetic_records(3, k=4)
    last = events[-1]
    target_token = replace(last.tokens[-1], status=TokenStatus.TARGET)
    events[-1] = replace(last, n_drafted=0, n_accepted=0, n_emitted=1, tokens=[target_token])
    return events


def test_tokens_of_iterations_without_proposals_are_target_steps_everywhere(qtbot, tmp_path):
    from specscope.app.widgets.legend import legend_html
    from specscope.core.trace.files import read_trace, write_trace

    w = make_window(qtbot, tmp_path)
    events = _no_proposal_records()
    w.ingest(events)
    shown = [t.status.value for it, t in w.token_view.shown_tokens() if it == events[-1].iteration]
    assert shown == ["target"]
    # the baseline's two plain iterations are target steps too
    assert "target 3" in w.legend.counts_text and "target" in legend_html()
    fmt = w.token_view._formats
    assert fmt["target"].fontItalic() is False and fmt["target"] != fmt["bonus"]
    write_trace(tmp_path / "t.csv", events, {})
    assert ",target," in (tmp_path / "t.tokens.csv").read_text()
    back = read_trace(tmp_path / "t.csv").records[-1]
    assert [t.status for t in back.tokens] == [TokenStatus.TARGET]


def test_acceptance_bars_have_integer_ticks_and_a_sample_size(qtbot, tmp_path):
    from specscope.app.widgets.acceptance_bars import MIN_SAMPLES

    w = make_window(qtbot, tmp_path)
    # At 1280x720 six columns leave room for any count ("6 n=999"): the n's are written (a narrower window,
    # whose columns would hold "n=31" but not "n=999", leaves them out from the start rather than at n=100)
    w.resize(1280, 720)
    qtbot.waitUntil(lambda: w.plots.positions.width() > 400)
    # Every iteration accepts 3 of 4: positions 1-3 reached 30 times, position 4 reached 30 times, rejected.
    # One iteration at k=6 reaches positions 5 and 6 once (n=1): those bars are hatched and carry no rate.
    events = synthetic_records(30, k=4, accept=lambda i: 3)
    last = synthetic_records(1, k=6, accept=lambda i: 6, first_baseline=False)[0]
    events.append(replace(last, iteration=len(events)))
    w.ingest(events)  # acceptance by position comes from the window's measurement
    bars = w.plots.positions
    ticks = bars.getPlotItem().getAxis("bottom")._tickLevels[0]
    assert [v for v, _ in ticks] == [1, 2, 3, 4, 5, 6] and all(float(v).is_integer() for v, _ in ticks)
    assert [t for _, t in ticks] == ["1 n=31", "2 n=31", "3 n=31", "4 n=31", "5 n=1", "6 n=1"]
    solid_x = list(bars.bars.opts["x"])
    thin_x = list(bars.thin_bars.opts["x"])
    assert solid_x == [1, 2, 3, 4] and thin_x == [5, 6]
    labels = [lab.textItem.toPlainText() for lab in bars.labels[:6]]
    assert labels[0] == "1.00" and labels[3] == "0.03"
    assert labels[4] == "" and MIN_SAMPLES > 1  # a rate from one sample is not written
