"""The measurement's snapshot: every derived number of a run at one event, as immutable values.

``core.measure.measurement.Measurement`` is the one owner that computes these; every surface (the status bar, the run
panel, plot titles, the k advisor, the CLI's text and ``--json``, the flat CSV export, adaptive k and
``specscope bench``) displays a snapshot and computes nothing. The text helpers here are the one wording of
each number, so two surfaces cannot phrase (or round) the same number differently.

A leaf module: it imports only the pure cost model, so record and event types never depend on the measurement.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from specscope.core.measure import costmodel
from specscope.core.records import ControlValues

CONFIDENCE = 0.95
NOT_ENOUGH = "not enough data yet"
# A verdict needs a quiet, narrow interval: one whose ends differ by more than this factor says little.
VERDICT_MAX_SPREAD = 1.6


@dataclass(frozen=True)
class RatioInterval:
    """A ratio with its confidence interval and what it was computed from."""

    value: float
    lo: float
    hi: float
    n: int  # plain samples (the measured speed-up), or paired rounds (the bench, attach)
    confidence: float = CONFIDENCE  # what the interval achieves (a rank interval over 5 rounds: 94%)

    def covers(self, x: float) -> bool:
        return self.lo <= x <= self.hi

    @property
    def spread(self) -> float:
        """hi / lo: how many times wider the top of the interval is than its bottom (1 = exact)."""
        return self.hi / self.lo if self.lo > 0 else math.inf

    def text(self) -> str:
        return f"×{self.value:.2f} ({self.lo:.2f}–{self.hi:.2f})"


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


@dataclass(frozen=True)
class CurvePoint:
    k: int
    speedup: float | None  # None = a gap, see ``reason``
    reason: str = ""


@dataclass(frozen=True)
class Costs:
    """Step costs in ms over the recent window (medians), and the verify fit's knots."""

    plain_step_ms: float | None  # the median of the recent length-1 passes (plain steps) as timed
    draft_step_ms: float | None  # per proposal (drafters whose cost grows with k)
    draft_iteration_ms: float | None  # per iteration (lookup: its cost does not grow with k)
    fixed_ms: float | None  # rollback + bookkeeping per iteration
    verify_ms_by_len: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Segment:
    """The iterations since the last control change (the whole run when nothing changed)."""

    index: int  # 0 for the first segment
    start_iteration: int
    controls: ControlValues
    alpha: float | None
    judged: int
    measured: RatioInterval | None  # over the iterations and plain samples inside this segment only
    plain_samples: int

    @property
    def label(self) -> str:
        """'k=3 since it. 60' (what the segment's controls are and where it began)."""
        c = self.controls
        parts = ["adaptive k" if c.adaptive_k else f"k={c.k}"]
        if not c.greedy:
            parts.append(f"T={c.temperature:g}")
        if c.top_k:
            parts.append(f"top-k={c.top_k}")
        if c.top_p < 1.0:
            parts.append(f"top-p={c.top_p:g}")
        return f"{', '.join(parts)} since it. {self.start_iteration}"


@dataclass(frozen=True)
class MeasurementCost:
    """What measuring costs the run, as a share of its wall time (the measurement's own number).

    ``bookkeeping_ms``: wall time between iterations (records, memory joins, probes, autosave hand-off).
    ``baseline_ms``: what the plain baseline steps cost beyond what speculation would have taken for the same
    tokens (0 when speculation does not pay: then a plain step is the faster way to decode).
    ``exploration_ms``: what the iterations run at another k (to time an unmeasured pass length) took beyond
    the median speculative iteration at the user's k around them.
    """

    wall_ms: float
    decode_ms: float
    bookkeeping_ms: float
    baseline_ms: float
    exploration_iterations: int = 0
    exploration_ms: float = 0.0

    @property
    def iterations_ms(self) -> float:
        """What the measurement's own iterations cost (baselines and exploration): what its budget bounds."""
        return self.baseline_ms + self.exploration_ms

    @property
    def share(self) -> float | None:
        spent = self.bookkeeping_ms + self.iterations_ms
        return spent / self.wall_ms if self.wall_ms > 0 else None

    def text(self) -> str:
        s = self.share
        return "measurement overhead —" if s is None else f"measurement overhead {100 * s:.1f}%"


