"""Trace files: a run's event stream written down and read back (export, replay, ``--trace``), and the flat
export for spreadsheets written from it.

One trace is five files next to each other (see docs/trace-format.md): ``<stem>.events.jsonl``, the stream
itself (``core.trace.event_log``: what replay reads, and what autosave writes); and, from it, ``<stem>.csv`` one row
per iteration with the measurement's snapshot after it, ``<stem>.tokens.csv`` one row per token,
``<stem>.baselines.csv`` (only traces from before baselines committed their tokens) and ``<stem>.session.json``
(settings, models, format, column units). A trace without an event log (written before it existed) is read
from its CSVs into the same stream (``legacy_stream``). ``chrome_trace.write_chrome_trace`` writes the same
stream as Trace Event Format JSON (Perfetto).

The columns are declared once, in ``ITERATION_SCHEMA``, ``TOKEN_SCHEMA`` and ``BASELINE_SCHEMA``: name,
unit, cell type (how a value is written and parsed back), where the value lives on the record, and a doc
line. The CSV headers and rows, ``TraceAppender`` (the one CSV writer),
``read_trace``, the units in the session file, the app's columns and the table in docs/trace-format.md
(``python -m specscope.core.trace.files --doc-table``) all derive from them. Adding a column is one line there
(plus the record field it reads).

Floats are written with ``repr`` so that writing and reading back gives equal records. Trace files are data:
they are parsed with ``csv`` and ``json`` only (JSON with bounded depth and size), never evaluated. Text cells
that a spreadsheet would run as a formula are written with a leading ``'``, which the reader removes.
"""

from __future__ import annotations

import csv
import io
import json
import operator
import os
import re
import secrets
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any, NamedTuple

from specscope import __version__
from specscope.core.controls import K_MAX
from specscope.core.events import Event, RunFinished, RunStarted, control_changes
from specscope.core.records import BaselineRecord, ControlValues, IterationRecord, TokenRecord, TokenStatus
from specscope.core.trace.errors import (
    JsonLimitError,
    TraceError,
    TraceFormatError,
    TraceWriteError,
    bounded_json,
    read_trace_text,
)
from specscope.core.trace.errors import (
    TraceReadError as TraceReadError,  # re-exported: callers catch it from here
)
from specscope.core.trace.event_log import EVENTS_SUFFIX, read_events, write_events
from specscope.core.user_files import check_output_target

FORMAT_NAME = "specscope-trace"
FORMAT_VERSION = 1

# --- cell formatting ------------------------------------------------------------------------------------


def fmt_num(x: float | int | None) -> str:
    """'' for None; ints exactly; floats with repr (round-trips exactly, 'nan'/'inf' included)."""
    if x is None:
        return ""
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, int):
        return str(x)
    return repr(float(x))


def fmt_bool(b: bool) -> str:
    return "true" if b else "false"


def compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str)


# Characters that would break a row onto several lines, confuse a spreadsheet, or not encode as UTF-8
# (lone surrogates from byte-level tokenizers) are written as backslash escapes.
_ESCAPE_RE = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_ESCAPE_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPE_RE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_UNESCAPE_NAMED = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def escape_text(text: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPE_NAMED.get(m.group(), f"\\u{ord(m.group()):04x}"), text)


def unescape_text(text: str) -> str:
    if "\\" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        s = m.group(1)
        if len(s) == 5:
            return chr(int(s[1:], 16))
        if s in _UNESCAPE_NAMED:
            return _UNESCAPE_NAMED[s]
        raise ValueError(f"unknown escape \\{s}")

    return _UNESCAPE_RE.sub(one, text)


# A spreadsheet runs a cell that starts with one of these as a formula (``=cmd|' /C calc'!A0``). As
# spreadsheet-safe CSV writers do (OWASP "CSV injection"), such text cells get a leading apostrophe, which
# spreadsheets hide. So that every text still round-trips, a cell whose text after its leading apostrophes
# starts with a trigger gets one more apostrophe, and the reader removes exactly one from such cells.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _looks_like_formula(cell: str) -> bool:
    return cell.lstrip("'").startswith(FORMULA_TRIGGERS)


def spreadsheet_safe(cell: str) -> str:
    """``cell`` with a leading ``'`` when a spreadsheet would run it as a formula (undone by
    ``spreadsheet_restore``)."""
    return "'" + cell if _looks_like_formula(cell) else cell


def spreadsheet_restore(cell: str) -> str:
    return cell[1:] if cell.startswith("'") and _looks_like_formula(cell) else cell


FLAG_SEPARATOR = " | "


def join_flags(flags: Sequence[str]) -> str:
    return FLAG_SEPARATOR.join(f.replace("\\", "\\\\").replace("|", "\\|") for f in flags)


def split_flags(cell: str) -> list[str]:
    flags: list[str] = []
    current: list[str] = []
    i, n = 0, len(cell)
    while i < n:
        ch = cell[i]
        if ch == "\\" and i + 1 < n:
            current.append(cell[i + 1])
            i += 2
        elif cell.startswith(FLAG_SEPARATOR, i):
            flags.append("".join(current))
            current = []
            i += len(FLAG_SEPARATOR)
        else:
            current.append(ch)
            i += 1
    if current or flags:
        flags.append("".join(current))
    return flags


