"""The predicted speed-up prices every k from costs timed adjacent in time: a plain step timed while the machine
ran at another speed is carried to now by the verify passes around it (as the measured speed-up pairs them),
and the snapshot says which costs were timed at another speed. k = 0 is plain decoding: exactly 1.

Also the numbers issue 40 found wrong: the k in use during an exploration, a paging drill's time charged to the
measurement, and the export's last row.
"""

from __future__ import annotations

import csv
import random
from dataclasses import replace

import pytest

from specscope.core.events import RunFinished, RunStarted
from specscope.core.measure.measurement import Measurement
from specscope.core.measure.snapshot import Costs, price_curve
from specscope.core.records import ControlValues, DrillEvent, IterationRecord
from specscope.core.trace.files import write_trace

K = 3


def spec(i: int, verify_ms: float, accepted: int = 2, k: int = K, draft_ms: float = 1.0, t: float | None = None,
         explore: bool = False) -> IterationRecord:
    """A speculative iteration at ``k`` whose verify pass (k + 1 tokens) took ``verify_ms``."""
    ms = verify_ms + k * draft_ms + 0.5
    start = float(i) if t is None else t
    return IterationRecord(
        iteration=i, mode="speculative", drafter="model", controls=ControlValues(k=k), tokens=[], n_drafted=k,
        n_accepted=min(accepted, k), n_emitted=min(accepted, k) + 1, draft_ms=k * draft_ms, verify_ms=verify_ms,
        rollback_ms=0.5, iteration_ms=ms, context_len=0, generated_len=0, t_start_s=start,
        t_end_s=start + ms / 1000.0, explore=explore,
    )


def plain(i: int, ms: float, t: float | None = None) -> IterationRecord:
    start = float(i) if t is None else t
    return IterationRecord(
        iteration=i, mode="plain", drafter="none", controls=ControlValues(k=K), tokens=[], n_drafted=0,
        n_accepted=0, n_emitted=1, draft_ms=0.0, verify_ms=ms, rollback_ms=0.0, iteration_ms=ms, context_len=0,
        generated_len=0, t_start_s=start, t_end_s=start + ms / 1000.0,
    )


def run(stretches: list[tuple[int, float, float | None]]) -> tuple[Measurement, list[IterationRecord]]:
    """Stretches of (iterations, verify pass ms, plain step ms or None): a plain step opens each stretch that has
    one; the machine's speed is the stretch's (pass and plain step scale together, as they do on a CPU)."""
    m = Measurement()
    records: list[IterationRecord] = []
    i = 0
    for count, verify_ms, plain_ms in stretches:
        if plain_ms is not None:
            records.append(plain(i, plain_ms))
            i += 1
        for j in range(count):
            records.append(spec(i, verify_ms * (1.0 + 0.02 * ((j % 3) - 1))))  # a little timing noise
            i += 1
    for r in records:
        m.feed(r)
    return m, records


def test_a_plain_step_timed_under_load_is_priced_at_the_speed_of_the_passes_now():
    """Issue 40: a plain step of 200 ms timed early under load, verify passes of ~120 ms later: the prediction
    priced every k against 200 ms and read ×3.02 where the run measured ×1.75."""
    m, _ = run([(12, 240.0, 200.0), (12, 240.0, 200.0), (60, 120.0, None)])
    est = m.estimate()
    assert est is not None
    # passes now take half what they took beside the plain steps: so does the plain step
    assert est.costs.plain_step_ms == pytest.approx(100.0, rel=0.05)
    assert est.costs.verify_ms(K + 1) == pytest.approx(120.0, rel=0.05)
    assert "plain step" in est.costs.stale and "stale: plain step" in est.costs.stale_text()
    # priced at the plain step as timed (200 ms) it would read about twice as high
    assert est.predicted_speedup is not None
    old = price_curve(replace(est.costs, plain_step_ms=200.0), [p.rate or 0.0 for p in est.positions], [K])[0]
    assert old.speedup is not None and old.speedup == pytest.approx(2 * est.predicted_speedup, rel=0.08)


def test_a_plain_step_timed_before_a_drill_is_priced_at_the_passes_during_it():
    """Issue 40: during a target paging drill the advisor said "do not speculate" from a plain step timed
    before the drill against passes timed during it."""
    m, _ = run([(12, 120.0, 100.0), (12, 120.0, 100.0), (40, 360.0, None)])
    est = m.estimate()
    assert est is not None
    assert est.costs.plain_step_ms == pytest.approx(300.0, rel=0.05)
    assert "plain step" in est.costs.stale
    assert est.costs.speed_change == pytest.approx(3.0, rel=0.05)  # passes take 3x as long as at the plain step


def test_a_fresh_plain_step_is_not_stale_and_the_schedule_asks_for_one_when_it_is():
    from specscope.core.measure.schedule import BaselineSchedule

    m, _ = run([(12, 120.0, 100.0), (12, 120.0, 100.0), (30, 360.0, None)])
    schedule = BaselineSchedule(m, min_gap=6, max_gap=48)
    assert "plain step" in m.estimate().costs.stale
    assert schedule.next_gap(since=6) == 6  # the machine's speed moved: a plain step as soon as allowed
    m.feed(plain(1000, 300.0))
    for j in range(10):
        m.feed(spec(1001 + j, 360.0))
    est = m.estimate()
    assert est.costs.stale == () and est.costs.plain_step_ms == pytest.approx(300.0, rel=0.05)


def test_on_a_steady_machine_the_costs_are_the_costs_as_timed():
    m, _ = run([(10, 120.0, 100.0), (10, 120.0, 100.0), (10, 120.0, 100.0)])
    est = m.estimate()
    assert est.costs.plain_step_ms == pytest.approx(100.0, rel=0.01)
    assert est.costs.verify_ms(K + 1) == pytest.approx(120.0, rel=0.03)
    assert est.costs.stale == ()


