"""The one owner of every derived number: α, acceptance length and by position, tokens/s, step costs, the
verify-cost fit, measured speed-up with its interval, predicted speed-up, the speed-up-vs-k curve and best k.

Every consumer — the CLI's text and ``--json``, the trace, the app's status bar and plots, adaptive k and
``specscope bench`` — displays or stores what this module gives; none computes its own.

Definitions (docs/cost-model.md has the derivations):
- α = accepted / judged proposals, where judged = accepted + the first rejected one (``metrics.checked_proposals``).
  It is the maximum-likelihood per-proposal acceptance under iid acceptance and does not shrink with k.
- Verify cost is one fit over pass length, from every pass measured: the loop's own verify passes (length
  k+1), the baselines' plain steps (length 1) and the sweeps. Per length it keeps the most recent passes
  (the context grows, so old passes cost less), takes their median, and makes the medians non-decreasing in
  length (pool-adjacent-violators weighted by counts). Between measured lengths it interpolates; past the
  longest measured length it says nothing: the curve has a gap there, with the reason.
- The plain step of the cost model is the fit at length 1, so a predicted speed-up can never exceed
  E(k) <= k+1: every iteration costs at least one pass of length k+1 >= one plain step.
- Measured speed-up is a paired ratio over blocks: the speculative iterations between two adjacent plain
  baselines form a block; its ratio is the block's tokens/ms times the bracketing baselines' median plain step.
  The estimate is the Hodges-Lehmann centre of the blocks' log ratios (one outlying block barely moves it),
  with its distribution-free interval. Fewer than ``MIN_BLOCKS`` blocks give no number, only a reason.
  A block with an iteration flagged "machine busy" is left out once ``MIN_BLOCKS`` quiet blocks exist (a
  stall of another program's making is not the speed-up); the estimate counts the blocks left out.
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

from . import costmodel
from .busy import BUSY_PREFIX
from .controls import K_MAX
from .kinds import draft_cost_per_token
from .metrics import (
    acceptance_rate,
    accepted_histogram,
    alpha_estimate,
    checked_proposals,
    conditional_position_acceptance,
    inter_token_intervals_ms,
    mean_acceptance_length,
    per_position_acceptance,
    percentile,
    time_to_first_token_ms,
    tokens_per_second,
)
from .records import ATTACHED_MODE, JUDGING_MODES, SPECULATIVE_MODE, BaselineRecord, ControlValues, IterationRecord

MIN_BLOCKS = 5  # blocks (adjacent plain/speculative pairs) before a measured speed-up is given (94% at most)
MIN_BLOCK_ITERATIONS = 2  # a block cut shorter by a control change is dropped
CONFIDENCE = 0.95
PASSES_KEPT_PER_LENGTH = 16  # recent verify passes per pass length kept for the fit
WINDOW = 32  # iterations in the recent window (α window, step costs)
POSITION_DECAY = 0.98  # per-iteration forgetting of per-position acceptance counts (~50 iterations)
ATTACHED_REASON = ("attached to an engine: its passes are not bracketed by plain steps (specscope attach "
                   "--plain-url or --plain-model measures plain requests beside them)")
TRUSTED_PASSES = 3  # passes of one length before an optimistic score takes its cost as known
POSITION_PRIOR_WEIGHT = 2.0  # pseudo-counts shrinking a position's acceptance toward the one before it
NOT_ENOUGH = "not enough data yet"


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


@dataclass(frozen=True)
class RatioInterval:
    """A ratio with its confidence interval and what it was computed from."""

    value: float
    lo: float
    hi: float
    n: int  # pairs (blocks, or rounds in the bench)
    confidence: float = CONFIDENCE  # what the interval achieves: below 95% with fewer than 6 pairs

    def covers(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    def text(self) -> str:
        return f"×{self.value:.2f} ({self.lo:.2f}–{self.hi:.2f})"


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


# ---- what the owner gives ------------------------------------------------------------------------------
@dataclass(frozen=True)
class PositionStat:
    """Acceptance at one draft position (0-based) with its sample size."""

    position: int
    reached: int  # iterations that judged this position
    accepted: int
    drafted: int  # iterations that drafted this position (judged or not)

    @property
    def rate(self) -> float | None:
        """P(accepted | reached): the conditional rate."""
        return self.accepted / self.reached if self.reached else None

    @property
    def rate_per_draft(self) -> float | None:
        """accepted / drafted at this position: the serving engines' per-position acceptance."""
        return self.accepted / self.drafted if self.drafted else None