# --- cell types -----------------------------------------------------------------------------------------


class _Unparsable(ValueError):
    """A cell that does not hold its column's type; the message says what was expected."""


@dataclass(frozen=True)
class CellType:
    """How one kind of value is written to a cell and parsed back (``parse`` raises ValueError)."""

    name: str  # for the docs and error messages: "an integer"
    format: Callable[[Any], str]
    parse: Callable[[str], Any]


def _parse_int(cell: str) -> int:
    try:
        return int(cell)
    except ValueError:
        raise _Unparsable("an integer") from None


def _parse_float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        raise _Unparsable("a number") from None


def _parse_opt_float(cell: str) -> float | None:
    return None if cell == "" else _parse_float(cell)


def _parse_opt_int(cell: str) -> int | None:
    if cell == "":
        return None
    try:
        return int(cell)
    except ValueError:  # 0.1.0-era writers and spreadsheets may write a count as a float
        value = _parse_float(cell)
        if not value.is_integer():
            raise _Unparsable("a whole number") from None
        return int(value)


def _parse_bool(cell: str) -> bool:
    v = cell.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no", ""):
        return False
    raise _Unparsable("true or false")


def _parse_escaped(cell: str) -> str:
    try:
        return unescape_text(spreadsheet_restore(cell))
    except ValueError as e:
        raise _Unparsable(f"escaped text ({e})") from None


def _parse_steps(cell: str) -> list[float]:
    try:
        return [float(s) for s in cell.split(";")] if cell else []
    except ValueError:
        raise _Unparsable("numbers joined with ';'") from None


TOP5_MAX_CHARS = 4096
MEMORY_JSON_MAX_CHARS = 65536


def _parse_top5(cell: str) -> list[tuple[int, float]]:
    if cell == "":
        return []
    try:
        obj = bounded_json(cell, max_depth=2, max_chars=TOP5_MAX_CHARS)
        return [(int(i), float(p)) for i, p in obj]
    except JsonLimitError as e:
        raise _Unparsable(f"a JSON list of [id, prob] pairs ({e})") from None
    except (TypeError, ValueError):
        raise _Unparsable("a JSON list of [id, prob] pairs") from None


def _format_top5(top5: list[tuple[int, float]]) -> str:
    return compact_json([[int(i), float(p)] for i, p in top5]) if top5 else ""


def _parse_memory_json(cell: str) -> dict[str, float]:
    if cell == "":
        return {}
    try:
        obj = bounded_json(cell, max_depth=1, max_chars=MEMORY_JSON_MAX_CHARS)
    except JsonLimitError as e:
        raise _Unparsable(f"a JSON object of numbers ({e})") from None
    except ValueError:
        raise _Unparsable("a JSON object of numbers") from None
    if not isinstance(obj, dict) or not all(type(v) in (int, float) for v in obj.values()):
        raise _Unparsable("a JSON object of numbers")
    return {str(k): v for k, v in obj.items()}


def _parse_status(cell: str) -> TokenStatus:
    try:
        return TokenStatus(cell)
    except ValueError:
        raise _Unparsable("a token status") from None


INT = CellType("integer", str, _parse_int)
FLOAT = CellType("number", fmt_num, _parse_float)
OPT_FLOAT = CellType("number or empty", fmt_num, _parse_opt_float)
OPT_INT = CellType("whole number or empty", fmt_num, _parse_opt_int)
BOOL = CellType("true/false", fmt_bool, _parse_bool)
TEXT = CellType("text", spreadsheet_safe, spreadsheet_restore)
ESCAPED_TEXT = CellType("escaped text", lambda s: spreadsheet_safe(escape_text(s)), _parse_escaped)
FLAGS = CellType("sentences joined with ' | '", lambda f: spreadsheet_safe(join_flags(f)),
                 lambda s: split_flags(spreadsheet_restore(s)))
STEPS = CellType("numbers joined with ';'", lambda xs: ";".join(fmt_num(x) for x in xs), _parse_steps)
TOP5 = CellType("JSON [[id, prob], ...]", _format_top5, _parse_top5)
STATUS = CellType("token status", lambda s: s.value, _parse_status)
MEMORY_JSON = CellType("JSON object of numbers", lambda m: compact_json(m) if m else "", _parse_memory_json)


# --- the schema -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Column:
    """One CSV column. ``field`` is where the value lives on the row's subject (a dotted path such as
    ``controls.k``); the getter reads it there and the reader puts the parsed value back there."""

    name: str
    unit: str
    type: CellType
    doc: str
    field: str = ""  # defaults to ``name``
    required: bool = False  # a file without it is not a trace
    derived: bool = False  # computed from other fields: written for readers, never read back
    plotted: bool = False  # a per-iteration number the app keeps a column array of
    getter: Callable[[Any], Any] | None = None  # when the value is not at ``field`` as it is
    group: str = ""  # columns shown as one row of the docs' table

    @property
    def path(self) -> str:
        return self.field or self.name

    def get(self, subject: Any) -> Any:
        return self.getter(subject) if self.getter is not None else operator.attrgetter(self.path)(subject)

    def cell(self, subject: Any) -> str:
        return str(self.type.format(self.get(subject)))

    def spec(self) -> dict[str, str]:
        return {"name": self.name, "unit": self.unit, "description": self.doc}


