"""The drill in the app: the Run panel widget asks the controls for it, and the plots mark it like a control
change, from the records' drill columns (so a replayed trace shows it too)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from specscope.app.run_data import RunData
from specscope.app.widgets.drill_control import DrillControl
from specscope.core.controls import Controls
from specscope.core.drill import DrillSpec
from specscope.core.records import DrillEvent

from .app_helpers import synthetic_records


def test_drill_start_and_end_are_marked_from_the_records() -> None:
    events = synthetic_records(12)
    records = [e for e in events if hasattr(e, "iteration")]
    for r in records:
        r.memory["drill_draft_layers_count"] = 3.0 if 4 <= r.iteration < 8 else 0.0
        r.memory["drill_target_layers_count"] = 0.0
    data = RunData()
    data.extend([*events[:5], DrillEvent("start", "draft", 3, 3, "disk", 4), *events[5:]])
    marks = [(c.iteration, c.label) for c in data.control_changes if "drill" in c.label]
    assert marks == [(4, "drill: draft 3 layers off its device"), (8, "drill end: draft layers back")]
    assert len(data.records) == 12  # the event itself is not a record


def test_the_widget_asks_the_controls_and_shows_the_engine_reply(qtbot) -> None:
    controls = Controls()
    widget = DrillControl(lambda: controls)
    qtbot.addWidget(widget)
    assert not widget.start_button.isEnabled()  # nothing runs yet
    widget.set_state("running")
    widget.model.setCurrentText("target")
    widget.layers.setValue(18)
    widget.start_button.click()
    assert controls.take_drill_request() == ("start", DrillSpec("target", 18))
    assert not widget.end_button.isEnabled()  # until the engine says it started
    widget.on_event(DrillEvent("start", "target", 18, 30, "disk", 7))
    assert widget.end_button.isEnabled() and "18/30 layers → disk" in widget.status.text()
    widget.end_button.click()
    assert controls.take_drill_request() == ("end", None)
    widget.on_event(DrillEvent("start", "draft", 0, 0, "", 9, error="there is no draft model to drill"))
    assert "no draft model" in widget.status.text()
