"""The reader of a trace from before the event log (its CSVs alone) under hostile cells and edited row
sequences (issue 31 items 14 and 16): every value out of its range is one TraceFormatError sentence naming the
file and line, never OverflowError; repeated or missing rows are repaired or counted in a warning; every
column × every hostile value reads or fails as a TraceError. The time each read takes is measured by
scripts/trace_cell_fuzz.py (docs/trace-cell-fuzz.md), not here."""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path

import pytest

from specscope.core.trace.errors import TraceFormatError, TraceReadError
from specscope.core.trace.files import read_trace, write_trace
from specscope.core.trace.legacy_csv import legacy_stream

from .trace_cell_fuzz import HOSTILE_CELLS, fuzz_cases, read_outcome
from .trace_samples import sample_baselines, sample_records

DATA = Path(__file__).parent / "data"


@pytest.fixture
def legacy(tmp_path: Path) -> Path:
    """A current trace's CSVs with its event log removed: the legacy reader's input, five iterations."""
    paths = write_trace(tmp_path / "run.csv", legacy_stream(sample_records(), sample_baselines(), {}), {"k": 4})
    paths.events.unlink()
    return tmp_path


def _set(path: Path, column: str, row: int, value: str) -> int:
    """Set one cell of data row ``row`` (0-based); the file line it is on."""
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    rows[row + 1][rows[0].index(column)] = value
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    return row + 2


def _refused(path: Path) -> str:
    with pytest.raises(TraceFormatError) as exc:
        read_trace(path)
    message = str(exc.value)
    assert "\n" not in message and len(message) < 300
    return message


@pytest.mark.parametrize("cell", ["[[1e400,0.5]]", "[[Infinity,0.5]]", "[[-Infinity,0.5]]", "[[1,NaN]]",
                                  "[[1,1e400]]", "[[1.5,0.5]]", "[[1,2]]", "[[1,0.5,3]]", "[1]", "5", '"ab"',
                                  "[" + ",".join(["[1,0.1]"] * 65) + "]"])
def test_a_hostile_top5_cell_is_one_sentence_not_an_overflow(legacy: Path, cell: str) -> None:
    line = _set(legacy / "run.tokens.csv", "top5", 1, cell)
    message = _refused(legacy / "run.csv")
    assert message.startswith(f"run.tokens.csv: line {line}: column top5: ")
    assert "[token id, probability] pairs" in message


@pytest.mark.parametrize(("column", "value", "says"), [
    ("k", "-1", "k = -1 is outside 0..16"),
    ("k", "100000000000000000000", "k = 100000000000000000000 is outside 0..16"),
    ("k", "1e20", "column k: '1e20' is not an integer"),
    ("temperature", "nan", "column temperature: 'nan' is not a finite number"),
    ("temperature", "-0.5", "temperature = -0.5 is outside"),
    ("top_p", "2", "top_p = 2.0 is outside"),
    ("top_k", "-3", "top_k = -3 is outside"),
    ("mode", "=cmd|' /C calc'!A0", "mode \"=cmd|' /C calc'!A0\" is not one of attached, plain, speculative"),
    ("n_drafted", "99999999999999999999", "n_drafted = 99999999999999999999 is outside 0..80"),
    ("n_accepted", "9", "n_accepted = 9 is outside 0..7"),
    ("n_emitted", "99", "n_emitted = 99 is outside 0..8"),
    ("iteration_ms", "inf", "column iteration_ms: 'inf' is not a finite number"),
    ("draft_ms", "-inf", "column draft_ms: '-inf' is not a finite number (or nan: not known)"),
    ("verify_ms", "-2", "verify_ms = -2.0 is outside"),
    ("t_end_s", "nan", "column t_end_s: 'nan' is not a finite number"),
    ("context_len", "-1", "context_len = -1 is outside"),
    ("finish_reason", "x" * 41, "finish_reason is longer than 40 characters"),
])
def test_every_iteration_field_is_range_checked(legacy: Path, column: str, value: str, says: str) -> None:
    line = _set(legacy / "run.csv", column, 1, value)
    message = _refused(legacy / "run.csv")
    assert message.startswith(f"run.csv: line {line}: ") and says in message


def test_an_unknown_time_of_an_attached_engine_still_reads(legacy: Path) -> None:
    _set(legacy / "run.csv", "draft_ms", 1, "nan")  # an engine that does not split its passes
    loaded = read_trace(legacy / "run.csv")
    assert loaded.warnings == [] and str(loaded.records[1].draft_ms) == "nan"