@dataclass(frozen=True)
class Estimate:
    """Everything the run's numbers are, at one event. Immutable: shared by threads and surfaces."""

    iteration: int  # the last iteration seen (-1 before any)
    k: int  # the k that iteration used
    drafter: str
    iterations: int  # speculative + plain records seen
    alpha: float | None  # the headline: accepted / judged over the whole run
    judged: int
    alpha_window: float | None  # the recent window only (its own name and label everywhere)
    judged_window: int
    window: int  # iterations in the recent window
    mean_acceptance_length: float | None  # 1 + accepted / speculative iterations (whole run)
    tokens_per_iteration: float | None
    tokens_per_s: float | None  # decode rate: emitted / time inside iterations, whole run
    positions: tuple[PositionStat, ...]
    costs: Costs
    measured: RatioInterval | None  # the headline measured speed-up (see ``measured_scope``)
    measured_reason: str  # why there is no measured number (empty when there is one)
    plain_samples: int  # plain samples the headline measured speed-up is paired with (see core/measure/speedup.py)
    predicted_speedup: float | None  # at the k in use, same cost model as the curve
    curve: tuple[CurvePoint, ...]
    best_k: int | None  # None when no k has a prediction; 0 = do not speculate
    best_speedup: float | None
    busy: str = ""  # the latest machine-busy sentence in the window, if any
    busy_left_out: int = 0  # records flagged machine-busy, left out of the measured speed-up
    measured_scope: str = "run"  # "run", or the segment's label when the segment has its own number
    run_measured: RatioInterval | None = None  # over every block of the run
    run_plain_limited: bool = False  # the plain samples are most of run_measured's uncertainty (see speedup.py)
    segment: Segment | None = None  # the current control segment
    segments: int = 1  # segments so far
    wall_tokens_per_s: float | None = None  # emitted / wall time from the first iteration's start
    cost: MeasurementCost | None = None
    k_note: str = ""  # the adaptive controller's reason for its last k, when it is not simply best k
    adaptive: bool = False  # the last iteration's k was chosen by the adaptive controller
    verdict: str | None = None  # one sentence once the data can carry it (see Measurement)

    # ---- the one wording of each number ----------------------------------------------------------------
    @property
    def measured_text(self) -> str:
        return self.measured.text() if self.measured is not None else self.measured_reason or NOT_ENOUGH

    def alpha_text(self) -> str:
        """'α 0.57 (run) · 0.54 (k=3 since it. 60)': the run's α, and the segment's once there is more than one."""
        if self.alpha is None:
            return "α —"
        out = f"α {self.alpha:.2f} (run)"
        seg = self.segment
        if self.segments > 1 and seg is not None and seg.alpha is not None:
            out += f" · {seg.alpha:.2f} ({seg.label})"
        return out

    def speedup_text(self) -> str:
        """'×1.21 (1.05–1.40), run' or the reason there is none."""
        if self.measured is None:
            return f"— ({self.measured_reason or NOT_ENOUGH})"
        return f"{self.measured.text()}, {self.measured_scope}"

    def rates_text(self) -> str:
        decode = f"{self.tokens_per_s:.1f}" if self.tokens_per_s is not None else "—"
        wall = f"{self.wall_tokens_per_s:.1f}" if self.wall_tokens_per_s is not None else "—"
        return f"{decode} tok/s decoding · {wall} tok/s wall"

    def best_k_text(self) -> str:
        if self.best_k is None or self.best_speedup is None:
            return "best k —"
        if self.best_k == 0:
            return "best: do not speculate"
        return f"best k={self.best_k} (×{self.best_speedup:.2f})"

    def controller_text(self) -> str:
        """What the adaptive controller did against best k, in words ('' when there is nothing to say)."""
        if not self.adaptive:
            return ""
        if self.k_note:
            return f"adaptive k={self.k}: {self.k_note}"
        if self.best_k is not None and self.best_k != self.k:
            return f"adaptive k={self.k}: keeps its choice until best k={self.best_k} gains enough"
        return f"adaptive k={self.k}"

    # ---- the cost model at this snapshot -------------------------------------------------------------------
    def speedup_at(self, k: int) -> float | None:
        for p in self.curve:
            if p.k == k:
                return p.speedup
        return None

    def iteration_costs(self, k: int) -> tuple[float, float] | None:
        """(draft ms per iteration, verify ms of a k+1 pass) at this k from the measured costs; None: no data."""
        c = self.costs
        verify = interpolate(c.verify_ms_by_len, k + 1)
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


def interpolate(points: dict[int, float], length: int) -> float | None:
    """The verify fit's knots read at ``length``: linear between knots, the shortest's cost below them, and
    nothing past the longest measured length (a gap, never an extrapolation)."""
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
