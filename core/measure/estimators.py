"""The running estimators the measurement keeps: verify cost by pass length (a monotone fit over recent real
passes) and acceptance by position (exponentially forgotten counts, shrunk toward the position before).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from statistics import median

from specscope.core.measure.metrics import (
    checked_proposals,
)
from specscope.core.measure.statistics import monotone_fit
from specscope.core.records import (
    JUDGING_MODES,
    IterationRecord,
)

PASSES_KEPT_PER_LENGTH = 16  # recent verify passes per pass length kept for the fit
POSITION_DECAY = 0.98  # per-iteration forgetting of per-position acceptance counts (~50 iterations)
POSITION_PRIOR_WEIGHT = 2.0  # pseudo-counts shrinking a position's acceptance toward the one before it


class VerifyCostFit:
    """Verify time by pass length, from every pass measured; monotone, robust, with no extrapolation."""

    def __init__(self, kept_per_length: int = PASSES_KEPT_PER_LENGTH):
        self.kept = kept_per_length
        self._passes: dict[int, deque[float]] = {}
        self._fitted: dict[int, float] | None = None
        self._lengths: list[int] = []  # the knots' lengths, sorted (with ``_fitted``)
        self.version = 0  # changes with every pass added: what a cache of anything read from the fit keys on

    def add(self, length: int, ms: float) -> None:
        if length < 1 or not math.isfinite(ms) or ms < 0:
            return
        self._passes.setdefault(length, deque(maxlen=self.kept)).append(ms)
        self._fitted = None
        self.version += 1

    def clear(self) -> None:
        self._passes.clear()
        self._fitted = None
        self.version += 1

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
        """A lower bound on a pass of ``length``: the fit at the longest length up to it measured at least
        ``min_passes`` times, else at the shortest length measured (the fit never falls with length). One
        slow pass, or none, at a length then never hides what a longer pass may cost."""
        pts = self.points
        if not pts:
            return None
        trusted = [n for n in pts if n <= length and self.passes(n) >= min_passes]
        return pts[max(trusted)] if trusted else pts[min(pts)]

    def __call__(self, length: int) -> float | None:
        """ms for a pass of this length; None past the longest measured length (or before any data)."""
        pts = self.points
        lengths = self._lengths
        if not pts or length > lengths[-1] or length < 1:
            return None
        if length in pts:
            return pts[length]
        if length < lengths[0]:
            return pts[lengths[0]]  # shorter than any measured pass: at most the shortest's cost
        i = bisect.bisect_right(lengths, length)
        hi, lo = lengths[i], lengths[i - 1]
        return pts[lo] + (pts[hi] - pts[lo]) * (length - lo) / (hi - lo)


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

    def add(self, record: IterationRecord) -> None:
        if record.mode not in JUDGING_MODES or record.n_drafted == 0:
            return
        if self.decay < 1.0:
            self.reached = [x * self.decay for x in self.reached]
            self.accepted = [x * self.decay for x in self.accepted]
        judged = checked_proposals(record)
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
