"""Property tests for the measurement: for random event streams (speculative iterations, plain baseline runs,
control changes, drills, busy flags, at random places), the snapshot the incremental owner hands out after the
last event equals a batch computation from the raw events written from the definitions alone — and it does not
depend on which thread fed the events or where readers looked in between.

The streams are drawn from a seeded generator (200 of them), so a failure names its seed and reproduces.
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass
from statistics import median

import pytest
from scipy import stats

from specscope.core.events import ControlChange, Event, RunFinished, RunStarted
from specscope.core.measure.busy import BUSY_PREFIX
from specscope.core.measure.measurement import Measurement
from specscope.core.measure.metrics import checked_proposals
from specscope.core.measure.snapshot import RatioInterval
from specscope.core.measure.speedup import MIN_PASSES, MIN_PLAIN_SAMPLES, PASSES_EACH_SIDE
from specscope.core.records import ControlValues, DrillEvent, IterationRecord

SEEDS = range(200)  # 200 streams in about 10 s; the batch definitions hold on 500 too (checked once)


def random_stream(seed: int) -> list[Event]:
    rng = random.Random(seed)
    controls = ControlValues(k=rng.randint(1, 6))
    events: list[Event] = [RunStarted("local", "t", "d", "model", "", "p", 5, controls, 500)]
    t = 100.0
    for i in range(rng.randint(1, 160)):
        roll = rng.random()
        if roll < 0.04:
            new = ControlValues(k=rng.randint(1, 6), temperature=rng.choice([0.0, 0.0, 0.7]))
            if (new.k, new.temperature) != (controls.k, controls.temperature):
                events.append(ControlChange(i, controls, new, t))
                controls = new
        elif roll < 0.05:
            events.append(DrillEvent(rng.choice(["start", "end"]), "draft", 2, 2, "disk", i, t_s=t))
        plain = rng.random() < 0.3
        ms = rng.uniform(5.0, 40.0)
        if plain:
            r = IterationRecord(i, "plain", "none", controls, [], 0, 0, 1, 0.0, ms * 0.9, 0.0, ms, 0, 0, t,
                                t + ms / 1000.0)
        else:
            k = controls.k
            drafted = rng.randint(0, k)
            accepted = rng.randint(0, drafted)
            r = IterationRecord(i, "speculative", "model", controls, [], drafted, accepted, accepted + 1,
                                0.5 * drafted, ms * 0.8, 0.1, ms, 0, 0, t, t + ms / 1000.0,
                                explore=rng.random() < 0.05)
        if rng.random() < 0.08:
            r.flags = [f"{BUSY_PREFIX}: scripted"]
        events.append(r)
        t += ms / 1000.0 + rng.uniform(0.0, 0.003)  # bookkeeping between iterations
    if rng.random() < 0.8:
        events.append(RunFinished("max_new_tokens", 0, 0, 1.0, 2.0, t_s=t))
    return events


# ---- the definitions, in batch ----------------------------------------------------------------------------
@dataclass
class Reference:
    alpha: float | None
    segment_alpha: float | None
    tokens_per_s: float | None
    wall_tokens_per_s: float | None
    measured: RatioInterval | None
    overhead: float | None


def reference(events: list[Event]) -> Reference:
    records = [e for e in events if isinstance(e, IterationRecord)]
    spec = [r for r in records if r.mode == "speculative"]
    judged = sum(checked_proposals(r) for r in spec)
    alpha = sum(r.n_accepted for r in spec) / judged if judged else None
    last_change = max((n for n, e in enumerate(events) if isinstance(e, ControlChange)), default=-1)
    seg = [e for e in events[last_change + 1:] if isinstance(e, IterationRecord) and e.mode == "speculative"]
    seg_judged = sum(checked_proposals(r) for r in seg)
    segment_alpha = sum(r.n_accepted for r in seg) / seg_judged if seg_judged else None
    emitted = sum(r.n_emitted for r in records)
    decode_ms = sum(r.iteration_ms for r in records)
    wall_ms = (records[-1].t_end_s - records[0].t_start_s) * 1000.0 if records else 0.0
    measured = speedup_reference(records_up_to_refresh(events))
    plain_in_run = [r for r in records if r.mode == "plain"]
    normal = [r for r in spec if not r.explore]
    spec_ms, spec_tokens = sum(r.iteration_ms for r in normal), sum(r.n_emitted for r in normal)

    def extra(rs: list[IterationRecord]) -> float:
        """What these iterations cost beyond speculation at the user's k for as many tokens (never below 0)."""
        if not rs or not spec_tokens or spec_ms <= 0:
            return 0.0
        return max(0.0, sum(r.iteration_ms for r in rs) - sum(r.n_emitted for r in rs) * spec_ms / spec_tokens)

    judging = [r for r in records if r.mode in ("speculative", "attached")]

    def beyond_usual(j: int) -> float:
        """An explored iteration's time beyond the median speculative iteration at the user's k among the 32
        judging iterations up to it, less its tokens accepted past that k at speculation's rate before it."""
        usual = [r for r in judging[max(0, j - 31):j + 1] if r.mode == "speculative" and not r.explore]
        if not usual:
            return 0.0
        before = [r for r in records[:records.index(judging[j])] if r.mode == "speculative" and not r.explore]
        tokens = sum(r.n_emitted for r in before)
        per_token = sum(r.iteration_ms for r in before) / tokens if tokens else 0.0
        gained = max(0, judging[j].n_accepted - usual[-1].controls.k)
        return max(0.0, judging[j].iteration_ms - median(r.iteration_ms for r in usual) - gained * per_token)

    explored = sum(beyond_usual(j) for j, r in enumerate(judging) if r.mode == "speculative" and r.explore)
    # the wait between two iterations around a paging drill's event is the drill moving layers, not measuring
    drill_ms, previous, drilled = 0.0, None, False
    for e in events:
        if isinstance(e, DrillEvent):
            drilled = True
        elif isinstance(e, IterationRecord):
            if drilled and previous is not None:
                drill_ms += (e.t_start_s - previous.t_end_s) * 1000.0
            previous, drilled = e, False
    spent = max(0.0, wall_ms - decode_ms - drill_ms) + extra(plain_in_run) + explored
    overhead = spent / wall_ms if wall_ms > 0 else None
    return Reference(alpha, segment_alpha, emitted * 1000.0 / decode_ms if decode_ms > 0 else None,
                     emitted * 1000.0 / wall_ms if wall_ms > 0 else None, measured, overhead)


