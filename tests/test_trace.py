"""Trace files: export then read gives equal records; corrupt or foreign files give clear errors."""

from __future__ import annotations

import csv
import dataclasses
import json
import random
from pathlib import Path

import pytest

from specscope.core.measure.measurement import Measurement
from specscope.core.records import IterationRecord
from specscope.core.trace.cells import escape_text, join_flags, split_flags, unescape_text
from specscope.core.trace.chrome_trace import chrome_trace, write_chrome_trace
from specscope.core.trace.errors import TraceFormatError, TraceWriteError
from specscope.core.trace.files import TraceReadError, read_trace, write_trace
from specscope.core.trace.layout import trace_paths
from specscope.core.trace.legacy_csv import legacy_stream
from specscope.core.trace.schema import ITERATION_COLUMNS, ITERATION_SCHEMA, doc_tables, unit_of

from .trace_samples import NASTY_TEXTS, make_record, sample_baselines, sample_records

SESSION = {"target": "tiny-target", "draft": "tiny-draft", "device": "cpu", "k": 4, "prompt": "héllo,\n\"x\""}


@pytest.fixture
def written(tmp_path: Path):
    """A trace in the CSV layout alone, as specscope wrote it before the event log: the reader for old traces."""
    records, baselines = sample_records(), sample_baselines()
    paths = write_trace(tmp_path / "run.csv", legacy_stream(records, baselines, SESSION), SESSION)
    paths.events.unlink()
    return paths, records, baselines


# --- round trip -----------------------------------------------------------------------------------------


def test_export_then_read_gives_equal_data(written) -> None:
    paths, records, baselines = written
    loaded = read_trace(paths.iterations)
    assert loaded.warnings == [] and loaded.legacy
    assert loaded.records == records
    assert loaded.baselines == baselines
    assert loaded.session == SESSION
    assert loaded.meta["format"] == "specscope-trace"
    assert [t.text for r in loaded.records for t in r.tokens] == [t.text for r in records for t in r.tokens]


def test_all_files_are_written_next_to_each_other(tmp_path: Path) -> None:
    """Four files; the baselines CSV only for a stream that holds baseline records (one from an old trace)."""
    old = write_trace(tmp_path / "old.csv", legacy_stream(sample_records(), sample_baselines(), SESSION), SESSION)
    assert all(p.exists() for p in old.all()) and len(old.baselines.read_text().splitlines()) == 4
    paths = write_trace(tmp_path / "run.csv", sample_records(), SESSION)
    names = ["run.csv", "run.tokens.csv", "run.baselines.csv", "run.session.json", "run.events.jsonl"]
    assert [p.name for p in paths.all()] == names
    assert [p.exists() for p in paths.all()] == [True, True, False, True, True]  # no header-only baselines
    assert "baselines" not in json.loads(paths.session.read_text(encoding="utf-8"))["files"]
    assert not [p for p in paths.iterations.parent.iterdir() if p.name.endswith(".tmp")]
    old.events.rename(paths.baselines)  # an earlier export's leftover under the name: not left beside the new one
    write_trace(tmp_path / "run.csv", sample_records(), SESSION)
    assert not paths.baselines.exists()


def test_iteration_header_and_memory_columns(written) -> None:
    paths, records, _ = written
    with paths.iterations.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
        header = list(rows[0].keys())
    memory = ["gpu_free_bytes", "gpu_used_bytes", "host_rss_bytes", "pcie_rx_bytes_per_s"]
    assert header == [*ITERATION_COLUMNS, *memory]
    assert header[:10] == ["iteration", "mode", "drafter", "k", "temperature", "top_k", "top_p", "adaptive_k",
                           "n_drafted", "n_accepted"]
    assert rows[1]["gpu_used_bytes"] == ""  # a key missing from a row is an empty cell
    assert rows[3]["gpu_used_bytes"] == repr(1.6e9)
    # derived columns are the measurement's snapshot after each row: no plain step before the first baseline,
    # then the verify fit at length 1 (the baseline before iteration 1: steps 3.1, 3.3, 0.3 and its 3.2 sweep)
    # (carried to the machine's speed at that row by the verify passes around it: within 0.1% here)
    assert rows[0]["plain_step_ms"] == "" and float(rows[1]["plain_step_ms"]) == pytest.approx(3.15, rel=1e-3)
    assert float(rows[0]["draft_step_ms"]) == pytest.approx(records[0].draft_ms / records[0].n_drafted)
    assert rows[1]["flags"] == "paging: verify 4.1x slower, PCIe RX up | a \\| b, c \\\\ d"
    assert rows[4]["finished"] == "true" and rows[4]["finish_reason"] == "max_new_tokens"


