"""Autosave: a session folder that is readable while it grows and recognised when its process died."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from specscope.core.trace.autosave import (
    RUNNING_MARKER,
    SessionRecorder,
    default_data_dir,
    dismiss_interrupted_session,
    find_interrupted_sessions,
)
from specscope.core.trace.errors import TraceWriteError
from specscope.core.trace.files import read_trace

from .faults import full_disk, leftovers
from .trace_samples import sample_baselines, sample_records, sample_run_started

SESSION = {"target": "tiny", "draft": "tiny-draft", "k": 3}


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def make_recorder(root: Path, clock: FakeClock | None = None, **kw) -> SessionRecorder:
    return SessionRecorder(root, SESSION, clock=clock or FakeClock(), background_flush=False, **kw)


def test_folder_layout_sidecar_first_and_marker(tmp_path: Path) -> None:
    rec = make_recorder(tmp_path)
    assert rec.folder.parent == tmp_path
    assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{6}", rec.folder.name)
    marker = json.loads((rec.folder / RUNNING_MARKER).read_text(encoding="utf-8"))
    assert marker["pid"] == os.getpid()
    meta = json.loads(rec.paths.session.read_text(encoding="utf-8"))
    assert meta["session"] == SESSION and meta["recording"]["state"] == "running"
    assert read_trace(rec.folder).records == []  # headers are on disk from the start
    rec.close()


def test_rows_are_readable_mid_session_after_a_flush(tmp_path: Path) -> None:
    clock = FakeClock()
    rec = make_recorder(tmp_path, clock)
    records, baselines = sample_records(), sample_baselines()
    rec.append(sample_run_started())  # the first event is written at once
    clock.now = 1.0
    rec.append(records[0])  # a second later: written at once too
    clock.now = 1.4
    rec.append(records[1])
    rec.append(baselines[0])
    assert read_trace(rec.folder).records == records[:1]  # less than a second since the last write
    clock.now = 2.1
    rec.append(records[2])  # a second has passed: everything buffered is written
    loaded = read_trace(rec.folder)
    assert loaded.records == records[:3]
    assert loaded.baselines == baselines[:1]
    assert loaded.session == SESSION
    assert loaded.warnings == []
    rec.close()


def test_closed_session_reads_back_equal_and_marker_is_removed(tmp_path: Path) -> None:
    clock = FakeClock()
    rec = make_recorder(tmp_path, clock)
    records, baselines = sample_records(), sample_baselines()
    rec.append(sample_run_started())
    for i, r in enumerate(records):
        clock.now = 0.3 * i
        rec.append(r)
        if i < len(baselines):
            rec.append(baselines[i])
    rec.close()
    assert not (rec.folder / RUNNING_MARKER).exists()
    loaded = read_trace(rec.folder)
    assert loaded.records == records  # memory dicts that differ per row survive the JSON column
    assert loaded.baselines == baselines
    assert loaded.warnings == []
    assert loaded.meta["recording"]["state"] == "closed" and loaded.meta["recording"]["ok"] is True
    head = json.loads(rec.paths.events.read_text(encoding="utf-8").splitlines()[0])
    assert head["format"] == "specscope-events"  # the event log, the one form export writes too
    assert not rec.paths.iterations.exists()  # no CSV: that is an export, written from the stream
    rec.append(records[0])  # after close: ignored, no error
    rec.close()  # idempotent
    assert len(read_trace(rec.folder).records) == len(records)


def test_close_with_error_is_recorded(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), make_recorder(tmp_path) as rec:
        rec.append(sample_records()[0])
        raise RuntimeError("model raised mid-run")
    meta = json.loads(rec.paths.session.read_text(encoding="utf-8"))
    assert meta["recording"]["ok"] is False
    assert find_interrupted_sessions(tmp_path) == []


def test_background_timer_writes_rows_when_appends_stop(tmp_path: Path) -> None:
    rec = SessionRecorder(tmp_path, SESSION, flush_interval_s=0.05)
    records = sample_records()
    rec.append(records[0])
    rec.append(records[1])  # buffered; no further append will come
    deadline = time.monotonic() + 10.0
    while rec.flushes < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert read_trace(rec.folder).records == records[:2]
    rec.close()


def test_writer_thread_mode_renders_nothing_on_the_caller_and_loses_nothing_at_close(tmp_path: Path) -> None:
    rec = SessionRecorder(tmp_path, SESSION, flush_interval_s=3600, writer_thread=True)
    records, baselines = sample_records(), sample_baselines()
    for r in records[:3]:
        rec.append(r)
    rec.append(baselines[0])
    assert rec.n_iterations == 0 and rec.flushes == 0  # queued: no row rendered on the appending thread
    assert read_trace(rec.folder).records == []
    rec.close()
    assert not any(t.name == "specscope-autosave" for t in threading.enumerate())
    loaded = read_trace(rec.folder)
    assert loaded.records == records[:3] and loaded.baselines == baselines[:1]
    assert json.loads(rec.paths.session.read_text(encoding="utf-8"))["recording"]["iterations"] == 3


def test_writer_thread_writes_rows_within_an_interval_without_further_appends(tmp_path: Path) -> None:
    rec = SessionRecorder(tmp_path, SESSION, flush_interval_s=0.05, writer_thread=True)
    records = sample_records()
    rec.append(records[0])
    rec.append(records[1])
    deadline = time.monotonic() + 10.0
    while rec.flushes < 1 and time.monotonic() < deadline:
        time.sleep(0.01)  # waiting for the writer, not making a race pass: the assertion is what it wrote
    assert read_trace(rec.folder).records == records[:2]
    assert (rec.folder / RUNNING_MARKER).exists()  # written while the session runs, not at its close
    rec.close()


def test_writer_thread_stops_at_a_record_the_format_cannot_hold(tmp_path: Path) -> None:
    from dataclasses import replace

    rec = SessionRecorder(tmp_path, SESSION, flush_interval_s=3600, writer_thread=True)
    records, baselines = sample_records(), sample_baselines()
    rec.append(records[0])
    rec.append(replace(baselines[0], context_len="x"))  # type: ignore[arg-type]  # no event the log can hold
    rec.append(records[1])
    rec.close()
    assert rec.error is not None and "stopped" in rec.error
    assert read_trace(rec.folder).records == records[:1]
    assert json.loads(rec.paths.session.read_text(encoding="utf-8"))["recording"]["ok"] is False


def test_disk_full_mid_run_stops_recording_keeps_rows_and_closes_the_session(tmp_path: Path, monkeypatch) -> None:
    clock = FakeClock()
    budget = full_disk(monkeypatch, free=1 << 20)
    rec = make_recorder(tmp_path, clock)
    records = sample_records()
    rec.append(records[0])  # written: the first row goes to disk at once
    budget.free = 0
    clock.now = 2.0
    rec.append(records[1])
    assert budget.refused and rec.error is not None
    assert "No space left on device" in rec.error and str(rec.folder) in rec.error
    rec.append(records[2])  # no exception in the caller's thread
    rec.close()
    assert not (rec.folder / RUNNING_MARKER).exists()
    meta = json.loads(rec.paths.session.read_text(encoding="utf-8"))
    assert meta["recording"]["state"] == "closed" and meta["recording"]["ok"] is False
    assert "No space left on device" in meta["recording"]["error"]
    assert read_trace(rec.folder).records == records[:1]  # what reached the disk stays readable
    assert leftovers(tmp_path) == []


def test_disk_full_at_start_leaves_nothing_behind(tmp_path: Path, monkeypatch) -> None:
    full_disk(monkeypatch, free=0)
    with pytest.raises(TraceWriteError, match="No space left on device") as exc:
        SessionRecorder(tmp_path, SESSION)
    assert str(tmp_path) in str(exc.value)
    assert list(tmp_path.iterdir()) == []  # no folder to be offered as an interrupted session later


def test_disk_full_after_the_headers_leaves_nothing_to_offer(tmp_path: Path, monkeypatch) -> None:
    budget = full_disk(monkeypatch, free=1 << 20)
    rec = make_recorder(tmp_path)
    budget.free = 0
    rec.append(sample_records()[0])
    _set_marker(rec.folder, pid=_dead_pid(), process_created=None)  # as if killed now
    assert find_interrupted_sessions(tmp_path) == []  # it holds no iteration


def test_unwritable_root_gives_a_write_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x", encoding="utf-8")
    with pytest.raises(TraceWriteError, match="Not a directory"):
        SessionRecorder(blocker / "sessions", SESSION)


# --- interrupted sessions -------------------------------------------------------------------------------


def _dead_pid() -> int:
    code = "import os; print(os.getpid())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(proc.stdout)


def _set_marker(folder: Path, **fields: object) -> None:
    marker = folder / RUNNING_MARKER
    info = json.loads(marker.read_text(encoding="utf-8"))
    info.update(fields)
    marker.write_text(json.dumps(info), encoding="utf-8")


def test_live_session_is_not_interrupted_but_a_dead_one_is(tmp_path: Path) -> None:
    live = make_recorder(tmp_path)
    dead = make_recorder(tmp_path)
    dead.append(sample_records()[0])
    _set_marker(dead.folder, pid=_dead_pid(), process_created=None)
    assert find_interrupted_sessions(tmp_path) == [dead.folder]
    live.close()
    assert find_interrupted_sessions(tmp_path) == [dead.folder]
    assert read_trace(dead.folder).records == sample_records()[:1]
    dismiss_interrupted_session(dead.folder)
    assert find_interrupted_sessions(tmp_path) == []
    assert dead.paths.events.exists()
    dead.close()


def test_reused_pid_and_unreadable_marker_count_as_interrupted(tmp_path: Path) -> None:
    reused = make_recorder(tmp_path)
    reused.append(sample_records()[0])
    _set_marker(reused.folder, process_created=12345.0)  # our pid, but a different process's start time
    garbled = make_recorder(tmp_path)
    garbled.append(sample_records()[0])
    (garbled.folder / RUNNING_MARKER).write_text("{\"pi", encoding="utf-8")
    assert set(find_interrupted_sessions(tmp_path)) == {reused.folder, garbled.folder}
    assert find_interrupted_sessions(tmp_path / "nowhere") == []
    reused.close()
    garbled.close()


def test_killed_process_leaves_a_readable_interrupted_session(tmp_path: Path) -> None:
    """A real crash: a child records, its rows are flushed, then it dies without closing."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(Path(__file__).resolve().parents[1])!r})
        from specscope.core.trace.autosave import SessionRecorder
        from tests.trace_samples import sample_records
        rec = SessionRecorder({str(tmp_path)!r}, {{"target": "child"}}, flush_interval_s=3600)
        for r in sample_records()[:3]:
            rec.append(r)
        rec.flush()
        rec.append(sample_records()[3])  # buffered, never written: lost in the crash
        os._exit(3)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert proc.returncode == 3, proc.stderr
    (folder,) = find_interrupted_sessions(tmp_path)
    loaded = read_trace(folder)
    assert loaded.records == sample_records()[:3]
    assert loaded.session == {"target": "child"}


def test_data_dir_env_override(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(tmp_path / "data"))
    assert default_data_dir() == tmp_path / "data"
    monkeypatch.delenv("SPECSCOPE_DATA_DIR")
    assert default_data_dir().name == "specscope"


def test_a_session_killed_before_its_first_iteration_is_pruned_and_one_with_iterations_kept(tmp_path: Path) -> None:
    from specscope.core.trace.autosave import prune_sessions

    empty = make_recorder(tmp_path)  # the process died while loading: a folder that holds no iteration
    _set_marker(empty.folder, pid=_dead_pid(), process_created=None)
    interrupted = make_recorder(tmp_path)
    interrupted.append(sample_records()[0])
    interrupted.flush()
    _set_marker(interrupted.folder, pid=_dead_pid(), process_created=None)
    live = make_recorder(tmp_path)
    assert prune_sessions(tmp_path, keep=0) == [empty.folder]
    assert interrupted.folder.exists() and live.folder.exists()
    assert find_interrupted_sessions(tmp_path) == [interrupted.folder]
    live.close()
