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
  the bracketing plain steps' median (one side only for the run's first block, before any baseline, and its
  last, which the run's end closes). The estimate is the Hodges-Lehmann centre of the blocks' log ratios
  (one outlying block barely moves it), with its distribution-free interval. Fewer than ``MIN_BLOCKS``
  blocks give no number, only a reason. A block with an iteration flagged "machine busy" is left out once
  ``MIN_BLOCKS`` quiet blocks exist (a stall of another program's making is not the speed-up).
- A verdict is stated only when the data can carry it: a quiet majority of blocks, an interval no wider
  than ``VERDICT_MAX_SPREAD``, and not while adaptive k has chosen not to speculate (then it speaks of the
  controller's choice).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from statistics import median

from specscope.core.controls import K_MAX
from specscope.core.drafter_catalogue import draft_cost_per_token
from specscope.core.events import ControlChange, Event, RunFinished, RunStarted
from specscope.core.measure import costmodel
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
)
from specscope.core.measure.statistics import MIN_BLOCKS, paired_ratio
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
    "feed_all", "paired_ratio", "replay",
]

MIN_BLOCK_ITERATIONS = 2  # a block cut shorter by a control change is dropped
WINDOW = 32  # iterations in the recent window (α window, step costs)
ATTACHED_REASON = ("attached to an engine: its passes are not bracketed by plain steps (specscope attach "
                   "--plain-url or --plain-model measures plain requests beside them)")
TRUSTED_PASSES = 3  # passes of one length before an optimistic score takes its cost as known


# ---- small statistics ----------------------------------------------------------------------------------


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
        self._window_accepted = self._window_judged = 0  # over ``_recent``, kept as it slides
        self._window_version = 0  # changes whenever ``_recent`` does (what the cost and curve caches key on)
        self._timing_cache: tuple[tuple[object, ...], tuple[float | None, float | None, float | None]] | None = None
        self._curve_cache: tuple[tuple[object, ...], tuple[CurvePoint, ...]] | None = None
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
        self._baseline_seen = False  # a plain step (or a legacy baseline record) came in this run
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
                self._baseline_seen = True
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
                self._baseline_seen = True
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
        if r.mode == SPECULATIVE_MODE and self._block is None and not self._baseline_seen:
            # speculative iterations before the run's first baseline: a block closed by the plain steps after it
            # (one-sided, like the run's last block), so the first baseline already pays for a ratio
            self._block = _Block([], len(self._segments) - 1)
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

    def provisional_speedup(self) -> float | None:
        """Speculation's rate over the recent window (tokens / ms of its speculative iterations) times the plain
        step (the fit at length 1): a rough figure for what a plain step costs right now, to space baselines
        before and beside the measured speed-up (a run whose answer starts in prose and then copies changes
        its speed-up mid-run); never shown. None before a length-1 pass was timed."""
        with self._lock:
            plain = self.fit.points.get(1)
            spec = [r for r in self._recent if r.mode == SPECULATIVE_MODE]
            ms = sum(r.iteration_ms for r in spec)
            tokens = sum(r.n_emitted for r in spec)
            return tokens / ms * plain if plain and ms > 0 and tokens else None

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
        # E(k) for every k at once (the same sums as expected_tokens_from_positions, k by k)
        tokens_by_k = costmodel.expected_tokens_by_k(cond, max(ks, default=0)) if alpha is not None and cond else []
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
                tokens = tokens_by_k[k] if k < len(tokens_by_k) else costmodel.expected_tokens_from_positions(cond, k)
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
        # the curve reads the costs, the fit and the acceptance counts: rebuilt only when one of them changed
        key = (self._window_version, drafter, id(self.fit), self.fit.version, id(self.counts), self._spec_iterations)
        if self._curve_cache is None or self._curve_cache[0] != key:
            self._curve_cache = (key, tuple(self._curve_locked(costs, range(0, self.k_max + 1))))
        curve = self._curve_cache[1]
        known = [p for p in curve if p.speedup is not None]
        best = max(known, key=lambda p: (p.speedup or 0.0, -p.k)) if known else None
        predicted = next((p.speedup for p in curve if p.k == k), None)
        judged_w = self._window_judged
        alpha_w = self._window_accepted / judged_w if judged_w else None
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
            alpha_window=alpha_w, judged_window=judged_w, window=len(self._recent),
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
        return with_verdict(est, len(self._busy_ratios), len(self._ratios))


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


