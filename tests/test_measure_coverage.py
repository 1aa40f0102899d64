"""The measured speed-up's interval covers the truth at about its nominal 95%, on synthetic event streams with a
known speed-up, noise, spikes and slow drift (tests/interval_sim.py), with as few plain steps as a short run of a
strong drafter affords; and the measurement (the one owner) gives exactly that interval for such a stream.

Seeded: every figure here is deterministic. scripts/bench_interval_coverage.py reports every scenario, beside the
block method it replaced.
"""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from specscope.core.events import RunFinished
from specscope.core.measure.measurement import Measurement
from specscope.core.measure.statistics import student_t_quantile
from tests.interval_sim import SCENARIOS, block_interval, coverage, new_interval, synthetic_run

SEEDS = range(150)
BY_NAME = {sc.name: sc for sc in SCENARIOS}


@pytest.mark.parametrize(("name", "least"), [
    ("eagle, 2 plain steps", 0.90),
    ("eagle, 3 plain steps", 0.90),
    ("eagle, strong drift", 0.90),
    ("draft model, loses", 0.90),
    ("lookup, prose then copying, 1 baseline", 0.90),
    ("eagle, plain steps 3x as noisy", 0.85),  # the passes understate their noise: their own spread takes over
])
def test_the_interval_covers_the_true_speedup_at_about_its_nominal_rate(name: str, least: float) -> None:
    cov = coverage(BY_NAME[name], SEEDS)
    assert cov.shown == cov.runs  # every run gives an interval, from two plain steps on
    assert cov.rate >= least, f"{name}: {cov.rate:.3f}"
    assert cov.rate <= 0.995 or name.startswith("lookup")  # not vacuously wide (lookup's phases make it wide)


def test_three_plain_steps_give_an_interval_where_the_block_method_gave_none() -> None:
    sc = BY_NAME["eagle, 3 plain steps"]
    old = coverage(sc, range(20), block_interval)
    assert old.shown == 0  # 3 plain steps bracket 4 blocks: fewer than its 5
    new = coverage(sc, range(20))
    assert new.shown == 20 and new.median_width < 1.7


def test_with_the_same_plain_steps_the_interval_is_no_wider_than_the_block_methods() -> None:
    sc = BY_NAME["eagle, 7 plain steps (384 tokens)"]
    old, new = coverage(sc, SEEDS, block_interval), coverage(sc, SEEDS)
    assert old.shown == new.shown == len(SEEDS)
    assert new.median_width <= old.median_width and new.rate >= 0.9


def test_at_128_tokens_three_plain_steps_give_no_wider_an_interval_than_the_old_schedules_twelve() -> None:
    """The issue's target, in simulation: the old schedule (2-step baselines every 6 iterations, 12 plain steps
    in 48 iterations) with the block method, against the default's 3 plain steps in 50 with this method."""
    old = coverage(BY_NAME["eagle, 2-step baselines every 6 (old schedule)"], SEEDS, block_interval)
    new = coverage(BY_NAME["eagle, 3 plain steps"], SEEDS)
    assert old.shown == new.shown == len(SEEDS)
    assert new.median_width <= old.median_width


def test_the_measurement_gives_the_simulated_streams_interval() -> None:
    """The coverage above is the owner's: the measurement fed the stream hands out the same interval."""
    for seed in range(3):
        records, _ = synthetic_run(np.random.default_rng(seed), BY_NAME["eagle, busy records"])
        m = Measurement()
        for r in records:
            m.feed(r)
        est = m.feed(RunFinished("max_new_tokens", len(records), 0, 1.0, 1.0))
        assert est is not None and est.run_measured == new_interval(records)
        assert est.busy_left_out > 0  # the busy records were left out, as the simulated truth has them


def test_a_replayed_trace_gives_the_same_interval_free_plain_samples_included(tmp_path) -> None:
    """The trace is the event stream: written to the event log and read back, a run whose plain samples are
    iterations that proposed nothing (no baseline at all) replays to the same snapshot."""
    from specscope.core.events import RunStarted
    from specscope.core.measure.run import replay
    from specscope.core.records import ControlValues
    from specscope.core.trace.event_log import read_events, write_events

    records, _ = synthetic_run(np.random.default_rng(7), BY_NAME["lookup, prose then copying, no baseline"])
    events = [RunStarted("local", "t", "", "lookup", "", "p", 5, ControlValues(k=3), 128), *records,
              RunFinished("eos", len(records), 0, 1.0, 1.0)]
    live = Measurement()
    for e in events:
        live.feed(e)
    path = tmp_path / "run.events.jsonl"
    with path.open("w", encoding="utf-8") as f:
        write_events(f, events)
    back, problems = read_events(path)
    assert not problems and len(back) == len(events)
    est = live.estimate()
    assert est is not None and est.measured is not None and est.plain_samples >= 2
    assert replay(back).estimate() == est


@pytest.mark.parametrize("p", [0.6, 0.9, 0.975, 0.995, 0.025])
def test_student_t_quantile_closed_forms(p: float) -> None:
    # one degree of freedom is Cauchy's distribution, two have a closed form, and many are the normal's
    assert student_t_quantile(p, 1.0) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-9)
    assert student_t_quantile(p, 2.0) == pytest.approx((2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-9)
    assert student_t_quantile(p, 1e7) == pytest.approx(NormalDist().inv_cdf(p), rel=1e-6)


def test_student_t_quantile_real_degrees_lie_between_whole_ones() -> None:
    # the Welch-Satterthwaite df is real: its quantile falls between its neighbours', heavier tails at fewer df
    assert student_t_quantile(0.975, 1.0) > student_t_quantile(0.975, 1.7) > student_t_quantile(0.975, 2.0)
    assert student_t_quantile(0.025, 3.4) == pytest.approx(-student_t_quantile(0.975, 3.4))
    for bad in ((0.0, 3.0), (1.0, 3.0), (0.5, 0.0)):
        with pytest.raises(ValueError):
            student_t_quantile(*bad)
