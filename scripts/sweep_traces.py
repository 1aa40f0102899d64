"""The trace reader's part of scripts/bad_input_sweep.py (issue 31 items 4, 14-16): hostile traces opened with
``read_trace``, the function the app's File ▸ Open trace calls, in this process, each read timed.

A case passes when the outcome is the expected one — a TraceError whose one line holds the expected words, or a
trace read with a warning holding them — and nothing else is raised.
"""

from __future__ import annotations

import csv
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from specscope.core.trace.errors import TraceError
from specscope.core.trace.files import read_trace, write_trace
from specscope.core.trace.legacy_csv import legacy_stream
from tests.trace_samples import sample_baselines, sample_records


@dataclass(frozen=True)
class TraceCase:
    label: str
    damage: Callable[[Path], object]  # given the trace's folder (run.csv and its siblings, no event log)
    outcome: str  # "error" or "warning"
    says: str  # words the error, or one of the warnings, holds


def _set(folder: Path, name: str, column: str, value: str, row: int = 1) -> None:
    path = folder / name
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    rows[row + 1][rows[0].index(column)] = value
    with path.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


def _repeat_rows(folder: Path) -> None:  # 5 -> 3,000 iteration rows (the issue: 10 -> 3,000)
    lines = _lines(folder / "run.csv")
    (folder / "run.csv").write_text("".join([lines[0], *lines[1:4] * 999, *lines[4:]]), encoding="utf-8")


def _drop_rows(folder: Path) -> None:
    lines = _lines(folder / "run.csv")
    (folder / "run.csv").write_text("".join([lines[0], lines[1], *lines[4:]]), encoding="utf-8")


def _replace(folder: Path, name: str, make: Callable[[Path], object]) -> None:
    (folder / name).unlink()
    make(folder / name)


CASES = [
    TraceCase("top5 cell [[1e400,0.5]]", lambda d: _set(d, "run.tokens.csv", "top5", "[[1e400,0.5]]"), "error",
              "column top5"),
    TraceCase("top5 cell [[Infinity,0.5]]", lambda d: _set(d, "run.tokens.csv", "top5", "[[Infinity,0.5]]"),
              "error", "column top5"),
    TraceCase("k = -1", lambda d: _set(d, "run.csv", "k", "-1"), "error", "k = -1 is outside 0..16"),
    TraceCase("k = 1e20", lambda d: _set(d, "run.csv", "k", "1e20"), "error", "column k"),
    TraceCase("k = 10^20", lambda d: _set(d, "run.csv", "k", "100000000000000000000"), "error", "outside 0..16"),
    TraceCase("temperature NaN", lambda d: _set(d, "run.csv", "temperature", "nan"), "error", "not a finite"),
    TraceCase("top_p = 2", lambda d: _set(d, "run.csv", "top_p", "2"), "error", "top_p = 2.0 is outside"),
    TraceCase("token p = 2", lambda d: _set(d, "run.tokens.csv", "p", "2"), "error", "p = 2.0 is outside 0..1"),
    TraceCase("mode any text", lambda d: _set(d, "run.csv", "mode", "hello"), "error", "is not one of"),
    TraceCase("n_drafted = 10^20", lambda d: _set(d, "run.csv", "n_drafted", "99999999999999999999"), "error",
              "is outside 0..80"),
    TraceCase("iteration rows repeated (5 -> 3,000)", _repeat_rows, "warning", "were dropped (5 iterations kept)"),
    TraceCase("iteration rows deleted", _drop_rows, "warning", "2 iterations missing from the numbering"),
    TraceCase("baselines file deleted", lambda d: (d / "run.baselines.csv").unlink(), "warning",
              "run.baselines.csv: missing"),
    TraceCase("tokens file a named pipe", lambda d: _replace(d, "run.tokens.csv", os.mkfifo), "error",
              "is a named pipe, not a trace file"),
    TraceCase("tokens file a link to /dev/zero",
              lambda d: _replace(d, "run.tokens.csv", lambda p: p.symlink_to("/dev/zero")), "error",
              "is a character device, not a trace file"),
    TraceCase("session file unterminated, 32 kB",
              lambda d: (d / "run.session.json").write_text('{"a": "' + "x" * 32_768, encoding="utf-8"), "warning",
              "run.session.json: unreadable session file"),
    TraceCase("memory_json cell unterminated, 64 kB",
              lambda d: _set(d, "run.csv", "gpu_used_bytes", '{"a": "' + "x" * 65_000), "error",
              "column gpu_used_bytes"),
]


def run_cases(root: Path, filter_text: str = "") -> tuple[list[str], int, int]:
    """Print one line per case; the lines, the failures and the tracebacks (anything but a TraceError)."""
    lines: list[str] = []
    failures = tracebacks = 0
    for n, case in enumerate(c for c in CASES if filter_text in f"read_trace {c.label}"):
        folder = root / f"trace{n}"
        folder.mkdir(parents=True)
        paths = write_trace(folder / "run.csv", legacy_stream(sample_records(), sample_baselines(), {}), {"k": 4})
        paths.events.unlink()  # the CSVs alone: the reader of traces from before the event log
        case.damage(folder)
        t0 = time.perf_counter()
        try:
            loaded = read_trace(folder / "run.csv")
            outcome, said = "warning", next((w for w in loaded.warnings if case.says in w), "; ".join(loaded.warnings))
        except TraceError as e:
            outcome, said = "error", str(e)
        except Exception as e:  # a traceback for the user: what the sweep counts
            outcome, said = "traceback", f"{type(e).__name__}: {e}"
            tracebacks += 1
        ms = (time.perf_counter() - t0) * 1000
        ok = outcome == case.outcome and case.says in said and "\n" not in said
        failures += not ok
        said = said.replace(str(root), "{d}/traces")
        line = f"{'ok  ' if ok else 'FAIL'} {outcome:<9} {ms:7.1f} ms | read_trace {case.label} | {said[:150]}"
        print(line, flush=True)
        lines.append(line)
    return lines, failures, tracebacks