def _col(name: str, unit: str, type_: CellType, doc: str, **kw: Any) -> Column:
    return Column(name, unit, type_, doc, **kw)


class IterationRow:
    """The subject of one iteration-CSV row: the record, and the measurement's snapshot after it (None when
    the row is written without one). Attributes not here are the record's."""

    __slots__ = ("record", "snapshot")

    def __init__(self, record: IterationRecord, snapshot: Any = None):
        self.record = record
        self.snapshot = snapshot

    def __getattr__(self, name: str) -> Any:
        return getattr(self.record, name)


def _snap(row: Any, path: str) -> Any:
    """A snapshot value for a row (None without a snapshot, or where a step of the path is None)."""
    value = getattr(row, "snapshot", None)
    for part in path.split("."):
        if value is None:
            return None
        value = getattr(value, part)
    return value


# Memory columns (one per memory key, or one JSON column) follow these in the iteration CSV.
ITERATION_SCHEMA: tuple[Column, ...] = (
    _col("iteration", "", INT, "iteration number in the run, from 0", required=True, plotted=True),
    _col("mode", "", TEXT, "`speculative`, `plain`, or `attached` (a serving engine's pass)", required=True),
    _col("drafter", "", TEXT, "drafter name", required=True),
    _col("k", "tokens", INT, "proposals requested this iteration", field="controls.k", required=True, plotted=True),
    _col("temperature", "", FLOAT, "sampling temperature (0 = greedy)", field="controls.temperature",
         required=True),
    _col("top_k", "tokens", INT, "top-k filter (0 = off)", field="controls.top_k", required=True),
    _col("top_p", "", FLOAT, "top-p filter (1.0 = off)", field="controls.top_p", required=True),
    _col("adaptive_k", "", BOOL, "`true` when k was chosen by the adaptive policy", field="controls.adaptive_k"),
    _col("n_drafted", "tokens", INT, "proposals drafted", required=True),
    _col("n_accepted", "tokens", INT, "proposals accepted", required=True),
    _col("n_emitted", "tokens", INT, "tokens committed (accepted + the correction or bonus token)",
         required=True),
    _col("draft_ms", "ms", FLOAT, "drafting time", required=True, plotted=True),
    _col("draft_step_ms", "ms", OPT_FLOAT, "`draft_ms / n_drafted` (derived; empty when nothing was drafted)",
         derived=True),
    _col("verify_ms", "ms", FLOAT, "the target's verification pass", required=True, plotted=True),
    _col("rollback_ms", "ms", FLOAT, "cutting both caches back to the committed prefix", required=True,
         plotted=True),
    _col("iteration_ms", "ms", FLOAT, "whole iteration", required=True, plotted=True),
    _col("context_len", "tokens", INT, "prompt + generated tokens after the iteration", required=True),
    _col("generated_len", "tokens", INT, "generated tokens after the iteration", required=True),
    _col("t_start_s", "s", FLOAT, "iteration start, `time.monotonic()` of the recording process", required=True),
    _col("t_end_s", "s", FLOAT, "iteration end, `time.monotonic()` of the recording process", required=True),
    # From here to predicted_speedup: the measurement's snapshot after this iteration (derived: written for
    # spreadsheets from the event stream, never read back; replay recomputes them through the same owner).
    _col("plain_step_ms", "ms", OPT_FLOAT, "the target's plain step, the verify fit at length 1 (empty until "
         "measured)", plotted=True, derived=True, getter=lambda r: _snap(r, "costs.plain_step_ms")),
    _col("alpha_run", "", OPT_FLOAT, "α = accepted / judged proposals over the whole run so far (the headline α)",
         plotted=True, derived=True, getter=lambda r: _snap(r, "alpha")),
    _col("alpha_segment", "", OPT_FLOAT, "α over the current control segment (since the last control change)",
         plotted=True, derived=True, getter=lambda r: _snap(r, "segment.alpha")),
    _col("alpha_window", "", OPT_FLOAT, "α over the recent window of iterations", plotted=True, derived=True,
         getter=lambda r: _snap(r, "alpha_window")),
    _col("measured_speedup", "x", OPT_FLOAT, "measured speed-up over plain decoding: paired plain/speculative "
         "blocks, Hodges-Lehmann centre (empty until 5 blocks); over `measured_scope`", plotted=True,
         derived=True, getter=lambda r: _snap(r, "measured.value")),
    _col("measured_speedup_lo", "x", OPT_FLOAT, "lower end of the measured speed-up's 95% interval", plotted=True,
         derived=True, getter=lambda r: _snap(r, "measured.lo")),
    _col("measured_speedup_hi", "x", OPT_FLOAT, "upper end of the measured speed-up's 95% interval", plotted=True,
         derived=True, getter=lambda r: _snap(r, "measured.hi")),
    _col("measured_scope", "", TEXT, "what the measured speed-up is over: `run`, or the control segment's label",
         derived=True, getter=lambda r: _snap(r, "measured_scope") if _snap(r, "measured") else ""),
    _col("predicted_speedup", "x", OPT_FLOAT, "the cost model's speed-up at this k (acceptance by position, the "
         "verify fit)", plotted=True, derived=True, getter=lambda r: _snap(r, "predicted_speedup")),
    _col("explore", "", BOOL, "`true` when the iteration ran at another k to time a verify pass never measured"),
    _col("k_note", "", TEXT, "why k was what it was, when the controller or an exploration chose it"),
    _col("cpu_ms", "ms", OPT_FLOAT, "process CPU time during the iteration, all threads"),
    _col("preempted", "count", OPT_INT, "involuntary context switches of the process during the iteration"),
    _col("match_len", "tokens", OPT_INT, "prompt lookup's n-gram size or suffix decoding's match length behind "
         "the proposal (empty: no match, or another drafter)"),
    _col("expected_accepted", "tokens", OPT_FLOAT, "suffix decoding: the proposal's expected accepted tokens, the sum "
         "of its tokens' estimated probabilities (empty for other drafters)"),
    _col("flags", "", FLAGS, "paging-detector and machine-busy sentences joined with ` | ` (`|` and `\\` inside "
         "one are `\\`-escaped)"),
    _col("finished", "", BOOL, "`true` on the run's last iteration when it ended by itself"),
    _col("finish_reason", "", TEXT, "on the last iteration: `eos`, `max_new_tokens`, `context_window`, `stop`, "
         "`error`, `interrupted` (SIGINT) or `terminated` (SIGTERM)"),
)