@dataclass(frozen=True)
class CurvePoint:
    k: int
    speedup: float | None  # None = a gap, see ``reason``
    reason: str = ""


@dataclass(frozen=True)
class Costs:
    """Step costs in ms over the recent window (medians), and the verify fit's knots."""

    plain_step_ms: float | None  # the fit at pass length 1
    draft_step_ms: float | None  # per proposal (drafters whose cost grows with k)
    draft_iteration_ms: float | None  # per iteration (lookup: its cost does not grow with k)
    fixed_ms: float | None  # rollback + bookkeeping per iteration
    verify_ms_by_len: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Estimate:
    """Everything the run's numbers are, at one iteration. Immutable: shared by records and threads."""

    iteration: int
    k: int
    drafter: str
    iterations: int  # speculative + plain records seen
    alpha: float | None  # cumulative since the last change of sampling controls
    judged: int
    alpha_window: float | None
    judged_window: int
    window: int  # iterations in the recent window
    mean_acceptance_length: float | None  # 1 + accepted / speculative iterations (cumulative)
    tokens_per_iteration: float | None
    tokens_per_s: float | None  # emitted / decode-loop time, whole run
    positions: tuple[PositionStat, ...]
    costs: Costs
    measured: RatioInterval | None
    measured_reason: str  # why there is no measured number (empty when there is one)
    blocks: int  # blocks the measured speed-up is over
    predicted_speedup: float | None  # at the k in use, same cost model as the curve
    curve: tuple[CurvePoint, ...]
    best_k: int | None  # None when no k has a prediction; 0 = do not speculate
    best_speedup: float | None
    busy: str = ""  # the latest machine-busy sentence in the window, if any
    blocks_busy: int = 0  # blocks with a machine-busy iteration, left out of the measured speed-up

    @property
    def measured_text(self) -> str:
        return self.measured.text() if self.measured is not None else self.measured_reason or NOT_ENOUGH

    def speedup_at(self, k: int) -> float | None:
        for p in self.curve:
            if p.k == k:
                return p.speedup
        return None

    def iteration_costs(self, k: int) -> tuple[float, float] | None:
        """(draft ms per iteration, verify ms of a k+1 pass) at this k from the measured costs; None: no data."""
        c = self.costs
        if not c.verify_ms_by_len:
            return None
        verify = _interp(c.verify_ms_by_len, k + 1)
        if verify is None:
            return None
        return (c.draft_step_ms or 0.0) * k + (c.draft_iteration_ms or 0.0), verify

    def alpha_for_speedup(self, k: int, speedup: float) -> float | None:
        """The α this k would need to run ``speedup`` times as fast as plain, at the measured costs (None: no
        data, or no α reaches it)."""
        costs = self.iteration_costs(k) if k else None
        plain = self.costs.plain_step_ms
        if costs is None or not plain:
            return None
        draft, verify = costs
        try:
            return costmodel.alpha_for_speedup(k, speedup, plain, draft / k, verify, self.costs.fixed_ms or 0.0)
        except ValueError:
            return None

    def break_even_alpha(self, k: int) -> float | None:
        """The α at which speculation at this k breaks even (None: no data, or it cannot pay at any α)."""
        return self.alpha_for_speedup(k, 1.0)

    def verdict(self) -> str | None:
        """One sentence when speculation measurably loses (the whole interval below 1), else None."""
        m = self.measured
        if m is None or m.hi >= 1.0:
            return None
        c = self.costs
        parts = [f"Speculation is slower than plain decoding ({m.text()})"]
        if c.plain_step_ms and c.draft_step_ms is not None:
            parts.append(f"a draft step costs {100 * c.draft_step_ms / c.plain_step_ms:.0f}% of a target step")
        be = self.break_even_alpha(self.k) if self.k else None
        if be is not None and self.alpha_window is not None:
            parts.append(f"break-even α at k={self.k} is {be:.2f}, measured α {self.alpha_window:.2f}")
        if self.best_k and self.best_speedup is not None and self.best_speedup > 1.0:
            parts.append(f"best k = {self.best_k} (predicted ×{self.best_speedup:.2f})")
        elif self.best_k == 0:
            parts.append("plain decoding wins at every k")
        return "; ".join(parts)


def _interp(points: dict[int, float], length: int) -> float | None:
    if not points or length > max(points) or length < 1:
        return None
    if length in points:
        return points[length]
    lengths = sorted(points)
    if length < lengths[0]:
        return points[lengths[0]]
    hi = next(n for n in lengths if n > length)
    lo = max(n for n in lengths if n < length)
    return points[lo] + (points[hi] - points[lo]) * (length - lo) / (hi - lo)