def test_every_record_field_reaches_the_trace() -> None:
    """A field added to IterationRecord must be added to the trace too, or replays would silently lose it."""
    covered = {c.path.split(".")[0] for c in ITERATION_SCHEMA} | {"tokens", "memory"}
    missing = [f.name for f in dataclasses.fields(IterationRecord) if f.name not in covered]
    assert missing == []


def test_floats_round_trip_exactly(tmp_path: Path) -> None:
    awkward = [0.1 + 0.2, 1 / 3, 1e-300, 5e-324, 1.7976931348623157e308, 123456789.123456789, -0.0]
    readings = [*awkward[:4], 2.0**62, *awkward[5:]]  # a memory reading is at most 2^62 (core.bounds)
    records = []
    for i, (x, reading) in enumerate(zip(awkward, readings, strict=True)):
        r = make_record(i, memory={"gpu_used_bytes": reading})
        r.draft_ms = x
        r.t_start_s = 1e6 + x
        r.t_end_s = max(r.t_end_s, r.t_start_s)
        records.append(r)
    write_trace(tmp_path / "f.csv", records)
    loaded = read_trace(tmp_path / "f.csv").records
    assert loaded == records  # from the event log
    (tmp_path / "f.events.jsonl").unlink()
    loaded = read_trace(tmp_path / "f.csv").records  # from the CSV
    assert [r.draft_ms for r in loaded] == awkward
    assert [r.memory["gpu_used_bytes"] for r in loaded] == readings
    assert loaded == records


def test_token_text_escapes_keep_one_row_per_line() -> None:
    for text in NASTY_TEXTS:
        escaped = escape_text(text)
        assert "\n" not in escaped and "\r" not in escaped and "\u2028" not in escaped
        escaped.encode("utf-8")  # lone surrogates are escaped, so the file is valid UTF-8
        assert unescape_text(escaped) == text
    assert escape_text("emoji 😀, \"q\"") == "emoji 😀, \"q\""  # readable text stays as it is


def test_tokens_file_is_one_line_per_token(written) -> None:
    paths, records, _ = written
    lines = paths.tokens.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 + sum(len(r.tokens) for r in records)


@pytest.mark.parametrize("flags", [[], ["a"], ["a | b", "c"], ["x\\", "|y|"], ["trailing ", " lead"]])
def test_flags_round_trip(flags: list[str]) -> None:
    assert split_flags(join_flags(flags)) == flags


def test_empty_trace_round_trips(tmp_path: Path) -> None:
    write_trace(tmp_path / "e.csv", [])
    loaded = read_trace(tmp_path / "e.csv")
    assert loaded.records == [] and loaded.baselines == [] and loaded.warnings == [] and loaded.session == {}


def test_sibling_and_folder_paths_open_the_same_trace(written) -> None:
    paths, records, _ = written
    for p in (paths.tokens, paths.session, paths.baselines):
        assert read_trace(p).records == records
    assert trace_paths(Path("out/x")).tokens == Path("out/x.tokens.csv")


def test_session_file_lists_columns_with_units(written) -> None:
    paths, _, _ = written
    meta = json.loads(paths.session.read_text(encoding="utf-8"))
    units = {c["name"]: c["unit"] for c in meta["columns"]["iterations"]}
    assert units["draft_ms"] == "ms" and units["t_start_s"] == "s" and units["gpu_used_bytes"] == "bytes"
    assert units["pcie_rx_bytes_per_s"] == "bytes/s"
    baseline_names = [c["name"] for c in meta["columns"]["baselines"]]
    assert baseline_names[:5] == ["iterations_done", "context_len", "step_ms", "median_step_ms", "t_s"]
    assert baseline_names[5:] == [f"verify_ms_len_{n}" for n in range(1, 18)]  # fixed: one form everywhere
    assert meta["format_version"] == 1 and meta["specscope_version"]
    assert unit_of("host_major_faults_per_s") == "1/s" and unit_of("gpu0_lost") == ""