@pytest.mark.parametrize(("column", "value", "says"), [
    ("p", "nan", "line 3: column p: 'nan' is not a finite number"),
    ("q", "inf", "line 3: column q: 'inf' is not a finite number"),
    ("p", "2", "the tokens of iteration 0 (run.csv line 2): p = 2.0 is outside 0..1"),
    ("position", "-5", "the tokens of iteration 0 (run.csv line 2): position = -5 is outside"),
    ("token_id", "1e999", "line 3: column token_id: '1e999' is not an integer"),
])
def test_token_fields_are_range_checked(legacy: Path, column: str, value: str, says: str) -> None:
    _set(legacy / "run.tokens.csv", column, 1, value)
    message = _refused(legacy / "run.csv")
    assert message.startswith("run.tokens.csv: ") and says in message


@pytest.mark.parametrize(("column", "value", "says"), [
    ("step_ms", "1;inf", "column step_ms: '1;inf' is not finite numbers joined with ';'"),
    ("step_ms", "-4", "s = -4.0 is outside"),
    ("verify_ms_len_2", "nan", "column verify_ms_len_2: 'nan' is not a finite number"),
    ("iterations_done", "-1", "iterations_done = -1 is outside"),
])
def test_baseline_fields_are_range_checked(legacy: Path, column: str, value: str, says: str) -> None:
    _set(legacy / "run.baselines.csv", column, 0, value)
    message = _refused(legacy / "run.csv")
    assert message.startswith("run.baselines.csv: line 2: ") and says in message


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def test_repeated_iteration_rows_are_dropped_with_a_warning(legacy: Path) -> None:
    """10 -> 3,000 iterations in the issue: a row pasted many times. Only the first of each number is kept."""
    lines = _lines(legacy / "run.csv")
    (legacy / "run.csv").write_text("".join([lines[0], *lines[1:4] * 600, *lines[4:]]), encoding="utf-8")
    loaded = read_trace(legacy / "run.csv")
    assert loaded.records == sample_records()
    assert "run.csv: 1,797 of 1,802 iteration rows repeated an earlier iteration number or went back to one, " \
           "and were dropped (5 iterations kept)" in loaded.warnings
    assert "run.session.json" not in " ".join(loaded.warnings)  # after the repair the count agrees


def test_deleted_iteration_rows_are_counted_in_a_warning(legacy: Path) -> None:
    lines = _lines(legacy / "run.csv")
    (legacy / "run.csv").write_text("".join([lines[0], lines[1], *lines[4:]]), encoding="utf-8")
    loaded = read_trace(legacy / "run.csv")
    assert [r.iteration for r in loaded.records] == [0, 3, 4]
    assert ("run.csv: 2 iterations missing from the numbering (the first is iteration 1): rows were deleted, "
            "and the replay shows the run without them") in loaded.warnings
    assert "run.session.json says the run had 5 iterations; run.csv holds 3" in loaded.warnings
    assert any("token rows belong to no iteration" in w for w in loaded.warnings)


def test_a_trace_whose_first_rows_were_deleted_says_so(legacy: Path) -> None:
    lines = _lines(legacy / "run.csv")
    (legacy / "run.csv").write_text("".join([lines[0], *lines[3:]]), encoding="utf-8")
    loaded = read_trace(legacy / "run.csv")
    assert any("2 iterations missing from the numbering (the first is iteration 0)" in w for w in loaded.warnings)


def test_repeated_token_and_baseline_rows_are_dropped_with_a_warning(legacy: Path) -> None:
    for name in ("run.tokens.csv", "run.baselines.csv"):
        lines = _lines(legacy / name)
        (legacy / name).write_text("".join([lines[0], lines[1], *lines[1:]]), encoding="utf-8")
    loaded = read_trace(legacy / "run.csv")
    assert loaded.records == sample_records() and loaded.baselines == sample_baselines()
    assert "run.tokens.csv: 1 token row repeating an earlier one dropped" in loaded.warnings
    assert "run.baselines.csv: 1 baseline row repeating an earlier one dropped" in loaded.warnings


def test_more_tokens_than_an_iteration_can_hold_is_refused(legacy: Path) -> None:
    lines = _lines(legacy / "run.tokens.csv")
    first = [ln for ln in lines[1:] if ln.startswith("4,")]
    extra = [ln.replace("4,", "4,", 1).replace(",a,", f",a{i},", 1) for i in range(12) for ln in first[:1]]
    (legacy / "run.tokens.csv").write_text("".join([*lines, *extra]), encoding="utf-8")
    message = _refused(legacy / "run.csv")
    assert message.startswith("run.tokens.csv: the tokens of iteration 4 (run.csv line 6): tokens holds 15, more than "
                              "n_drafted + 2 = 4")


