"""Trace files: a run's event stream written down and read back (export, replay, ``--trace``), with the flat
export for spreadsheets written from it.

One trace is five files next to each other (see docs/trace-format.md): ``<stem>.events.jsonl``, the stream
itself (``core.trace.event_log``: what replay reads, and what autosave writes); and, from it, ``<stem>.csv`` one row
per iteration with the measurement's snapshot after it, ``<stem>.tokens.csv`` one row per token,
``<stem>.baselines.csv`` (only for a stream converted from a trace written before baselines committed their
tokens: the only one holding baseline records) and ``<stem>.session.json`` (settings, models, format, column
units). ``write_trace`` writes them all at once, atomically; ``TraceAppender``
is the one CSV writer; ``read_trace`` reads the event log, or, for a trace written before it existed, the CSVs
(``core.trace.legacy_csv``). The columns are declared once in ``core.trace.schema``, the cells' formats in
``core.trace.cells``. ``chrome_trace.write_chrome_trace`` writes the same stream as Trace Event Format JSON.
"""


from __future__ import annotations

import csv
import json
import os
import secrets
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager, suppress
from datetime import datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from specscope import __version__
from specscope.core.events import Event, RunFinished
from specscope.core.records import BaselineRecord, IterationRecord
from specscope.core.trace.cells import spreadsheet_safe
from specscope.core.trace.errors import (
    TraceReadError as TraceReadError,  # re-exported: callers catch it from here
)
from specscope.core.trace.errors import (
    TraceWriteError,
)
from specscope.core.trace.event_log import Repairs, read_events, repaired, write_events
from specscope.core.trace.layout import (
    FORMAT_NAME,
    FORMAT_VERSION,
    SESSION_FOLDER_TRACE,
    LoadedTrace,
    TracePaths,
    trace_paths,
)
from specscope.core.trace.legacy_csv import _read_legacy, _read_sidecar
from specscope.core.trace.schema import (
    _ITERATION_FIXED,
    BASELINE_COLUMNS,
    BASELINE_SCHEMA,
    ITERATION_SCHEMA,
    TOKEN_COLUMNS,
    TOKEN_SCHEMA,
    VERIFY_LENGTHS,
    IterationRow,
    TokenRow,
    _memory_columns,
    column_specs,
)
from specscope.core.user_files import check_output_target

if TYPE_CHECKING:
    from specscope.core.measure.run import Run


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

    def __init__(self, iterations: IO[str], tokens: IO[str], baselines: IO[str] | None,
                 memory_keys: Sequence[str] | None):
        # ``baselines`` is None for a stream without baseline records (every trace since plain steps became
        # part of the stream): no header-only file is written for them.
        self._files = (iterations, tokens, baselines)
        self._writers = [None if f is None else new_csv_writer(f) for f in self._files]
        self._iteration_columns = (*ITERATION_SCHEMA, *_memory_columns(memory_keys))
        self._pending: tuple[list[list[str]], list[list[str]], list[list[str]]] = ([], [], [])
        # A memory key is a column name: checked where it enters (core.bounds), and made safe here again, so
        # that no header cell a spreadsheet opens can be a formula.
        self._write(0, [[spreadsheet_safe(c.name) for c in self._iteration_columns]])
        self._write(1, [list(TOKEN_COLUMNS)])
        if baselines is not None:
            self._write(2, [list(BASELINE_COLUMNS)])
        self.n_iterations = 0
        self.n_baselines = 0

    def append(self, item: IterationRecord | BaselineRecord, snapshot: Any = None) -> None:
        """A record's rows; ``snapshot`` is the measurement's after it (the derived columns), if any."""
        if isinstance(item, BaselineRecord):
            if self._files[2] is None:
                raise ValueError("a baseline record for a trace opened without a baselines file")
            if any(n not in VERIFY_LENGTHS for n in item.verify_ms_by_len):
                raise ValueError(f"verify pass lengths beyond {VERIFY_LENGTHS[-1]}: {sorted(item.verify_ms_by_len)}")
            self._pending[2].append([c.cell(item) for c in BASELINE_SCHEMA])
            self.n_baselines += 1
            return
        row = IterationRow(item, snapshot)
        self._pending[0].append([c.cell(row) for c in self._iteration_columns])
        self._pending[1].extend([c.cell(TokenRow(item.iteration, t)) for c in TOKEN_SCHEMA] for t in item.tokens)
        self.n_iterations += 1

    def _write(self, index: int, rows: list[list[str]]) -> None:
        writer = self._writers[index]
        assert writer is not None  # rows only ever go to a file that was opened
        writer.writerows(rows)

    def flush(self) -> None:
        for index in (1, 2, 0):
            rows = self._pending[index]
            if rows:
                self._write(index, rows)
                rows.clear()
            f = self._files[index]
            if f is not None:
                f.flush()