def is_busy(r: IterationRecord) -> bool:
    return any(f.startswith(BUSY_PREFIX) for f in r.flags)


def records_up_to_refresh(events: list[Event]) -> list[IterationRecord]:
    """The records the measured speed-up was last computed over: it is recomputed at each plain sample (a plain
    step, an iteration that proposed nothing), at the run's end, and once max(4, N // 32) speculative iterations
    came since (N so far, at least every 4)."""
    records: list[IterationRecord] = []
    computed_at = 0  # records at the last computation
    last = (0, 0, False)  # (plain samples, speculative iterations, finished) then
    plain = spec = 0
    finished = False
    for e in events:
        if isinstance(e, IterationRecord):
            records.append(e)
            spec += e.mode == "speculative"
            plain += e.mode == "plain" or (e.mode == "speculative" and e.n_drafted == 0)
        finished |= isinstance(e, RunFinished)
        if not records:
            continue
        if (plain, finished) != (last[0], last[2]) or spec - last[1] >= max(4, spec // 32) or computed_at == 0:
            computed_at, last = len(records), (plain, spec, finished)
    return records[:computed_at]


def speedup_reference(records: list[IterationRecord]) -> RatioInterval | None:
    """The measured speed-up from its definition (core/measure/speedup.py), in plain Python."""
    rows = [(n, r) for n, r in enumerate(records)]
    busy_any = any(is_busy(r) for _, r in rows)
    quiet_plain = [(n, r) for n, r in rows if not is_busy(r) and (r.mode == "plain" or (
        r.mode == "speculative" and r.n_drafted == 0))]
    quiet_passes = [r for _, r in rows if not is_busy(r) and r.mode == "speculative" and r.n_drafted > 0]
    quiet_only = busy_any and len(quiet_plain) >= MIN_PLAIN_SAMPLES and len(quiet_passes) >= MIN_PASSES
    use = [(n, r) for n, r in rows if not (quiet_only and is_busy(r))]
    plain = [(n, math.log(r.verify_ms)) for n, r in use
             if r.mode == "plain" or (r.mode == "speculative" and r.n_drafted == 0)]
    passes = [(n, math.log(r.verify_ms), r.n_drafted + 1) for n, r in use
              if r.mode == "speculative" and r.n_drafted > 0]
    its = [(n, r.n_emitted, r.iteration_ms) for n, r in use if r.mode == "speculative"]
    lengths = [L for _, _, L in passes]
    track = [(n, lv - median(v for _, v, L2 in passes if L2 == L)) for n, lv, L in passes if lengths.count(L) >= 2]
    if len(plain) < MIN_PLAIN_SAMPLES or len(track) < MIN_PASSES or len(its) < 2:
        return None

    def level(x: int, leave_out: int | None = None) -> float:
        before = [i for i, (n, _) in enumerate(track) if n < x][-PASSES_EACH_SIDE:]
        after = [i for i, (n, _) in enumerate(track) if n >= x and i != leave_out]
        after = after[:PASSES_EACH_SIDE]
        window = before + after
        return sum(track[i][1] for i in window) / len(window)

    q = [lp - level(x) for x, lp in plain]
    resid = []
    for i, (_, rel) in enumerate(track):
        others = [j for j in range(max(0, i - PASSES_EACH_SIDE), min(len(track), i + PASSES_EACH_SIDE + 1)) if j != i]
        resid.append(rel - sum(track[j][1] for j in others) / len(others))
    n, p = len(q), len(track)
    mean_q = sum(q) / n
    var_own = sum((x - mean_q) ** 2 for x in q) / (n - 1)
    mean_r = sum(resid) / p
    var_pass = sum((x - mean_r) ** 2 for x in resid) / (p - 1)
    var_q, df_q = ((n - 1) * var_own + (p - 1) * var_pass) / (n - 1 + p - 1), n - 1 + p - 1
    if var_own > var_q:
        var_q, df_q = var_own, n - 1
    a = [t * math.exp(level(x)) for x, t, _ in its]
    ms = [m for _, _, m in its]
    rate = sum(a) / sum(ms)
    se_q2 = var_q / n
    se_r2 = sum((ai - rate * mi) ** 2 for ai, mi in zip(a, ms, strict=True)) * len(a) / (len(a) - 1) / sum(a) ** 2
    centre = mean_q + math.log(rate)
    se2 = se_q2 + se_r2
    if se2 <= 0:
        return RatioInterval(math.exp(centre), math.exp(centre), math.exp(centre), n)
    df = se2 ** 2 / (se_q2 ** 2 / df_q + se_r2 ** 2 / (len(a) - 1))
    half = float(stats.t.ppf(0.975, max(df, 1.0))) * math.sqrt(se2)
    return RatioInterval(math.exp(centre), math.exp(centre - half), math.exp(centre + half), n)


@pytest.mark.parametrize("seed", SEEDS)
def test_the_incremental_snapshot_equals_the_batch_definitions(seed: int) -> None:
    events = random_stream(seed)
    est = None
    m = Measurement()
    for e in events:
        est = m.feed(e)
    ref = reference(events)
    if not any(isinstance(e, IterationRecord) for e in events):
        assert est is None
        return
    assert est is not None
    assert est.alpha == pytest.approx(ref.alpha) if ref.alpha is not None else est.alpha is None
    seg = est.segment
    assert seg is not None
    assert seg.alpha == pytest.approx(ref.segment_alpha) if ref.segment_alpha is not None else seg.alpha is None
    assert est.tokens_per_s == pytest.approx(ref.tokens_per_s)
    if ref.wall_tokens_per_s is None:
        assert est.wall_tokens_per_s is None
    else:
        assert est.wall_tokens_per_s == pytest.approx(ref.wall_tokens_per_s)
    if ref.measured is None:
        assert est.run_measured is None, seed
    else:
        got = est.run_measured
        assert got is not None and got.n == ref.measured.n, seed
        assert (got.value, got.lo, got.hi) == pytest.approx(
            (ref.measured.value, ref.measured.lo, ref.measured.hi), rel=1e-7), seed
    assert est.cost is not None
    assert est.cost.share == (pytest.approx(ref.overhead) if ref.overhead is not None else None)
    # the headline is the run's unless the segment has a measurable number of its own; an interval too wide to
    # mean anything (hi/lo over 4) is withheld: no point, the interval in the reason
    own = est.segments > 1 and seg.measured is not None and seg.measured.measurable
    candidate = seg.measured if own else est.run_measured
    if candidate is None:
        assert est.measured is None and est.measured_withheld is None
    elif candidate.measurable:
        assert est.measured == candidate and est.measured_withheld is None
        assert est.measured_scope == (seg.label if own else "run")
    else:
        assert est.measured is None and est.measured_withheld == candidate
        assert est.measured_reason.startswith(f"not measurable yet: interval {candidate.lo:.2f}–{candidate.hi:.2f}")


@pytest.mark.parametrize("seed", range(20))
def test_reading_from_another_thread_while_feeding_changes_nothing(seed: int) -> None:
    events = random_stream(seed)
    quiet = Measurement()
    for e in events:
        quiet.feed(e)
    busy = Measurement()
    stop = threading.Event()
    seen = []

    def reader() -> None:
        while not stop.is_set():
            seen.append(busy.estimate())
            busy.scores(0, 8)

    t = threading.Thread(target=reader)
    t.start()
    try:
        for e in events:
            busy.feed(e)
    finally:
        stop.set()
        t.join()
    assert busy.estimate() == quiet.estimate()
