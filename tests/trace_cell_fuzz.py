"""The cell-level fuzz of the legacy trace reader, shared by tests/test_trace_legacy_checks.py (every outcome is
a trace or a TraceError) and scripts/trace_cell_fuzz.py (the same cases, each read timed): every column of each
CSV of a trace × every hostile value, one cell at a time, in a middle row (a bad last row is dropped as a crash's
cut, a warning: the middle row is where a value must be judged)."""

from __future__ import annotations

import csv
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from specscope.core.trace.errors import TraceError
from specscope.core.trace.files import read_trace
from specscope.core.trace.layout import trace_paths

HOSTILE_CELLS: tuple[str, ...] = (
    "", " ", "nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-1e400", "-1", "-0", "0.5", "1e20",
    "99999999999999999999", "-99999999999999999999", "1_000", "0x10", " 7 ", "true", "speculative",
    "=cmd|' /C calc'!A0", "'", "\\", "\\u12", " | ", ";", "😀", "\u2028",
    "[[1e400,0.5]]", "[[Infinity,0.5]]", "[[1,NaN]]", '{"a": 1e400}', '{"1": Infinity}', "[" * 2000,
    '{"a":' * 300, "x" * 70_000,
)


@dataclass(frozen=True)
class FuzzCase:
    label: str  # file, column and value, for a failure's message
    main: Path  # the iteration CSV to open


def _rows(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def fuzz_cases(mains: Sequence[Path], work: Path, every: int = 1) -> Iterator[FuzzCase]:
    """For each trace (its iteration CSV in ``mains``), each of its CSVs, each column and each hostile value:
    the trace copied to ``work`` with that one cell replaced. The copy is rewritten for each case.

    ``every``: keep one case in ``every`` (counted over all of them). A count prime to the number of hostile
    values moves the kept value along by one column each time, so every column still meets a few values and
    every value a few columns."""
    index = -1
    for main in mains:
        paths = trace_paths(main)
        for csv_path in (paths.iterations, paths.tokens, paths.baselines):
            if not csv_path.exists():
                continue
            rows = _rows(csv_path)
            middle = max(1, (len(rows) - 1) // 2)
            for column in range(len(rows[0])):
                for value in HOSTILE_CELLS:
                    index += 1
                    if index % every:
                        continue
                    shutil.rmtree(work, ignore_errors=True)
                    shutil.copytree(main.parent, work)
                    changed = [list(r) for r in rows]
                    changed[middle][column] = value
                    with (work / csv_path.name).open("w", newline="", encoding="utf-8") as f:
                        csv.writer(f, lineterminator="\n").writerows(changed)
                    yield FuzzCase(f"{csv_path.name} {rows[0][column]}={value[:30]!r}", work / main.name)


def read_outcome(main: Path) -> tuple[str, str]:
    """("read", ""), ("trace_error", its message), or ("crash", the exception) for anything else."""
    try:
        read_trace(main)
    except TraceError as e:
        return "trace_error", str(e)
    except Exception as e:
        return "crash", f"{type(e).__name__}: {e}"
    return "read", ""
