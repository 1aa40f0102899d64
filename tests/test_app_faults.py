"""The app's open-trace and export paths under the faults of issue 14: the message names the right file and
line, a bad session file is only a warning, a full disk leaves no temporary files, and a session folder that
holds nothing is never offered."""

from __future__ import annotations

import json
import os
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
    assert not window.files.open_trace(paths.iterations)  # replay reads the event log: that is the file named
    title, text = window.last_message
    assert title == "Cannot open trace"
    assert text.startswith("run.events.jsonl: line 3:") and "nested deeper than" in text
    assert window.replay_path is None and not window.data.records  # nothing half-shown


def test_non_utf8_session_file_opens_with_a_warning(qtbot, tmp_path) -> None:
    window = make_window(qtbot, tmp_path)
    paths = write_trace(tmp_path / "run.csv", sample_records(), {})
    paths.session.write_bytes(b"{\"format\": \"\xff\"}")
    assert window.files.open_trace(paths.iterations)
    assert len(window.data.records) == len(sample_records())
    assert "run.session.json" in window.banner.label.text() and "not UTF-8" in window.banner.label.text()


def test_export_to_a_full_disk_names_the_path_and_leaves_nothing(qtbot, tmp_path, monkeypatch) -> None:
    window = make_window(qtbot, tmp_path)
    window.ingest(sample_records())
    full_disk(monkeypatch, free=100)
    target = tmp_path / "out" / "run.csv"
    target.parent.mkdir()
    assert not window.files.export_trace(target)
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
    window.files.offer_interrupted_session()
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
    assert window.files.export_trace(tmp_path / "kept.csv")  # nothing decoded is lost: it is all still exportable


# --- issue 31: a hostile trace opened, an unwritable export path, the shortcut -----------------------------


def _legacy_trace(tmp_path: Path) -> Path:
    """The CSVs alone (a trace from before the event log), five iterations."""
    from specscope.core.trace.legacy_csv import legacy_stream

    from .trace_samples import sample_baselines

    paths = write_trace(tmp_path / "run.csv", legacy_stream(sample_records(), sample_baselines(), {}), {"k": 4})
    paths.events.unlink()
    return paths.iterations


def _set_cell(path: Path, column: str, row: int, value: str) -> None:
    import csv

    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    rows[row + 1][rows[0].index(column)] = value
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


HOSTILE_TRACES = {  # what is done to a legacy trace -> what the one sentence says
    "top5 1e400": (lambda d: _set_cell(d / "run.tokens.csv", "top5", 1, "[[1e400,0.5]]"),
                   "run.tokens.csv: line 3: column top5:"),
    "k = -1": (lambda d: _set_cell(d / "run.csv", "k", 1, "-1"), "run.csv: line 3: k = -1 is outside 0..16"),
    "n_drafted 10^20": (lambda d: _set_cell(d / "run.csv", "n_drafted", 1, "99999999999999999999"),
                        "n_drafted = 99999999999999999999 is outside 0..80"),
    "NaN temperature": (lambda d: _set_cell(d / "run.csv", "temperature", 1, "nan"),
                        "column temperature: 'nan' is not a finite number"),
    "mode text": (lambda d: _set_cell(d / "run.csv", "mode", 1, "=HYPERLINK(\"x\")"), "is not one of attached"),
    "tokens file a named pipe": (lambda d: ((d / "run.tokens.csv").unlink(), os.mkfifo(d / "run.tokens.csv")),
                                 "run.tokens.csv: is a named pipe, not a trace file"),
    "random bytes": (lambda d: (d / "run.csv").write_bytes(bytes(range(1, 256)) * 40),
                     "run.csv: not a specscope trace"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_TRACES))
def test_a_hostile_trace_opened_in_the_window_is_one_sentence(qtbot, tmp_path, case) -> None:
    window = make_window(qtbot, tmp_path)
    window.ingest(sample_records())  # a run on screen, which a refused trace must leave alone
    shown = len(window.data.records)
    (tmp_path / "t").mkdir()
    main = _legacy_trace(tmp_path / "t")
    damage, says = HOSTILE_TRACES[case]
    damage(main.parent)
    assert not window.files.open_trace(main)
    title, text = window.last_message
    assert title == "Cannot open trace" and says in text, text
    assert "\n" not in text and len(text) < 300 and "Error" not in text  # a sentence, not an exception's name
    assert window.replay_path is None and len(window.data.records) == shown


