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
from typing import Protocol

from specscope.core.measure import costmodel
from specscope.core.records import ControlValues

CONFIDENCE = 0.95
NOT_ENOUGH = "not enough data yet"
# A verdict needs a quiet, narrow interval: one whose ends differ by more than this factor says little.
VERDICT_MAX_SPREAD = 1.6
# A measured speed-up whose interval's ends differ by more than this factor is no headline at all: it cannot tell
# halving the speed from doubling it (0.5–2.0 is 4-fold). It is withheld, and the reason gives the interval.
MEASURABLE_MAX_SPREAD = 4.0


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

    @property
    def measurable(self) -> bool:
        """Narrow enough to be a headline (hi/lo at most ``MEASURABLE_MAX_SPREAD``)."""
        return self.spread <= MEASURABLE_MAX_SPREAD

    def text(self) -> str:
        return f"×{self.value:.2f} ({self.lo:.2f}–{self.hi:.2f})"


def too_wide_reason(interval: RatioInterval, plain_samples: int) -> str:
    """Why a measured speed-up is withheld: its interval, without a point (the point of 0.02–17.82 means
    nothing)."""
    return (f"not measurable yet: interval {interval.lo:.2f}–{interval.hi:.2f} "
            f"({plain_samples} plain step{'s' if plain_samples != 1 else ''})")


@dataclass(frozen=True)
class PositionStat:
    """Acceptance at one draft position (0-based) with its sample size."""

    position: int
    reached: int  # iterations that judged this position
    accepted: int
    drafted: int  # iterations that drafted this position (judged or not)
    recent_reached: float = 0.0  # ``reached`` forgotten slowly (about the last 50 iterations), what the curve uses

    @property
    def rate(self) -> float | None:
        """P(accepted | reached): the conditional rate."""
        return self.accepted / self.reached if self.reached else None

    @property
    def rate_per_draft(self) -> float | None:
        """accepted / drafted at this position: the serving engines' per-position acceptance (``run --json``)."""
        return self.accepted / self.drafted if self.drafted else None


@dataclass(frozen=True)
class CurvePoint:
    k: int
    speedup: float | None  # None = a gap, see ``reason``
    reason: str = ""


