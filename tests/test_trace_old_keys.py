"""Keys renamed since traces were first written: the readers take the old names, the writers write the new.

``BaselineRecord.after_iteration`` and ``DrillEvent.before_iteration`` held one number, the iterations the run
had done, under two names; both are ``iterations_done`` now. Event logs and baselines CSVs written before the
rename still open, with the same events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specscope.core.records import BaselineRecord, DrillEvent
from specscope.core.trace.errors import TraceFormatError
from specscope.core.trace.event_log import decode, encode
from specscope.core.trace.files import read_trace, write_trace
from specscope.core.trace.legacy_csv import legacy_stream

from .trace_samples import sample_baselines, sample_records

DRILL = DrillEvent("start", "target", 2, 4, "disk", 3, moved_bytes=10, t_s=1000.06)


def _stream() -> list:
    """A stream with baselines (as converted from an old trace) and a drill before iteration 3."""
    stream = legacy_stream(sample_records(), sample_baselines(), {})
    third = next(i for i, e in enumerate(stream) if getattr(e, "iteration", None) == 3 and not hasattr(e, "old"))
    return [*stream[:third], DRILL, *stream[third:]]


def _with_old_names(line: str) -> str:
    """An event log line as it was written before the rename."""
    obj = json.loads(line)
    old = {"drill": "before_iteration", "baseline": "after_iteration"}.get(obj.get("type"))
    return json.dumps({old if key == "iterations_done" and old else key: v for key, v in obj.items()})


def test_the_writers_write_the_new_name_only() -> None:
    for event in (DRILL, sample_baselines()[0]):
        line = json.loads(encode(event))
        assert line["iterations_done"] == event.iterations_done
        assert "before_iteration" not in line and "after_iteration" not in line


def test_an_event_log_written_with_the_old_names_opens_with_the_same_events(tmp_path: Path) -> None:
    stream = _stream()
    paths = write_trace(tmp_path / "run.csv", stream, {})
    text = paths.events.read_text(encoding="utf-8")
    old = "".join(_with_old_names(line) + "\n" for line in text.split("\n")[:-1])  # lines end with \n
    assert '"before_iteration": 3' in old and '"after_iteration": 1' in old and '"iterations_done"' not in old
    paths.events.write_text(old, encoding="utf-8")
    loaded = read_trace(paths.events)
    assert loaded.warnings == []
    assert loaded.events == stream
    assert [b.iterations_done for b in loaded.baselines] == [1, 3, 4]


def test_an_old_style_line_reads_and_the_new_name_wins_where_both_are_there() -> None:
    old_drill = {"type": "drill", "kind": "end", "model": "draft", "layers": 3, "total_layers": 3, "place": "disk",
                 "before_iteration": 8, "moved_bytes": 0, "t_s": 1.0, "error": ""}
    assert decode(old_drill) == DrillEvent("end", "draft", 3, 3, "disk", 8, t_s=1.0)
    assert decode({**old_drill, "iterations_done": 9}).iterations_done == 9
    old_baseline = {"type": "baseline", "after_iteration": 2, "context_len": 7, "step_ms": [1.5],
                    "verify_ms_by_len": {}, "t_s": 2.0}
    assert decode(old_baseline) == BaselineRecord(2, 7, [1.5], t_s=2.0)


def test_an_old_name_is_range_checked_like_the_new() -> None:
    with pytest.raises(ValueError, match="iterations_done = -1 is outside"):
        decode({"type": "baseline", "after_iteration": -1, "context_len": 7, "step_ms": [1.5]})


def test_a_baselines_csv_with_the_old_header_opens(tmp_path: Path) -> None:
    paths = write_trace(tmp_path / "run.csv", legacy_stream(sample_records(), sample_baselines(), {}), {})
    paths.events.unlink()  # the CSVs alone: a trace from before the event log
    header, rest = paths.baselines.read_text(encoding="utf-8").split("\n", 1)
    assert header.startswith("iterations_done,")
    paths.baselines.write_text(header.replace("iterations_done", "after_iteration") + "\n" + rest, encoding="utf-8")
    loaded = read_trace(paths.iterations)
    assert loaded.warnings == [] and loaded.baselines == sample_baselines()


def test_a_baselines_csv_without_either_name_is_refused(tmp_path: Path) -> None:
    paths = write_trace(tmp_path / "run.csv", legacy_stream(sample_records(), sample_baselines(), {}), {})
    paths.events.unlink()
    header, rest = paths.baselines.read_text(encoding="utf-8").split("\n", 1)
    paths.baselines.write_text(header.replace("iterations_done", "iteration_count") + "\n" + rest, encoding="utf-8")
    with pytest.raises(TraceFormatError, match="missing columns: iterations_done"):
        read_trace(paths.iterations)