MEMORY_JSON_COLUMN = "memory_json"
# The memory sample as one JSON cell: how an appended file (autosave) holds it, since memory keys are only
# known as samples arrive and a header cannot grow. Exports write one column per key instead.
MEMORY_JSON_SPEC = _col(MEMORY_JSON_COLUMN, "", MEMORY_JSON, "the memory sample as one JSON object (autosaved "
                        "sessions, whose memory keys are not known when the header is written)", field="memory")


class TokenRow(NamedTuple):
    """The subject of one tokens-CSV row: a token and the iteration it belongs to."""

    iteration: int
    token: TokenRecord


TOKEN_SCHEMA: tuple[Column, ...] = (
    _col("iteration", "", INT, "the iteration row the token belongs to", required=True),
    _col("position", "tokens", INT, "index in the generated continuation (0 = first new token); a rejected "
         "proposal has the position it would have taken", field="token.position", required=True),
    _col("token_id", "", INT, "vocabulary id", field="token.token_id", required=True),
    _col("text", "", ESCAPED_TEXT, "decoded text, escaped (see below)", field="token.text", required=True),
    _col("status", "", STATUS,
         "`accepted`, `rejected`, `correction`, `bonus`, `target` (no proposals) or `plain`",
         field="token.status", required=True),
    _col("p", "", OPT_FLOAT, "target's probability of the token after temperature/top-k/top-p",
         field="token.p"),
    _col("q", "", OPT_FLOAT, "drafter's probability (empty for tokens the target supplied)", field="token.q"),
    _col("accept_prob", "", OPT_FLOAT, "min(1, p/q) (derived; empty for target-supplied tokens)",
         field="token.accept_prob", derived=True),
    _col("top5", "", TOP5, "the target's top 5 at this position, compact JSON `[[token_id, prob], ...]` "
         "(empty if not recorded)", field="token.top5"),
)

VERIFY_PREFIX = "verify_ms_len_"
VERIFY_LENGTHS = range(1, K_MAX + 2)  # a verify pass holds the committed token plus up to K_MAX proposals


def _verify_column(n: int) -> Column:
    return _col(f"{VERIFY_PREFIX}{n}", "ms", OPT_FLOAT, "a target pass over N tokens (the verify sweep; empty "
                "where not measured)", getter=lambda b: b.verify_ms_by_len.get(n), group="verify_ms_len_N")


BASELINE_SCHEMA: tuple[Column, ...] = (
    _col("after_iteration", "", INT, "iteration after which the plain steps ran", required=True),
    _col("context_len", "tokens", INT, "context they ran on", required=True),
    _col("step_ms", "ms", STEPS, "each plain step, joined with `;`", required=True),
    _col("median_step_ms", "ms", OPT_FLOAT, "median of `step_ms` (derived)", derived=True,
         getter=lambda b: b.median_step_ms if b.step_ms else None),
    _col("t_s", "s", FLOAT, "`time.monotonic()` when the baseline finished"),
    *(_verify_column(n) for n in VERIFY_LENGTHS),
)
LEGACY_VERIFY_JSON_COLUMN = "verify_ms_by_len_json"  # how 0.1.0's autosave held the sweep; read, never written