@dataclass(frozen=True)
class Costs:
    """Step costs in ms at the machine's speed now: the draft and rollback over the recent window (medians),
    the plain step and the verify fit's knots from the target's passes carried to now (``estimators.VerifyCostFit
    .frame``), and which of them were last timed at another machine speed."""

    plain_step_ms: float | None  # the plain step (length-1 passes as timed), at the machine's speed now
    draft_step_ms: float | None  # per proposal (drafters whose cost grows with k)
    draft_iteration_ms: float | None  # per iteration (lookup: its cost does not grow with k)
    fixed_ms: float | None  # rollback + bookkeeping per iteration
    verify_ms_by_len: dict[int, float] = field(default_factory=dict)
    passes_by_len: dict[int, int] = field(default_factory=dict)  # passes behind each knot
    stale: tuple[str, ...] = ()  # costs last timed when the machine ran >15% faster or slower than now
    speed_change: float = 1.0  # a pass's time now over its time when the last plain step was timed

    def draft_ms(self, k: int) -> float | None:
        """What drafting k proposals costs per iteration: k draft steps, or lookup's one search whatever k is
        (0 at k = 0; None: not measured)."""
        if k == 0:
            return 0.0
        if self.draft_step_ms is not None:
            return k * self.draft_step_ms
        return self.draft_iteration_ms

    def verify_ms(self, length: int) -> float | None:
        """A verify pass of ``length`` tokens (None past the longest measured)."""
        return interpolate(self.verify_ms_by_len, length)

    @property
    def longest_pass(self) -> int:
        return max(self.verify_ms_by_len, default=0)

    def verify_floor(self, length: int, min_passes: int) -> float | None:
        """A lower bound on a pass of ``length``: the knot at the longest length up to it measured at least
        ``min_passes`` times, else at the shortest length measured (knots never fall with length)."""
        return verify_floor(self.verify_ms_by_len, self.passes_by_len, length, min_passes)

    def stale_brief(self) -> str:
        """'stale: plain step' or 'stale: plain step +2': a few words beside a prediction ('' when none is stale;
        ``stale_text`` says why)."""
        if not self.stale:
            return ""
        more = f" +{len(self.stale) - 1}" if len(self.stale) > 1 else ""
        return f"stale: {self.stale[0]}{more}"

    def stale_text(self) -> str:
        """'stale: plain step (timed at another machine speed: passes take ×1.40 as long now; priced by them)'
        or ''."""
        if not self.stale:
            return ""
        return (f"stale: {', '.join(self.stale)} (timed at another machine speed: passes take "
                f"×{self.speed_change:.2f} as long now as at the last plain step; carried to now by them)")


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
    ``drill_ms``: the wall time between iterations a paging drill spent moving layers; not charged to the
    measurement (it is what the user asked the drill to do).
    """

    wall_ms: float
    decode_ms: float
    bookkeeping_ms: float
    baseline_ms: float
    exploration_iterations: int = 0
    exploration_ms: float = 0.0
    drill_ms: float = 0.0  # wall time a paging drill spent moving layers: the drill's, not the measurement's

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
    measured: RatioInterval | None  # the headline measured speed-up (see ``measured_scope``); None while too wide
    measured_reason: str  # why there is no measured number (empty when there is one)
    plain_samples: int  # plain samples the headline measured speed-up is paired with (see core/measure/speedup.py)
    predicted_speedup: float | None  # at the k in use, same cost model as the curve
    curve: tuple[CurvePoint, ...]
    best_k: int | None  # None when no k has a prediction; 0 = do not speculate
    best_speedup: float | None
    # over the iterations the measured speed-up covers, each at the proposals it made (``price_span``): the figure
    # to hold against ``measured`` where k varied (adaptive k, a lookup match shorter than k)
    predicted_span: float | None = None
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
    exploring_k: int | None = None  # the last iteration ran at this k to time a pass length (``k`` is the run's)
    exploring_note: str = ""  # why, in the loop's words
    measured_withheld: RatioInterval | None = None  # the headline's interval while too wide to be one (the reason
    # gives it; no surface shows its point)
    curve_bound: tuple[CurvePoint, ...] = ()  # each k priced at a lower bound on its verify pass (``price_curve``'s
    # cost_floor_beyond): the most timing that pass could show, what exploration asks before timing one
    positions_since: int = 0  # the iteration acceptance by position counts from (it starts over at a sampling change)
    # what the baseline schedule spaces plain steps by (never shown): speculation's rate over the recent window
    # times the plain step (None before a length-1 pass was timed), and the speculative iterations since the
    # last plain sample (a baseline's plain step or an iteration that proposed nothing; None before any)
    provisional_speedup: float | None = None
    since_plain_sample: int | None = None

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

    def speedup_brief(self) -> str:
        """The speed-up where one short line has room (the status bar): the number, the withheld interval without
        a point, or a dash (the reason then goes in a tooltip)."""
        if self.measured is not None:
            return self.speedup_text()
        w = self.measured_withheld
        return f"— (interval {w.lo:.2f}–{w.hi:.2f}: not measurable yet)" if w is not None else "—"

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

    def k_note_text(self) -> str:
        """Why the last iteration's k is not simply the run's: the controller's reason, or an exploration."""
        if self.exploring_k is not None:
            return self.exploring_note or f"this iteration explored k={self.exploring_k}"
        return self.controller_text().partition(": ")[2]

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
    def scores(self, k_lo: int, k_hi: int) -> dict[int, float]:
        """The curve's predicted speed-up for each k in [k_lo, k_hi] that has one (what adaptive k reads)."""
        return {p.k: p.speedup for p in self.curve if k_lo <= p.k <= k_hi and p.speedup is not None}

    def scores_for(self, conditional: list[float], k_lo: int, k_hi: int, optimistic: bool = False,
                   trusted_passes: int = 3) -> dict[int, float]:
        """Predicted speed-up for each k in [k_lo, k_hi] that has data, for a given conditional acceptance by
        position (a policy that knows more about this iteration's proposals, e.g. prompt lookup's match length):
        this snapshot's costs and the one formula (:func:`price_curve`); ``optimistic`` at a lower bound on
        each verify pass's cost."""
        curve = price_curve(self.costs, list(conditional), list(range(k_lo, k_hi + 1)), optimistic, trusted_passes)
        return {p.k: p.speedup for p in curve if p.speedup is not None}

    def acceptance_depth(self, min_trials: float) -> int:
        """Leading positions judged at least ``min_trials`` times lately (forgotten slowly, as the curve's)."""
        depth = 0
        while depth < len(self.positions) and self.positions[depth].recent_reached >= min_trials:
            depth += 1
        return depth

    @property
    def recently_judged(self) -> float:
        """Proposals judged lately (forgotten slowly, as the curve's acceptance)."""
        return sum(p.recent_reached for p in self.positions)

    def bound_at(self, k: int) -> float | None:
        """The most k's speed-up could be once its verify pass is timed (``curve_bound``; None: not priced)."""
        return next((p.speedup for p in self.curve_bound if p.k == k), None)

    def speedup_at(self, k: int) -> float | None:
        for p in self.curve:
            if p.k == k:
                return p.speedup
        return None

    def iteration_costs(self, k: int) -> tuple[float, float] | None:
        """(draft ms per iteration, verify ms of a k+1 pass) at this k from the measured costs; None: no data."""
        c = self.costs
        verify, draft = c.verify_ms(k + 1), c.draft_ms(k)
        if verify is None or draft is None:
            return None
        return draft, verify

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


