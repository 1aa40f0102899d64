"""The running estimators the measurement keeps: verify cost by pass length (a monotone fit over recent real
passes, and the same passes brought to the machine's speed now) and acceptance by position (exponentially
forgotten counts, shrunk toward the position before).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from statistics import median

import numpy as np

from specscope.core.measure.metrics import (
    checked_proposals,
)
from specscope.core.measure.snapshot import PositionStat, interpolate, verify_floor
from specscope.core.measure.statistics import monotone_fit
from specscope.core.records import (
    JUDGING_MODES,
    IterationRecord,
)

PASSES_KEPT_PER_LENGTH = 16  # recent verify passes per pass length kept for the fit
POSITION_DECAY = 0.98  # per-iteration forgetting of per-position acceptance counts (~50 iterations)
POSITION_PRIOR_WEIGHT = 2.0  # pseudo-counts shrinking a position's acceptance toward the one before it
LEVEL_PASSES = 4  # passes on each side of a position that make the machine's speed there (as speedup.py)
LEVEL_NOW_PASSES = 8  # the latest passes that make the machine's speed now
STALE_DRIFT = 0.15  # a cost last timed when the machine ran this much faster or slower than now is stale
FRAME_REFRESH = 32  # the frame is recomputed every max(1, passes // FRAME_REFRESH) passes, and at every new
# plain step or pass length: one computation reads every pass of the run (~0.1 ms at 500 passes)


@dataclass(frozen=True)
class TargetFrame:
    """The target's pass costs at the machine's speed now: what the cost model prices every k from.

    ``plain_ms`` the plain step, ``knots`` the verify fit by pass length (non-decreasing), ``passes`` how many
    passes of each length the knots keep, ``stale`` the costs last timed while the machine ran more than
    ``STALE_DRIFT`` faster or slower than now (their price leans on the passes that carried them here), and
    ``speed_change`` how much longer a pass takes now than when the last plain step was timed (1 = the same)."""

    plain_ms: float | None
    knots: dict[int, float]
    passes: dict[int, int]
    stale: tuple[str, ...] = ()
    speed_change: float = 1.0


class VerifyCostFit:
    """Verify time by pass length, from every pass measured; monotone, robust, with no extrapolation."""

    def __init__(self, kept_per_length: int = PASSES_KEPT_PER_LENGTH):
        self.kept = kept_per_length
        self._passes: dict[int, deque[float]] = {}
        self._fitted: dict[int, float] | None = None
        self._lengths: list[int] = []  # the knots' lengths, sorted (with ``_fitted``)
        self.version = 0  # changes with every pass added: what a cache of anything read from the fit keys on
        # every pass of the run in order (position, length, log ms): the machine's speed at each moment
        self._history = np.empty((64, 3))
        self._n = 0
        self._frame: TargetFrame | None = None
        self._frame_at: tuple[int, int, int] = (-1, -1, -1)  # passes, plain steps, lengths when computed

    def add(self, length: int, ms: float, position: int | None = None) -> None:
        """One target pass of ``length`` tokens that took ``ms``, at ``position`` in the run (records so far;
        None: right after the last pass)."""
        if length < 1 or not math.isfinite(ms) or ms <= 0:
            return
        self._passes.setdefault(length, deque(maxlen=self.kept)).append(ms)
        self._fitted = None
        self.version += 1
        if self._n == len(self._history):
            self._history = np.concatenate((self._history, np.empty_like(self._history)))
        if position is None:
            position = int(self._history[self._n - 1, 0]) + 1 if self._n else 0
        self._history[self._n] = (position, length, math.log(ms))
        self._n += 1

    def clear(self) -> None:
        self._passes.clear()
        self._fitted = None
        self.version += 1
        self._n = 0
        self._frame = None
        self._frame_at = (-1, -1, -1)

    def frame(self) -> TargetFrame:
        """The plain step and the verify knots at the machine's speed now, each from passes timed adjacent in
        time to the passes that carry it to now.

        The drift tracker is the measured speed-up's (``core.measure.speedup``): each pass of a length timed at
        least twice, relative to the median of its length over the run, and the machine's *level* at a
        position is the mean of the ``LEVEL_PASSES`` such passes before and after it. A pass's cost in level
        units is its log time less the level where it ran; the cost now is the median of a length's recent
        ones (the kept ``kept`` passes) plus the level over the latest ``LEVEL_NOW_PASSES`` passes. A plain
        step timed early under load and verify passes timed later on a quiet machine are so priced at the
        same moment (the speed-up's ratio), as are a plain step timed before a paging drill and the passes
        timed during it. Recomputed at each new plain step or pass length, else every
        max(1, passes // ``FRAME_REFRESH``) passes."""
        lengths = len(self._passes)
        plain = len(self._passes.get(1, ()))
        done, plain_done, lengths_done = self._frame_at
        if (self._frame is not None and plain == plain_done and lengths == lengths_done
                and self._n - done < max(1, self._n // FRAME_REFRESH)):
            return self._frame
        self._frame = self._compute_frame()
        self._frame_at = (self._n, plain, lengths)
        return self._frame

    def _compute_frame(self) -> TargetFrame:
        rows = self._history[: self._n]
        if not len(rows):
            return TargetFrame(None, {}, {})
        pos, lengths, logs = rows[:, 0], rows[:, 1].astype(int), rows[:, 2]
        rel = np.zeros(len(rows))
        track = np.zeros(len(rows), dtype=bool)
        timed_twice = [n for n in np.unique(lengths) if (lengths == n).sum() >= 2]
        if any(n > 1 for n in timed_twice):
            # the plain steps are what the passes carry, not part of the carrying: two plain steps timed at one
            # speed read "typical" against each other and would pull the level around them toward it
            timed_twice = [n for n in timed_twice if n > 1]
        for n in timed_twice:
            at = lengths == n
            track |= at
            rel[at] = logs[at] - np.median(logs[at])
        t_pos, t_rel = pos[track], rel[track]
        if len(t_pos) >= 2:
            cum = np.concatenate(([0.0], np.cumsum(t_rel)))
            j = np.searchsorted(t_pos, pos, side="left")
            lo, hi = np.maximum(j - LEVEL_PASSES, 0), np.minimum(j + LEVEL_PASSES, len(t_pos))
            level = (cum[hi] - cum[lo]) / np.maximum(hi - lo, 1)
            now = float(t_rel[-LEVEL_NOW_PASSES:].mean())
        else:  # nothing tracks the drift yet: every pass as timed
            level, now = np.zeros(len(rows)), 0.0
        units = logs - level
        by_length: dict[int, float] = {}
        counts: dict[int, float] = {}
        stale: list[str] = []
        plain_ms: float | None = None
        # a cost timed among the passes that make "now" is current whatever the noise between two means says
        recent_from = float(t_pos[-LEVEL_NOW_PASSES:][0]) if len(t_pos) else math.inf
        for n in sorted(set(lengths.tolist())):
            idx = np.flatnonzero(lengths == n)[-self.kept:]
            cost = math.exp(float(np.median(units[idx])) + now)
            if pos[idx[-1]] < recent_from and abs(now - float(level[idx[-1]])) > math.log1p(STALE_DRIFT):
                stale.append("plain step" if n == 1 else f"verify pass of {n}")
            if n == 1:
                plain_ms = cost  # the plain step as timed, not pooled with cheaper short passes
            by_length[n] = cost
            counts[n] = float(len(idx))
        knots = monotone_fit(by_length, counts)
        plain_at = np.flatnonzero(lengths == 1)
        change = math.exp(now - float(level[plain_at[-1]])) if len(plain_at) else 1.0
        return TargetFrame(plain_ms, knots, {n: int(c) for n, c in counts.items()}, tuple(stale), change)

    @property
    def points(self) -> dict[int, float]:
        """Fitted knots: pass length -> ms (non-decreasing)."""
        if self._fitted is None:
            medians = {n: float(median(v)) for n, v in self._passes.items() if v}
            counts = {n: float(len(v)) for n, v in self._passes.items() if v}
            self._fitted = monotone_fit(medians, counts) if medians else {}
            self._lengths = sorted(self._fitted)
        return self._fitted

    @property
    def max_length(self) -> int:
        self.points  # noqa: B018 (fits the knots when a pass came since)
        return self._lengths[-1] if self._lengths else 0

    def passes(self, length: int) -> int:
        """How many passes of this length the fit keeps."""
        return len(self._passes.get(length, ()))

    def median(self, length: int) -> float | None:
        """The median of the kept passes of this length as timed, before the fit pools it with its neighbours (a
        plain step can cost more than a short pass: the monotone fit's length-1 knot then says less)."""
        kept = self._passes.get(length)
        return float(median(kept)) if kept else None

    def floor(self, length: int, min_passes: int) -> float | None:
        """A lower bound on a pass of ``length`` (``snapshot.verify_floor`` over the knots as timed)."""
        return verify_floor(self.points, {n: len(v) for n, v in self._passes.items()}, length, min_passes)

    def __call__(self, length: int) -> float | None:
        """ms for a pass of this length; None past the longest measured length (or before any data)."""
        return interpolate(self.points, length)


class PositionCounts:
    """Per-position acceptance counts with exponential forgetting.

    Position i was *reached* when proposals 0..i-1 were accepted and i was drafted (so it was judged), and
    *accepted* when i was accepted too. Counting only iterations that reached a position keeps the estimate
    free of the k each iteration used.
    """

    def __init__(self, decay: float = 1.0):
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self.reached: list[float] = []
        self.accepted: list[float] = []
        self.totals: list[list[int]] = []  # [reached, accepted, drafted] per position, never forgotten

    def add(self, record: IterationRecord) -> None:
        if record.mode not in JUDGING_MODES or record.n_drafted == 0:
            return
        judged = checked_proposals(record)
        while len(self.totals) < record.n_drafted:
            self.totals.append([0, 0, 0])
        for i in range(record.n_drafted):
            self.totals[i][0] += i < judged
            self.totals[i][1] += i < record.n_accepted
            self.totals[i][2] += 1
        if self.decay < 1.0:
            self.reached = [x * self.decay for x in self.reached]
            self.accepted = [x * self.decay for x in self.accepted]
        while len(self.reached) < judged:
            self.reached.append(0.0)
            self.accepted.append(0.0)
        for i in range(judged):
            self.reached[i] += 1.0
            if i < record.n_accepted:
                self.accepted[i] += 1.0

    @property
    def judged(self) -> float:
        return sum(self.reached)

    def stats(self) -> tuple[PositionStat, ...]:
        """Each position's counts as the snapshot shows them: the whole count and the slowly forgotten one."""
        return tuple(PositionStat(i, t[0], t[1], t[2], self.reached[i] if i < len(self.reached) else 0.0)
                     for i, t in enumerate(self.totals))

    @property
    def pooled(self) -> float | None:
        """Accepted over judged, all positions together (the iid α)."""
        judged = sum(self.reached)
        return sum(self.accepted) / judged if judged > 0 else None

    def depth(self, min_trials: float) -> int:
        """How many leading positions were reached at least ``min_trials`` times."""
        d = 0
        while d < len(self.reached) and self.reached[d] >= min_trials:
            d += 1
        return d

    def conditional(self, depth: int, prior: float, prior_weight: float = POSITION_PRIOR_WEIGHT) -> list[float]:
        """P(accept i | 0..i-1 accepted) for i < depth, each shrunk toward the position before it
        (position 0 toward ``prior``); a position never reached takes the value of the one before."""
        out: list[float] = []
        previous = prior
        for i in range(depth):
            reached = self.reached[i] if i < len(self.reached) else 0.0
            accepted = self.accepted[i] if i < len(self.accepted) else 0.0
            c = (accepted + prior_weight * previous) / (reached + prior_weight)
            out.append(c)
            previous = c
        return out


class KeyedPositionCounts:
    """Per-position acceptance counts split by a key known when the proposals were made (prompt lookup: the
    size of the n-gram that matched), with the counts of all keys together as each key's prior.

    A key seen rarely borrows from the pooled counts at the same position, so one early rejection after a
    1-gram match does not condemn every later 1-gram match, and positions reached only under other keys are
    still estimated.
    """

    def __init__(self, decay: float = POSITION_DECAY, prior_weight: float = POSITION_PRIOR_WEIGHT):
        self.decay = decay
        self.prior_weight = prior_weight
        self.pooled = PositionCounts(decay)
        self.by_key: dict[int, PositionCounts] = {}

    def add(self, key: int, record: IterationRecord) -> None:
        self.pooled.add(record)
        self.by_key.setdefault(key, PositionCounts(self.decay)).add(record)

    def conditional(self, key: int, depth: int, prior: float) -> list[float]:
        """P(accept i | 0..i-1 accepted, key) for i < depth: the key's counts shrunk toward the pooled
        estimate at the same position (itself shrunk toward the position before it, position 0 toward
        ``prior``)."""
        pooled = self.pooled.conditional(depth, self.pooled.pooled if self.pooled.pooled is not None else prior)
        own = self.by_key.get(key)
        if own is None:
            return pooled
        out: list[float] = []
        for i in range(depth):
            reached = own.reached[i] if i < len(own.reached) else 0.0
            accepted = own.accepted[i] if i < len(own.accepted) else 0.0
            out.append((accepted + self.prior_weight * pooled[i]) / (reached + self.prior_weight))
        return out
