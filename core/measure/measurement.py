"""The one owner of every derived number: α, acceptance length and by position, tokens/s, step costs, the
verify-cost fit, measured speed-up with its interval, predicted speed-up, the speed-up-vs-k curve, best k, the
verdict and what measuring costs the run.

It is fed the run's event stream (``core.events``) through :meth:`Measurement.feed` by a ``Run``
(``core.measure.run``, the only place one is built: live, received from a worker, attached, or replayed),
and hands out one immutable snapshot (``core.measure.snapshot.Estimate``) after each event. Every consumer —
the CLI's text and ``--json``, the flat CSV export, the app's status bar, panels and plots, adaptive k and
``specscope bench`` — displays a snapshot; none computes its own.

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
- The plain step of the cost model is the median of the recent length-1 passes as timed (the baselines' plain
  steps and iterations that proposed nothing), the same figure the baseline schedule prices plain steps at.
  Not the fit's length-1 knot: on a CPU a one-token pass can cost more than a short multi-token one (GEMV
  against GEMM), the monotone fit pools the two, and the prediction would then be biased low.
- Measured speed-up (``core.measure.speedup``): speculation's tokens over its time, against the plain step at
  the same moments. Plain samples are the baselines' plain steps (which commit their tokens) and speculative
  iterations that proposed nothing (a plain step at no cost); the verify passes around each one carry it
  across the drift to every iteration. Its interval has the plain samples' noise (pooled with the passes')
  and acceptance's; fewer than ``MIN_PLAIN_SAMPLES`` plain samples give no number, only a reason. Records
  flagged "machine busy" are left out once the quiet ones suffice (a stall of another program's making is not
  the speed-up). It is recomputed at each plain sample, at the run's end, and otherwise every
  max(``SPEEDUP_MIN_REFRESH``, N // ``SPEEDUP_REFRESH``) speculative iterations (N so far), the last result
  in between: after a model's pass has evicted the caches one computation costs ~0.2 ms, a percent of a
  demo iteration if it ran at each.
- A measured speed-up whose interval is wider than ``MEASURABLE_MAX_SPREAD`` (hi/lo) is withheld from the
  headline: ``measured`` is None and the reason gives the interval without a point ("not yet measurable:
  interval 0.02–17.82 (2 plain steps)"), so every surface says the same; a segment's too-wide number gives way
  to the run's.
- A verdict is stated only when the data can carry it: a quiet majority of records, an interval no wider
  than ``VERDICT_MAX_SPREAD``, and not while adaptive k has chosen not to speculate (then it speaks of the
  controller's choice).
"""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from statistics import median

from specscope.core.controls import K_MAX
from specscope.core.drafter_catalogue import draft_cost_per_token
from specscope.core.events import ALPHA_WINDOW, ControlChange, Event, RunFinished, RunStarted
from specscope.core.measure.busy import BUSY_PREFIX
from specscope.core.measure.estimators import POSITION_DECAY, PositionCounts, VerifyCostFit
from specscope.core.measure.metrics import (
    checked_proposals,
)
from specscope.core.measure.snapshot import (
    CONFIDENCE,
    NOT_ENOUGH,
    Costs,
    CurvePoint,
    Estimate,
    MeasurementCost,
    PositionStat,
    RatioInterval,
    Segment,
    price_curve,
    price_span,
    too_wide_reason,
)
from specscope.core.measure.speedup import SpeedupResult, SpeedupSamples, measured_speedup
from specscope.core.measure.verdict import with_verdict
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
    "CONFIDENCE", "NOT_ENOUGH", "Costs", "CurvePoint", "Estimate", "Measurement",
    "MeasurementCost", "PositionCounts", "PositionStat", "RatioInterval", "Segment", "VerifyCostFit",
]

SPEEDUP_REFRESH = 32  # see the module docstring: the measured speed-up's recomputation cadence
SPEEDUP_MIN_REFRESH = 4
WINDOW = ALPHA_WINDOW  # iterations in the recent window (α window, step costs), unless the run says otherwise
ATTACHED_REASON = ("attached to an engine: its passes are not bracketed by plain steps (specscope attach "
                   "--plain-url or --plain-model measures plain requests beside them)")
TRUSTED_PASSES = 3  # passes of one length before an optimistic score takes its cost as known


# ---- small statistics ----------------------------------------------------------------------------------


