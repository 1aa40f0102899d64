"""The GUI's copy of a run: records plus column arrays the plots draw from (no Qt, no torch).

Records arrive in batches (a timer drains the worker's buffer); each batch extends preallocated numpy
columns that grow by doubling, so a redraw is one ``setData`` per curve over array views, never a rebuild
from Python lists. Values the measurement layer put on the record are used as they are; when a record lacks
them (a replayed trace from an older version, or no measurement layer) a simple running value is derived
from the record's own counts so the plots still show something truthful.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from specscope.core.controls import K_MAX
from specscope.core.live import LiveMeasurement
from specscope.core.metrics import checked_proposals
from specscope.core.records import BaselineRecord, ControlValues, DrillEvent, IterationRecord

FALLBACK_WINDOW = 32  # iterations, for windowed α / speed-up when the record carries none


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


COLUMNS = (
    "iteration", "k", "draft_ms", "verify_ms", "rollback_ms", "iteration_ms", "plain_step_ms",
    "alpha_window", "alpha_cumulative", "tokens_per_iteration", "measured_speedup", "predicted_speedup",
)


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
        self.position_reached = np.zeros(K_MAX + 1, dtype=np.int64)
        self.position_accepted = np.zeros(K_MAX + 1, dtype=np.int64)
        self.n_drafted = 0
        self.n_checked = 0
        self.n_accepted = 0
        self.n_emitted = 0
        self.decode_ms = 0.0
        self._window: deque[tuple[int, int, int, float]] = deque(maxlen=FALLBACK_WINDOW)
        self._last_controls: ControlValues | None = None
        self._last_drill: dict[str, float] = {}
        self._last_plain_ms: float | None = None
        # The GUI's own window of estimates (costs, alpha) for the "which k" curve and the status verdict:
        # the same class the session uses, so live runs and replayed traces read alike.
        self.live = LiveMeasurement(window=FALLBACK_WINDOW)

    # ---- ingest ----------------------------------------------------------------------------------------
    def extend(self, events: list[IterationRecord | BaselineRecord | DrillEvent]) -> None:
        for e in events:
            if isinstance(e, BaselineRecord):
                self.baselines.append(e)
                self._last_plain_ms = e.median_step_ms
                self.live.observe_baseline(e)
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
        self.live.observe(r)
        self.n_drafted += r.n_drafted
        self.n_checked += checked_proposals(r)
        self.n_accepted += r.n_accepted
        self.n_emitted += r.n_emitted
        self.decode_ms += r.iteration_ms
        for i in range(min(r.n_drafted, K_MAX + 1)):
            if i > r.n_accepted:
                break
            self.position_reached[i] += 1
            if i < r.n_accepted:
                self.position_accepted[i] += 1
        self._window.append((checked_proposals(r), r.n_accepted, r.n_emitted, r.iteration_ms))

        plain_ms = r.plain_step_ms if r.plain_step_ms is not None else self._last_plain_ms
        alpha_w = r.alpha_window if r.alpha_window is not None else self._window_alpha()
        alpha_c = r.alpha_cumulative
        if alpha_c is None and self.n_checked:
            alpha_c = self.n_accepted / self.n_checked
        speedup = r.measured_speedup
        if speedup is None and plain_ms:
            speedup = self._window_speedup(plain_ms)
        c = self.columns
        c["iteration"].append(r.iteration)
        c["k"].append(r.controls.k)
        c["draft_ms"].append(r.draft_ms)
        c["verify_ms"].append(r.verify_ms)
        c["rollback_ms"].append(r.rollback_ms)
        c["iteration_ms"].append(r.iteration_ms)
        c["plain_step_ms"].append(_num(plain_ms))
        c["alpha_window"].append(_num(alpha_w))
        c["alpha_cumulative"].append(_num(alpha_c))
        c["tokens_per_iteration"].append(r.n_emitted)
        c["measured_speedup"].append(_num(speedup))
        c["predicted_speedup"].append(_num(r.predicted_speedup))
        for key, value in r.memory.items():
            arr = self.memory.get(key)
            if arr is None:
                arr = self.memory[key] = GrowingArray()
                arr.pad_to(n - 1)
            arr.append(float(value))
        for arr in self.memory.values():
            arr.pad_to(n)
        for sentence in r.flags:
            last = self.flag_bands[-1] if self.flag_bands else None
            if last is not None and r.iteration - last.end <= 1:
                last.end = r.iteration
                last.count += 1
                last.last_sentence = sentence
            else:
                self.flag_bands.append(FlagBand(r.iteration, r.iteration, sentence, 1, sentence))

    def _window_alpha(self) -> float | None:
        checked = sum(w[0] for w in self._window)
        return sum(w[1] for w in self._window) / checked if checked else None

    def _window_speedup(self, plain_ms: float) -> float | None:
        ms = sum(w[3] for w in self._window)
        emitted = sum(w[2] for w in self._window)
        return (emitted / ms) * plain_ms if ms > 0 else None

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
    def tokens_per_second(self) -> float | None:
        return self.n_emitted / (self.decode_ms / 1000.0) if self.decode_ms > 0 else None

    @property
    def tokens_per_iteration(self) -> float | None:
        return self.n_emitted / len(self.records) if self.records else None

    @property
    def alpha(self) -> float | None:
        """Cumulative α as the cost model defines it: accepted / checked proposals."""
        return self.n_accepted / self.n_checked if self.n_checked else None

    def per_position_acceptance(self) -> np.ndarray:
        """P(accept at position i | position i was reached), NaN where never reached; trimmed to used k."""
        used = int(np.max(np.nonzero(self.position_reached)[0]) + 1) if self.position_reached.any() else 0
        reached = self.position_reached[:used].astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(reached > 0, self.position_accepted[:used] / reached, np.nan)

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in self.columns.values()) + sum(a.nbytes for a in self.memory.values())
