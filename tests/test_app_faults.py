"""The app's open-trace and export paths under the faults of issue 14: the message names the right file and
line, a bad session file is only a warning, a full disk leaves no temporary files, and a session folder that
holds nothing is never offered."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from specscope.core.trace.files import write_trace

from .app_helpers import make_window, qt_binding_broken
from .faults import full_disk, leftovers
from .trace_samples import sample_records

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]


def _set_first_top5(path: Path, line: int, value: str) -> None:
    """Put ``value`` (raw JSON text) as the first token's top-5 of the event on ``line`` (1-based)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    event = json.loads(lines[line - 1])
    event["tokens"][0]["top5"] = "@TOP5@"
    lines[line - 1] = json.dumps(event).replace('"@TOP5@"', value)
    path.write_text("\n".join(lines), encoding="utf-8")


def test_deep_json_names_the_event_log_and_line(qtbot, tmp_path) -> None:
    window = make_window(qtbot, tmp_path)
    paths = write_trace(tmp_path / "run.csv", sample_records(), {})
    _set_first_top5(paths.events, 3, "[" * 1500 + "]" * 1500)
    assert not window.open_trace(paths.iterations)  # replay reads the event log: that is the file named
    title, text = window.last_message
    assert title == "Cannot open trace"
    assert text.startswith("run.events.jsonl: line 3:") and "nested deeper than" in text
    assert window.replay_path is None and not window.data.records  # nothing half-shown


def test_non_utf8_session_file_opens_with_a_warning(qtbot, tmp_path) -> None:
    window = make_window(qtbot, tmp_path)
    paths = write_trace(tmp_path / "run.csv", sample_records(), {})
    paths.session.write_bytes(b"{\"format\": \"\xff\"}")
    assert window.open_trace(paths.iterations)
    assert len(window.data.records) == len(sample_records())
    assert "run.session.json" in window.banner.label.text() and "not UTF-8" in window.banner.label.text()


def test_export_to_a_full_disk_names_the_path_and_leaves_nothing(qtbot, tmp_path, monkeypatch) -> None:
    window = make_window(qtbot, tmp_path)
    window.ingest(sample_records())
    full_disk(monkeypatch, free=100)
    target = tmp_path / "out" / "run.csv"
    target.parent.mkdir()
    assert not window.export_trace(target)
    title, text = window.last_message
    assert title == "Export failed" and str(target) in text and "No space left on device" in text
    assert leftovers(tmp_path / "out") == [] and list((tmp_path / "out").iterdir()) == []


def test_a_session_folder_that_holds_nothing_is_not_offered(qtbot, tmp_path) -> None:
    from specscope.core.trace.autosave import RUNNING_MARKER

    sessions = tmp_path / "data" / "sessions"
    empty = sessions / "20250101-000000-abcdef"
    empty.mkdir(parents=True)
    (empty / RUNNING_MARKER).write_text('{"pid": 999999999}', encoding="utf-8")
    (empty / "trace.csv").write_text("", encoding="utf-8")
    window = make_window(qtbot, tmp_path, check_interrupted=True)
    window.offer_interrupted_session()
    assert window.banner.isHidden() and getattr(window, "interrupted_folder", None) is None


def test_autosave_that_stops_mid_run_is_reported_when_the_run_ends(qtbot, tmp_path, monkeypatch) -> None:
    from specscope.core.trace import event_log

    from .app_helpers import load_tiny

    original = event_log.EventLogAppender.append

    def fails_at_the_sixth(self, event):  # an event the format cannot hold, as an attached token id once was
        if self.n_events == 5:
            raise ValueError("token_id = -2 is outside 0..2147483648")
        original(self, event)

    monkeypatch.setattr(event_log.EventLogAppender, "append", fails_at_the_sixth)
    window = make_window(qtbot, tmp_path)
    load_tiny(qtbot, window, "perfect")
    window.panel.max_new.setValue(24)
    with qtbot.waitSignal(window.run_ended, timeout=60_000) as blocker:
        assert window.start_run()
    assert blocker.args[0] == "finished:max_new_tokens"  # the run went on
    text = window.last_error or ""
    assert window.banner.isVisible() and text.startswith("Autosave to ") and "stopped: token_id = -2" in text
    assert "Export trace" in text
    monkeypatch.setattr(event_log.EventLogAppender, "append", original)
    assert window.export_trace(tmp_path / "kept.csv")  # nothing decoded is lost: it is all still exportable