ITERATION_COLUMNS = tuple(c.name for c in ITERATION_SCHEMA)
TOKEN_COLUMNS = tuple(c.name for c in TOKEN_SCHEMA)
BASELINE_COLUMNS = tuple(c.name for c in BASELINE_SCHEMA)
PLOTTED_COLUMNS = tuple(c.name for c in ITERATION_SCHEMA if c.plotted)
_ITERATION_FIXED = frozenset((*ITERATION_COLUMNS, MEMORY_JSON_COLUMN))

_UNIT_SUFFIXES = (
    ("_bytes_per_s", "bytes/s"), ("_per_s", "1/s"), ("_bytes", "bytes"), ("_ms", "ms"), ("_s", "s"),
    ("_pct", "%"), ("_percent", "%"), ("_mib", "MiB"), ("_gib", "GiB"), ("_count", "count"), ("_w", "W"),
)


def unit_of(column: str) -> str:
    """The unit a memory (or other unit-named) column carries, from its name's suffix; '' if unknown."""
    for suffix, unit in _UNIT_SUFFIXES:
        if column.endswith(suffix):
            return unit
    return ""


def _memory_columns(memory_keys: Sequence[str] | None) -> list[Column]:
    if memory_keys is None:
        return [MEMORY_JSON_SPEC]
    return [_col(k, unit_of(k), OPT_FLOAT, "memory sample joined to the iteration",
                 getter=lambda r, k=k: r.memory.get(k)) for k in memory_keys]


def iteration_columns(memory_keys: Sequence[str] | None) -> list[str]:
    """Header of the iteration CSV: memory keys as columns, or ``None`` for the one-JSON-column form."""
    return [*ITERATION_COLUMNS, *(c.name for c in _memory_columns(memory_keys))]


def column_specs(memory_keys: Sequence[str] | None) -> dict[str, Any]:
    """Column lists with units and descriptions, as stored in the session sidecar."""
    return {
        "iterations": [c.spec() for c in (*ITERATION_SCHEMA, *_memory_columns(memory_keys))],
        "tokens": [c.spec() for c in TOKEN_SCHEMA],
        "baselines": [c.spec() for c in BASELINE_SCHEMA],
    }


def doc_table(schema: Sequence[Column]) -> str:
    """The markdown table docs/trace-format.md shows for ``schema`` (a test checks the doc holds it)."""
    lines = ["| column | unit | type | meaning |", "|---|---|---|---|"]
    done: set[str] = set()
    for c in schema:
        if c.group:
            if c.group in done:
                continue
            done.add(c.group)
            members = [m.name for m in schema if m.group == c.group]
            name = f"`{members[0]}` … `{members[-1]}`"
        else:
            name = f"`{c.name}`"
        cells = (name, c.unit, c.type.name.replace("|", "\\|"), c.doc.replace("|", "\\|"))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def doc_tables() -> dict[str, str]:
    return {"iterations": doc_table(ITERATION_SCHEMA), "tokens": doc_table(TOKEN_SCHEMA),
            "baselines": doc_table(BASELINE_SCHEMA)}


# --- errors and results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class TracePaths:
    iterations: Path  # the path given to write_trace
    tokens: Path
    baselines: Path
    session: Path
    events: Path  # the event stream: what replay reads

    def all(self) -> tuple[Path, Path, Path, Path, Path]:
        return (self.iterations, self.tokens, self.baselines, self.session, self.events)


@dataclass
class LoadedTrace:
    events: list[Event]  # the run's stream in order: what replay feeds the measurement
    session: dict[str, Any]  # the caller's settings/models dict as written
    warnings: list[str]
    meta: dict[str, Any] = field(default_factory=dict)  # the whole sidecar (format, version, columns, ...)
    paths: TracePaths | None = None
    legacy: bool = False  # read from the CSVs of a trace written before the event log existed

    @property
    def records(self) -> list[IterationRecord]:
        return [e for e in self.events if isinstance(e, IterationRecord)]

    @property
    def baselines(self) -> list[BaselineRecord]:
        return [e for e in self.events if isinstance(e, BaselineRecord)]

    @property
    def started(self) -> RunStarted | None:
        return next((e for e in self.events if isinstance(e, RunStarted)), None)

    @property
    def finished(self) -> RunFinished | None:
        return next((e for e in reversed(self.events) if isinstance(e, RunFinished)), None)


SESSION_FOLDER_TRACE = "trace.csv"  # the iteration CSV's name inside an autosaved session folder


def trace_paths(path: Path) -> TracePaths:
    """The four file names of a trace. ``path`` is the iteration CSV (``x.csv``) or a sibling file
    (``x.tokens.csv``, ``x.session.json``...)."""
    path = Path(path)
    name = path.name
    for sibling in (".tokens.csv", ".baselines.csv", ".session.json", EVENTS_SUFFIX):
        if name.endswith(sibling):
            stem = name[: -len(sibling)]
            path = path.with_name(stem + ".csv")
            break
    else:
        stem = name[:-4] if name.lower().endswith(".csv") else name
    return TracePaths(
        iterations=path,
        tokens=path.with_name(stem + ".tokens.csv"),
        baselines=path.with_name(stem + ".baselines.csv"),
        session=path.with_name(stem + ".session.json"),
        events=path.with_name(stem + EVENTS_SUFFIX),
    )