def _regime(values: ControlValues) -> tuple[object, ...]:
    """Controls whose change starts a new measured speed-up (k only when it is not chosen adaptively)."""
    k = None if values.adaptive_k else values.k
    return (k, values.adaptive_k, values.temperature, values.top_k, values.top_p)


def _sampling(values: ControlValues) -> tuple[object, ...]:
    """Controls whose change changes acceptance (k does not: α is per judged proposal)."""
    return (values.temperature, values.top_k, values.top_p)


@dataclass
class _Block:
    """Speculative iterations between two plain baselines (one regime)."""

    before: BaselineRecord
    tokens: int = 0
    ms: float = 0.0
    iterations: int = 0
    busy: bool = False  # an iteration in it was flagged "machine busy"


class Measurement:
    """Fed every record and baseline of a run once (by the session); gives the current :class:`Estimate`.

    Thread-safe: the loop's thread feeds it, any thread may call :meth:`estimate`.
    """

    def __init__(self, window: int = WINDOW, k_max: int = K_MAX, min_blocks: int = MIN_BLOCKS):
        self.window = window
        self.k_max = k_max
        self.min_blocks = min_blocks
        self._lock = threading.Lock()
        # The last events observed, kept alive so identity checks stay valid (an id can be reused once freed):
        # the adaptive policy and the session may pass the same record; it counts once.
        self._seen: deque[object] = deque(maxlen=8)
        self.reset()

    def reset(self) -> None:
        self.fit = VerifyCostFit()
        self.counts = PositionCounts(POSITION_DECAY)
        self._recent: deque[IterationRecord] = deque(maxlen=self.window)
        self._positions: list[list[int]] = []  # [reached, accepted, drafted] per position, since sampling change
        self._accepted = self._judged = self._spec_iterations = 0
        self._emitted = 0
        self._iterations = 0
        self._decode_ms = 0.0
        self._last_values: ControlValues | None = None
        self._baseline: BaselineRecord | None = None
        self._block: _Block | None = None
        self._ratios: list[float] = []
        self._busy_ratios: list[float] = []  # blocks with a machine-busy iteration: left out while others suffice
        self._measured: RatioInterval | None = None
        self._last_busy = ""
        self._last_busy_iteration = -(10**9)
        self._estimate: Estimate | None = None

    # ---- feeding -----------------------------------------------------------------------------------------
    def observe_baseline(self, b: BaselineRecord) -> Estimate | None:
        """Feed a baseline: it closes the open block and opens the next. Returns (and puts on the baseline)
        the estimate it updates, once there is one."""
        with self._lock:
            if any(b is e for e in self._seen):
                return b.estimate
            self._seen.append(b)
            for ms in b.step_ms:
                self.fit.add(1, ms)
            for n, ms in b.verify_ms_by_len.items():
                self.fit.add(int(n), ms)
            self._close_block(b)
            self._baseline = b
            self._block = _Block(b)
            last = self._estimate
            if last is not None:
                self._estimate = self._estimate_locked(last.iteration, last.k, last.drafter)
                b.estimate = self._estimate
            return self._estimate

    def observe(self, r: IterationRecord) -> None:
        with self._lock:
            self._observe_locked(r)

    def _observe_locked(self, r: IterationRecord) -> None:
        if any(r is e for e in self._seen):
            return
        self._seen.append(r)
        values = r.controls
        if self._last_values is not None:
            if _sampling(values) != _sampling(self._last_values):
                self.counts = PositionCounts(POSITION_DECAY)
                self._positions = []
                self._accepted = self._judged = self._spec_iterations = 0
                self._recent.clear()
            if _regime(values) != _regime(self._last_values):
                self._ratios = []
                self._busy_ratios = []
                self._measured = None
                self._block = None  # the iterations until the next baseline belong to no block
        self._last_values = values
        self._iterations += 1
        self._emitted += r.n_emitted
        self._decode_ms += r.iteration_ms
        if r.mode != ATTACHED_MODE:  # an engine's pass time is not this machine's verify time
            self.fit.add(r.n_drafted + 1, r.verify_ms)
        if r.mode in JUDGING_MODES:
            self._recent.append(r)
            self.counts.add(r)
            self._spec_iterations += 1
            self._accepted += r.n_accepted
            self._judged += checked_proposals(r)
            judged = checked_proposals(r)
            while len(self._positions) < r.n_drafted:
                self._positions.append([0, 0, 0])
            for i in range(r.n_drafted):
                self._positions[i][2] += 1
                if i < judged:
                    self._positions[i][0] += 1
                if i < r.n_accepted:
                    self._positions[i][1] += 1
            if self._block is not None and r.mode == SPECULATIVE_MODE:
                self._block.tokens += r.n_emitted
                self._block.ms += r.iteration_ms
                self._block.iterations += 1

    def _close_block(self, after: BaselineRecord) -> None:
        blk = self._block
        if blk is None or blk.iterations < MIN_BLOCK_ITERATIONS or blk.ms <= 0:
            return
        steps = [*blk.before.step_ms, *after.step_ms]
        if not steps:
            return
        plain = float(median(steps))
        (self._busy_ratios if blk.busy else self._ratios).append(blk.tokens / blk.ms * plain)
        self._measured = paired_ratio(self._blocks_used(), self.min_blocks)

    def _blocks_used(self) -> list[float]:
        """The quiet blocks once there are enough of them; every block while there are not (a machine busy
        throughout still gets a number, and its estimate says how many blocks were busy)."""
        if len(self._ratios) >= self.min_blocks or not self._busy_ratios:
            return self._ratios
        return self._ratios + self._busy_ratios

    def enrich(self, r: IterationRecord) -> Estimate:
        """Observe the record, fill its measurement fields, attach and return the current estimate."""
        with self._lock:
            self._observe_locked(r)  # the adaptive policy may have fed it already, before its flags were set
            for flag in r.flags:
                if flag.startswith(BUSY_PREFIX):
                    self._last_busy, self._last_busy_iteration = flag, r.iteration
                    if self._block is not None and r.mode == SPECULATIVE_MODE:
                        self._block.busy = True  # its ratio says more about the machine than the speed-up
            est = self._estimate_locked(r.iteration, r.controls.k, r.drafter)
            self._estimate = est
        r.plain_step_ms = est.costs.plain_step_ms
        r.alpha_window = est.alpha_window
        r.alpha_cumulative = est.alpha
        if est.measured is not None:
            r.measured_speedup, r.measured_speedup_lo, r.measured_speedup_hi = (
                est.measured.value, est.measured.lo, est.measured.hi)
        else:
            r.measured_speedup = r.measured_speedup_lo = r.measured_speedup_hi = None
        r.predicted_speedup = est.predicted_speedup
        r.estimate = est
        return est

    # ---- reading -----------------------------------------------------------------------------------------
    def estimate(self) -> Estimate | None:
        """The estimate after the last record (None before any)."""
        with self._lock:
            return self._estimate

    def window_records(self) -> list[IterationRecord]:
        with self._lock:
            return list(self._recent)

    def costs(self) -> Costs:
        with self._lock:
            return self._costs_locked(self._recent[-1].drafter if self._recent else "")

    def scores(self, k_lo: int, k_hi: int) -> dict[int, float]:
        """Predicted speed-up for each k in [k_lo, k_hi] that has data (adaptive k reads this)."""
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
            cost = draft + verify + (costs.fixed_ms or 0.0)
            out.append(CurvePoint(k, plain * tokens / cost if cost > 0 else None,
                                  "" if cost > 0 else "no cost measured"))
        return out

    def _estimate_locked(self, iteration: int, k: int, drafter: str) -> Estimate:
        costs = self._costs_locked(drafter)
        curve = self._curve_locked(costs, range(0, self.k_max + 1))
        known = [p for p in curve if p.speedup is not None]
        best = max(known, key=lambda p: (p.speedup or 0.0, -p.k)) if known else None
        predicted = next((p.speedup for p in curve if p.k == k), None)
        recent = list(self._recent)
        judged_w = sum(checked_proposals(r) for r in recent)
        alpha_w = sum(r.n_accepted for r in recent) / judged_w if judged_w else None
        positions = tuple(PositionStat(i, p[0], p[1], p[2]) for i, p in enumerate(self._positions))
        used = self._blocks_used()
        if self._measured is None:
            have = len(used)
            if self._recent and all(r.mode == ATTACHED_MODE for r in self._recent):
                reason = ATTACHED_REASON
            elif self._spec_iterations:
                reason = f"{NOT_ENOUGH} ({have} of {self.min_blocks} plain/speculative blocks)"
            else:
                reason = "plain decoding: nothing to compare"
        else:
            reason = ""
        busy = self._last_busy if iteration - self._last_busy_iteration < self.window else ""
        return Estimate(
            iteration=iteration, k=k, drafter=drafter, iterations=self._iterations,
            alpha=self._accepted / self._judged if self._judged else None, judged=self._judged,
            alpha_window=alpha_w, judged_window=judged_w, window=len(recent),
            mean_acceptance_length=(1.0 + self._accepted / self._spec_iterations) if self._spec_iterations else None,
            tokens_per_iteration=self._emitted / self._iterations if self._iterations else None,
            tokens_per_s=self._emitted * 1000.0 / self._decode_ms if self._decode_ms > 0 else None,
            positions=positions, costs=costs, measured=self._measured, measured_reason=reason,
            blocks=len(used), blocks_busy=len(self._busy_ratios) if used is self._ratios else 0,
            predicted_speedup=predicted, curve=tuple(curve),
            best_k=best.k if best else None, best_speedup=best.speedup if best else None, busy=busy,
        )


