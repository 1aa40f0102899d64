"""Where a trace's files are and what reading one gives: the format's name, the five paths of one trace, the
loaded result. Shared by the writer (``core.trace.files``) and the legacy reader (``core.trace.legacy_csv``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specscope.core.events import Event, RunFinished, RunStarted
from specscope.core.records import BaselineRecord, IterationRecord
from specscope.core.trace.errors import (
    TraceReadError as TraceReadError,  # re-exported: callers catch it from here
)
from specscope.core.trace.event_log import EVENTS_SUFFIX

FORMAT_NAME = "specscope-trace"
FORMAT_VERSION = 1



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


