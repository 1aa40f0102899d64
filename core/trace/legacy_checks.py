"""What the reader of a trace from before the event log checks beyond each cell's type: every field's range,
and the sequence of rows (repeated, reordered or missing iterations, repeated token and baseline rows).

Such a trace is a set of CSVs a user may have edited in a spreadsheet; what the reader builds from it is
replayed through the measurement and may be exported as an event log. So every event it builds must be one the
event log can hold: ``check_event`` runs it through the event log's own decoder (``core.trace.event_log.decode``), the
one owner of each field's range (k from 0 to 16, a temperature from 0 to 10^6, top-p in (0, 1], at most 80
proposals drafted, so that a replay cannot grow without bound). What the rows say of the run's sequence is
repaired where it can be — a repeated row dropped, the count said — and every repair is a warning naming the
file; a value out of range is refused with one sentence (``ValueError`` here, which the reader turns into a
``TraceFormatError`` with the file and line).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from enum import Enum
from typing import Any, TypeVar

from specscope.core.events import Event, RunStarted
from specscope.core.records import BaselineRecord, IterationRecord
from specscope.core.trace.event_log import decode

Row = TypeVar("Row")


# The event types the legacy reader builds, by the name the event log gives them.
_EVENT_TYPES: dict[type, str] = {IterationRecord: "iteration", BaselineRecord: "baseline", RunStarted: "run_started"}


def _plain(obj: Any) -> Any:
    """``obj`` as the event log writes it, before the JSON text: dataclasses as dicts, enums as their values,
    NaN and infinities as None (``event_log.encode`` without ``asdict``'s deep copies, which made a check cost
    more than the parse of a row)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, (str, int, bool)) or obj is None:
        return obj.value if isinstance(obj, Enum) else obj
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: _plain(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    return obj.value if isinstance(obj, Enum) else obj


def check_event(event: Event) -> None:
    """ValueError naming the field unless the event log can hold ``event`` as it is: decoded by the event log's
    own decoder as it would read the event's line (non-finite numbers are refused at the cell, before this)."""
    decode({"type": _EVENT_TYPES[type(event)], **_plain(event)})


def drop_repeated_rows(rows: Sequence[tuple[int, list[str]]]) -> tuple[list[tuple[int, list[str]]], int]:
    """The rows with any row identical to an earlier one left out (a row pasted twice), and how many were."""
    seen: set[tuple[str, ...]] = set()
    kept: list[tuple[int, list[str]]] = []
    for line, cells in rows:
        key = tuple(cells)
        if key in seen:
            continue
        seen.add(key)
        kept.append((line, cells))
    return kept, len(rows) - len(kept)


def in_sequence(records: Sequence[IterationRecord], lines: Sequence[Row]) -> tuple[list[IterationRecord],
                                                                                  list[Row], int]:
    """The records whose iteration number follows the one kept before it (as a run numbers them: 0, 1, 2 ...),
    their lines, and how many were dropped (a row repeated, or moved back by an edit)."""
    kept: list[IterationRecord] = []
    kept_lines: list[Row] = []
    last = -1
    for record, line in zip(records, lines, strict=True):
        if record.iteration <= last:
            continue
        last = record.iteration
        kept.append(record)
        kept_lines.append(line)
    return kept, kept_lines, len(records) - len(kept)


def missing_iterations(records: Sequence[IterationRecord]) -> tuple[int, int | None]:
    """How many iteration numbers are absent between 0 and the last record's (a run numbers every iteration),
    and the first absent one (None when none is)."""
    expected = 0
    missing = 0
    first: int | None = None
    for r in records:
        if r.iteration > expected:
            missing += r.iteration - expected
            first = expected if first is None else first
        expected = r.iteration + 1
    return missing, first


def sequence_warnings(name: str, n_rows: int, kept: Sequence[IterationRecord], dropped: int) -> list[str]:
    """What was repaired in the iteration file ``name`` and what is missing from it, in words."""
    out: list[str] = []
    if dropped:
        out.append(f"{name}: {dropped:,} of {n_rows:,} iteration rows repeated an earlier iteration number or "
                   f"went back to one, and were dropped ({len(kept):,} iterations kept)")
    missing, first = missing_iterations(kept)
    if missing:
        out.append(f"{name}: {missing:,} iteration{'s' * (missing != 1)} missing from the numbering (the "
                   f"first is iteration {first}): rows were deleted, and the replay shows the run without them")
    return out


def count_warnings(meta: dict[str, Any], session_name: str, names: dict[str, str],
                   held: dict[str, int]) -> list[str]:
    """Where the session file's counts (``counts`` as an export writes them) differ from what the files hold.
    ``names`` maps a count ("iterations", "baselines") to the file that holds them, ``held`` to how many it
    does after the repairs."""
    counts = meta.get("counts")
    if not isinstance(counts, dict):
        return []
    out = []
    for what, n in held.items():
        said = counts.get(what)
        if isinstance(said, int) and not isinstance(said, bool) and said != n:
            out.append(f"{session_name} says the run had {said:,} {what}; {names[what]} holds {n:,}")
    return out
