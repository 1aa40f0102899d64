"""The GUI's copy of a run: its event stream with the measurement's snapshots, plus column arrays the plots
draw from (no Qt, no torch).

Events arrive in batches, each with the snapshot the measurement gave after it (the session's sink on the
worker thread, or a replay fed through the same owner); each batch extends preallocated numpy columns that grow
by doubling, so a redraw is one ``setData`` per curve over array views, never a rebuild from Python lists.
Every derived number (α, speed-ups, tokens/s, acceptance by position, best k, the verdict) is the snapshot's:
the plotted series are the trace schema's snapshot columns read off each iteration's snapshot, and
``estimate`` is the latest snapshot. Nothing is estimated here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specscope.core.attach.passes import NOTE_FLAGS
from specscope.core.events import ControlChange, Event, RunFinished, RunStarted
from specscope.core.measure.busy import BUSY_PREFIX
from specscope.core.measure.snapshot import Estimate
from specscope.core.memory.detector import step_read_rates
from specscope.core.records import BaselineRecord, DrillEvent, IterationRecord
from specscope.core.trace.schema import ITERATION_SCHEMA, IterationRow

Observed = tuple[Event, Estimate | None]


class GrowingArray:
    """A float64 array with amortised O(1) append; ``view()`` is the filled part (no copy)."""

    def __init__(self, capacity: int = 1024) -> None:
        self._data = np.full(capacity, np.nan)
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def append(self, value: float) -> None:
        if self._n == len(self._data):
            grown = np.full(2 * len(self._data), np.nan)
            grown[: self._n] = self._data
            self._data = grown
        self._data[self._n] = value
        self._n += 1

    def pad_to(self, n: int) -> None:
        """Append NaN until the length is n (a memory key that appears late)."""
        while self._n < n:
            self.append(math.nan)

    def view(self) -> np.ndarray:
        return self._data[: self._n]

    @property
    def nbytes(self) -> int:
        return int(self._data.nbytes)


# The trace schema's plotted columns, read from each record through the schema's getter, plus tokens per
# iteration: a column added to the schema with plotted=True gets its array here by itself.
_SCHEMA_COLUMNS = {c.name: c for c in ITERATION_SCHEMA if c.plotted}
COLUMNS = (*_SCHEMA_COLUMNS, "tokens_per_iteration")


@dataclass
class Marker:
    """A labelled line on the time plots: a control change, a drill, a requested baseline."""

    iteration: int
    label: str


PAGING = "paging"
BUSY = "busy"


def flag_kind(sentence: str) -> str:
    """BUSY for the busy detector's sentence (other programs took the CPU), PAGING for every other flag (the
    paging detector's: weights streamed, or a step several times its recent self)."""
    return BUSY if sentence.startswith(BUSY_PREFIX) else PAGING


@dataclass
class FlagBand:
    """Consecutive flagged iterations of one kind (paging or busy: never merged, a busy machine's bands must
    not swallow a drill's). Sentences carry numbers, so they differ per iteration; one band per run of flags
    keeps the plot to a few items however noisy the machine is."""

    start: int
    end: int  # inclusive
    sentence: str  # the first flag of the band
    count: int = 1  # flags in the band
    last_sentence: str = ""
    kind: str = PAGING


@dataclass
class DrillSpan:
    """The iterations a paging drill held layers away: from its start event to its end (``end`` None while
    it lasts; a run that ended mid-drill ends it at its last iteration)."""

    start: int
    end: int | None
    label: str


def _num(x: float | None) -> float:
    return math.nan if x is None else float(x)