def test_a_trace_with_repeated_rows_opens_with_what_was_repaired(qtbot, tmp_path) -> None:
    window = make_window(qtbot, tmp_path)
    main = _legacy_trace(tmp_path)
    lines = main.read_text(encoding="utf-8").splitlines(keepends=True)
    main.write_text("".join([lines[0], *lines[1:3] * 300, *lines[3:]]), encoding="utf-8")
    assert window.files.open_trace(main)
    assert len(window.data.records) == len(sample_records())
    assert "iteration rows repeated an earlier iteration number" in window.banner.label.text()


def _unwritable(tmp_path: Path, kind: str) -> Path:
    from .cli_helpers import char_device

    if kind == "a character device":
        return char_device(tmp_path / "null.csv")
    if kind == "a named pipe":
        os.mkfifo(tmp_path / "pipe.csv")
        return tmp_path / "pipe.csv"
    if kind == "a folder":
        (tmp_path / "folder.csv").mkdir()
        return tmp_path / "folder.csv"
    blocker = tmp_path / "a_file"
    blocker.write_text("x", encoding="utf-8")
    return blocker / "run.csv"  # under a regular file


@pytest.mark.parametrize("kind", ["a character device", "a named pipe", "a folder", "under a file"])
@pytest.mark.parametrize("export", ["export_trace", "export_chrome_trace"])
def test_an_unwritable_export_path_is_one_sentence_and_replaces_nothing(qtbot, tmp_path, kind, export) -> None:
    import stat

    window = make_window(qtbot, tmp_path)
    window.ingest(sample_records())
    out = tmp_path / "out"
    out.mkdir()
    target = _unwritable(out, kind)
    before = {p.name: stat.S_IFMT(os.lstat(p).st_mode) for p in out.iterdir()}
    assert not getattr(window.files, export)(target)
    title, text = window.last_message
    assert title == "Export failed" and "\n" not in text and len(text) < 300, text
    assert str(target) in text or target.name in text
    if kind != "under a file":
        assert f"is {kind}" in text or "Is a directory" in text, text
    assert {p.name: stat.S_IFMT(os.lstat(p).st_mode) for p in out.iterdir()} == before  # nothing replaced
    assert leftovers(out) == []


class _ClaimsCtrlE:
    """What a line edit does where the platform binds Ctrl+E to "end of line" (X11's key scheme; this offscreen
    platform binds nothing to it): it accepts the ShortcutOverride for Ctrl+E, so a window shortcut never sees it."""

    def __init__(self) -> None:
        from PySide6.QtCore import QObject

        class Filter(QObject):
            def eventFilter(self, watched, event) -> bool:
                from PySide6.QtCore import QEvent, Qt

                if event.type() == QEvent.Type.ShortcutOverride and event.key() == Qt.Key.Key_E \
                        and event.modifiers() == Qt.KeyboardModifier.ControlModifier:
                    event.accept()
                    return True
                return False

        self.filter = Filter()


def test_ctrl_e_exports_while_a_spin_box_has_focus(qtbot, tmp_path) -> None:
    from PySide6.QtCore import Qt
    from PySide6.QtWidgets import QMainWindow

    claims = _ClaimsCtrlE()
    plain = QMainWindow()  # the emulation does block a window shortcut that is not window-wide
    qtbot.addWidget(plain)
    from PySide6.QtGui import QAction, QKeySequence
    from PySide6.QtWidgets import QSpinBox

    action = QAction("x", plain)
    action.setShortcut(QKeySequence("Ctrl+E"))
    plain.addAction(action)
    other = QSpinBox(plain)
    plain.setCentralWidget(other)
    other.installEventFilter(claims.filter)  # the spin box has the focus and hands the event to its line edit
    plain.show()
    other.setFocus()
    qtbot.waitUntil(other.hasFocus, timeout=5000)
    fired: list[bool] = []
    action.triggered.connect(lambda: fired.append(True))
    qtbot.keyClick(other, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    assert fired == []

    window = make_window(qtbot, tmp_path)
    spin = window.panel.max_new
    assert not spin.hasFocus()
    spin.installEventFilter(claims.filter)  # as the platform's binding would, before the spin box has the focus
    window.activateWindow()
    spin.setFocus()
    qtbot.waitUntil(spin.hasFocus, timeout=5000)
    with qtbot.waitSignal(window.menus.export_action.triggered, timeout=5000):
        qtbot.keyClick(spin, Qt.Key.Key_E, Qt.KeyboardModifier.ControlModifier)
    assert window.last_message[0] == "Nothing to export"  # the export ran (and found nothing to write)
