"""The app's open-trace and export paths under the faults of issue 14: the message names the right file and
line, a bad session file is only a warning, a full disk leaves no temporary files, and a session folder that
holds nothing is never offered."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

pytest.importorskip("pytestqt")

from specscope.core.trace import write_trace

from .app_helpers import make_window, qt_binding_broken
from .faults import full_disk, leftovers
from .trace_samples import sample_baselines, sample_records

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]


def _set_top5(path: Path, value: str) -> None:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    rows[2][rows[0].index("top5")] = value
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


def test_deep_json_names_the_tokens_file_and_line(qtbot, tmp_path) -> None:
    window = make_window(qtbot, tmp_path)
    paths = write_trace(tmp_path / "run.csv", sample_records(), sample_baselines())
    _set_top5(paths.tokens, "[" * 1500 + "]" * 1500)
    assert not window.open_trace(paths.iterations)
    title, text = window.last_message
    assert title == "Cannot open trace"
    assert text.startswith("run.tokens.csv: line 3: column top5:") and "nested deeper than 2 levels" in text


def test_non_utf8_session_file_opens_with_a_warning(qtbot, tmp_path) -> None:
    window = make_window(qtbot, tmp_path)
    paths = write_trace(tmp_path / "run.csv", sample_records(), sample_baselines())
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
    from specscope.core.autosave import RUNNING_MARKER

    sessions = tmp_path / "data" / "sessions"
    empty = sessions / "20250101-000000-abcdef"
    empty.mkdir(parents=True)
    (empty / RUNNING_MARKER).write_text('{"pid": 999999999}', encoding="utf-8")
    (empty / "trace.csv").write_text("", encoding="utf-8")
    window = make_window(qtbot, tmp_path, check_interrupted=True)
    window.offer_interrupted_session()
    assert window.banner.isHidden() and getattr(window, "interrupted_folder", None) is None