def write_trace(
    path: Path,
    source: Run | Iterable[Event],
    session: dict[str, Any] | None = None,
    warnings: list[str] | None = None,
) -> TracePaths:
    """Write a trace: the event stream (``<stem>.events.jsonl``, what replay reads) and, beside it, the flat
    export for spreadsheets — the iteration CSV at ``path`` with the measurement's numbers after each iteration
    (the last row: after the whole stream, the run's end included), its tokens, legacy baselines and session
    files. Given a ``Run`` the rows are the snapshots it holds, the ones the run showed live; given a bare
    stream, the snapshots of its replay.

    All files are written to temporary names first and renamed into place, so a failed export leaves no
    half-written trace. Raises TraceWriteError (path + OS reason); the events are not modified. A field the
    format cannot hold (out of its range, a memory key that is no column name) is clamped or left out, never
    the event: each such change is a sentence appended to ``warnings`` and kept in the session file.
    """
    from dataclasses import replace

    from specscope.core.measure.run import Run, replay  # the derived columns are the one owner's

    repairs = Repairs()
    given = source.observed() if isinstance(source, Run) else [(e, None) for e in source]
    kept: list[tuple[Event, Any]] = []
    for event, snapshot in given:
        event, notes = repaired(event)
        if isinstance(event, IterationRecord) and any(k in _ITERATION_FIXED for k in event.memory):
            clash = sorted(k for k in event.memory if k in _ITERATION_FIXED)
            notes = [*notes, f"iteration {event.iteration}: memory key(s) {', '.join(clash)} name trace columns; "
                             "left out"]
            event = replace(event, memory={k: v for k, v in event.memory.items() if k not in _ITERATION_FIXED})
        repairs.note(notes)
        kept.append((event, snapshot))
    if not isinstance(source, Run):  # a bare stream: the numbers its replay (as written) gives
        kept = replay(e for e, _ in kept).observed()
    events = [e for e, _ in kept]
    paths = trace_paths(Path(path))
    records = [e for e in events if isinstance(e, IterationRecord)]
    memory_keys = sorted({k for r in records for k in r.memory})
    finished = next((e for e in reversed(events) if isinstance(e, RunFinished)), None)
    n_baselines = sum(isinstance(e, BaselineRecord) for e in events)
    meta = sidecar(
        session, paths, memory_keys,
        counts={"events": len(events), "iterations": len(records), "tokens": sum(len(r.tokens) for r in records),
                "baselines": n_baselines},
        **({"repairs": repairs.sentences()} if repairs else {}),
    )
    if not n_baselines:  # only a stream converted from an old trace holds baseline records
        del meta["files"]["baselines"]
    targets = paths.all() if n_baselines else (paths.iterations, paths.tokens, paths.session, paths.events)
    with atomic_text_files(targets) as files:
        f_it, f_tok, f_base = files[0], files[1], files[2] if n_baselines else None
        f_meta, f_events = files[-2], files[-1]
        appender = TraceAppender(f_it, f_tok, f_base, memory_keys)
        snapshot = None
        for e, snapshot in kept:
            if isinstance(e, IterationRecord) and e is not records[-1]:
                appender.append(e, snapshot)
            elif isinstance(e, BaselineRecord):
                appender.append(e)
        if records:
            last = records[-1]
            if finished is not None and not last.finish_reason:
                last = replace(last, finish_reason=finished.reason)  # the export's last row says how it ended
            # with the snapshot after the whole stream (the run's end recomputes the measured speed-up): the
            # numbers the window and the CLI end on
            appender.append(last, snapshot)
        appender.flush()
        f_meta.write(sidecar_text(meta))
        write_events(f_events, events)
    if not n_baselines and paths.baselines.is_file():
        # an earlier export's baselines under this name would sit beside a trace they do not belong to
        with suppress(OSError):
            paths.baselines.unlink()
    if warnings is not None:
        warnings.extend(repairs.sentences())
    return paths


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