def random_costs(rng: random.Random) -> Costs:
    lengths = sorted(rng.sample(range(1, 18), rng.randint(1, 6)))
    knots = {n: rng.uniform(0.01, 500.0) for n in lengths}  # not even monotone: k = 0 must not read them
    per_step = rng.random() < 0.5
    return Costs(
        plain_step_ms=rng.choice([rng.uniform(1e-3, 1e3), rng.uniform(1e3, 1e6)]),
        draft_step_ms=rng.uniform(0.0, 300.0) if per_step else None,
        draft_iteration_ms=None if per_step else rng.uniform(0.0, 300.0),
        fixed_ms=rng.choice([None, 0.0, rng.uniform(0.0, 100.0)]),
        verify_ms_by_len=knots, passes_by_len={n: rng.randint(1, 16) for n in lengths},
    )


def test_k_0_is_plain_decoding_and_exactly_1_over_random_costs():
    """A seeded sweep (hypothesis is not installed here): whatever the costs and acceptance, k = 0 is 1.0."""
    rng = random.Random(40)
    for _ in range(2000):
        costs = random_costs(rng)
        conditional = [rng.random() for _ in range(rng.randint(0, 5))]
        point = price_curve(costs, conditional, [0, 1, 4], cost_floor_beyond=rng.random() < 0.5)[0]
        assert point.k == 0 and point.speedup == 1.0


def test_k_0_is_exactly_1_in_a_measured_run_with_random_timings():
    rng = random.Random(7)
    for trial in range(20):
        m = Measurement()
        est = None
        for i in range(rng.randint(8, 60)):
            if rng.random() < 0.15:
                est = m.feed(plain(i, rng.uniform(5.0, 400.0)))
            else:
                k = rng.randint(0, 8)
                est = m.feed(spec(i, rng.uniform(5.0, 400.0), rng.randint(0, k), k=k,
                                  draft_ms=rng.uniform(0.1, 50.0)))
        assert est is not None
        if est.costs.plain_step_ms is not None:
            assert est.speedup_at(0) == 1.0, trial


def test_an_exploration_is_not_the_runs_k():
    """Issue 40: "k in use: 8" while the user's k was 4: the exploration's k shown as the run's."""
    m = Measurement()
    for i in range(8):
        m.feed(spec(i, 120.0))
    est = m.feed(replace(spec(8, 200.0, k=8, explore=True),
                         k_note="exploring k=8 to time a verify pass of 9 tokens never measured"))
    assert est.k == K and est.exploring_k == 8
    assert est.k_note_text().startswith("exploring k=8")
    assert est.predicted_speedup == est.speedup_at(K)
    est = m.feed(spec(9, 120.0))
    assert est.k == K and est.exploring_k is None


def test_a_drills_move_is_not_measurement_overhead():
    """Issue 40: "measurement overhead 23.9%" during a drill: moving layers was charged to the measurement."""
    m = Measurement()
    t = 0.0
    for i in range(10):
        m.feed(spec(i, 20.0, t=t))
        t += 0.0245  # 24 ms iterations, ~0.5 ms between them
    m.feed(DrillEvent("start", "target", 4, 4, "disk", 10, moved_bytes=1 << 30, t_s=t))
    t += 3.0  # the layers take 3 s to move
    for i in range(10, 20):
        est = m.feed(spec(i, 20.0, t=t))
        t += 0.0245
    assert est is not None and est.cost is not None
    assert est.cost.drill_ms == pytest.approx(3000.0, abs=5.0)
    assert est.cost.bookkeeping_ms < 50.0
    assert est.cost.share is not None and est.cost.share < 0.05


def test_the_exports_last_row_is_the_snapshot_the_run_ends_on(tmp_path):
    """Issue 40: the CSV's last row read ×1.76 (1.21–2.54) while the window ended at ×1.75 (1.22–2.52): the run's
    end recomputes the measured speed-up, and the export wrote the row before it."""
    events: list = [RunStarted("local", "t", "d", "model", "t + d", "p", 1, ControlValues(k=K), 128)]
    i = 0
    for stretch in range(6):
        events.append(plain(i, 100.0 + stretch))
        i += 1
        for _ in range(10):
            events.append(spec(i, 120.0 + 3 * ((i * 7) % 5), accepted=(i * 5) % 4))
            i += 1
    events.append(RunFinished("max_new_tokens", i, i, 1.0, 0.0))
    m = Measurement()
    snaps = [m.feed(e) for e in events]
    last_iteration, final = snaps[-2], snaps[-1]
    assert final is not None and final.measured is not None and last_iteration is not None
    assert last_iteration.measured != final.measured  # the end's recomputation moved it (what the test is about)
    paths = write_trace(tmp_path / "run.csv", events)
    with paths.iterations.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert float(rows[-1]["measured_speedup"]) == final.measured.value
    assert float(rows[-1]["measured_speedup_lo"]) == final.measured.lo
    assert rows[-1]["finish_reason"] == "max_new_tokens"


def test_the_pass_length_in_use_is_never_stale_however_noisy_the_machine():
    """The k in use times its pass at every iteration: it is part of "now", not a cost carried to it (on a
    loaded machine two means of noisy passes differ by more than 15% and called EAGLE's own pass stale)."""
    rng = random.Random(3)
    m = Measurement()
    for i in range(120):
        if i % 12 == 0:
            m.feed(plain(i, 100.0 * rng.lognormvariate(0.0, 0.5)))
        else:
            m.feed(spec(i, 120.0 * rng.lognormvariate(0.0, 0.5)))
    assert f"verify pass of {K + 1}" not in m.estimate().costs.stale
