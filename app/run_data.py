"""The GUI's copy of a run: records plus column arrays the plots draw from (no Qt, no torch).

Records arrive in batches (a timer drains the worker's buffer); each batch extends preallocated numpy
columns that grow by doubling, so a redraw is one ``setData`` per curve over array views, never a rebuild
from Python lists. Every derived number (α, speed-ups, tokens/s, acceptance by position, best k) is the
measurement owner's (``core.measurement``): it arrives on the records (their fields, and ``record.estimate``);
a replayed trace is passed through ``core.measurement.replay`` before it gets here. Nothing is estimated here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from specscope.core.attach.passes import NOTE_FLAGS
from specscope.core.measurement import Estimate
from specscope.core.records import BaselineRecord, ControlValues, DrillEvent, IterationRecord
from specscope.core.trace import ITERATION_SCHEMA


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
class ControlChange:
    iteration: int
    label: str


@dataclass
class FlagBand:
    """Consecutive flagged iterations. Sentences carry numbers, so they differ per iteration; one band per
    run of flags keeps the plot to a few items however noisy the machine is."""

    start: int
    end: int  # inclusive
    sentence: str  # the first flag of the band
    count: int = 1  # flags in the band
    last_sentence: str = ""


def describe_change(old: ControlValues, new: ControlValues) -> str:
    """A short label for a control change, e.g. 'k 4→8, T 0→0.7'."""
    parts: list[str] = []
    if old.k != new.k and not (old.adaptive_k and new.adaptive_k):
        parts.append(f"k {old.k}→{new.k}")
    if old.temperature != new.temperature:
        parts.append(f"T {old.temperature:g}→{new.temperature:g}")
    if old.top_k != new.top_k:
        parts.append(f"top-k {old.top_k}→{new.top_k}")
    if old.top_p != new.top_p:
        parts.append(f"top-p {old.top_p:g}→{new.top_p:g}")
    if old.adaptive_k != new.adaptive_k:
        parts.append("adaptive k on" if new.adaptive_k else "adaptive k off")
    return ", ".join(parts)


DRILL_MODELS = ("draft", "target")


def describe_drill(before: dict[str, float], memory: dict[str, float]) -> str:
    """A marker label when a paging drill started or ended at this record ('' otherwise)."""
    parts: list[str] = []
    for model in DRILL_MODELS:
        old, new = before.get(model, 0.0), memory.get(f"drill_{model}_layers_count", 0.0)
        if new and not old:
            parts.append(f"drill: {model} {new:.0f} layers off its device")
        elif old and not new:
            parts.append(f"drill end: {model} layers back")
    return ", ".join(parts)


def _num(x: float | None) -> float:
    return math.nan if x is None else float(x)


@dataclass
class RunData:
    records: list[IterationRecord] = field(default_factory=list)
    baselines: list[BaselineRecord] = field(default_factory=list)
    control_changes: list[ControlChange] = field(default_factory=list)
    flag_bands: list[FlagBand] = field(default_factory=list)
    version: int = 0  # bumped on every change; widgets redraw only when it moved

    def __post_init__(self) -> None:
        self.columns: dict[str, GrowingArray] = {name: GrowingArray() for name in COLUMNS}
        self.memory: dict[str, GrowingArray] = {}
        self._last_controls: ControlValues | None = None
        self._last_drill: dict[str, float] = {}
        self.estimate: Estimate | None = None  # the measurement's, after the last record

    # ---- ingest ----------------------------------------------------------------------------------------
    def extend(self, events: list[IterationRecord | BaselineRecord | DrillEvent]) -> None:
        for e in events:
            if isinstance(e, BaselineRecord):
                self.baselines.append(e)
                if e.estimate is not None:  # a baseline closing a block updates the measured speed-up
                    self.estimate = e.estimate
            elif isinstance(e, DrillEvent):
                continue  # marked from the records' drill columns below, so replayed traces show it too
            else:
                self._add(e)
        if events:
            self.version += 1

    def _add(self, r: IterationRecord) -> None:
        self.records.append(r)
        n = len(self.records)
        if self._last_controls is not None and r.controls != self._last_controls:
            label = describe_change(self._last_controls, r.controls)
            if label:
                self.control_changes.append(ControlChange(r.iteration, label))
        self._last_controls = r.controls
        drill = describe_drill(self._last_drill, r.memory)
        if drill:
            self.control_changes.append(ControlChange(r.iteration, drill))
        self._last_drill = {m: r.memory.get(f"drill_{m}_layers_count", 0.0) for m in DRILL_MODELS}
        if r.estimate is not None:
            self.estimate = r.estimate
        for name, column in _SCHEMA_COLUMNS.items():
            self.columns[name].append(_num(column.get(r)))
        self.columns["tokens_per_iteration"].append(r.n_emitted)
        for key, value in r.memory.items():
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
            last = self.flag_bands[-1] if self.flag_bands else None
            if last is not None and r.iteration - last.end <= 1:
                last.end = r.iteration
                last.count += 1
                last.last_sentence = sentence
            else:
                self.flag_bands.append(FlagBand(r.iteration, r.iteration, sentence, 1, sentence))

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
