"""Property tests for the measurement: for random event streams (speculative iterations, plain baseline runs,
control changes, drills, busy flags, at random places), the snapshot the incremental owner hands out after the
last event equals a batch computation from the raw events written from the definitions alone — and it does not
depend on which thread fed the events or where readers looked in between.

The streams are drawn from a seeded generator (200 of them), so a failure names its seed and reproduces.
"""

from __future__ import annotations

import random
import threading
from dataclasses import dataclass
from statistics import median

import pytest

from specscope.core.events import ControlChange, Event, RunFinished, RunStarted
from specscope.core.measure.busy import BUSY_PREFIX
from specscope.core.measure.measurement import MIN_BLOCKS, Measurement, paired_ratio
from specscope.core.measure.metrics import checked_proposals
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
    quiet: list[float]
    busy: list[float]
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
    # Blocks: a run of speculative iterations not split by a plain iteration, a change or the end. Its baseline
    # before is every plain iteration since the speculative iteration before it (a change in between does not
    # matter: a plain step does not depend on the controls), at least one; after, every plain iteration until
    # the next speculative one, or none when the run ends (one-sided). A block that a speculative iteration
    # follows with no plain one in between has no baseline after it and is dropped, as is one under 2 iterations;
    # one whose plain iterations after it are still going on (nothing followed them yet) is not counted yet.
    runs: list[tuple[int, int]] = []  # [first, last] indices into events
    start = None
    for n, e in enumerate(events):
        spec_here = isinstance(e, IterationRecord) and e.mode == "speculative"
        if spec_here and start is None:
            start = n
        elif not spec_here and start is not None and (isinstance(e, (ControlChange, RunFinished))
                                                        or (isinstance(e, IterationRecord) and e.mode == "plain")):
            runs.append((start, n - 1))
            start = None
    if start is not None:
        runs.append((start, len(events) - 1))

    def plain_between(lo: int, hi: int) -> list[float]:
        return [e.verify_ms for e in events[lo:hi] if isinstance(e, IterationRecord) and e.mode == "plain"]

    def is_spec(e: Event) -> bool:
        return isinstance(e, IterationRecord) and e.mode == "speculative"

    quiet, busy = [], []
    for first, last in runs:
        prev_spec = max((n for n in range(first) if is_spec(events[n])), default=-1)
        before = plain_between(prev_spec + 1, first)
        next_spec = next((n for n in range(last + 1, len(events)) if is_spec(events[n])), None)
        ended = any(isinstance(e, RunFinished) for e in events[last + 1:])
        after = plain_between(last + 1, next_spec if next_spec is not None else len(events))
        run = [e for e in events[first:last + 1] if isinstance(e, IterationRecord)]
        # the baseline after it counts once it is complete: a speculative iteration or the end follows it
        closed = (next_spec is not None and after) or (next_spec is None and ended)
        if not before or len(run) < 2 or not closed:
            continue
        ratio = sum(r.n_emitted for r in run) / sum(r.iteration_ms for r in run) * median(before + after)
        (busy if any(f.startswith(BUSY_PREFIX) for r in run for f in r.flags) else quiet).append(ratio)
    plain_in_run = [r for r in records if r.mode == "plain"]
    normal = [r for r in spec if not r.explore]
    spec_ms, spec_tokens = sum(r.iteration_ms for r in normal), sum(r.n_emitted for r in normal)

    def extra(rs: list[IterationRecord]) -> float:
        """What these iterations cost beyond speculation at the user's k for as many tokens (never below 0)."""
        if not rs or not spec_tokens or spec_ms <= 0:
            return 0.0
        return max(0.0, sum(r.iteration_ms for r in rs) - sum(r.n_emitted for r in rs) * spec_ms / spec_tokens)

    spent = max(0.0, wall_ms - decode_ms) + extra(plain_in_run) + extra([r for r in spec if r.explore])
    overhead = spent / wall_ms if wall_ms > 0 else None
    return Reference(alpha, segment_alpha, emitted * 1000.0 / decode_ms if decode_ms > 0 else None,
                     emitted * 1000.0 / wall_ms if wall_ms > 0 else None, quiet, busy, overhead)


def used(quiet: list[float], busy: list[float]) -> list[float]:
    return quiet if len(quiet) >= MIN_BLOCKS or not busy else quiet + busy


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
    expected = paired_ratio(used(ref.quiet, ref.busy))
    assert est.run_measured == (pytest.approx(expected) if expected is not None else None), seed
    assert est.cost is not None
    assert est.cost.share == (pytest.approx(ref.overhead) if ref.overhead is not None else None)
    # the headline is the run's unless the segment has a number of its own; it never blanks once the run has one
    if est.segments == 1 or seg.measured is None:
        assert est.measured == est.run_measured and (est.measured is None or est.measured_scope == "run")
    else:
        assert est.measured == seg.measured and est.measured_scope == seg.label


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
