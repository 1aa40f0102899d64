"""The drill in the app: the Run panel widget asks the controls for it, and the plots mark it like a control
change, from the drill events in the stream (a trace keeps them in place, so a replay shows them too)."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from specscope.app.run_data import RunData
from specscope.app.widgets.drill_control import DrillControl
from specscope.core.controls import Controls
from specscope.core.memory.drill import DrillSpec
from specscope.core.records import DrillEvent

from .app_helpers import synthetic_records


def test_drill_start_and_end_are_marked_from_the_stream() -> None:
    records = synthetic_records(12, first_baseline=False)
    start = DrillEvent("start", "draft", 3, 3, "disk", 4)
    end = DrillEvent("end", "draft", 3, 3, "disk", 8)
    data = RunData()
    data.extend([(e, None) for e in [*records[:4], start, *records[4:8], end, *records[8:]]])
    marks = [(m.iteration, m.label) for m in data.markers]
    assert marks == [(4, "drill: draft 3/3 layers → disk"), (8, "drill end: draft layers back")]
    assert len(data.records) == 12  # the events themselves are not records
    assert data.events[4] is start and data.events[9] is end  # kept in place: an export writes them there


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
