"""The one owner of every derived number: α, acceptance length and by position, tokens/s, step costs, the
verify-cost fit, measured speed-up with its interval, predicted speed-up, the speed-up-vs-k curve, best k, the
verdict and what measuring costs the run.

It is fed the run's event stream (``core.events``) through :meth:`Measurement.feed`, by the session live and by
replay for a trace, and hands out one immutable snapshot (``core.measure.snapshot.Estimate``) after each event. Every
consumer — the CLI's text and ``--json``, the flat CSV export, the app's status bar, panels and plots, adaptive
k and ``specscope bench`` — displays a snapshot; none computes its own.

Definitions (docs/cost-model.md has the derivations):
- α (the headline) = accepted / judged proposals over the whole run, where judged = accepted + the first
  rejected one (``metrics.checked_proposals``): the maximum-likelihood per-proposal acceptance under iid
  acceptance; it does not shrink with k. The recent-window α has its own name (``alpha_window``), and each
  control segment its own α (``Segment.alpha``).
- A control change (``events.ControlChange``) starts a new segment; nothing resets. The headline measured
  speed-up is the current segment's once it has its own, else the whole run's, and says which.
- Verify cost is one fit over pass length, from every real pass: the loop's verify passes (length k+1) and
  plain steps (length 1). Per length it keeps the most recent passes (the context grows, so old passes cost
  less), takes their median, and makes the medians non-decreasing in length (pool-adjacent-violators weighted
  by counts). Between measured lengths it interpolates; past the longest measured length it says nothing: the
  curve has a gap there, with the reason (the session explores such lengths with real iterations).
- The plain step of the cost model is the fit at length 1, so a predicted speed-up can never exceed
  E(k) <= k+1: every iteration costs at least one pass of length k+1 >= one plain step.
- Measured speed-up is a paired ratio over blocks: the speculative iterations between two runs of plain
  iterations (baselines, which commit their tokens) form a block; its ratio is the block's tokens/ms times
  the bracketing plain steps' median. The estimate is the Hodges-Lehmann centre of the blocks' log ratios
  (one outlying block barely moves it), with its distribution-free interval. Fewer than ``MIN_BLOCKS``
  blocks give no number, only a reason. A block with an iteration flagged "machine busy" is left out once
  ``MIN_BLOCKS`` quiet blocks exist (a stall of another program's making is not the speed-up).
- A verdict is stated only when the data can carry it: a quiet majority of blocks, an interval no wider
  than ``VERDICT_MAX_SPREAD``, and not while adaptive k has chosen not to speculate (then it speaks of the
  controller's choice).
"""

from __future__ import annotations

import math
import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median
from typing import Any

import numpy as np

from specscope.core.controls import K_MAX
from specscope.core.drafter_catalogue import draft_cost_per_token
from specscope.core.events import ControlChange, Event, RunFinished, RunStarted
from specscope.core.measure import costmodel
from specscope.core.measure.busy import BUSY_PREFIX
from specscope.core.measure.metrics import (
    acceptance_rate,
    accepted_histogram,
    checked_proposals,
    conditional_position_acceptance,
    inter_token_intervals_ms,
    per_position_acceptance,
    percentile,
    time_to_first_token_ms,
)
from specscope.core.measure.snapshot import (
    CONFIDENCE,
    NOT_ENOUGH,
    VERDICT_MAX_SPREAD,
    Costs,
    CurvePoint,
    Estimate,
    MeasurementCost,
    PositionStat,
    RatioInterval,
    Segment,
)
from specscope.core.records import (
    ATTACHED_MODE,
    JUDGING_MODES,
    PLAIN_MODE,
    SPECULATIVE_MODE,
    BaselineRecord,
    ControlValues,
    DrillEvent,
    IterationRecord,
)

__all__ = [
    "CONFIDENCE", "NOT_ENOUGH", "Costs", "CurvePoint", "Estimate", "KeyedPositionCounts", "Measurement",
    "MeasurementCost", "PositionCounts", "PositionStat", "RatioInterval", "Segment", "VerifyCostFit",
    "feed_all", "monotone_fit", "paired_ratio", "replay", "run_summary",
]

