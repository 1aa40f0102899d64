"""Issue 29's words and behaviour: nothing cut mid-word, no stale progress line after a failed load, natural
run-end wording, View ▸ Controls and F11, adaptive k kept across drafter switches, settings saved as they
change (a killed window keeps them)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtGui import QKeySequence

from specscope.core.controls import switched_drafter_controls
from specscope.core.records import ControlValues

from .app_helpers import load_tiny, make_window, pair_factory, qt_binding_broken

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]

DEMO_EAGLE = ("SmolLM2-135M-Instruct (embedded demo) with its EAGLE-3 head (one layer, 3,072-token draft "
              "vocabulary; reads target layers 2, 15, 27)")


def test_a_long_label_ends_in_an_ellipsis_keeps_the_drafter_and_shows_the_rest_on_hover(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    w.run_panel.show_pair(DEMO_EAGLE, "lookup")
    label = w.run_panel.pair
    qtbot.waitUntil(lambda: label.width() > 100)
    assert label.is_elided
    shown = label.shown_text
    assert shown.endswith(" · drafter: lookup")  # the drafter is never the part that is cut
    assert "…" in shown and label.fontMetrics().horizontalAdvance(shown) <= label.width()
    assert DEMO_EAGLE in label.toolTip()  # the full text on hover
    w.resize(2400, 720)
    qtbot.waitUntil(lambda: not label.is_elided)
    assert label.toolTip() == "" and label.shown_text == f"pair: {DEMO_EAGLE} · drafter: lookup"


def test_the_eliding_label_cuts_whole_text_with_an_ellipsis(qtbot):
    from specscope.app.widgets.elided_label import ElidedLabel

    label = ElidedLabel("3,072-token draft vocabulary; reads target layers 2, 15, 27")
    qtbot.addWidget(label)
    label.resize(120, 20)
    label.show()
    assert label.shown_text.endswith("…") and label.shown_text[:-1] in label.full_text
    assert label.toolTip() == label.full_text


def test_a_failed_load_leaves_no_reading_line_and_its_sentence_has_a_full_stop(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)

    def failing(progress):
        progress("Reading /home/me/models/broken", 0.0)
        raise ValueError("no config.json in /home/me/models/broken")

    with qtbot.waitSignal(w.pair_failed, timeout=30_000):
        w.load_pair(failing)
    qtbot.wait(50)  # the progress signal is queued from the worker thread as well
    assert "Reading" not in w.status.message.text() and "failed" in w.status.message.text()
    assert not w.status.progress.isVisible()
    assert "no config.json in /home/me/models/broken. Correct it in Models" in w.banner.label.text()


def test_the_run_end_is_said_in_words(qtbot, tmp_path):
    from specscope.app.sentences import finish_sentence

    assert finish_sentence("eos", 152.2, 96) == "Finished after 152.2 s and 96 iterations: the model ended its answer."
    assert finish_sentence("stop", 3.0, 1) == "Stopped after 3.0 s and 1 iteration."
    w = make_window(qtbot, tmp_path)
    load_tiny(qtbot, w, "perfect")
    w.panel.max_new.setValue(6)
    with qtbot.waitSignal(w.run_ended, timeout=60_000):
        w.start_run()
    text = w.status.message.text()
    assert text.startswith("Finished after ") and text.endswith(": max new tokens reached.")


def test_view_controls_toggles_the_dock_and_f11_is_full_screen(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    toggle = w.controls_dock.toggleViewAction()
    assert toggle in w.menus.view_menu.actions() and toggle.isEnabled()
    toggle.trigger()
    assert not w.controls_dock.isVisible()
    toggle.trigger()
    assert w.controls_dock.isVisible()
    assert QKeySequence("F11") in w.arrangement.full_screen_action.shortcuts()


def test_a_drafter_switch_keeps_adaptive_k_the_user_unticked(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    asked = []
    w.controller.load = lambda what: asked.append(what) or True  # see what would load, load nothing
    w.change_drafter("lookup")
    assert w.panel.adaptive.isChecked()  # lookup's default, the user has not touched it
    w.panel.adaptive.click()  # the user unticks it
    assert not w.panel.adaptive.isChecked()
    w.change_drafter("model")
    w.change_drafter("lookup")
    assert [a.drafter for a in asked] == ["lookup", "model", "lookup"]
    assert not w.panel.adaptive.isChecked()  # their choice, not lookup's default
    w.close()
    again = make_window(qtbot, tmp_path)  # and after a relaunch
    again.controller.load = lambda what: True
    again.change_drafter("model")
    again.change_drafter("lookup")
    assert not again.panel.adaptive.isChecked()
    # the rule itself: an untouched setting follows the drafter, a chosen one stays
    assert switched_drafter_controls(ControlValues(adaptive_k=False), "model", "lookup").adaptive_k
    assert not switched_drafter_controls(ControlValues(adaptive_k=False), "model", "lookup", True).adaptive_k


def test_settings_reach_the_disk_when_they_change_not_only_on_exit(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    ini = tmp_path / "settings.ini"
    w.controller.load = lambda what: True
    w.panel.set_prompt_text("Count the sheep in Wales, one per line")
    w.panel.k_spin.setValue(7)
    w.change_drafter("early-exit")
    # No close, no explicit save: what a kill would leave on disk.
    qtbot.waitUntil(lambda: ini.exists() and all(
        s in ini.read_text() for s in ("Count the sheep in Wales", "early-exit", '\\"k\\": 7')), timeout=5_000)


def test_loading_names_each_step_in_the_status_bar(qtbot, tmp_path):
    from specscope.app.window import engine_imported

    w = make_window(qtbot, tmp_path)
    seen: list[str] = []
    w.controller.progress.connect(lambda message, _fraction: seen.append(message))
    with qtbot.waitSignal(w.pair_ready, timeout=60_000):
        w.load_pair(pair_factory("perfect"))
        # the window's own first line names the step the worker starts with
        first = w.status.message.text()
        assert first.endswith(": starting…" if engine_imported() else ": importing torch and transformers…")
    assert "building a tiny pair" in seen  # the loader's own steps
    assert seen[-1].startswith("Warming up: decode modules and a memory bandwidth probe")  # the last, named
    assert w.status.message.text().startswith("Ready: ")
    # Start within the message's 5 s: "Ready: <pair>" no longer describes a window that is decoding
    w.panel.max_new.setValue(4)
    with qtbot.waitSignal(w.run_ended, timeout=60_000):
        assert w.start_run()
        assert w.status.message.text() == ""
