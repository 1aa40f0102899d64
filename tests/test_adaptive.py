"""Adaptive k policies on constructed records with known costs (no timing involved)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from specscope.core.adaptive import (
    CostModelKPolicy,
    HeuristicKPolicy,
    PositionCounts,
    monotone_verify_costs,
    position_counts,
)
from specscope.core.live import LiveMeasurement
from specscope.core.records import BaselineRecord, ControlValues, IterationRecord

SWEEP = {n: 10.0 + 0.5 * (n - 1) for n in range(1, 18)}  # verify cost by pass length


def rec(drafted: int, accepted: int, draft_step_ms: float = 1.0) -> IterationRecord:
    verify = SWEEP[drafted + 1]
    draft = draft_step_ms * drafted
    return IterationRecord(
        iteration=0, mode="speculative", drafter="t", controls=ControlValues(k=max(1, drafted)), tokens=[],
        n_drafted=drafted, n_accepted=accepted, n_emitted=accepted + 1, draft_ms=draft, verify_ms=verify,
        rollback_ms=0.2, iteration_ms=draft + verify + 0.2, context_len=0, generated_len=0,
        t_start_s=0.0, t_end_s=0.0,
    )


def policy_fed(records: list[IterationRecord], **kw: object) -> CostModelKPolicy:
    """A policy whose live window has seen these records (copies: live counts each object once)."""
    records = [replace(r) for r in records]
    live = LiveMeasurement(window=64)
    live.observe_baseline(BaselineRecord(0, 10, [10.0, 10.0, 10.0], verify_ms_by_len=dict(SWEEP)))
    policy = CostModelKPolicy(live, explore_every=0, **kw)  # type: ignore[arg-type]
    for r in records:
        policy.observe(r)
    return policy


def test_keeps_initial_k_until_it_has_data():
    policy = policy_fed([rec(4, 4) for _ in range(2)], initial_k=3, min_iterations=3)
    assert policy.choose_k(16) == 3


def test_everything_accepted_with_a_cheap_draft_climbs_two_positions_past_the_measured_ones():
    policy = policy_fed([rec(4, 4, draft_step_ms=0.1) for _ in range(8)])
    assert policy.choose_k(16) == 6  # the best is deeper, but positions 5 and 6 have not been measured
    policy.observe(rec(6, 6, draft_step_ms=0.1))
    assert policy.choose_k(16) == 8
    assert policy.choose_k(4) == 4  # the loop's k_max caps it
    assert policy_fed([rec(4, 4, draft_step_ms=0.1) for _ in range(8)], reach=1).choose_k(16) == 5


def test_nothing_accepted_goes_to_k_min():
    assert policy_fed([rec(4, 0) for _ in range(8)]).choose_k(16) == 1


def test_dear_draft_at_middling_alpha_prefers_small_k():
    # alpha 0.6 with draft steps costing half a plain step: k=1 1.6/15.7 beats k=2 1.96/21.2
    records = [rec(3, 0), rec(3, 1), rec(3, 3), rec(3, 1)] * 4  # accepted 5, judged 8 per 4 -> 0.625
    policy = policy_fed([rec(r.n_drafted, r.n_accepted, draft_step_ms=5.0) for r in records])
    assert policy.choose_k(16) == 1


def test_bursty_acceptance_predicts_more_than_iid():
    # half the iterations reject at once, half accept all four: conditional acceptance is 0.5 then 1
    records = [rec(4, 0), rec(4, 4)] * 8
    counts = position_counts(records)
    assert counts.reached == [16, 8, 8, 8] and counts.accepted == [8, 8, 8, 8]
    assert counts.pooled == pytest.approx(32 / 40)
    cond = counts.conditional(6, prior=0.8, prior_weight=2.0)
    assert cond[0] == pytest.approx((8 + 1.6) / 18)
    assert cond[1] > 0.9 and cond[3] > 0.9
    assert cond[5] == pytest.approx(cond[3])  # unmeasured positions: the last measured value
    assert counts.depth(2) == 4 and counts.depth(9) == 1


def test_position_counts_forget_old_iterations():
    counts = PositionCounts(decay=0.5)
    for r in [rec(2, 2), rec(2, 0)]:
        counts.add(r)
    # the all-accepted iteration now weighs 0.5: position 0 reached 1.5 times, accepted 0.5
    assert counts.reached == [1.5, 0.5] and counts.accepted == [0.5, 0.5]
    with pytest.raises(ValueError):
        PositionCounts(decay=0.0)


def test_hysteresis_keeps_k_when_the_gain_is_small():
    records = [rec(3, 3 - i % 2) for i in range(12)]
    policy = policy_fed(records, initial_k=3, hysteresis=0.5)
    assert policy.choose_k(16) == 3
    best = max(policy.scores, key=lambda k: policy.scores[k])
    assert best != 3 or policy.scores[3] == max(policy.scores.values())
    assert policy_fed(records, initial_k=3, hysteresis=0.0).choose_k(16) == best


def test_explores_one_deeper_every_n_choices():
    live = LiveMeasurement(window=64)
    live.observe_baseline(BaselineRecord(0, 10, [10.0], verify_ms_by_len=dict(SWEEP)))
    policy = CostModelKPolicy(live, explore_every=3, initial_k=2)
    for r in [rec(2, 0) for _ in range(8)]:
        policy.observe(r)
    assert [policy.choose_k(16) for _ in range(6)] == [1, 1, 2, 1, 1, 2]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        CostModelKPolicy(LiveMeasurement(), k_min=5, k_max=2)
    with pytest.raises(ValueError):
        HeuristicKPolicy(k_min=0)


def test_heuristic_is_transformers_schedule():
    h = HeuristicKPolicy(initial_k=5, k_max=10)
    trace = []
    for drafted, accepted in [(5, 5), (7, 7), (9, 3), (8, 8), (10, 0)]:
        assert h.choose_k(16) == drafted
        h.observe(rec(drafted, accepted))
        trace.append(h.k)
    assert trace == [7, 9, 8, 10, 9]  # +2 capped at k_max, -1 after any rejection
    for _ in range(20):
        h.observe(rec(1, 0))
    assert h.k == 1
    h.reset()
    assert h.k == 5


def test_verify_curve_is_made_monotone():
    assert monotone_verify_costs({1: 10.0, 2: 14.0, 3: 12.0, 4: 15.0}) == {1: 10.0, 2: 13.0, 3: 13.0, 4: 15.0}
    assert monotone_verify_costs({1: 5.0, 3: 7.0}) == {1: 5.0, 3: 7.0}