MIN_BLOCKS = 5  # blocks (adjacent plain/speculative pairs) before a measured speed-up is given (94% at most)
MIN_BLOCK_ITERATIONS = 2  # a block cut shorter by a control change is dropped
PASSES_KEPT_PER_LENGTH = 16  # recent verify passes per pass length kept for the fit
WINDOW = 32  # iterations in the recent window (α window, step costs)
POSITION_DECAY = 0.98  # per-iteration forgetting of per-position acceptance counts (~50 iterations)
ATTACHED_REASON = ("attached to an engine: its passes are not bracketed by plain steps (specscope attach "
                   "--plain-url or --plain-model measures plain requests beside them)")
TRUSTED_PASSES = 3  # passes of one length before an optimistic score takes its cost as known
POSITION_PRIOR_WEIGHT = 2.0  # pseudo-counts shrinking a position's acceptance toward the one before it


# ---- small statistics ----------------------------------------------------------------------------------
def signed_rank_cdf(n: int) -> np.ndarray:
    """P(T <= t), t = 0..n(n+1)/2, for the Wilcoxon signed-rank statistic of n pairs (exact, by counting)."""
    m = n * (n + 1) // 2
    counts = np.zeros(m + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):  # each rank is in the positive set or not
        counts[rank:] = counts[rank:] + counts[: m + 1 - rank].copy()
    return np.cumsum(counts) / counts.sum()