def new_csv_writer(f: IO[str]) -> Any:
    return csv.writer(f, lineterminator="\n")


def open_for_csv(path: Path, mode: str) -> IO[str]:
    # backslashreplace: a lone surrogate in a free-text field must not abort a write (token text is escaped).
    return open(path, mode, encoding="utf-8", errors="backslashreplace", newline="")


def sidecar(
    session: dict[str, Any] | None,
    paths: TracePaths,
    memory_keys: Sequence[str] | None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created": datetime.now().astimezone().isoformat(timespec="seconds"),
        "specscope_version": __version__,
        "files": {
            "events": paths.events.name,
            "iterations": paths.iterations.name,
            "tokens": paths.tokens.name,
            "baselines": paths.baselines.name,
        },
        "session": session or {},
        "columns": column_specs(memory_keys),
        **extra,
    }


def sidecar_text(meta: dict[str, Any]) -> str:
    return json.dumps(meta, indent=2, ensure_ascii=False, default=str) + "\n"


# --- writing --------------------------------------------------------------------------------------------


def probe_writable(path: Path) -> None:
    """Raise TraceWriteError unless a file can be created at ``path`` (checked before a long run, so an
    unwritable export path costs nothing). Creates and removes a small probe file beside it."""
    path = Path(path)
    if path.is_dir():
        raise TraceWriteError(path, "is a folder")
    probe = path.with_name(f".{path.name}.{secrets.token_hex(4)}.probe")
    try:
        with open(probe, "x", encoding="utf-8") as f:
            f.write("specscope write check\n")
    except OSError as e:
        raise TraceWriteError(path, e.strerror or str(e)) from None
    finally:
        with suppress(OSError):
            probe.unlink(missing_ok=True)


@contextmanager
def atomic_text_files(targets: Sequence[Path]) -> Iterator[list[IO[str]]]:
    """Open temp files beside each target; on success rename them all into place, on failure remove them
    (every one, even when closing them fails too, as it does on a full disk). Any OSError becomes a
    TraceWriteError naming the file and the OS reason. A target that exists and is not a regular file (a
    device, a FIFO, a folder) is refused with a TraceWriteError and never replaced."""
    temps: list[Path] = []
    handles: list[IO[str]] = []
    current = targets[0]
    try:
        token = secrets.token_hex(4)
        for target in targets:
            current = target
            tmp = target.with_name(f".{target.name}.{token}.tmp")
            handles.append(open_for_csv(tmp, "x"))
            temps.append(tmp)
        current = targets[0]  # a failure while writing (disk full) is reported for the trace as a whole
        yield handles
        for h, target in zip(handles, targets, strict=True):
            current = target
            h.close()
        for target in targets:  # all checked before the first rename: a refused trace leaves no part behind
            why = check_output_target(target)
            if why is not None:  # a device, FIFO, socket or folder: renaming over it would replace it
                raise TraceWriteError(target, f"{why}; it was left as it is")
        for tmp, target in zip(temps, targets, strict=True):
            current = target
            os.replace(tmp, target)
    except OSError as e:
        raise TraceWriteError(current, e.strerror or str(e)) from e
    finally:
        for h in handles:
            with suppress(OSError):  # closing flushes; on a full disk that fails again
                h.close()
        for tmp in temps:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)


class TraceAppender:
    """The one writer of a trace's three CSVs, for export and autosave alike.

    Writes the headers at once; ``append`` renders a record's rows from the schema and keeps them until
    ``flush``, which writes tokens and baselines before iterations, so that a reader of a growing trace never
    sees an iteration whose tokens are not on disk yet. ``memory_keys`` lists the memory columns, or ``None``
    for the one-JSON-column form (memory keys unknown when the header is written). OSError propagates.
    """

    def __init__(self, iterations: IO[str], tokens: IO[str], baselines: IO[str],
                 memory_keys: Sequence[str] | None):
        self._files = (iterations, tokens, baselines)
        self._writers = [new_csv_writer(f) for f in self._files]
        self._iteration_columns = (*ITERATION_SCHEMA, *_memory_columns(memory_keys))
        self._pending: tuple[list[list[str]], list[list[str]], list[list[str]]] = ([], [], [])
        self._writers[0].writerow(c.name for c in self._iteration_columns)
        self._writers[1].writerow(TOKEN_COLUMNS)
        self._writers[2].writerow(BASELINE_COLUMNS)
        self.n_iterations = 0
        self.n_baselines = 0

    def append(self, item: IterationRecord | BaselineRecord, snapshot: Any = None) -> None:
        """A record's rows; ``snapshot`` is the measurement's after it (the derived columns), if any."""
        if isinstance(item, BaselineRecord):
            if any(n not in VERIFY_LENGTHS for n in item.verify_ms_by_len):
                raise ValueError(f"verify pass lengths beyond {VERIFY_LENGTHS[-1]}: {sorted(item.verify_ms_by_len)}")
            self._pending[2].append([c.cell(item) for c in BASELINE_SCHEMA])
            self.n_baselines += 1
            return
        row = IterationRow(item, snapshot)
        self._pending[0].append([c.cell(row) for c in self._iteration_columns])
        self._pending[1].extend([c.cell(TokenRow(item.iteration, t)) for c in TOKEN_SCHEMA] for t in item.tokens)
        self.n_iterations += 1

    def flush(self) -> None:
        for index in (1, 2, 0):
            rows = self._pending[index]
            if rows:
                self._writers[index].writerows(rows)
                rows.clear()
            self._files[index].flush()