# ---- the owner -----------------------------------------------------------------------------------------
def _sampling(values: ControlValues) -> tuple[object, ...]:
    """Controls whose change changes acceptance (k does not: α is per judged proposal)."""
    return (values.temperature, values.top_k, values.top_p)


@dataclass
class _SegmentState:
    index: int
    start_iteration: int
    controls: ControlValues | None
    accepted: int = 0
    judged: int = 0
    samples: SpeedupSamples = field(default_factory=SpeedupSamples)
    drafted: Counter[int] = field(default_factory=Counter)  # speculative iterations by proposals made


class Measurement:
    """Fed a run's events in order (by the session, or by replay); gives the current :class:`Estimate`.

    Thread-safe: the loop's thread feeds it, any thread may call :meth:`estimate`.
    """

    def __init__(self, window: int = WINDOW, k_max: int = K_MAX):
        self.window = window
        self.k_max = k_max
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        self.fit = VerifyCostFit()
        self.counts = PositionCounts(POSITION_DECAY)  # the curve's acceptance: since the last sampling change
        self._positions_since = 0  # the iteration ``counts`` start from (0: the run's start)
        self._recent: deque[IterationRecord] = deque(maxlen=self.window)
        self._window_accepted = self._window_judged = 0  # over ``_recent``, kept as it slides
        self._window_version = 0  # changes whenever ``_recent`` does (what the cost and curve caches key on)
        self._timing_cache: tuple[tuple[object, ...], tuple[float | None, float | None, float | None]] | None = None
        self._curve_cache: (tuple[tuple[object, ...], tuple[tuple[CurvePoint, ...], tuple[CurvePoint, ...]]]
                            | None) = None
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
        self._explore_ms = 0.0  # what explored iterations took beyond an iteration at the user's k
        self._drill_ms = 0.0  # wall time a paging drill spent moving layers between iterations
        self._drill_pending = False  # a drill event came since the last iteration
        self._exploring_k: int | None = None  # the k the last iteration explored at (None: it ran at the user's)
        self._plain_run = False  # a --plain run: plain steps are the decoding, not baselines
        self._segments: list[_SegmentState] = [_SegmentState(0, 0, None)]
        self._samples = SpeedupSamples()  # the whole run's; each segment has its own too
        self._drafted: Counter[int] = Counter()  # the whole run's speculative iterations by proposals made
        self._position = 0  # records (and legacy baseline steps) so far: where each sample sits in the run
        self._finished = False
        self._since_plain: int | None = None  # speculative iterations since the last plain sample
        self._speedup_cache: dict[int, tuple[tuple[int, int, bool], SpeedupResult]] = {}
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
                    self.fit.add(1, ms, self._position)
                    for samples in (self._samples, self._segments[-1].samples):
                        samples.add_plain(self._position, ms, False)
                    self._position += 1
                    self._since_plain = 0
                for n, ms in event.verify_ms_by_len.items():
                    self.fit.add(int(n), ms, self._position)
            elif isinstance(event, RunStarted):
                self._plain_run = event.plain
                if self._segments[0].controls is None:
                    self._segments[0].controls = event.controls
            elif isinstance(event, RunFinished):
                self._finished = True
            elif isinstance(event, DrillEvent):
                self._drill_pending = True
            else:
                raise TypeError(f"not an event of a run: {type(event).__name__}")
            if self._last_record is not None:
                self._estimate = self._build()
            return self._estimate

    def _control_change(self, change: ControlChange) -> None:
        if _sampling(change.new) != _sampling(change.old):
            # the curve predicts for the controls now in force: acceptance under other sampling says little
            self.counts = PositionCounts(POSITION_DECAY)
            self._positions_since = change.iteration
        self._segments.append(_SegmentState(len(self._segments), change.iteration, change.new))

    def _iteration(self, r: IterationRecord) -> None:
        if self._segments[0].controls is None:
            self._segments[0].controls = r.controls
        self._last_record = r
        self._iterations += 1
        self._emitted += r.n_emitted
        self._decode_ms += r.iteration_ms
        if self._first_start_s is None:
            self._first_start_s = r.t_start_s
        if r.explore:
            self._explorations += 1
        for flag in r.flags:
            if flag.startswith(BUSY_PREFIX):
                self._last_busy, self._last_busy_iteration = flag, r.iteration
        if self._drill_pending and self._last_end_s is not None and r.t_start_s >= self._last_end_s:
            # the layers moved between the last iteration and this one: that wait is the drill's
            self._drill_ms += (r.t_start_s - self._last_end_s) * 1000.0
        self._drill_pending = False
        self._last_end_s = r.t_end_s
        position, self._position = self._position, self._position + 1
        if r.mode != ATTACHED_MODE:  # an engine's pass time is not this machine's verify time
            self.fit.add(r.n_drafted + 1, r.verify_ms, position)
        if not self._plain_run and r.mode in (PLAIN_MODE, SPECULATIVE_MODE):
            # a --plain run's steps are the decoding: nothing to compare them with
            busy = any(f.startswith(BUSY_PREFIX) for f in r.flags)
            for samples in (self._samples, self._segments[-1].samples):
                samples.add_record(position, r, busy)  # a plain step: its target pass, as plain decoding runs it
            if r.mode == SPECULATIVE_MODE:  # what the predicted span prices (``price_span``)
                for drafted in (self._drafted, self._segments[-1].drafted):
                    drafted[r.n_drafted] += 1
            plain_sample = r.mode == PLAIN_MODE or r.n_drafted == 0
            self._since_plain = 0 if plain_sample else None if self._since_plain is None else self._since_plain + 1
        if r.mode == PLAIN_MODE:
            if not self._plain_run:
                self._baseline_ms += r.iteration_ms
                self._baseline_tokens += r.n_emitted
            return
        if r.mode not in JUDGING_MODES:
            return
        if not r.explore:  # an exploration runs at another k for one iteration: the run's k is the user's
            self._last_judging = r
        if len(self._recent) == self._recent.maxlen:
            gone = self._recent[0]
            self._window_accepted -= gone.n_accepted
            self._window_judged -= checked_proposals(gone)
        self._recent.append(r)
        self._window_accepted += r.n_accepted
        self._window_judged += checked_proposals(r)
        self._window_version += 1
        self.counts.add(r)
        self._spec_iterations += 1
        judged = checked_proposals(r)
        self._accepted += r.n_accepted
        self._judged += judged
        seg = self._segments[-1]
        seg.accepted += r.n_accepted
        seg.judged += judged
        if r.mode == SPECULATIVE_MODE and r.explore:
            self._explore_ms += self._beyond_usual(r)
        elif r.mode == SPECULATIVE_MODE:
            self._spec_ms += r.iteration_ms
            self._spec_tokens += r.n_emitted

    def _beyond_usual(self, r: IterationRecord) -> float:
        """What an explored iteration cost: its time beyond the median speculative iteration at the user's k in
        the recent window, less the time of the tokens it accepted past that k (at speculation's rate so far),
        which a proposal of k could not have accepted (its first k proposals are the same); 0 with nothing to
        compare. Charging it by all its tokens at the run's rate instead charged the text's luck: one late
        exploration read 15-32 ms where it took 6 ms longer."""
        usual = [x for x in self._recent if x.mode == SPECULATIVE_MODE and not x.explore]
        if not usual:
            return 0.0
        gained = max(0, r.n_accepted - usual[-1].controls.k)
        per_token = self._spec_ms / self._spec_tokens if self._spec_tokens else 0.0
        return max(0.0, r.iteration_ms - median(x.iteration_ms for x in usual) - gained * per_token)

    def _speedup(self, samples: SpeedupSamples) -> SpeedupResult:
        """The measured speed-up over these samples, recomputed at each plain sample, at the run's end and every
        max(SPEEDUP_MIN_REFRESH, N // SPEEDUP_REFRESH) speculative iterations (N so far); the last result in
        between."""
        iterations = samples.iterations.n
        hit = self._speedup_cache.get(id(samples))
        if hit is not None:
            (plain, done, finished), result = hit
            if (plain == samples.plain_samples and finished == self._finished
                    and iterations - done < max(SPEEDUP_MIN_REFRESH, iterations // SPEEDUP_REFRESH)):
                return result
        result = measured_speedup(samples)
        self._speedup_cache[id(samples)] = ((samples.plain_samples, iterations, self._finished), result)
        return result

    # ---- reading -----------------------------------------------------------------------------------------
    def estimate(self) -> Estimate | None:
        """The snapshot after the last event (None before any iteration)."""
        with self._lock:
            return self._estimate

    def _provisional_speedup_locked(self) -> float | None:
        """Speculation's rate over the recent window (tokens / ms of its speculative iterations) times the plain
        step (the median of the recent length-1 passes as timed): a rough figure for what a plain step costs
        right now, to space baselines before and beside the measured speed-up (a run whose answer starts in
        prose and then copies changes its speed-up mid-run); never shown. None before a length-1 pass was
        timed."""
        spec = [r for r in self._recent if r.mode == SPECULATIVE_MODE]
        plain = self._costs_locked(spec[-1].drafter if spec else "").plain_step_ms  # the cost model's figure
        ms = sum(r.iteration_ms for r in spec)
        tokens = sum(r.n_emitted for r in spec)
        return tokens / ms * plain if plain and ms > 0 and tokens else None

    def window_records(self) -> list[IterationRecord]:
        with self._lock:
            return list(self._recent)

    def scores(self, k_lo: int, k_hi: int) -> dict[int, float]:
        """The snapshot's curve for k in [k_lo, k_hi] (``Estimate.scores``; empty before any iteration)."""
        est = self.estimate()
        return est.scores(k_lo, k_hi) if est is not None else {}

    # ---- internals (lock held) ---------------------------------------------------------------------------
    def _costs_locked(self, drafter: str) -> Costs:
        key = (self._window_version, drafter)
        if self._timing_cache is None or self._timing_cache[0] != key:  # the window's medians: once per change
            recent = [r for r in self._recent if r.mode == SPECULATIVE_MODE]  # attached passes have no split
            draft_step = draft_iter = None
            if draft_cost_per_token(drafter):
                steps = [r.draft_ms / r.n_drafted for r in recent if r.n_drafted]
                draft_step = float(median(steps)) if steps else None
            elif recent:
                draft_iter = float(median(r.draft_ms for r in recent))
            fixed = (float(median(max(0.0, r.iteration_ms - r.draft_ms - r.verify_ms) for r in recent))
                     if recent else None)
            self._timing_cache = (key, (draft_step, draft_iter, fixed))
        draft_step, draft_iter, fixed = self._timing_cache[1]
        # the target's costs carried to the machine's speed now (the plain step as timed, not the monotone
        # fit's length-1 knot: on a CPU a one-token pass can cost more than a short multi-token one)
        frame = self.fit.frame()
        return Costs(frame.plain_ms, draft_step, draft_iter, fixed, dict(frame.knots), dict(frame.passes),
                     frame.stale, frame.speed_change)

    def _curve_locked(self, costs: Costs, ks: Iterable[int], conditional: list[float] | None = None,
                      cost_floor_beyond: bool = False) -> list[CurvePoint]:
        ks = list(ks)
        if conditional is None:
            alpha = self.counts.pooled
            conditional = self.counts.conditional(max(max(ks, default=1), 1), alpha) if alpha is not None else []
        return price_curve(costs, conditional, ks, cost_floor_beyond, TRUSTED_PASSES)

    def _span_locked(self, costs: Costs, drafted: Counter[int]) -> float | None:
        """The prediction over the iterations behind a measured figure, each at the proposals it made."""
        alpha = self.counts.pooled
        if alpha is None or not drafted:
            return None
        return price_span(costs, self.counts.conditional(max(max(drafted), 1), alpha), dict(drafted))

    def _segment_snapshot(self, seg: _SegmentState, run: SpeedupResult) -> tuple[Segment, SpeedupResult]:
        # with one segment its samples are the run's: computed once
        result = run if len(self._segments) == 1 else self._speedup(seg.samples)
        return Segment(
            index=seg.index, start_iteration=seg.start_iteration,
            controls=seg.controls if seg.controls is not None else ControlValues(),
            alpha=seg.accepted / seg.judged if seg.judged else None, judged=seg.judged,
            measured=result.interval, plain_samples=result.plain_samples,
        ), result

    def _cost_locked(self) -> MeasurementCost | None:
        if self._first_start_s is None or self._last_end_s is None:
            return None
        wall_ms = max(0.0, (self._last_end_s - self._first_start_s) * 1000.0)
        baseline = 0.0
        if self._baseline_tokens and self._spec_tokens and self._spec_ms > 0:
            # what the plain steps cost beyond what speculation takes for as many tokens (never below 0: where
            # speculation loses, the plain step was the faster way to decode them)
            baseline = max(0.0, self._baseline_ms - self._baseline_tokens * self._spec_ms / self._spec_tokens)
        explore = self._explore_ms
        bookkeeping = max(0.0, wall_ms - self._decode_ms - self._drill_ms)  # moving a drill's layers is the drill's
        return MeasurementCost(wall_ms, self._decode_ms, bookkeeping, baseline, self._explorations, explore,
                               self._drill_ms)

    def _build(self) -> Estimate:
        last = self._last_record
        assert last is not None
        r = self._last_judging or last  # the iteration that says what k and drafter are in use
        seg_controls = self._segments[-1].controls
        # the user's k (or the controller's choice), never an exploration's: that one is ``exploring_k``
        k = r.controls.k if self._last_judging is not None or seg_controls is None else seg_controls.k
        drafter = r.drafter
        costs = self._costs_locked(drafter)
        # the curve reads the costs, the fit and the acceptance counts: rebuilt only when one of them changed
        key = (self._window_version, drafter, id(self.fit), self.fit.version, id(self.counts), self._spec_iterations)
        if self._curve_cache is None or self._curve_cache[0] != key:
            ks = range(0, self.k_max + 1)
            self._curve_cache = (key, (tuple(self._curve_locked(costs, ks)),
                                       tuple(self._curve_locked(costs, ks, cost_floor_beyond=True))))
        curve, curve_bound = self._curve_cache[1]
        known = [p for p in curve if p.speedup is not None]
        best = max(known, key=lambda p: (p.speedup or 0.0, -p.k)) if known else None
        predicted = next((p.speedup for p in curve if p.k == k), None)
        judged_w = self._window_judged
        alpha_w = self._window_accepted / judged_w if judged_w else None
        positions = self.counts.stats()
        run = self._speedup(self._samples)
        segment, seg_result = self._segment_snapshot(self._segments[-1], run)
        own = segment.measured  # the segment's own number is the headline once it is narrow enough to be one
        used = seg_result if len(self._segments) > 1 and own is not None and own.measurable else run
        measured, withheld = used.interval, None
        if measured is not None and not measured.measurable:  # too wide to mean anything: the interval, no point
            measured, withheld = None, measured
        scope = segment.label if used is not run else "run"
        span = self._span_locked(costs, self._segments[-1].drafted if used is not run else self._drafted)
        if withheld is not None:
            reason = too_wide_reason(withheld, used.plain_samples)
        elif measured is None:
            if self._recent and all(x.mode == ATTACHED_MODE for x in self._recent):
                reason = ATTACHED_REASON
            elif self._spec_iterations:
                reason = run.reason
            else:
                reason = "plain decoding: nothing to compare"
        else:
            reason = ""
        cost = self._cost_locked()
        wall_s = cost.wall_ms / 1000.0 if cost is not None else 0.0
        est = Estimate(
            iteration=last.iteration, k=k, drafter=drafter, iterations=self._iterations,
            alpha=self._accepted / self._judged if self._judged else None, judged=self._judged,
            alpha_window=alpha_w, judged_window=judged_w, window=len(self._recent),
            mean_acceptance_length=(1.0 + self._accepted / self._spec_iterations) if self._spec_iterations else None,
            tokens_per_iteration=self._emitted / self._iterations if self._iterations else None,
            tokens_per_s=self._emitted * 1000.0 / self._decode_ms if self._decode_ms > 0 else None,
            positions=positions, costs=costs, measured=measured, measured_reason=reason,
            plain_samples=used.plain_samples, busy_left_out=used.busy_left_out, predicted_speedup=predicted,
            curve=curve, curve_bound=curve_bound, predicted_span=span,
            best_k=best.k if best else None, best_speedup=best.speedup if best else None,
            busy=self._last_busy if last.iteration - self._last_busy_iteration < self.window else "",
            measured_scope=scope, run_measured=run.interval, run_plain_limited=run.plain_limited,
            segment=segment, segments=len(self._segments),
            wall_tokens_per_s=self._emitted / wall_s if wall_s > 0 else None, cost=cost,
            k_note=r.k_note, adaptive=r.controls.adaptive_k and r.mode == SPECULATIVE_MODE,
            exploring_k=last.controls.k if last.explore else None,
            exploring_note=last.k_note if last.explore else "",
            measured_withheld=withheld, positions_since=self._positions_since,
            provisional_speedup=self._provisional_speedup_locked(), since_plain_sample=self._since_plain,
        )
        return with_verdict(est, self._samples.busy_records, self._samples.quiet_records)