def hodges_lehmann_interval(x: Sequence[float] | np.ndarray,
                            confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """(centre, lo, hi, achieved confidence): the Hodges-Lehmann centre and its distribution-free interval.

    The interval runs between order statistics of the Walsh averages chosen from the exact signed-rank
    distribution (Tukey's interval, the one ``wilcoxon`` inverts): its coverage is at least ``confidence``
    for any distribution symmetric about the centre, however few pairs there are — a bootstrap over 4-8
    blocks under-covers. With n pairs the highest confidence available is 1 - 2 / 2^n (94% at n = 5).
    """
    v = np.sort(np.asarray(x, dtype=float))
    n = len(v)
    i, j = np.triu_indices(n)
    walsh = np.sort((v[i] + v[j]) / 2.0)
    centre = float(np.median(walsh))
    cdf = signed_rank_cdf(n)
    tail = (1.0 - confidence) / 2.0
    below = np.nonzero(cdf <= tail)[0]
    # [W_(k), W_(M+1-k)] covers with 1 - 2 P(T <= k-1): cut k-1 = the largest t with P(T <= t) <= tail from
    # each end; with too few pairs for the confidence asked, the whole range is all there is.
    cut = int(below[-1]) if len(below) else 0
    achieved = 1.0 - 2.0 * float(cdf[cut])
    return centre, float(walsh[cut]), float(walsh[len(walsh) - 1 - cut]), achieved


def paired_ratio(ratios: Sequence[float], min_pairs: int = MIN_BLOCKS) -> RatioInterval | None:
    """The centre and interval of paired ratios (speculative over plain, per block or per bench round).

    Works on logs (a ratio of 2 and of 1/2 are equally far from 1): the Hodges-Lehmann centre, which one
    outlying pair barely moves, with its distribution-free interval. None with fewer than ``min_pairs``.
    """
    logs = np.log([r for r in ratios if r > 0 and math.isfinite(r)])
    n = len(logs)
    if n < max(1, min_pairs):
        return None
    centre, lo, hi, achieved = hodges_lehmann_interval(logs)
    return RatioInterval(math.exp(centre), math.exp(lo), math.exp(hi), n, achieved)


def monotone_fit(values_by_length: dict[int, float], weights: dict[int, float] | None = None) -> dict[int, float]:
    """Values made non-decreasing in length: pool-adjacent-violators, weighted (a longer pass never costs less)."""
    lengths = sorted(values_by_length)
    blocks: list[list[float]] = []  # [weighted sum, weight, number of lengths]
    for n in lengths:
        w = float(weights.get(n, 1.0)) if weights else 1.0
        blocks.append([values_by_length[n] * w, w, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, w2, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += w2
            blocks[-1][2] += c
    fitted = [b[0] / b[1] for b in blocks for _ in range(int(b[2]))]
    return dict(zip(lengths, fitted, strict=True))


class VerifyCostFit:
    """Verify time by pass length, from every pass measured; monotone, robust, with no extrapolation."""

    def __init__(self, kept_per_length: int = PASSES_KEPT_PER_LENGTH):
        self.kept = kept_per_length
        self._passes: dict[int, deque[float]] = {}
        self._fitted: dict[int, float] | None = None

    def add(self, length: int, ms: float) -> None:
        if length < 1 or not math.isfinite(ms) or ms < 0:
            return
        self._passes.setdefault(length, deque(maxlen=self.kept)).append(ms)
        self._fitted = None

    def clear(self) -> None:
        self._passes.clear()
        self._fitted = None

    @property
    def points(self) -> dict[int, float]:
        """Fitted knots: pass length -> ms (non-decreasing)."""
        if self._fitted is None:
            medians = {n: float(median(v)) for n, v in self._passes.items() if v}
            counts = {n: float(len(v)) for n, v in self._passes.items() if v}
            self._fitted = monotone_fit(medians, counts) if medians else {}
        return self._fitted

    @property
    def max_length(self) -> int:
        return max(self.points, default=0)

    def passes(self, length: int) -> int:
        """How many passes of this length the fit keeps."""
        return len(self._passes.get(length, ()))

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
        if not pts or length > max(pts) or length < 1:
            return None
        if length in pts:
            return pts[length]
        lengths = sorted(pts)
        if length < lengths[0]:
            return pts[lengths[0]]  # shorter than any measured pass: at most the shortest's cost
        hi = next(n for n in lengths if n > length)
        lo = max(n for n in lengths if n < length)
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


# ---- the owner -----------------------------------------------------------------------------------------
def _sampling(values: ControlValues) -> tuple[object, ...]:
    """Controls whose change changes acceptance (k does not: α is per judged proposal)."""
    return (values.temperature, values.top_k, values.top_p)


@dataclass
class _Block:
    """Speculative iterations between two runs of plain steps (one control segment)."""

    before: list[float]  # the plain steps before it (ms)
    segment: int
    tokens: int = 0
    ms: float = 0.0
    iterations: int = 0
    busy: bool = False  # an iteration in it was flagged "machine busy"


@dataclass
class _SegmentState:
    index: int
    start_iteration: int
    controls: ControlValues | None
    accepted: int = 0
    judged: int = 0
    ratios: list[float] = field(default_factory=list)
    busy_ratios: list[float] = field(default_factory=list)


class Measurement:
    """Fed a run's events in order (by the session, or by replay); gives the current :class:`Estimate`.

    Thread-safe: the loop's thread feeds it, any thread may call :meth:`estimate`.
    """

    def __init__(self, window: int = WINDOW, k_max: int = K_MAX, min_blocks: int = MIN_BLOCKS):
        self.window = window
        self.k_max = k_max
        self.min_blocks = min_blocks
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.fit = VerifyCostFit()
        self.counts = PositionCounts(POSITION_DECAY)  # the curve's acceptance: since the last sampling change
        self._recent: deque[IterationRecord] = deque(maxlen=self.window)
        self._positions: list[list[int]] = []  # [reached, accepted, drafted] per position, since sampling change
        self._accepted = self._judged = self._spec_iterations = 0
        self._emitted = 0
        self._iterations = 0
        self._decode_ms = 0.0
        self._first_start_s: float | None = None
        self._last_end_s: float | None = None
        self._spec_ms = 0.0
        self._spec_tokens = 0
        self._baseline_ms = 0.0  # plain steps inside a speculative run, and what they emitted
        self._baseline_tokens = 0
        self._explorations = 0
        self._explore_ms = 0.0  # explored iterations, and what they emitted
        self._explore_tokens = 0
        self._plain_run = False  # a --plain run: plain steps are the decoding, not baselines
        self._segments: list[_SegmentState] = [_SegmentState(0, 0, None)]
        self._block: _Block | None = None
        self._closing: _Block | None = None  # ended by the plain run under way, closed when that run ends
        self._plain_steps: list[float] = []  # the plain run under way
        self._ratios: list[float] = []
        self._busy_ratios: list[float] = []  # blocks with a machine-busy iteration: left out while others suffice
        self._ratio_cache: dict[tuple[int, int, int], tuple[RatioInterval | None, int]] = {}
        self._last_record: IterationRecord | None = None
        self._last_judging: IterationRecord | None = None  # the k, drafter and controller note in use (a
        # baseline's plain step says nothing of them: drafter "none", the slider's k)
        self._last_busy = ""
        self._last_busy_iteration = -(10**9)
        self._estimate: Estimate | None = None

    # ---- feeding -----------------------------------------------------------------------------------------
    def feed(self, event: Event) -> Estimate | None:
        """Feed one event of the stream; returns the snapshot after it (None before any iteration)."""
        with self._lock:
            if isinstance(event, IterationRecord):
                self._iteration(event)
            elif isinstance(event, ControlChange):
                self._control_change(event)
            elif isinstance(event, BaselineRecord):  # a trace from before baselines committed their tokens
                for ms in event.step_ms:
                    self.fit.add(1, ms)
                for n, ms in event.verify_ms_by_len.items():
                    self.fit.add(int(n), ms)
                self._plain_steps.extend(event.step_ms)
                self._closing, self._block = self._closing or self._block, None
                self._end_plain_run()
            elif isinstance(event, RunStarted):
                self._plain_run = event.plain
                if self._segments[0].controls is None:
                    self._segments[0].controls = event.controls
            elif isinstance(event, RunFinished):
                self._end_plain_run()
                last = self._block or self._closing
                if last is not None:  # the last block: bracketed on one side only
                    self._close_block(last, [])
                self._block = self._closing = None
            elif not isinstance(event, DrillEvent):
                raise TypeError(f"not an event of a run: {type(event).__name__}")
            if self._last_record is not None:
                self._estimate = self._build()
            return self._estimate

    def _control_change(self, change: ControlChange) -> None:
        if _sampling(change.new) != _sampling(change.old):
            # the curve predicts for the controls now in force: acceptance under other sampling says little
            self.counts = PositionCounts(POSITION_DECAY)
            self._positions = []
        self._segments.append(_SegmentState(len(self._segments), change.iteration, change.new))
        # A block never spans a change (its ratio would mix two settings): the open one ends here, and the plain
        # steps that follow the change close it (a plain step does not depend on k).
        if self._block is not None:
            self._closing, self._block = self._block, None

    def _iteration(self, r: IterationRecord) -> None:
        if self._segments[0].controls is None:
            self._segments[0].controls = r.controls
        self._last_record = r
        self._iterations += 1
        self._emitted += r.n_emitted
        self._decode_ms += r.iteration_ms
        if self._first_start_s is None:
            self._first_start_s = r.t_start_s
        self._last_end_s = r.t_end_s
        if r.explore:
            self._explorations += 1
        for flag in r.flags:
            if flag.startswith(BUSY_PREFIX):
                self._last_busy, self._last_busy_iteration = flag, r.iteration
        if r.mode != ATTACHED_MODE:  # an engine's pass time is not this machine's verify time
            self.fit.add(r.n_drafted + 1, r.verify_ms)
        if r.mode == PLAIN_MODE:
            if not self._plain_run:
                self._baseline_ms += r.iteration_ms
                self._baseline_tokens += r.n_emitted
                if self._block is not None:
                    self._closing, self._block = self._block, None
                self._plain_steps.append(r.verify_ms)  # the target's step, as plain decoding runs it
            return
        if not self._plain_steps:
            self._closing = None  # no plain step came after that block: it has no baseline after it
        self._end_plain_run()
        if r.mode not in JUDGING_MODES:
            return
        self._last_judging = r
        self._recent.append(r)
        self.counts.add(r)
        self._spec_iterations += 1
        judged = checked_proposals(r)
        self._accepted += r.n_accepted
        self._judged += judged
        seg = self._segments[-1]
        seg.accepted += r.n_accepted
        seg.judged += judged
        while len(self._positions) < r.n_drafted:
            self._positions.append([0, 0, 0])
        for i in range(r.n_drafted):
            self._positions[i][2] += 1
            if i < judged:
                self._positions[i][0] += 1
            if i < r.n_accepted:
                self._positions[i][1] += 1
        if r.mode == SPECULATIVE_MODE and r.explore:
            self._explore_ms += r.iteration_ms
            self._explore_tokens += r.n_emitted
        elif r.mode == SPECULATIVE_MODE:
            self._spec_ms += r.iteration_ms
            self._spec_tokens += r.n_emitted
        if r.mode == SPECULATIVE_MODE and self._block is not None:
            self._block.tokens += r.n_emitted
            self._block.ms += r.iteration_ms
            self._block.iterations += 1
            self._block.busy |= any(f.startswith(BUSY_PREFIX) for f in r.flags)

    def _end_plain_run(self) -> None:
        """A run of plain steps ended: it closes the block before it and opens the next."""
        if not self._plain_steps:
            return
        steps, self._plain_steps = self._plain_steps, []
        if self._closing is not None:
            self._close_block(self._closing, steps)
            self._closing = None
        self._block = _Block(steps, len(self._segments) - 1)

    def _close_block(self, blk: _Block, after: list[float]) -> None:
        if blk.iterations < MIN_BLOCK_ITERATIONS or blk.ms <= 0:
            return
        steps = [*blk.before, *after]
        if not steps:
            return
        ratio = blk.tokens / blk.ms * float(median(steps))
        seg = self._segments[blk.segment]
        (self._busy_ratios if blk.busy else self._ratios).append(ratio)
        (seg.busy_ratios if blk.busy else seg.ratios).append(ratio)

    def _ratio(self, quiet: list[float], busy: list[float]) -> tuple[RatioInterval | None, int]:
        """The paired ratio over the blocks used, and how many: recomputed only when a block was added (the
        interval's exact signed-rank table was a tenth of a tiny pair's run when rebuilt at every event)."""
        key = (id(quiet), len(quiet), len(busy))
        hit = self._ratio_cache.get(key)
        if hit is None:
            used = self._used(quiet, busy)
            hit = self._ratio_cache[key] = (paired_ratio(used, self.min_blocks), len(used))
        return hit

    def _used(self, quiet: list[float], busy: list[float]) -> list[float]:
        """The quiet blocks once there are enough of them; every block while there are not (a machine busy
        throughout still gets a number, and the snapshot says how many blocks were busy)."""
        if len(quiet) >= self.min_blocks or not busy:
            return quiet
        return quiet + busy

    # ---- reading -----------------------------------------------------------------------------------------
    def estimate(self) -> Estimate | None:
        """The snapshot after the last event (None before any iteration)."""
        with self._lock:
            return self._estimate

    def window_records(self) -> list[IterationRecord]:
        with self._lock:
            return list(self._recent)

    def costs(self) -> Costs:
        with self._lock:
            return self._costs_locked(self._recent[-1].drafter if self._recent else "")

    def scores(self, k_lo: int, k_hi: int) -> dict[int, float]:
        """Predicted speed-up for each k in [k_lo, k_hi] that has data: the curve the snapshot shows, which
        adaptive k reads too."""
        with self._lock:
            drafter = self._recent[-1].drafter if self._recent else ""
            curve = self._curve_locked(self._costs_locked(drafter), range(k_lo, k_hi + 1))
        return {p.k: p.speedup for p in curve if p.speedup is not None}

    def scores_for(self, conditional: Sequence[float], k_lo: int, k_hi: int,
                   optimistic: bool = False) -> dict[int, float]:
        """Predicted speed-up for each k in [k_lo, k_hi] that has data, for a given conditional acceptance by
        position (a caller that knows more about this iteration's proposals than the run's pooled counts, e.g.
        prompt lookup's match length): the same costs, verify fit and formula as :meth:`scores`.

        ``optimistic`` scores each k at a lower bound on its verify pass's cost instead, the fit at the
        longest length up to k + 1 measured at least ``TRUSTED_PASSES`` times (the fit is non-decreasing), so
        k with a pass never measured, or measured once or twice, get an upper bound on their speed-up: what a
        policy needs to decide whether measuring such a pass could pay."""
        with self._lock:
            drafter = self._recent[-1].drafter if self._recent else ""
            curve = self._curve_locked(self._costs_locked(drafter), range(k_lo, k_hi + 1), list(conditional),
                                       cost_floor_beyond=optimistic)
        return {p.k: p.speedup for p in curve if p.speedup is not None}

    # ---- internals (lock held) ---------------------------------------------------------------------------
    def _costs_locked(self, drafter: str) -> Costs:
        recent = [r for r in self._recent if r.mode == SPECULATIVE_MODE]  # attached passes have no split
        per_token = draft_cost_per_token(drafter)
        draft_step = draft_iter = None
        if per_token:
            steps = [r.draft_ms / r.n_drafted for r in recent if r.n_drafted]
            draft_step = float(median(steps)) if steps else None
        elif recent:
            draft_iter = float(median(r.draft_ms for r in recent))
        fixed = float(median(max(0.0, r.iteration_ms - r.draft_ms - r.verify_ms) for r in recent)) if recent else None
        points = dict(self.fit.points)
        return Costs(points.get(1), draft_step, draft_iter, fixed, points)

    def _curve_locked(self, costs: Costs, ks: Iterable[int], conditional: list[float] | None = None,
                      cost_floor_beyond: bool = False) -> list[CurvePoint]:
        out: list[CurvePoint] = []
        plain = costs.plain_step_ms
        ks = list(ks)
        if conditional is not None:
            alpha: float | None = conditional[0] if conditional else None
            cond = conditional
        else:
            alpha = self.counts.pooled
            cond = self.counts.conditional(max(max(ks, default=1), 1), alpha) if alpha is not None else []
        for k in ks:
            if plain is None or plain <= 0:
                out.append(CurvePoint(k, None, "no plain step measured yet"))
                continue
            verify = self.fit.floor(k + 1, TRUSTED_PASSES) if cost_floor_beyond else self.fit(k + 1)
            if verify is None:
                longest = self.fit.max_length
                out.append(CurvePoint(k, None, f"no verify pass of length {k + 1} measured (longest {longest})"))
                continue
            if k == 0:
                tokens, draft = 1.0, 0.0
            elif alpha is None:
                out.append(CurvePoint(k, None, "no proposal judged yet"))
                continue
            else:
                tokens = costmodel.expected_tokens_from_positions(cond, k)
                if costs.draft_step_ms is not None:
                    draft = k * costs.draft_step_ms
                elif costs.draft_iteration_ms is not None:
                    draft = costs.draft_iteration_ms
                else:
                    out.append(CurvePoint(k, None, "no draft step measured yet"))
                    continue
            speedup = costmodel.speedup(tokens, plain, draft, verify, costs.fixed_ms or 0.0)
            out.append(CurvePoint(k, speedup, "" if speedup is not None else "no cost measured"))
        return out

    def _segment_snapshot(self, seg: _SegmentState) -> Segment:
        measured, blocks = self._ratio(seg.ratios, seg.busy_ratios)
        return Segment(
            index=seg.index, start_iteration=seg.start_iteration,
            controls=seg.controls if seg.controls is not None else ControlValues(),
            alpha=seg.accepted / seg.judged if seg.judged else None, judged=seg.judged,
            measured=measured, blocks=blocks,
        )

    def _cost_locked(self) -> MeasurementCost | None:
        if self._first_start_s is None or self._last_end_s is None:
            return None
        wall_ms = max(0.0, (self._last_end_s - self._first_start_s) * 1000.0)
        baseline = 0.0
        if self._baseline_tokens and self._spec_tokens and self._spec_ms > 0:
            # what the plain steps cost beyond what speculation takes for as many tokens (never below 0: where
            # speculation loses, the plain step was the faster way to decode them)
            baseline = max(0.0, self._baseline_ms - self._baseline_tokens * self._spec_ms / self._spec_tokens)
        explore = 0.0
        if self._explore_tokens and self._spec_tokens and self._spec_ms > 0:
            explore = max(0.0, self._explore_ms - self._explore_tokens * self._spec_ms / self._spec_tokens)
        bookkeeping = max(0.0, wall_ms - self._decode_ms)
        return MeasurementCost(wall_ms, self._decode_ms, bookkeeping, baseline, self._explorations, explore)

    def _build(self) -> Estimate:
        last = self._last_record
        assert last is not None
        r = self._last_judging or last  # the iteration that says what k and drafter are in use
        k = r.controls.k
        drafter = r.drafter
        costs = self._costs_locked(drafter)
        curve = self._curve_locked(costs, range(0, self.k_max + 1))
        known = [p for p in curve if p.speedup is not None]
        best = max(known, key=lambda p: (p.speedup or 0.0, -p.k)) if known else None
        predicted = next((p.speedup for p in curve if p.k == k), None)
        recent = list(self._recent)
        judged_w = sum(checked_proposals(x) for x in recent)
        alpha_w = sum(x.n_accepted for x in recent) / judged_w if judged_w else None
        positions = tuple(PositionStat(i, p[0], p[1], p[2]) for i, p in enumerate(self._positions))
        run_used = self._used(self._ratios, self._busy_ratios)
        run_measured, _ = self._ratio(self._ratios, self._busy_ratios)
        segment = self._segment_snapshot(self._segments[-1])
        measured: RatioInterval | None
        if len(self._segments) > 1 and segment.measured is not None:
            measured, scope, blocks = segment.measured, segment.label, segment.blocks
            busy_left = len(self._segments[-1].busy_ratios) if len(self._segments[-1].ratios) >= self.min_blocks else 0
        else:
            measured, scope, blocks = run_measured, "run", len(run_used)
            busy_left = len(self._busy_ratios) if run_used is self._ratios else 0
        if measured is None:
            if self._recent and all(x.mode == ATTACHED_MODE for x in self._recent):
                reason = ATTACHED_REASON
            elif self._spec_iterations:
                reason = f"{NOT_ENOUGH} ({len(run_used)} of {self.min_blocks} plain/speculative blocks)"
            else:
                reason = "plain decoding: nothing to compare"
        else:
            reason = ""
        cost = self._cost_locked()
        wall_s = cost.wall_ms / 1000.0 if cost is not None else 0.0
        est = Estimate(
            iteration=last.iteration, k=k, drafter=drafter, iterations=self._iterations,
            alpha=self._accepted / self._judged if self._judged else None, judged=self._judged,
            alpha_window=alpha_w, judged_window=judged_w, window=len(recent),
            mean_acceptance_length=(1.0 + self._accepted / self._spec_iterations) if self._spec_iterations else None,
            tokens_per_iteration=self._emitted / self._iterations if self._iterations else None,
            tokens_per_s=self._emitted * 1000.0 / self._decode_ms if self._decode_ms > 0 else None,
            positions=positions, costs=costs, measured=measured, measured_reason=reason,
            blocks=blocks, blocks_busy=busy_left, predicted_speedup=predicted, curve=tuple(curve),
            best_k=best.k if best else None, best_speedup=best.speedup if best else None,
            busy=self._last_busy if last.iteration - self._last_busy_iteration < self.window else "",
            measured_scope=scope, run_measured=run_measured, segment=segment, segments=len(self._segments),
            wall_tokens_per_s=self._emitted / wall_s if wall_s > 0 else None, cost=cost,
            k_note=r.k_note, adaptive=r.controls.adaptive_k and r.mode == SPECULATIVE_MODE,
        )
        return _with_verdict(est, len(self._busy_ratios), len(self._ratios))


def _with_verdict(est: Estimate, busy_blocks: int, quiet_blocks: int) -> Estimate:
    """The snapshot with its verdict: one sentence when speculation measurably loses and the data can carry
    it, else the reason no verdict is given (or None when there is nothing to say)."""
    from dataclasses import replace

    m = est.measured
    if m is None or m.hi >= 1.0:
        return est
    if est.adaptive and est.k == 0:
        sentence = ("Adaptive k chose not to speculate (k = 0): the controller predicts plain decoding is "
                    f"faster at {est.alpha_text()}; it drafts again when a probe finds acceptance rising")
    elif busy_blocks > quiet_blocks:
        sentence = (f"No verdict: not enough quiet data ({busy_blocks} of {busy_blocks + quiet_blocks} blocks "
                    "ran while the machine was busy)")
    elif m.spread > VERDICT_MAX_SPREAD:
        sentence = f"No verdict yet: the interval {m.text()} is too wide to say ({m.n} blocks)"
    else:
        c = est.costs
        parts = [f"Speculation is slower than plain decoding ({m.text()}, {est.measured_scope})"]
        if c.plain_step_ms and c.draft_step_ms is not None:
            parts.append(f"a draft step costs {100 * c.draft_step_ms / c.plain_step_ms:.0f}% of a target step")
        be = est.break_even_alpha(est.k) if est.k else None
        if be is not None and est.alpha is not None:
            parts.append(f"break-even α at k={est.k} is {be:.2f}, measured {est.alpha_text()}")
        if est.best_k and est.best_speedup is not None and est.best_speedup > 1.0:
            parts.append(f"best k = {est.best_k} (predicted ×{est.best_speedup:.2f})")
        elif est.best_k == 0:
            parts.append("the cost model predicts plain decoding is fastest at every k")
        sentence = "; ".join(parts)
    return replace(est, verdict=sentence)


def feed_all(events: Iterable[Event],
             measurement: Measurement | None = None) -> Iterable[tuple[Event, Estimate | None]]:
    """Each event with the snapshot after it: what a live session hands its consumers, for a recorded stream."""
    m = measurement or Measurement()
    for e in events:
        yield e, m.feed(e)


def replay(events: Iterable[Event], window: int = WINDOW) -> Measurement:
    """A measurement fed a recorded stream (a replayed trace): the same owner, the same numbers as live."""
    m = Measurement(window=window)
    for e in events:
        m.feed(e)
    return m


def _median_or_none(values: Iterable[float]) -> float | None:
    vs = [v for v in values if math.isfinite(v)]  # an attached engine does not report the split (NaN)
    return float(median(vs)) if vs else None


def run_summary(records: Sequence[IterationRecord], prefill_ms: float = 0.0,
                estimate: Estimate | None = None) -> dict[str, Any]:
    """A whole run in one JSON-ready dict (CLI ``--json``, session.json, bench rows): the records' own counts
    and distributions, and every rate and speed-up from the snapshot (the same numbers every surface shows)."""
    spec = [r for r in records if r.mode in JUDGING_MODES]
    intervals = inter_token_intervals_ms(records)
    e = estimate
    cost = e.cost if e else None
    seg = e.segment if e else None
    out: dict[str, Any] = {
        "iterations": len(records),
        "speculative_iterations": len(spec),
        "plain_iterations": sum(1 for r in records if r.mode == PLAIN_MODE),
        "exploration_iterations": sum(1 for r in records if r.explore),
        "tokens": sum(r.n_emitted for r in records),
        "drafted": sum(r.n_drafted for r in spec),
        "accepted": sum(r.n_accepted for r in spec),
        "judged": e.judged if e else 0,
        "alpha": e.alpha if e else None,
        "alpha_window": e.alpha_window if e else None,
        "alpha_segment": seg.alpha if seg else None,
        "segment": seg.label if seg else None,
        "segments": e.segments if e else 0,
        "acceptance_rate": acceptance_rate(records),
        "mean_acceptance_length": e.mean_acceptance_length if e else None,
        "tokens_per_iteration": e.tokens_per_iteration if e else None,
        "mean_k": (sum(r.n_drafted for r in spec) / len(spec)) if spec else None,
        "per_position_acceptance": per_position_acceptance(records),
        "conditional_position_acceptance": conditional_position_acceptance(records),
        "accepted_histogram": accepted_histogram(records),
        "tokens_per_s": e.tokens_per_s if e else None,
        "wall_tokens_per_s": e.wall_tokens_per_s if e else None,
        "measurement_overhead": cost.share if cost else None,
        "measurement_overhead_ms": {"bookkeeping": cost.bookkeeping_ms, "baselines": cost.baseline_ms,
                                    "exploration": cost.exploration_ms, "wall": cost.wall_ms,
                                    "decode": cost.decode_ms} if cost else None,
        "prefill_ms": prefill_ms,
        "ttft_ms": time_to_first_token_ms(records, prefill_ms),
        "itl_p50_ms": percentile(intervals, 50.0),
        "itl_p95_ms": percentile(intervals, 95.0),
        "draft_ms_median": _median_or_none(r.draft_ms for r in spec),
        "verify_ms_median": _median_or_none(r.verify_ms for r in records),
        "rollback_ms_median": _median_or_none(r.rollback_ms for r in spec),
    }
    out.update({
        "plain_step_ms": e.costs.plain_step_ms if e else None,
        "draft_step_ms": e.costs.draft_step_ms if e else None,
        "draft_iteration_ms": e.costs.draft_iteration_ms if e else None,
        "fixed_ms": e.costs.fixed_ms if e else None,
        "verify_ms_by_len": {str(n): ms for n, ms in e.costs.verify_ms_by_len.items()} if e else {},
        "measured_speedup": e.measured.value if e and e.measured else None,
        "measured_speedup_lo": e.measured.lo if e and e.measured else None,
        "measured_speedup_hi": e.measured.hi if e and e.measured else None,
        "measured_speedup_scope": e.measured_scope if e and e.measured else None,
        "measured_speedup_blocks": e.blocks if e else 0,
        "measured_speedup_busy_blocks_left_out": e.blocks_busy if e else 0,
        "measured_speedup_note": e.measured_reason if e else NOT_ENOUGH,
        "run_measured_speedup": e.run_measured.value if e and e.run_measured else None,
        "predicted_speedup": e.predicted_speedup if e else None,
        "best_k": e.best_k if e else None,
        "best_k_speedup": e.best_speedup if e else None,
        "verdict": e.verdict if e else None,
    })
    return out