def price_curve(costs: Costs, conditional: list[float], ks: list[int], cost_floor_beyond: bool = False,
                trusted_passes: int = 3) -> list[CurvePoint]:
    """Predicted speed-up for each k at these costs and this conditional acceptance by position (empty: no
    proposal judged yet): the one formula every curve, score and prediction reads.

    ``cost_floor_beyond`` scores each k at a lower bound on its verify pass instead (``Costs.verify_floor``
    with ``trusted_passes``): an upper bound on its speed-up, for a policy deciding whether measuring it pays."""
    out: list[CurvePoint] = []
    plain = costs.plain_step_ms
    # E(k) for every k at once (the same sums as expected_tokens_from_positions, k by k)
    tokens_by_k = costmodel.expected_tokens_by_k(conditional, max(ks, default=0)) if conditional else []
    for k in ks:
        if plain is None or plain <= 0:
            out.append(CurvePoint(k, None, "no plain step measured yet"))
            continue
        if k == 0:  # plain decoding: 1 by construction
            out.append(CurvePoint(k, costmodel.speedup_at_k(0, 1.0, plain, 0.0, plain)))
            continue
        verify = costs.verify_floor(k + 1, trusted_passes) if cost_floor_beyond else costs.verify_ms(k + 1)
        if verify is None:
            out.append(CurvePoint(k, None, f"no verify pass of length {k + 1} measured (longest {costs.longest_pass})"))
            continue
        if not conditional:
            out.append(CurvePoint(k, None, "no proposal judged yet"))
            continue
        draft = costs.draft_ms(k)
        if draft is None:
            out.append(CurvePoint(k, None, "no draft step measured yet"))
            continue
        speedup = costmodel.speedup_at_k(k, tokens_by_k[k], plain, draft, verify, costs.fixed_ms or 0.0)
        out.append(CurvePoint(k, speedup, "" if speedup is not None else "no cost measured"))
    return out


def price_span(costs: Costs, conditional: list[float], drafted: dict[int, int]) -> float | None:
    """The predicted speed-up over a span of iterations, each priced at the proposals it made (``drafted``: how
    many iterations proposed each number): the tokens the cost model expects of them over the time it expects
    them to take, the way the measured speed-up sums them (Σ tokens · plain step / Σ ms). An iteration that
    proposed nothing costs its pass, the drafter's search and the bookkeeping. For a fixed-k draft
    model it is the prediction at k; for adaptive k, or prompt lookup proposing fewer than k when its match is
    short, it is what the measured figure over the same iterations is to be compared with. None: an iteration's
    proposals cannot be priced (a gap in the curve), or nothing proposed yet."""
    counts = {k: n for k, n in drafted.items() if n > 0}
    if not counts or not conditional:
        return None
    tokens = costmodel.expected_tokens_by_k(conditional, max(counts))
    expected = time = 0.0  # tokens, and their time in plain-step units (tokens / speed-up)
    for point in price_curve(costs, conditional, sorted(counts)):
        speedup = point.speedup
        if point.k == 0 and costs.plain_step_ms:
            # an iteration that proposed nothing is not plain decoding (which the curve's k = 0 is, ×1 by
            # construction): it ran the drafter's search (lookup, suffix) and the loop's bookkeeping beside its
            # one-token pass, as the measured figure counts it
            plain = costs.plain_step_ms
            speedup = plain / (plain + (costs.draft_iteration_ms or 0.0) + (costs.fixed_ms or 0.0))
        if speedup is None or speedup <= 0:
            return None
        expected += counts[point.k] * tokens[point.k]
        time += counts[point.k] * tokens[point.k] / speedup
    return expected / time if time > 0 else None


def verify_floor(points: dict[int, float], passes: dict[int, int], length: int, min_passes: int) -> float | None:
    """A lower bound on a pass of ``length`` from non-decreasing knots: the knot at the longest length up to it
    with at least ``min_passes`` passes, else the shortest knot. One slow pass, or none, at a length then never
    hides what a longer pass may cost."""
    if not points:
        return None
    trusted = [n for n in points if n <= length and passes.get(n, 0) >= min_passes]
    return points[max(trusted)] if trusted else points[min(points)]


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


class SnapshotSource(Protocol):
    """What reads a run's numbers as it goes (the k policies, the baseline schedule, verify exploration): the
    latest snapshot, never the owner's mutable state. A ``Run`` (core/measure/run.py) is one."""

    def estimate(self) -> Estimate | None: ...