def test_memory_key_clashing_with_a_column_is_left_out_and_the_row_kept(tmp_path: Path) -> None:
    warnings: list[str] = []
    write_trace(tmp_path / "c.csv", [make_record(0, memory={"iteration_ms": 1.0, "gpu_used_bytes": 2.0})],
                warnings=warnings)
    assert warnings == ["iteration 0: memory key(s) iteration_ms name trace columns; left out"]
    loaded = read_trace(tmp_path / "c.csv")
    assert [r.memory for r in loaded.records] == [{"gpu_used_bytes": 2.0}]
    assert loaded.meta["repairs"] == warnings


# --- corrupt and foreign files -------------------------------------------------------------------------


def test_random_bytes_are_not_a_trace(tmp_path: Path) -> None:
    p = tmp_path / "noise.csv"
    p.write_bytes(random.Random(0).randbytes(4096))
    with pytest.raises(TraceFormatError, match="not a specscope trace"):
        read_trace(p)


def test_utf8_text_that_is_not_csv_is_not_a_trace(tmp_path: Path) -> None:
    p = tmp_path / "notes.csv"
    p.write_text("just some notes\nabout nothing\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match="missing columns: iteration"):
        read_trace(p)


def test_unrelated_csv_names_the_missing_columns(tmp_path: Path) -> None:
    p = tmp_path / "people.csv"
    p.write_text("name,age\nbob,3\n", encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"people\.csv: not a specscope trace \(missing columns: iter"):
        read_trace(p)


def test_empty_file_is_rejected(tmp_path: Path) -> None:
    p = tmp_path / "empty.csv"
    p.write_text("", encoding="utf-8")
    with pytest.raises(TraceFormatError, match="empty"):
        read_trace(p)


def test_tokens_file_opened_as_a_trace_is_explained(tmp_path: Path, written) -> None:
    paths, _, _ = written
    copy = tmp_path / "copied_tokens.csv"
    copy.write_bytes(paths.tokens.read_bytes())
    with pytest.raises(TraceFormatError, match="tokens file"):
        read_trace(copy)


def test_missing_file_is_a_read_error(tmp_path: Path) -> None:
    with pytest.raises(TraceReadError, match="no such file"):
        read_trace(tmp_path / "absent.csv")


def _replace_cell(path: Path, line: int, column: str, value: str) -> None:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    rows[line - 1][rows[0].index(column)] = value
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


def test_bad_number_names_the_line_and_column(written) -> None:
    paths, _, _ = written
    _replace_cell(paths.iterations, 3, "draft_ms", "fast")
    with pytest.raises(TraceFormatError, match=r"run\.csv: line 3: column draft_ms: 'fast' is not a number"):
        read_trace(paths.iterations)


def test_bad_token_status_names_the_line(written) -> None:
    paths, _, _ = written
    _replace_cell(paths.tokens, 4, "status", "maybe")
    with pytest.raises(TraceFormatError, match=r"line 4: column status: 'maybe' is not a token status"):
        read_trace(paths.iterations)


def test_row_with_missing_fields_in_the_middle_is_corrupt(written) -> None:
    paths, _, _ = written
    lines = paths.iterations.read_text(encoding="utf-8").splitlines(keepends=True)
    lines[2] = ",".join(lines[2].split(",")[:5]) + "\n"
    paths.iterations.write_text("".join(lines), encoding="utf-8")
    with pytest.raises(TraceFormatError, match=r"line 3: \d+ fields where the header has \d+"):
        read_trace(paths.iterations)


def test_truncated_trace_keeps_the_good_rows_with_a_warning(written) -> None:
    paths, records, _ = written
    data = paths.iterations.read_bytes()
    paths.iterations.write_bytes(data[: len(data) - 25])  # cut inside the last row
    loaded = read_trace(paths.iterations)
    assert loaded.records == records[:-1]
    assert any("run.csv: line 6: truncated last row dropped" in w for w in loaded.warnings)
    # the last iteration's tokens have no row any more: reported, not attached elsewhere
    assert any("3 token rows belong to no iteration" in w for w in loaded.warnings)


def test_truncated_inside_a_quoted_field_is_a_truncation(written) -> None:
    paths, records, _ = written
    text = paths.tokens.read_text(encoding="utf-8")
    cut = text.rindex('"[[') + 5  # inside the last row's quoted top5 JSON
    paths.tokens.write_text(text[:cut], encoding="utf-8")
    loaded = read_trace(paths.iterations)
    assert [len(r.tokens) for r in loaded.records] == [len(r.tokens) for r in records[:-1]] + [2]
    assert any("run.tokens.csv" in w and "truncated" in w for w in loaded.warnings)


def test_bad_last_row_is_dropped_with_a_warning(written) -> None:
    paths, records, _ = written
    _replace_cell(paths.iterations, 6, "verify_ms", "1.2.3")
    loaded = read_trace(paths.iterations)
    assert loaded.records[:4] == records[:4] and len(loaded.records) == 4
    assert any("line 6: last row dropped (column verify_ms" in w for w in loaded.warnings)


def test_missing_side_files_are_warnings(written) -> None:
    paths, records, baselines = written
    paths.tokens.unlink()
    paths.session.unlink()
    loaded = read_trace(paths.iterations)
    assert [r.iteration for r in loaded.records] == [r.iteration for r in records]
    assert all(r.tokens == [] for r in loaded.records)
    assert loaded.baselines == baselines
    assert loaded.session == {}
    assert len(loaded.warnings) == 2


def test_foreign_session_file_is_a_warning(written) -> None:
    paths, records, _ = written
    paths.session.write_text(json.dumps({"hello": 1}), encoding="utf-8")
    loaded = read_trace(paths.iterations)
    assert loaded.records == records and loaded.session == {}
    assert any("not a specscope session file" in w for w in loaded.warnings)


# --- unwritable paths ----------------------------------------------------------------------------------


def test_path_under_a_regular_file_gives_a_write_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x", encoding="utf-8")
    records = sample_records()
    before = [dataclasses.replace(r) for r in records]
    target = blocker / "trace.csv"
    with pytest.raises(TraceWriteError) as info:
        write_trace(target, records, sample_baselines())
    assert info.value.path.parent == blocker
    assert str(target.parent) in str(info.value) and "Not a directory" in str(info.value)
    assert records == before  # the in-memory data is untouched and can be exported elsewhere
    write_trace(tmp_path / "ok.csv", records)
    assert read_trace(tmp_path / "ok.csv").records == before


def test_failed_export_leaves_no_partial_files(tmp_path: Path) -> None:
    (tmp_path / "run.csv").mkdir()  # the target is a folder: the final rename fails
    with pytest.raises(TraceWriteError, match=r"run\.csv"):
        write_trace(tmp_path / "run.csv", sample_records())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.csv"]


def test_chrome_trace_write_error(tmp_path: Path) -> None:
    blocker = tmp_path / "f"
    blocker.write_text("", encoding="utf-8")
    with pytest.raises(TraceWriteError, match="Not a directory"):
        write_chrome_trace(blocker / "t.json", sample_records())


# --- Chrome trace ----------------------------------------------------------------------------------------


def test_chrome_trace_structure(tmp_path: Path) -> None:
    records, baselines = sample_records(), sample_baselines()
    path = write_chrome_trace(tmp_path / "run.json", legacy_stream(records, baselines, {}))
    doc = json.loads(path.read_text(encoding="utf-8"))
    events = doc["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert {"draft", "verify", "rollback"} <= set(names.values())
    complete = [e for e in events if e["ph"] == "X"]
    for e in complete:
        assert {"ts", "dur", "pid", "tid", "name"} <= e.keys()
        assert e["dur"] >= 0 and e["ts"] >= 0
    by_track: dict[int, list[float]] = {}
    for e in events:
        if e["ph"] in ("X", "i"):
            by_track.setdefault(e["tid"], []).append(e["ts"])
    assert all(ts == sorted(ts) for ts in by_track.values())
    phases = {names[e["tid"]] for e in complete}
    assert {"draft", "verify", "rollback", "iteration", "baseline"} <= phases
    # one draft event per iteration, starting at the iteration's start, verify right after it (µs)
    drafts = [e for e in complete if names[e["tid"]] == "draft"]
    verifies = [e for e in complete if names[e["tid"]] == "verify"]
    assert len(drafts) == len(verifies) == len(records)
    t0 = records[0].t_start_s
    assert drafts[2]["ts"] == pytest.approx((records[2].t_start_s - t0) * 1e6, abs=1e-2)
    assert verifies[2]["ts"] == pytest.approx(drafts[2]["ts"] + drafts[2]["dur"], abs=1e-2)
    assert drafts[2]["dur"] == pytest.approx(records[2].draft_ms * 1000.0)


def test_chrome_trace_counters_and_flags() -> None:
    records = sample_records()
    events = chrome_trace(records)["traceEvents"]
    counters: dict[str, list[float]] = {}
    for e in events:
        if e["ph"] == "C":
            counters.setdefault(e["name"], []).append(e["args"]["value"])
    assert counters["tokens_per_iteration"] == [r.n_emitted for r in records]
    m = Measurement()
    alphas = [s.alpha for s in (m.feed(r) for r in records) if s is not None and s.alpha is not None]
    assert counters["alpha_run"] == alphas  # the measurement's snapshot after each iteration
    assert counters["gpu_used_bytes"] == [1.5e9, 1.6e9]
    assert "pcie_rx_bytes_per_s" in counters and "alpha_window" in counters
    instants = [e for e in events if e["ph"] == "i"]
    assert [e["args"]["sentence"] for e in instants] == [f for r in records for f in r.flags]
    assert all(e["s"] == "t" for e in instants)


def test_chrome_trace_nan_becomes_valid_json(tmp_path: Path) -> None:
    r = make_record(0, memory={"gpu_used_bytes": float("nan")})
    r.verify_ms = float("inf")
    path = write_chrome_trace(tmp_path / "nan.json", [r, *sample_baselines()[:1]])
    text = path.read_text(encoding="utf-8")
    assert "NaN" not in text and "Infinity" not in text
    json.loads(text)


# --- one schema ----------------------------------------------------------------------------------------

DATA = Path(__file__).parent / "data"


def test_docs_show_the_tables_the_schema_generates() -> None:
    """docs/trace-format.md holds exactly what ``python -m specscope.core.trace.schema --doc-table`` prints."""
    doc = (Path(__file__).parents[1] / "docs" / "trace-format.md").read_text(encoding="utf-8")
    for name, table in doc_tables().items():
        assert table in doc, f"the {name} table in docs/trace-format.md is stale: regenerate it"


@pytest.mark.parametrize("form", ["export/run.csv", "autosave"])
def test_traces_written_by_0_1_0_still_open(form: str) -> None:
    loaded = read_trace(DATA / "trace-0.1.0" / form)
    assert loaded.warnings == []
    expected = sample_records()
    for r in expected:  # 0.1.0 recorded the alternatives' ids, not their texts
        r.tokens = [dataclasses.replace(t, top5_text=[]) for t in r.tokens]
    assert loaded.records == expected
    assert loaded.baselines == sample_baselines()


def test_export_and_autosave_write_the_stream_in_one_form(tmp_path: Path) -> None:
    from specscope.core.trace.autosave import SessionRecorder

    stream = legacy_stream(sample_records(), sample_baselines(), SESSION)
    paths = write_trace(tmp_path / "x.csv", stream)
    rec = SessionRecorder(tmp_path / "sessions", {}, background_flush=False)
    for item in stream:
        rec.append(item)
    rec.close()
    body = paths.events.read_text(encoding="utf-8").split("\n", 1)[1]  # the first line names the format
    assert body == rec.paths.events.read_text(encoding="utf-8").split("\n", 1)[1]
    assert read_trace(rec.folder).events == read_trace(paths.iterations).events == stream


def test_session_units_come_from_the_schema(written) -> None:
    paths, _, _ = written
    meta = json.loads(paths.session.read_text(encoding="utf-8"))
    listed = {c["name"]: c["unit"] for c in meta["columns"]["iterations"]}
    assert all(listed[c.name] == c.unit for c in ITERATION_SCHEMA)
