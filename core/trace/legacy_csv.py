"""Reading a trace's CSVs: the traces written before the event log existed, turned into the same stream.

Every row is parsed through the schema's cell types; every field is checked against the range the event log
holds (``core.trace.legacy_checks``); repeated rows are dropped and missing iterations counted, each repair a
warning naming the file. The session sidecar is parsed with a bounded JSON reader.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from specscope.core.events import Event, RunFinished, RunStarted, control_changes
from specscope.core.records import (
    PLAIN_MODE,
    SPECULATIVE_MODE,
    BaselineRecord,
    ControlValues,
    IterationRecord,
    TokenRecord,
)
from specscope.core.trace.cells import FLOAT, INT, MEMORY_JSON_MAX_CHARS, OPT_FLOAT, spreadsheet_restore
from specscope.core.trace.errors import (
    JsonLimitError,
    TraceError,
    TraceFormatError,
    bounded_json,
    read_trace_text,
)
from specscope.core.trace.errors import (
    TraceReadError as TraceReadError,  # re-exported: callers catch it from here
)
from specscope.core.trace.layout import FORMAT_NAME, FORMAT_VERSION, LoadedTrace, TracePaths
from specscope.core.trace.legacy_checks import (
    check_event,
    count_warnings,
    drop_repeated_rows,
    in_sequence,
    sequence_warnings,
)
from specscope.core.trace.schema import (
    _ITERATION_FIXED,
    BASELINE_SCHEMA,
    ITERATION_SCHEMA,
    LEGACY_VERIFY_JSON_COLUMN,
    MEMORY_JSON_COLUMN,
    MEMORY_JSON_SPEC,
    TOKEN_COLUMNS,
    TOKEN_SCHEMA,
    VERIFY_PREFIX,
    Column,
    _col,
)

SESSION_MAX_CHARS = 16 * 1024 * 1024
SESSION_MAX_DEPTH = 64


class _CellError(ValueError):
    def __init__(self, column: str, value: str, expected: str):
        shown = repr(value if len(value) <= 60 else value[:57] + "...")
        super().__init__(f"column {column}: {shown} is not {expected}")


class _Row:
    """One CSV row with its header's column positions."""

    def __init__(self, index: dict[str, int], cells: list[str]):
        self.index = index
        self.cells = cells

    def parse(self, column: Column) -> Any:
        cell = self.cells[self.index[column.name]]
        try:
            return column.type.parse(cell)
        except ValueError as e:
            raise _CellError(column.name, cell, str(e)) from None


_ALWAYS_HAS_EMPTY = (INT, FLOAT)  # types with no empty value: an empty optional cell means "not recorded"


def _values(row: _Row, schema: Sequence[Column]) -> dict[str, Any]:
    """Parsed values of the schema's columns present in the row, nested by field path (``controls.k``)."""
    out: dict[str, Any] = {}
    for column in schema:
        if column.derived or column.getter is not None or column.name not in row.index:
            continue
        if not column.required and column.type in _ALWAYS_HAS_EMPTY and row.cells[row.index[column.name]] == "":
            continue  # the record's default
        *parents, leaf = column.path.split(".")
        target = out
        for p in parents:
            target = target.setdefault(p, {})
        target[leaf] = row.parse(column)
    return out


# An attached engine does not split its passes: these times may be NaN ("not known"), never infinite.
_MAY_BE_UNKNOWN = frozenset({"draft_ms", "verify_ms", "rollback_ms"})


def _finite_cells(row: _Row, values: dict[str, Any], schema: Sequence[Column]) -> None:
    """Refuse a NaN or infinite number in the schema's number columns (``_values``' nested output), naming the
    cell: the event log holds no such number, and a replay would plot or sum it."""
    for column in schema:
        if column.type not in (FLOAT, OPT_FLOAT) or column.derived or column.getter is not None:
            continue
        *parents, leaf = column.path.split(".")
        target: Any = values
        for part in parents:
            target = target.get(part, {})
        value = target.get(leaf)
        if value is None or math.isfinite(value) or (math.isnan(value) and column.name in _MAY_BE_UNKNOWN):
            continue
        raise _CellError(column.name, row.cells[row.index[column.name]],
                         "a finite number" + (" (or nan: not known)" if column.name in _MAY_BE_UNKNOWN else ""))