def replay(events: Iterable[object], window: int = WINDOW) -> Measurement:
    """A measurement fed a recorded stream (a replayed trace), with every record's fields filled anew.
    Events that are neither iterations nor baselines (drill events) carry no measurement and are skipped."""
    m = Measurement(window=window)
    for e in events:
        if isinstance(e, BaselineRecord):
            m.observe_baseline(e)
        elif isinstance(e, IterationRecord):
            m.enrich(e)
    return m



def _median_or_none(values: Iterable[float]) -> float | None:
    vs = [v for v in values if math.isfinite(v)]  # an attached engine does not report the split (NaN)
    return float(median(vs)) if vs else None


def run_summary(records: Sequence[IterationRecord], prefill_ms: float = 0.0,
                estimate: Estimate | None = None) -> dict[str, Any]:
    """A whole run in one JSON-ready dict (CLI ``--json``, session.json, bench rows): the records' own
    totals and rates, plus the estimate's costs and speed-ups (measured with its interval, predicted, best k).
    """
    spec = [r for r in records if r.mode in JUDGING_MODES]
    intervals = inter_token_intervals_ms(records)
    out: dict[str, Any] = {
        "iterations": len(records),
        "speculative_iterations": len(spec),
        "tokens": sum(r.n_emitted for r in records),
        "drafted": sum(r.n_drafted for r in spec),
        "accepted": sum(r.n_accepted for r in spec),
        "judged": sum(checked_proposals(r) for r in spec),
        "alpha": alpha_estimate(records),
        "acceptance_rate": acceptance_rate(records),
        "mean_acceptance_length": mean_acceptance_length(records),
        "tokens_per_iteration": (sum(r.n_emitted for r in records) / len(records)) if records else None,
        "mean_k": (sum(r.n_drafted for r in spec) / len(spec)) if spec else None,
        "per_position_acceptance": per_position_acceptance(records),
        "conditional_position_acceptance": conditional_position_acceptance(records),
        "accepted_histogram": accepted_histogram(records),
        "tokens_per_s": tokens_per_second(records),
        "prefill_ms": prefill_ms,
        "ttft_ms": time_to_first_token_ms(records, prefill_ms),
        "itl_p50_ms": percentile(intervals, 50.0),
        "itl_p95_ms": percentile(intervals, 95.0),
        "draft_ms_median": _median_or_none(r.draft_ms for r in spec),
        "verify_ms_median": _median_or_none(r.verify_ms for r in records),
        "rollback_ms_median": _median_or_none(r.rollback_ms for r in spec),
    }
    e = estimate
    out.update({
        "plain_step_ms": e.costs.plain_step_ms if e else None,
        "draft_step_ms": e.costs.draft_step_ms if e else None,
        "draft_iteration_ms": e.costs.draft_iteration_ms if e else None,
        "fixed_ms": e.costs.fixed_ms if e else None,
        "verify_ms_by_len": {str(n): ms for n, ms in e.costs.verify_ms_by_len.items()} if e else {},
        "measured_speedup": e.measured.value if e and e.measured else None,
        "measured_speedup_lo": e.measured.lo if e and e.measured else None,
        "measured_speedup_hi": e.measured.hi if e and e.measured else None,
        "measured_speedup_blocks": e.blocks if e else 0,
        "measured_speedup_busy_blocks_left_out": e.blocks_busy if e else 0,
        "measured_speedup_note": e.measured_reason if e else NOT_ENOUGH,
        "predicted_speedup": e.predicted_speedup if e else None,
        "best_k": e.best_k if e else None,
        "best_k_speedup": e.best_speedup if e else None,
    })
    return out