def write_trace(
    path: Path,
    events: Iterable[Event],
    session: dict[str, Any] | None = None,
) -> TracePaths:
    """Write a trace: the event stream (``<stem>.events.jsonl``, what replay reads) and, from the same stream,
    the flat export for spreadsheets — the iteration CSV at ``path`` with the measurement's numbers after each
    iteration, its tokens, legacy baselines and session files beside it.

    All files are written to temporary names first and renamed into place, so a failed export leaves no
    half-written trace. Raises TraceWriteError (path + OS reason); the events are not modified.
    """
    from dataclasses import replace

    from specscope.core.measure.measurement import (
        Measurement,  # the derived columns are the one owner's, fed this stream
    )

    events = list(events)
    paths = trace_paths(Path(path))
    records = [e for e in events if isinstance(e, IterationRecord)]
    memory_keys = sorted({k for r in records for k in r.memory})
    clash = [k for k in memory_keys if k in _ITERATION_FIXED]
    if clash:
        raise ValueError(f"memory keys clash with trace columns: {', '.join(clash)}")
    finished = next((e for e in reversed(events) if isinstance(e, RunFinished)), None)
    meta = sidecar(
        session, paths, memory_keys,
        counts={"events": len(events), "iterations": len(records), "tokens": sum(len(r.tokens) for r in records),
                "baselines": sum(isinstance(e, BaselineRecord) for e in events)},
    )
    measurement = Measurement()
    with atomic_text_files(paths.all()) as (f_it, f_tok, f_base, f_meta, f_events):
        appender = TraceAppender(f_it, f_tok, f_base, memory_keys)
        for e in events:
            snapshot = measurement.feed(e)
            if isinstance(e, IterationRecord):
                if e is records[-1] and finished is not None and not e.finish_reason:
                    e = replace(e, finish_reason=finished.reason)  # the export's last row says how it ended
                appender.append(e, snapshot)
            elif isinstance(e, BaselineRecord):
                appender.append(e)
        appender.flush()
        f_meta.write(sidecar_text(meta))
        write_events(f_events, events)
    return paths


# --- reading --------------------------------------------------------------------------------------------

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


def _parse_iteration(row: _Row, memory_cols: Sequence[str]) -> IterationRecord:
    values = _values(row, ITERATION_SCHEMA)
    memory: dict[str, float] = {}
    if MEMORY_JSON_COLUMN in row.index:
        memory.update(row.parse(MEMORY_JSON_SPEC))
    for name in memory_cols:
        v = row.parse(_col(name, "", OPT_FLOAT, ""))
        if v is not None:
            memory[name] = v
    controls = ControlValues(**values.pop("controls", {}))
    return IterationRecord(**values, controls=controls, tokens=[], memory=memory)


def _parse_token(row: _Row) -> tuple[int, TokenRecord]:
    values = _values(row, TOKEN_SCHEMA)
    return values["iteration"], TokenRecord(**values["token"])


def _parse_baseline(row: _Row, verify_cols: dict[str, int]) -> BaselineRecord:
    values = _values(row, BASELINE_SCHEMA)
    by_len: dict[int, float] = {}
    if LEGACY_VERIFY_JSON_COLUMN in row.index:
        cell = row.cells[row.index[LEGACY_VERIFY_JSON_COLUMN]]
        try:
            obj = bounded_json(cell, max_depth=1, max_chars=MEMORY_JSON_MAX_CHARS) if cell else {}
            by_len.update({int(n): float(ms) for n, ms in obj.items()})
        except (AttributeError, TypeError, ValueError):
            raise _CellError(LEGACY_VERIFY_JSON_COLUMN, cell, "a JSON object of ms") from None
    for name, n in verify_cols.items():
        v = row.parse(_col(name, "ms", OPT_FLOAT, ""))
        if v is not None:
            by_len[n] = v
    return BaselineRecord(**values, verify_ms_by_len=by_len)


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
    header = [h.strip() for h in header]
    missing = [c.name for c in schema if c.required and c.name not in header]
    if missing:
        if tuple(header[:3]) == TOKEN_COLUMNS[:3] and what == "trace":
            raise TraceFormatError(f"{path.name}: this is a tokens file; open the trace's main .csv instead")
        shown = ", ".join(missing[:6]) + (", ..." if len(missing) > 6 else "")
        raise TraceFormatError(f"{path.name}: not a specscope {what} (missing columns: {shown})")
    if len(set(header)) != len(header):
        raise TraceFormatError(f"{path.name}: duplicate column names in the header")
    return header, rows


