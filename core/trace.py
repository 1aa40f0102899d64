"""Trace files: the record stream written to disk and read back (export, replay, the CLI's ``--trace``).

One trace is four files next to each other (see docs/trace-format.md):
``<stem>.csv`` one row per iteration, ``<stem>.tokens.csv`` one row per token, ``<stem>.baselines.csv``
one row per plain-step baseline and ``<stem>.session.json`` (settings, models, format, column units).
``chrome_trace.write_chrome_trace`` writes the same records as Trace Event Format JSON (Perfetto).

Floats are written with ``repr`` so that writing and reading back gives equal records. Trace files are data:
they are parsed with ``csv`` and ``json`` only, never evaluated.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import secrets
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from .. import __version__
from .records import BaselineRecord, ControlValues, IterationRecord, TokenRecord, TokenStatus

FORMAT_NAME = "specscope-trace"
FORMAT_VERSION = 1

# --- columns -------------------------------------------------------------------------------------------

# (name, unit, description); memory columns sit between ``flags`` and ``finished``.
_ITERATION_HEAD: tuple[tuple[str, str, str], ...] = (
    ("iteration", "", "iteration number in the run (0-based)"),
    ("mode", "", "speculative or plain"),
    ("drafter", "", "drafter name"),
    ("k", "tokens", "proposals requested this iteration"),
    ("temperature", "", "sampling temperature (0 = greedy)"),
    ("top_k", "tokens", "top-k filter (0 = off)"),
    ("top_p", "", "top-p filter (1.0 = off)"),
    ("adaptive_k", "", "true when k was chosen by the adaptive policy"),
    ("n_drafted", "tokens", "proposals drafted"),
    ("n_accepted", "tokens", "proposals accepted"),
    ("n_emitted", "tokens", "tokens committed (accepted + correction or bonus)"),
    ("draft_ms", "ms", "drafting time"),
    ("draft_step_ms", "ms", "draft_ms / n_drafted (derived; empty when nothing was drafted)"),
    ("verify_ms", "ms", "target verification pass time"),
    ("rollback_ms", "ms", "cache rollback time"),
    ("iteration_ms", "ms", "whole iteration time"),
    ("context_len", "tokens", "committed tokens (prompt + generated) after the iteration"),
    ("generated_len", "tokens", "generated tokens after the iteration"),
    ("t_start_s", "s", "iteration start, time.monotonic() of the recording process"),
    ("t_end_s", "s", "iteration end, time.monotonic() of the recording process"),
    ("plain_step_ms", "ms", "adjacent plain-decoding step time of the target (empty if unmeasured)"),
    ("alpha_window", "", "α = accepted / judged proposals over the recent window"),
    ("alpha_cumulative", "", "α = accepted / judged proposals since the last change of sampling controls"),
    ("measured_speedup", "x", "measured speed-up over plain decoding: paired blocks, Hodges-Lehmann centre"),
    ("measured_speedup_lo", "x", "lower end of the measured speed-up's 95% interval"),
    ("measured_speedup_hi", "x", "upper end of the measured speed-up's 95% interval"),
    ("predicted_speedup", "x", "the cost model's speed-up at this k (acceptance by position, the verify fit)"),
    ("cpu_ms", "ms", "process CPU time during the iteration, all threads"),
    ("preempted", "count", "involuntary context switches of the process during the iteration"),
    ("flags", "", "paging-detector sentences joined with ' | ' (a '|' or '\\' inside one is '\\'-escaped)"),
)
_ITERATION_TAIL: tuple[tuple[str, str, str], ...] = (
    ("finished", "", "true on the run's last iteration"),
    ("finish_reason", "", "eos, max_new_tokens, stop or error (on the last iteration)"),
)
MEMORY_JSON_COLUMN = "memory_json"  # the autosave form: the memory dict as one JSON object
_MEMORY_JSON_SPEC = (MEMORY_JSON_COLUMN, "", "memory sample as a JSON object (autosaved session form)")

_TOKEN_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("iteration", "", "iteration the token belongs to"),
    ("position", "tokens", "index in the generated continuation (0 = first new token)"),
    ("token_id", "", "vocabulary id"),
    ("text", "", "decoded text; '\\', newline, CR, tab and other control characters are backslash-escaped"),
    ("status", "", "accepted, rejected, correction, bonus, target (no proposals) or plain"),
    ("p", "", "target probability of the token (processed)"),
    ("q", "", "drafter probability of the token (empty for target-supplied tokens)"),
    ("accept_prob", "", "min(1, p/q) (derived; empty for target-supplied tokens)"),
    ("top5", "", "target's top 5 at this position as compact JSON [[token_id, prob], ...]"),
)

_BASELINE_HEAD: tuple[tuple[str, str, str], ...] = (
    ("after_iteration", "", "iteration after which the baseline was measured"),
    ("context_len", "tokens", "context length the plain steps ran on"),
    ("step_ms", "ms", "plain step times joined with ';'"),
    ("median_step_ms", "ms", "median of step_ms (derived)"),
    ("t_s", "s", "time.monotonic() when the baseline was taken"),
)
VERIFY_JSON_COLUMN = "verify_ms_by_len_json"  # the autosave form of the verify_ms_len_N columns
_VERIFY_JSON_SPEC = (VERIFY_JSON_COLUMN, "ms", "verification time by pass length as a JSON object")
_VERIFY_PREFIX = "verify_ms_len_"

ITERATION_COLUMNS_HEAD = tuple(c[0] for c in _ITERATION_HEAD)
ITERATION_COLUMNS_TAIL = tuple(c[0] for c in _ITERATION_TAIL)
TOKEN_COLUMNS = tuple(c[0] for c in _TOKEN_COLUMNS)
BASELINE_COLUMNS_HEAD = tuple(c[0] for c in _BASELINE_HEAD)
_ITERATION_FIXED = frozenset((*ITERATION_COLUMNS_HEAD, *ITERATION_COLUMNS_TAIL, MEMORY_JSON_COLUMN))
# Columns a file must have to be read as a trace; the measurement columns may be absent (older/other writers).
_ITERATION_REQUIRED = (
    "iteration", "mode", "drafter", "k", "temperature", "top_k", "top_p", "n_drafted", "n_accepted",
    "n_emitted", "draft_ms", "verify_ms", "rollback_ms", "iteration_ms", "context_len", "generated_len",
    "t_start_s", "t_end_s",
)
_TOKEN_REQUIRED = ("iteration", "position", "token_id", "text", "status")
_BASELINE_REQUIRED = ("after_iteration", "context_len", "step_ms")

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


def iteration_columns(memory_keys: Sequence[str] | None) -> list[str]:
    """Header of the iteration CSV: memory keys as columns, or ``None`` for the one-JSON-column form."""
    middle = [MEMORY_JSON_COLUMN] if memory_keys is None else list(memory_keys)
    return [*ITERATION_COLUMNS_HEAD, *middle, *ITERATION_COLUMNS_TAIL]


def baseline_columns(verify_lengths: Sequence[int] | None) -> list[str]:
    if verify_lengths is None:
        return [*BASELINE_COLUMNS_HEAD, VERIFY_JSON_COLUMN]
    middle = [f"{_VERIFY_PREFIX}{n}" for n in verify_lengths]
    return [*BASELINE_COLUMNS_HEAD, *middle]


def column_specs(memory_keys: Sequence[str] | None, verify_lengths: Sequence[int] | None) -> dict[str, Any]:
    """Column lists with units and descriptions, as stored in the session sidecar."""

    def spec(rows: Iterable[tuple[str, str, str]]) -> list[dict[str, str]]:
        return [{"name": n, "unit": u, "description": d} for n, u, d in rows]

    if memory_keys is None:
        memory: list[tuple[str, str, str]] = [_MEMORY_JSON_SPEC]
    else:
        memory = [(k, unit_of(k), "memory sample joined to the iteration") for k in memory_keys]
    if verify_lengths is None:
        verify: list[tuple[str, str, str]] = [_VERIFY_JSON_SPEC]
    else:
        verify = [(f"{_VERIFY_PREFIX}{n}", "ms", f"verification pass of {n} tokens") for n in verify_lengths]
    return {
        "iterations": spec((*_ITERATION_HEAD, *memory, *_ITERATION_TAIL)),
        "tokens": spec(_TOKEN_COLUMNS),
        "baselines": spec((*_BASELINE_HEAD, *verify)),
    }


# --- errors and results ---------------------------------------------------------------------------------


class TraceError(Exception):
    """Base of the trace errors; ``str(e)`` is a one-line message for the user."""


class TraceWriteError(TraceError):
    def __init__(self, path: Path, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"cannot write {path}: {reason}")


class TraceReadError(TraceError):
    """The file could not be read at all (missing, permission)."""


class TraceFormatError(TraceError):
    """The file is not a specscope trace, or is corrupt."""


@dataclass(frozen=True)
class TracePaths:
    iterations: Path  # the path given to write_trace
    tokens: Path
    baselines: Path
    session: Path

    def all(self) -> tuple[Path, Path, Path, Path]:
        return (self.iterations, self.tokens, self.baselines, self.session)


@dataclass
class LoadedTrace:
    records: list[IterationRecord]
    baselines: list[BaselineRecord]
    session: dict[str, Any]  # the caller's settings/models dict as written
    warnings: list[str]
    meta: dict[str, Any] = field(default_factory=dict)  # the whole sidecar (format, version, columns, ...)
    paths: TracePaths | None = None


SESSION_FOLDER_TRACE = "trace.csv"  # the iteration CSV's name inside an autosaved session folder


def trace_paths(path: Path) -> TracePaths:
    """The four file names of a trace. ``path`` is the iteration CSV (``x.csv``) or a sibling file
    (``x.tokens.csv``, ``x.session.json``...)."""
    path = Path(path)
    name = path.name
    for sibling in (".tokens.csv", ".baselines.csv", ".session.json"):
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
    )


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


# --- rows -----------------------------------------------------------------------------------------------


def iteration_row(r: IterationRecord, memory_keys: Sequence[str] | None) -> list[str]:
    """One iteration CSV row; ``memory_keys=None`` writes the memory dict as one JSON cell."""
    c = r.controls
    row = [
        str(r.iteration), r.mode, r.drafter, str(c.k), fmt_num(c.temperature), str(c.top_k), fmt_num(c.top_p),
        fmt_bool(c.adaptive_k), str(r.n_drafted), str(r.n_accepted), str(r.n_emitted), fmt_num(r.draft_ms),
        fmt_num(r.draft_step_ms), fmt_num(r.verify_ms), fmt_num(r.rollback_ms), fmt_num(r.iteration_ms),
        str(r.context_len), str(r.generated_len), fmt_num(r.t_start_s), fmt_num(r.t_end_s),
        fmt_num(r.plain_step_ms), fmt_num(r.alpha_window), fmt_num(r.alpha_cumulative),
        fmt_num(r.measured_speedup), fmt_num(r.measured_speedup_lo), fmt_num(r.measured_speedup_hi),
        fmt_num(r.predicted_speedup), fmt_num(r.cpu_ms), fmt_num(r.preempted), join_flags(r.flags),
    ]
    if memory_keys is None:
        row.append(compact_json(r.memory) if r.memory else "")
    else:
        row.extend(fmt_num(r.memory.get(k)) for k in memory_keys)
    row += [fmt_bool(r.finished), r.finish_reason]
    return row


def token_rows(r: IterationRecord) -> Iterator[list[str]]:
    for t in r.tokens:
        yield [
            str(r.iteration), str(t.position), str(t.token_id), escape_text(t.text), t.status.value,
            fmt_num(t.p), fmt_num(t.q), fmt_num(t.accept_prob),
            compact_json([[int(i), float(p)] for i, p in t.top5]) if t.top5 else "",
        ]


def baseline_row(b: BaselineRecord, verify_lengths: Sequence[int] | None) -> list[str]:
    row = [
        str(b.after_iteration), str(b.context_len), ";".join(fmt_num(s) for s in b.step_ms),
        fmt_num(b.median_step_ms) if b.step_ms else "", fmt_num(b.t_s),
    ]
    if verify_lengths is None:
        row.append(compact_json({str(n): ms for n, ms in sorted(b.verify_ms_by_len.items())}))
    else:
        row.extend(fmt_num(b.verify_ms_by_len.get(n)) for n in verify_lengths)
    return row


def new_csv_writer(f: IO[str]) -> Any:
    return csv.writer(f, lineterminator="\n")


def open_for_csv(path: Path, mode: str) -> IO[str]:
    # backslashreplace: a lone surrogate in a free-text field must not abort a write (token text is escaped).
    return open(path, mode, encoding="utf-8", errors="backslashreplace", newline="")


def sidecar(
    session: dict[str, Any] | None,
    paths: TracePaths,
    memory_keys: Sequence[str] | None,
    verify_lengths: Sequence[int] | None,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "created": datetime.now().astimezone().isoformat(timespec="seconds"),
        "specscope_version": __version__,
        "files": {
            "iterations": paths.iterations.name,
            "tokens": paths.tokens.name,
            "baselines": paths.baselines.name,
        },
        "session": session or {},
        "columns": column_specs(memory_keys, verify_lengths),
        **extra,
    }


def sidecar_text(meta: dict[str, Any]) -> str:
    return json.dumps(meta, indent=2, ensure_ascii=False, default=str) + "\n"


# --- writing --------------------------------------------------------------------------------------------


@contextmanager
def atomic_text_files(targets: Sequence[Path]) -> Iterator[list[IO[str]]]:
    """Open temp files beside each target; on success rename them all into place, on failure remove them.
    Any OSError becomes a TraceWriteError naming the file and the OS reason."""
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
        for tmp, target in zip(temps, targets, strict=True):
            current = target
            os.replace(tmp, target)
    except OSError as e:
        raise TraceWriteError(current, e.strerror or str(e)) from e
    finally:
        for h in handles:
            h.close()
        for tmp in temps:
            with suppress(OSError):
                tmp.unlink(missing_ok=True)


def write_trace(
    path: Path,
    records: Iterable[IterationRecord],
    baselines: Iterable[BaselineRecord] = (),
    session: dict[str, Any] | None = None,
) -> TracePaths:
    """Write a trace (iteration CSV at ``path`` plus its tokens, baselines and session files beside it).

    All four files are written to temporary names first and renamed into place, so a failed export leaves
    no half-written trace. Raises TraceWriteError (path + OS reason); the records are not modified.
    """
    records = list(records)
    baselines = list(baselines)
    paths = trace_paths(Path(path))
    memory_keys = sorted({k for r in records for k in r.memory})
    clash = [k for k in memory_keys if k in _ITERATION_FIXED]
    if clash:
        raise ValueError(f"memory keys clash with trace columns: {', '.join(clash)}")
    verify_lengths = sorted({n for b in baselines for n in b.verify_ms_by_len})
    meta = sidecar(
        session, paths, memory_keys, verify_lengths,
        counts={"iterations": len(records), "tokens": sum(len(r.tokens) for r in records),
                "baselines": len(baselines)},
    )
    with atomic_text_files(paths.all()) as (f_it, f_tok, f_base, f_meta):
        w = new_csv_writer(f_it)
        w.writerow(iteration_columns(memory_keys))
        w.writerows(iteration_row(r, memory_keys) for r in records)
        w = new_csv_writer(f_tok)
        w.writerow(TOKEN_COLUMNS)
        for r in records:
            w.writerows(token_rows(r))
        w = new_csv_writer(f_base)
        w.writerow(baseline_columns(verify_lengths))
        w.writerows(baseline_row(b, verify_lengths) for b in baselines)
        f_meta.write(sidecar_text(meta))
    return paths


# --- reading --------------------------------------------------------------------------------------------


class _CellError(ValueError):
    def __init__(self, column: str, value: str, expected: str):
        super().__init__(f"column {column}: {value!r} is not {expected}")


class _Row:
    """Typed access to one CSV row by column name; errors name the column and the value."""

    def __init__(self, index: dict[str, int], cells: list[str]):
        self.index = index
        self.cells = cells

    def raw(self, col: str, default: str = "") -> str:
        i = self.index.get(col)
        return self.cells[i] if i is not None else default

    def as_int(self, col: str) -> int:
        v = self.raw(col)
        try:
            return int(v)
        except ValueError:
            raise _CellError(col, v, "an integer") from None

    def as_float(self, col: str) -> float:
        v = self.raw(col)
        try:
            return float(v)
        except ValueError:
            raise _CellError(col, v, "a number") from None

    def opt_float(self, col: str) -> float | None:
        return self.as_float(col) if self.raw(col) != "" else None

    def as_bool(self, col: str) -> bool:
        v = self.raw(col, "false").strip().lower()
        if v in ("true", "1", "yes"):
            return True
        if v in ("false", "0", "no", ""):
            return False
        raise _CellError(col, v, "true or false")

    def as_json(self, col: str, expected: str) -> Any:
        v = self.raw(col)
        if v == "":
            return None
        try:
            return json.loads(v)
        except ValueError:
            raise _CellError(col, v, expected) from None


def _read_text(path: Path, what: str) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceReadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceReadError(f"{path}: is a folder, not a trace file") from None
    except OSError as e:
        raise TraceReadError(f"cannot read {path}: {e.strerror or e}") from None
    if b"\x00" in data:
        raise TraceFormatError(f"{path.name}: not a specscope {what} (binary data)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path.name}: not a specscope {what} (not UTF-8 at byte {e.start})") from None


def _read_csv(
    path: Path, what: str, required: Sequence[str], warnings: list[str]
) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """Header and (line number, cells) rows. A last row cut short (a crash mid-write) is dropped with a
    warning; a wrong header raises TraceFormatError."""
    text = _read_text(path, what)
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
    missing = [c for c in required if c not in header]
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
    parse: Any,
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
        except ValueError as e:
            if last:  # a crash can cut the last row anywhere; keep everything before it
                warnings.append(f"{path.name}: line {line}: last row dropped ({e})")
            else:
                raise TraceFormatError(f"{path.name}: line {line}: {e}") from None
    return out


def _opt_int(x: float | None) -> int | None:
    return None if x is None else int(x)


def _parse_iteration(row: _Row, memory_cols: Sequence[str]) -> IterationRecord:
    memory: dict[str, float] = {}
    if MEMORY_JSON_COLUMN in row.index:
        obj = row.as_json(MEMORY_JSON_COLUMN, "a JSON object") or {}
        if not isinstance(obj, dict) or not all(isinstance(v, (int, float)) for v in obj.values()):
            raise _CellError(MEMORY_JSON_COLUMN, row.raw(MEMORY_JSON_COLUMN), "a JSON object of numbers")
        memory.update({str(k): v for k, v in obj.items()})
    for col in memory_cols:
        v = row.opt_float(col)
        if v is not None:
            memory[col] = v
    return IterationRecord(
        iteration=row.as_int("iteration"),
        mode=row.raw("mode"),
        drafter=row.raw("drafter"),
        controls=ControlValues(
            k=row.as_int("k"),
            temperature=row.as_float("temperature"),
            top_k=row.as_int("top_k"),
            top_p=row.as_float("top_p"),
            adaptive_k=row.as_bool("adaptive_k"),
        ),
        tokens=[],
        n_drafted=row.as_int("n_drafted"),
        n_accepted=row.as_int("n_accepted"),
        n_emitted=row.as_int("n_emitted"),
        draft_ms=row.as_float("draft_ms"),
        verify_ms=row.as_float("verify_ms"),
        rollback_ms=row.as_float("rollback_ms"),
        iteration_ms=row.as_float("iteration_ms"),
        context_len=row.as_int("context_len"),
        generated_len=row.as_int("generated_len"),
        t_start_s=row.as_float("t_start_s"),
        t_end_s=row.as_float("t_end_s"),
        finished=row.as_bool("finished"),
        finish_reason=row.raw("finish_reason"),
        plain_step_ms=row.opt_float("plain_step_ms"),
        alpha_window=row.opt_float("alpha_window"),
        alpha_cumulative=row.opt_float("alpha_cumulative"),
        measured_speedup=row.opt_float("measured_speedup"),
        measured_speedup_lo=row.opt_float("measured_speedup_lo"),
        measured_speedup_hi=row.opt_float("measured_speedup_hi"),
        predicted_speedup=row.opt_float("predicted_speedup"),
        cpu_ms=row.opt_float("cpu_ms"),
        preempted=_opt_int(row.opt_float("preempted")),
        memory=memory,
        flags=split_flags(row.raw("flags")),
    )


def _parse_token(row: _Row) -> tuple[int, TokenRecord]:
    status = row.raw("status")
    try:
        token_status = TokenStatus(status)
    except ValueError:
        raise _CellError("status", status, "a token status") from None
    top5_obj = row.as_json("top5", "a JSON list") or []
    try:
        top5 = [(int(i), float(p)) for i, p in top5_obj]
    except (TypeError, ValueError):
        raise _CellError("top5", row.raw("top5"), "a JSON list of [id, prob] pairs") from None
    try:
        text = unescape_text(row.raw("text"))
    except ValueError as e:
        raise _CellError("text", row.raw("text"), f"escaped text ({e})") from None
    token = TokenRecord(
        token_id=row.as_int("token_id"),
        text=text,
        status=token_status,
        position=row.as_int("position"),
        p=row.opt_float("p"),
        q=row.opt_float("q"),
        top5=top5,
    )
    return row.as_int("iteration"), token


def _parse_baseline(row: _Row, verify_cols: dict[str, int]) -> BaselineRecord:
    steps_cell = row.raw("step_ms")
    try:
        steps = [float(s) for s in steps_cell.split(";")] if steps_cell else []
    except ValueError:
        raise _CellError("step_ms", steps_cell, "numbers joined with ';'") from None
    by_len: dict[int, float] = {}
    if VERIFY_JSON_COLUMN in row.index:
        obj = row.as_json(VERIFY_JSON_COLUMN, "a JSON object") or {}
        try:
            by_len.update({int(n): float(ms) for n, ms in obj.items()})
        except (AttributeError, TypeError, ValueError):
            raise _CellError(VERIFY_JSON_COLUMN, row.raw(VERIFY_JSON_COLUMN), "a JSON object of ms") from None
    for col, n in verify_cols.items():
        v = row.opt_float(col)
        if v is not None:
            by_len[n] = v
    return BaselineRecord(
        after_iteration=row.as_int("after_iteration"),
        context_len=row.as_int("context_len"),
        step_ms=steps,
        verify_ms_by_len=by_len,
        t_s=row.as_float("t_s") if row.raw("t_s") else 0.0,
    )


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
    if not path.exists():
        warnings.append(f"{path.name}: missing; no session settings")
        return {}
    try:
        meta = json.loads(_read_text(path, "session file"))
    except ValueError as e:
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
    """Read a trace written by ``write_trace`` or an autosaved session folder.

    ``path`` may be the iteration CSV, a sibling file, or a session folder. Raises TraceFormatError for a
    corrupt or foreign file, TraceReadError when it cannot be read; a truncated last row (crash) is
    dropped and reported in ``warnings``. Missing tokens/baselines/session files are warnings too.
    """
    path = Path(path)
    paths = trace_paths(path / SESSION_FOLDER_TRACE if path.is_dir() else path)
    warnings: list[str] = []
    header, rows = _read_csv(paths.iterations, "trace", _ITERATION_REQUIRED, warnings)
    memory_cols = [c for c in header if c not in _ITERATION_FIXED]
    records: list[IterationRecord] = _parse_rows(
        paths.iterations, header, rows, lambda row: _parse_iteration(row, memory_cols), warnings
    )

    if paths.tokens.exists():
        header, rows = _read_csv(paths.tokens, "tokens file", _TOKEN_REQUIRED, warnings)
        tokens = _parse_rows(paths.tokens, header, rows, _parse_token, warnings)
        _attach_tokens(records, tokens, paths.tokens.name, warnings)
    else:
        warnings.append(f"{paths.tokens.name}: missing; the trace has no tokens")

    baselines: list[BaselineRecord] = []
    if paths.baselines.exists():
        header, rows = _read_csv(paths.baselines, "baselines file", _BASELINE_REQUIRED, warnings)
        verify_cols = {c: int(c[len(_VERIFY_PREFIX):]) for c in header
                       if c.startswith(_VERIFY_PREFIX) and c[len(_VERIFY_PREFIX):].isdigit()}
        baselines = _parse_rows(
            paths.baselines, header, rows, lambda row: _parse_baseline(row, verify_cols), warnings
        )

    meta = _read_sidecar(paths.session, warnings)
    session = meta.get("session", {})
    return LoadedTrace(
        records=records,
        baselines=baselines,
        session=session if isinstance(session, dict) else {},
        warnings=warnings,
        meta=meta,
        paths=paths,
    )
