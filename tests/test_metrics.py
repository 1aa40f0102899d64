"""Metrics on constructed iteration records."""

from __future__ import annotations

import json

import pytest

from specscope.core.measure import metrics as m
from specscope.core.measure.measurement import Measurement
from specscope.core.records import ControlValues, IterationRecord


def rec(i: int, drafted: int, accepted: int, ms: float = 10.0, emitted: int | None = None,
        mode: str = "speculative") -> IterationRecord:
    return IterationRecord(
        iteration=i, mode=mode, drafter="test", controls=ControlValues(k=max(1, drafted)), tokens=[],
        n_drafted=drafted, n_accepted=accepted, n_emitted=accepted + 1 if emitted is None else emitted,
        draft_ms=drafted * 1.0, verify_ms=5.0, rollback_ms=0.5, iteration_ms=ms, context_len=0,
        generated_len=0, t_start_s=0.0, t_end_s=0.0,
    )


@pytest.fixture
def four() -> list[IterationRecord]:
    return [rec(0, 4, 4), rec(1, 4, 0), rec(2, 4, 2), rec(3, 4, 4)]


def test_acceptance_definitions(four):
    assert m.acceptance_rate(four) == pytest.approx(10 / 16)
    # checked proposals: 4 + 1 + 3 + 4 (a rejection is judged, what follows it is not)
    assert sum(m.checked_proposals(r) for r in four) == 12
    assert m.mean_acceptance_length(four) == pytest.approx(3.5)
    assert m.accepted_histogram(four) == [1, 0, 1, 0, 2]


def positions(records: list[IterationRecord]) -> tuple[list[float | None], list[float | None]]:
    """Acceptance by position as the one owner counts it: (accepted / drafted, accepted / reached)."""
    measurement = Measurement()
    est = None
    for r in records:
        est = measurement.feed(r)
    assert est is not None
    return [p.rate_per_draft for p in est.positions], [p.rate for p in est.positions]


def test_per_position_unconditional_and_conditional(four):
    per_draft, conditional = positions(four)
    assert per_draft == pytest.approx([3 / 4, 3 / 4, 2 / 4, 2 / 4])
    assert conditional == pytest.approx([3 / 4, 3 / 3, 2 / 3, 2 / 2])


def test_per_position_denominator_counts_only_iterations_that_drafted_there():
    records = [rec(0, 4, 4), rec(1, 2, 2), rec(2, 2, 1)]
    # position 2: only the first iteration drafted a third proposal, and accepted it
    per_draft, conditional = positions(records)
    assert per_draft == pytest.approx([1.0, 2 / 3, 1.0, 1.0])
    assert conditional == pytest.approx([1.0, 2 / 3, 1.0, 1.0])


def test_plain_records_are_ignored_by_acceptance_metrics():
    records = [rec(0, 0, 0, mode="plain"), rec(1, 0, 0, mode="plain")]
    assert m.acceptance_rate(records) is None
    assert m.mean_acceptance_length(records) is None
    assert positions(records) == ([], [])
    assert m.accepted_histogram(records) == []


def test_token_timing_bursts(four):
    intervals = m.inter_token_intervals_ms(four)
    # 14 tokens: the first is the time to first token, then one interval and n-1 zeros per iteration
    assert intervals == [0, 0, 0, 0, 10, 10, 0, 0, 10, 0, 0, 0, 0]
    assert m.time_to_first_token_ms(four, prefill_ms=7.0) == 17.0
    assert m.time_to_first_token_ms([], 7.0) is None
    assert m.percentile(intervals, 50) == 0.0
    assert m.percentile(intervals, 95) == pytest.approx(10.0)


def test_percentile_interpolates():
    assert m.percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert m.percentile([1.0, 2.0, 3.0, 4.0], 95) == pytest.approx(3.85)
    assert m.percentile([], 50) is None
    with pytest.raises(ValueError):
        m.percentile([1.0], 101)


def test_run_summary_is_json_ready(four):
    from specscope.core.measure.run import replay
    from specscope.core.measure.summary import run_summary

    s = run_summary(four, prefill_ms=3.0, estimate=replay(four).estimate())
    json.dumps(s)
    assert s["tokens"] == 14
    assert s["iterations"] == 4
    assert s["tokens_per_s"] == pytest.approx(14 / 0.040)
    assert s["tokens_per_iteration"] == pytest.approx(3.5)
    assert s["ttft_ms"] == 13.0
    assert s["measured_speedup"] is None and s["measured_speedup_note"].startswith("not enough data")
    assert run_summary([])["tokens"] == 0