def _parse_iteration(row: _Row, memory_cols: Sequence[str]) -> IterationRecord:
    values = _values(row, ITERATION_SCHEMA)
    _finite_cells(row, values, ITERATION_SCHEMA)
    memory: dict[str, float] = {}
    if MEMORY_JSON_COLUMN in row.index:
        memory.update(row.parse(MEMORY_JSON_SPEC))
    for name in memory_cols:
        v = row.parse(_col(name, "", OPT_FLOAT, ""))
        if v is not None:
            memory[name] = v
    memory = {k: v for k, v in memory.items() if math.isfinite(v)}  # a probe's missing reading, as the log has it
    controls = ControlValues(**values.pop("controls", {}))
    record = IterationRecord(**values, controls=controls, tokens=[], memory=memory)
    check_event(record)  # every field in its range (its tokens are checked once they are attached)
    return record


def _parse_token(row: _Row) -> tuple[int, TokenRecord]:
    values = _values(row, TOKEN_SCHEMA)
    _finite_cells(row, values, TOKEN_SCHEMA)
    return values["iteration"], TokenRecord(**values["token"])


def _parse_baseline(row: _Row, verify_cols: dict[str, int]) -> BaselineRecord:
    values = _values(row, BASELINE_SCHEMA)
    _finite_cells(row, values, BASELINE_SCHEMA)
    if not all(math.isfinite(ms) for ms in values.get("step_ms", [])):
        raise _CellError("step_ms", row.cells[row.index["step_ms"]], "finite numbers joined with ';'")
    by_len: dict[int, float] = {}
    if LEGACY_VERIFY_JSON_COLUMN in row.index:
        cell = row.cells[row.index[LEGACY_VERIFY_JSON_COLUMN]]
        try:
            obj = bounded_json(cell, max_depth=1, max_chars=MEMORY_JSON_MAX_CHARS) if cell else {}
            by_len.update({int(n): float(ms) for n, ms in obj.items()})
        except (AttributeError, TypeError, ValueError):
            raise _CellError(LEGACY_VERIFY_JSON_COLUMN, cell, "a JSON object of ms") from None
        if not all(math.isfinite(ms) for ms in by_len.values()):
            raise _CellError(LEGACY_VERIFY_JSON_COLUMN, cell, "a JSON object of finite ms")
    for name, n in verify_cols.items():
        v = row.parse(_col(name, "ms", OPT_FLOAT, ""))
        if v is not None:
            if not math.isfinite(v):
                raise _CellError(name, row.cells[row.index[name]], "a finite number")
            by_len[n] = v
    baseline = BaselineRecord(**values, verify_ms_by_len=by_len)
    check_event(baseline)
    return baseline


def _current_names(header: list[str], schema: Sequence[Column]) -> list[str]:
    """The header with a column's old name (``Column.old_names``) read as its name, unless both are there."""
    current = {old: c.name for c in schema for old in c.old_names if c.name not in header}
    return [current.get(name, name) for name in header]