@dataclass
class RunData:
    records: list[IterationRecord] = field(default_factory=list)
    baselines: list[BaselineRecord] = field(default_factory=list)  # only in traces from before baselines committed
    events: list[Event] = field(default_factory=list)  # the whole stream, in order (what export writes)
    markers: list[Marker] = field(default_factory=list)
    paging_bands: list[FlagBand] = field(default_factory=list)
    busy_bands: list[FlagBand] = field(default_factory=list)
    drills: list[DrillSpan] = field(default_factory=list)
    version: int = 0  # bumped on every change; widgets redraw only when it moved

    def __post_init__(self) -> None:
        self.columns: dict[str, GrowingArray] = {name: GrowingArray() for name in COLUMNS}
        self.memory: dict[str, GrowingArray] = {}
        self.estimate: Estimate | None = None  # the measurement's snapshot after the last event
        self.started: RunStarted | None = None
        self.finished: RunFinished | None = None

    # ---- ingest ----------------------------------------------------------------------------------------
    def extend(self, observed: list[Observed]) -> None:
        for event, snapshot in observed:
            self.events.append(event)
            if snapshot is not None:
                self.estimate = snapshot
            if isinstance(event, IterationRecord):
                self._add(event, snapshot)
            elif isinstance(event, ControlChange):
                if event.label:
                    self.markers.append(Marker(event.iteration, event.label))
            elif isinstance(event, DrillEvent):
                self.markers.append(Marker(event.iterations_done, event.label))
                self._drill(event)
            elif isinstance(event, BaselineRecord):
                self.baselines.append(event)
            elif isinstance(event, RunStarted):
                self.started = event
            elif isinstance(event, RunFinished):
                self.finished = event
        if observed:
            self.version += 1

    def _add(self, r: IterationRecord, snapshot: Estimate | None) -> None:
        self.records.append(r)
        n = len(self.records)
        row = IterationRow(r, snapshot)
        for name, column in _SCHEMA_COLUMNS.items():
            self.columns[name].append(_num(column.get(row)))
        self.columns["tokens_per_iteration"].append(r.n_emitted)
        for key, value in {**r.memory, **step_read_rates(r)}.items():
            arr = self.memory.get(key)
            if arr is None:
                arr = self.memory[key] = GrowingArray()
                arr.pad_to(n - 1)
            arr.append(float(value))
        for arr in self.memory.values():
            arr.pad_to(n)
        for sentence in r.flags:
            if sentence in NOTE_FLAGS:
                continue  # how an attached pass was read (kept in the trace), not a warning to shade and show
            kind = flag_kind(sentence)
            bands = self.paging_bands if kind == PAGING else self.busy_bands
            last = bands[-1] if bands else None
            if last is not None and r.iteration - last.end <= 1:
                last.end = r.iteration
                last.count += 1
                last.last_sentence = sentence
            else:
                bands.append(FlagBand(r.iteration, r.iteration, sentence, 1, sentence, kind))

    def _drill(self, event: DrillEvent) -> None:
        if event.error:
            return
        if event.kind == "start":
            self.drills.append(DrillSpan(event.iterations_done, None, event.label))
        elif self.drills and self.drills[-1].end is None:
            self.drills[-1].end = max(self.drills[-1].start, event.iterations_done - 1)

    @property
    def flag_bands(self) -> list[FlagBand]:
        """Every band, paging and busy, in order of their first iteration."""
        return sorted(self.paging_bands + self.busy_bands, key=lambda b: (b.start, b.kind))

    def latest_warning(self) -> FlagBand | None:
        """The band the run panel's warning names: the latest paging band while it is no older than the latest
        busy one (paging is what the user came to see), else the latest busy band."""
        paging = self.paging_bands[-1] if self.paging_bands else None
        busy = self.busy_bands[-1] if self.busy_bands else None
        if paging is None or (busy is not None and busy.start > paging.end):
            return busy
        return paging

    # ---- summaries --------------------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.records)

    def col(self, name: str) -> np.ndarray:
        return self.columns[name].view()

    def last(self, name: str) -> float | None:
        v = self.columns[name].view()
        if not len(v):
            return None
        x = float(v[-1])
        return None if math.isnan(x) else x

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.columns.values()) + sum(a.nbytes for a in self.memory.values())