def test_a_deleted_baselines_file_is_a_warning(legacy: Path) -> None:
    (legacy / "run.baselines.csv").unlink()
    loaded = read_trace(legacy / "run.csv")
    assert loaded.records == sample_records() and loaded.baselines == []
    assert loaded.warnings == ["run.baselines.csv: missing; no measured speed-up can be replayed"]


def test_a_session_file_that_counts_otherwise_is_a_warning(legacy: Path) -> None:
    lines = _lines(legacy / "run.baselines.csv")
    (legacy / "run.baselines.csv").write_text("".join(lines[:2]), encoding="utf-8")
    loaded = read_trace(legacy / "run.csv")
    assert loaded.warnings == ["run.session.json says the run had 3 baselines; run.baselines.csv holds 1"]


def test_a_session_file_with_an_overlong_model_name_costs_only_the_description(legacy: Path) -> None:
    import json

    meta = json.loads((legacy / "run.session.json").read_text(encoding="utf-8"))
    meta["session"] = {"target": "t" * 5000, "prompt": "hello"}
    (legacy / "run.session.json").write_text(json.dumps(meta), encoding="utf-8")
    loaded = read_trace(legacy / "run.csv")
    assert loaded.records == sample_records() and loaded.started is not None and loaded.started.target == ""
    assert loaded.warnings == ["run.session.json: target is longer than 4,096 characters; the run's models and "
                               "prompt are left out"]


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
@pytest.mark.parametrize("name", ["run.tokens.csv", "run.csv", "run.baselines.csv"])
def test_a_named_pipe_or_a_link_to_dev_zero_in_a_trace_is_refused_without_waiting(legacy: Path, name: str) -> None:
    (legacy / name).unlink()
    os.mkfifo(legacy / name)  # reading it would wait for a writer for ever
    with pytest.raises(TraceReadError, match=f"{name}: is a named pipe, not a trace file"):
        read_trace(legacy / "run.csv")
    (legacy / name).unlink()
    (legacy / name).symlink_to("/dev/zero")  # reading it would never end
    with pytest.raises(TraceReadError, match=f"{name}: is a character device, not a trace file"):
        read_trace(legacy / "run.csv")


def test_a_named_pipe_as_the_session_file_is_a_warning(legacy: Path) -> None:
    (legacy / "run.session.json").unlink()
    os.mkfifo(legacy / "run.session.json")
    loaded = read_trace(legacy / "run.csv")
    assert loaded.records == sample_records()
    assert len(loaded.warnings) == 1 and "is a named pipe, not a trace file" in loaded.warnings[0]


# The whole sweep (~2,200 reads, 32 s of the fast tier) is in the full tier; the fast tier reads one case in 7,
# which still puts hostile values in every column and every hostile value in several columns (7 is prime to the
# number of values), so a reader that crashes on a kind of value or a column is caught in the inner loop too.
@pytest.mark.parametrize("every", [pytest.param(1, marks=pytest.mark.slow, id="whole"), pytest.param(7, id="sampled")])
def test_cell_fuzz_every_column_and_hostile_value_reads_or_is_a_trace_error(tmp_path: Path, every: int) -> None:
    """Every column of the three CSVs (current export form and 0.1.0 autosave form, with its JSON columns) ×
    every hostile value, in a middle row: the outcome is a trace or a one-line TraceError, nothing else."""
    shutil.copytree(DATA / "trace-0.1.0" / "autosave", tmp_path / "autosave")
    (tmp_path / "export").mkdir()
    write_trace(tmp_path / "export" / "run.csv", legacy_stream(sample_records(), sample_baselines(), {}), {"k": 4})
    (tmp_path / "export" / "run.events.jsonl").unlink()
    outcomes = {"read": 0, "trace_error": 0}
    n = 0
    for case in fuzz_cases([tmp_path / "autosave" / "trace.csv", tmp_path / "export" / "run.csv"],
                           tmp_path / "work", every):
        n += 1
        outcome, message = read_outcome(case.main)
        assert outcome in outcomes, (case.label, message)  # anything else is the bug this test looks for
        if outcome == "trace_error":
            assert "\n" not in message and len(message) < 400, (case.label, message)
        outcomes[outcome] += 1
    assert n >= len(HOSTILE_CELLS) * 60 // every  # every column of both forms
    assert outcomes["read"] > 100 // every and outcomes["trace_error"] > 1000 // every