def _read_csv(
    path: Path, what: str, schema: Sequence[Column], warnings: list[str]
) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and (line number, cells) rows. A last row cut short (a crash mid-write) is dropped with a
    warning; a wrong header raises TraceFormatError."""
    text = read_trace_text(path, what)
    if not text.strip():
        raise TraceFormatError(f"{path.name}: empty file, not a specscope {what}")
    terminated = text.endswith(("\n", "\r"))
    n_lines = text.count("\n") + (0 if terminated else 1)
    reader = csv.reader(io.StringIO(text), strict=True)
    header: list[str] = []
    rows: list[tuple[int, list[str]]] = []
    try:
        header = next(reader, [])
        for cells in reader:
            if cells:
                rows.append((reader.line_num, cells))
    except csv.Error as e:
        line = reader.line_num
        if not terminated and line >= n_lines:  # e.g. a quoted field cut off by a crash
            warnings.append(f"{path.name}: line {line}: truncated last row dropped")
        else:
            raise TraceFormatError(f"{path.name}: line {line}: malformed CSV ({e})") from None
    else:
        if rows and not terminated:
            line, _ = rows.pop()
            warnings.append(f"{path.name}: line {line}: truncated last row dropped")
    header = _current_names([spreadsheet_restore(h.strip()) for h in header], schema)
    missing = [c.name for c in schema if c.required and c.name not in header]
    if missing:
        if tuple(header[:3]) == TOKEN_COLUMNS[:3] and what == "trace":
            raise TraceFormatError(f"{path.name}: this is a tokens file; open the trace's main .csv instead")
        shown = ", ".join(missing[:6]) + (", ..." if len(missing) > 6 else "")
        raise TraceFormatError(f"{path.name}: not a specscope {what} (missing columns: {shown})")
    if len(set(header)) != len(header):
        raise TraceFormatError(f"{path.name}: duplicate column names in the header")
    return header, rows


def _read_side_csv(
    path: Path, what: str, schema: Sequence[Column], noun: str, warnings: list[str]
) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """A tokens or baselines CSV (``_read_csv``), rows identical to an earlier one dropped with a warning."""
    header, rows = _read_csv(path, what, schema, warnings)
    rows, repeated = drop_repeated_rows(rows)
    if repeated:
        warnings.append(f"{path.name}: {repeated:,} {noun} row{'s' * (repeated != 1)} repeating an earlier one "
                        "dropped")
    return header, rows


def _parse_rows(
    path: Path,
    header: list[str],
    rows: list[tuple[int, list[str]]],
    parse: Callable[[_Row], Any],
    warnings: list[str],
) -> tuple[list[Any], list[int]]:
    """The parsed rows and the file line of each."""
    index = {name: i for i, name in enumerate(header)}
    out = []
    lines = []
    for n, (line, cells) in enumerate(rows):
        last = n == len(rows) - 1
        try:
            if len(cells) != len(header):
                raise ValueError(f"{len(cells)} fields where the header has {len(header)}")
            out.append(parse(_Row(index, cells)))
            lines.append(line)
        except (ValueError, TypeError) as e:
            if last:  # a crash can cut the last row anywhere; keep everything before it
                warnings.append(f"{path.name}: line {line}: last row dropped ({e})")
            else:
                raise TraceFormatError(f"{path.name}: line {line}: {e}") from None
    return out, lines


def _attach_tokens(
    records: list[IterationRecord], tokens: list[tuple[int, TokenRecord]], name: str, warnings: list[str]
) -> None:
    """Tokens are written grouped by iteration in record order; give each group to the first record with
    that iteration number that has none yet (the records' numbers are unique by now: ``in_sequence`` dropped
    repeated ones), and count the rows no record takes."""
    waiting: dict[int, list[IterationRecord]] = {}
    for r in reversed(records):
        waiting.setdefault(r.iteration, []).append(r)
    orphans = 0
    current: IterationRecord | None = None
    current_iteration: int | None = None
    for iteration, token in tokens:
        if iteration != current_iteration:
            current_iteration = iteration
            stack = waiting.get(iteration)
            current = stack.pop() if stack else None
        if current is None:
            orphans += 1
        else:
            current.tokens.append(token)
    if orphans:
        warnings.append(f"{name}: {orphans} token rows belong to no iteration in the trace; ignored")


def _read_sidecar(path: Path, warnings: list[str]) -> dict[str, Any]:
    """The session file, or {} with a warning when it is missing or unreadable: the CSVs hold the data,
    so a bad session file (not UTF-8, not JSON, too deep) costs the settings, never the trace."""
    if not path.exists():
        warnings.append(f"{path.name}: missing; no session settings")
        return {}
    try:
        meta = bounded_json(read_trace_text(path, "session file"), max_depth=SESSION_MAX_DEPTH,
                            max_chars=SESSION_MAX_CHARS)
    except JsonLimitError as e:
        warnings.append(f"{path.name}: line {e.line}: {e}; no session settings")
        return {}
    except (TraceError, ValueError) as e:
        warnings.append(f"{path.name}: unreadable session file ({e}); no session settings")
        return {}
    if not isinstance(meta, dict) or meta.get("format") != FORMAT_NAME:
        warnings.append(f"{path.name}: not a specscope session file; no session settings")
        return {}
    version = meta.get("format_version")
    if isinstance(version, int) and version > FORMAT_VERSION:
        warnings.append(f"{path.name}: written by a newer specscope (format {version}); data may be missing")
    return meta


def _read_legacy(paths: TracePaths, warnings: list[str]) -> LoadedTrace:
    """The CSVs of a trace from before the event log: iterations, tokens, baselines and session settings, merged
    into one stream in the order the loop emitted them, with the control changes and the end they imply.

    Every field is checked against the range the event log holds (``legacy_checks``); repeated rows are
    dropped and missing iterations counted, each repair a warning naming the file."""
    header, rows = _read_csv(paths.iterations, "trace", ITERATION_SCHEMA, warnings)
    memory_cols = [c for c in header if c not in _ITERATION_FIXED and c not in _LEGACY_DERIVED]
    parsed, lines = _parse_rows(
        paths.iterations, header, rows, lambda row: _parse_iteration(row, memory_cols), warnings
    )
    records, lines, dropped = in_sequence(parsed, lines)
    warnings += sequence_warnings(paths.iterations.name, len(parsed), records, dropped)

    if paths.tokens.exists():
        header, rows = _read_side_csv(paths.tokens, "tokens file", TOKEN_SCHEMA, "token", warnings)
        tokens, _ = _parse_rows(paths.tokens, header, rows, _parse_token, warnings)
        _attach_tokens(records, tokens, paths.tokens.name, warnings)
        for record, line in zip(records, lines, strict=True):
            try:
                check_event(record)
            except ValueError as e:
                raise TraceFormatError(f"{paths.tokens.name}: the tokens of iteration {record.iteration} "
                                       f"({paths.iterations.name} line {line}): {e}") from None
    else:
        warnings.append(f"{paths.tokens.name}: missing; the trace has no tokens")

    baselines: list[BaselineRecord] = []
    if paths.baselines.exists():
        header, rows = _read_side_csv(paths.baselines, "baselines file", BASELINE_SCHEMA, "baseline", warnings)
        verify_cols = {c: int(c[len(VERIFY_PREFIX):]) for c in header
                       if c.startswith(VERIFY_PREFIX) and re.fullmatch("[0-9]{1,4}", c[len(VERIFY_PREFIX):])}
        baselines, _ = _parse_rows(
            paths.baselines, header, rows, lambda row: _parse_baseline(row, verify_cols), warnings
        )
    elif records and any(r.mode == SPECULATIVE_MODE for r in records):
        warnings.append(f"{paths.baselines.name}: missing; no measured speed-up can be replayed")

    meta = _read_sidecar(paths.session, warnings)
    held = {"iterations": len(records)}
    if paths.baselines.exists():
        held["baselines"] = len(baselines)
    warnings += count_warnings(meta, paths.session.name,
                               {"iterations": paths.iterations.name, "baselines": paths.baselines.name}, held)
    session = meta.get("session", {})
    session = session if isinstance(session, dict) else {}
    events = legacy_stream(records, baselines, session)
    for i, event in enumerate(events):
        if isinstance(event, RunStarted):
            try:
                check_event(event)
            except ValueError as e:  # what the session file says of the run: its settings, not its data
                warnings.append(f"{paths.session.name}: {e}; the run's models and prompt are left out")
                events[i] = dataclasses.replace(event, target="", draft="", description="", prompt="")
    return LoadedTrace(events=events, session=session, warnings=warnings, meta=meta, paths=paths, legacy=True)


# Derived columns older versions wrote (now snapshot columns or renamed): never read back as memory columns.
_LEGACY_DERIVED = frozenset({"alpha_cumulative"})


def legacy_stream(records: list[IterationRecord], baselines: list[BaselineRecord],
                  session: dict[str, Any]) -> list[Event]:
    """The event stream a trace from before the event log implies: what it says of the run, records and
    baselines in the order the loop emitted them (a baseline precedes the iteration it ran before), the control
    changes between records, and the end the last record gives."""
    events: list[Event] = []
    if records:
        first = records[0]
        # what the app (pair, pair_description, prompt) or the CLI (target, draft) wrote of the run
        pair: dict[str, Any] = session["pair"] if isinstance(session.get("pair"), dict) else {}

        def text_of(*values: Any) -> str:
            return next((v for v in values if isinstance(v, str) and v), "")

        kind = next((r.drafter for r in records if r.mode != PLAIN_MODE), "none")
        events.append(RunStarted(source="trace", target=text_of(session.get("target"), pair.get("target")),
                                 draft=text_of(session.get("draft"), pair.get("draft")), drafter=kind,
                                 description=text_of(session.get("pair_description")),
                                 prompt=text_of(session.get("prompt")),
                                 prompt_tokens=max(0, first.context_len - first.generated_len),
                                 controls=first.controls, max_new_tokens=0, t_s=first.t_start_s))
    changes = {c.iteration: c for c in control_changes(records)}
    pending = sorted(baselines, key=lambda b: b.iterations_done)
    i = 0
    for r in records:
        while i < len(pending) and pending[i].iterations_done <= r.iteration:
            events.append(pending[i])
            i += 1
        if r.iteration in changes:
            events.append(changes[r.iteration])
        events.append(r)
    events.extend(pending[i:])
    if records:
        last = records[-1]
        events.append(RunFinished(reason=last.finish_reason or "unknown", iterations=len(records),
                                  tokens=last.generated_len, elapsed_s=0.0, prefill_ms=0.0, t_s=last.t_end_s))
    return events