def _parse_rows(
    path: Path,
    header: list[str],
    rows: list[tuple[int, list[str]]],
    parse: Callable[[_Row], Any],
    warnings: list[str],
) -> list[Any]:
    index = {name: i for i, name in enumerate(header)}
    out = []
    for n, (line, cells) in enumerate(rows):
        last = n == len(rows) - 1
        try:
            if len(cells) != len(header):
                raise ValueError(f"{len(cells)} fields where the header has {len(header)}")
            out.append(parse(_Row(index, cells)))
        except (ValueError, TypeError) as e:
            if last:  # a crash can cut the last row anywhere; keep everything before it
                warnings.append(f"{path.name}: line {line}: last row dropped ({e})")
            else:
                raise TraceFormatError(f"{path.name}: line {line}: {e}") from None
    return out


def _attach_tokens(
    records: list[IterationRecord], tokens: list[tuple[int, TokenRecord]], name: str, warnings: list[str]
) -> None:
    """Tokens are written grouped by iteration in record order; give each group to the first record with
    that iteration number that has none yet (iteration numbers repeat only across runs in one file)."""
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


def read_trace(path: Path) -> LoadedTrace:
    """Read a trace: its event log when there is one (``write_trace``, autosave), else the CSVs of a trace
    written before the event log existed, turned into the same stream.

    ``path`` may be the iteration CSV, a sibling file (the event log included), or a session folder. Raises
    TraceFormatError for a corrupt or foreign file, TraceReadError when it cannot be read; what was repaired (a
    last line cut by a crash, repeated iterations) is reported in ``warnings``.
    """
    path = Path(path)
    paths = trace_paths(path / SESSION_FOLDER_TRACE if path.is_dir() else path)
    warnings: list[str] = []
    if paths.events.exists():
        events, warnings = read_events(paths.events)
        meta = _read_sidecar(paths.session, warnings)
        session = meta.get("session", {})
        return LoadedTrace(events=events, session=session if isinstance(session, dict) else {},
                           warnings=warnings, meta=meta, paths=paths)
    return _read_legacy(paths, warnings)


def _read_legacy(paths: TracePaths, warnings: list[str]) -> LoadedTrace:
    """The CSVs of a trace from before the event log: iterations, tokens, baselines and session settings, merged
    into one stream in the order the loop emitted them, with the control changes and the end they imply."""
    header, rows = _read_csv(paths.iterations, "trace", ITERATION_SCHEMA, warnings)
    memory_cols = [c for c in header if c not in _ITERATION_FIXED and c not in _LEGACY_DERIVED]
    records: list[IterationRecord] = _parse_rows(
        paths.iterations, header, rows, lambda row: _parse_iteration(row, memory_cols), warnings
    )

    if paths.tokens.exists():
        header, rows = _read_csv(paths.tokens, "tokens file", TOKEN_SCHEMA, warnings)
        tokens = _parse_rows(paths.tokens, header, rows, _parse_token, warnings)
        _attach_tokens(records, tokens, paths.tokens.name, warnings)
    else:
        warnings.append(f"{paths.tokens.name}: missing; the trace has no tokens")

    baselines: list[BaselineRecord] = []
    if paths.baselines.exists():
        header, rows = _read_csv(paths.baselines, "baselines file", BASELINE_SCHEMA, warnings)
        verify_cols = {c: int(c[len(VERIFY_PREFIX):]) for c in header
                       if c.startswith(VERIFY_PREFIX) and re.fullmatch("[0-9]{1,4}", c[len(VERIFY_PREFIX):])}
        baselines = _parse_rows(
            paths.baselines, header, rows, lambda row: _parse_baseline(row, verify_cols), warnings
        )
    elif records and any(r.mode == "speculative" for r in records):
        warnings.append(f"{paths.baselines.name}: missing; no measured speed-up can be replayed")

    meta = _read_sidecar(paths.session, warnings)
    session = meta.get("session", {})
    session = session if isinstance(session, dict) else {}
    return LoadedTrace(events=legacy_stream(records, baselines, session), session=session, warnings=warnings,
                       meta=meta, paths=paths, legacy=True)


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

        kind = next((r.drafter for r in records if r.mode != "plain"), "none")
        events.append(RunStarted(source="trace", target=text_of(session.get("target"), pair.get("target")),
                                 draft=text_of(session.get("draft"), pair.get("draft")), drafter=kind,
                                 description=text_of(session.get("pair_description")),
                                 prompt=text_of(session.get("prompt")),
                                 prompt_tokens=max(0, first.context_len - first.generated_len),
                                 controls=first.controls, max_new_tokens=0, t_s=first.t_start_s))
    changes = {c.iteration: c for c in control_changes(records)}
    pending = sorted(baselines, key=lambda b: b.after_iteration)
    i = 0
    for r in records:
        while i < len(pending) and pending[i].after_iteration <= r.iteration:
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


def _main(argv: Sequence[str]) -> int:
    if list(argv) == ["--doc-table"]:
        for name, table in doc_tables().items():
            print(f"<!-- {name} columns: generated by python -m specscope.core.trace.files --doc-table -->")
            print(table)
            print()
        return 0
    print("usage: python -m specscope.core.trace.files --doc-table", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
