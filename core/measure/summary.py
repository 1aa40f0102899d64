"""The run summary (CLI text and ``--json``, the bench): the snapshot's numbers plus the token-timing
statistics of the records, in one dictionary. Nothing here derives what the snapshot already holds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import median
from typing import Any

from specscope.core.measure.metrics import (
    acceptance_rate,
    accepted_histogram,
    inter_token_intervals_ms,
    percentile,
    time_to_first_token_ms,
)
from specscope.core.measure.snapshot import (
    NOT_ENOUGH,
    Estimate,
)
from specscope.core.records import (
    JUDGING_MODES,
    PLAIN_MODE,
    IterationRecord,
)


def _median_or_none(values: Iterable[float]) -> float | None:
    vs = [v for v in values if math.isfinite(v)]  # an attached engine does not report the split (NaN)
    return float(median(vs)) if vs else None


def run_summary(records: Sequence[IterationRecord], prefill_ms: float = 0.0,
                estimate: Estimate | None = None) -> dict[str, Any]:
    """A whole run in one JSON-ready dict (CLI ``--json``, session.json, bench rows): the records' own counts
    and distributions, and every rate and speed-up from the snapshot (the same numbers every surface shows)."""
    spec = [r for r in records if r.mode in JUDGING_MODES]
    intervals = inter_token_intervals_ms(records)
    e = estimate
    cost = e.cost if e else None
    seg = e.segment if e else None
    out: dict[str, Any] = {
        "iterations": len(records),
        "speculative_iterations": len(spec),
        "plain_iterations": sum(1 for r in records if r.mode == PLAIN_MODE),
        "exploration_iterations": sum(1 for r in records if r.explore),
        "tokens": sum(r.n_emitted for r in records),
        "drafted": sum(r.n_drafted for r in spec),
        "accepted": sum(r.n_accepted for r in spec),
        "judged": e.judged if e else 0,
        "alpha": e.alpha if e else None,
        "alpha_window": e.alpha_window if e else None,
        "alpha_segment": seg.alpha if seg else None,
        "segment": seg.label if seg else None,
        "segments": e.segments if e else 0,
        "acceptance_rate": acceptance_rate(records),
        "mean_acceptance_length": e.mean_acceptance_length if e else None,
        "tokens_per_iteration": e.tokens_per_iteration if e else None,
        "mean_k": (sum(r.n_drafted for r in spec) / len(spec)) if spec else None,
        # the owner's counts (since the last sampling change), the bars the window draws
        "per_position_acceptance": [p.rate_per_draft for p in e.positions] if e else [],
        "conditional_position_acceptance": [p.rate for p in e.positions] if e else [],
        "accepted_histogram": accepted_histogram(records),
        "tokens_per_s": e.tokens_per_s if e else None,
        "wall_tokens_per_s": e.wall_tokens_per_s if e else None,
        "measurement_overhead": cost.share if cost else None,
        "measurement_overhead_ms": {"bookkeeping": cost.bookkeeping_ms, "baselines": cost.baseline_ms,
                                    "exploration": cost.exploration_ms, "drill": cost.drill_ms,
                                    "wall": cost.wall_ms,
                                    "decode": cost.decode_ms} if cost else None,
        "prefill_ms": prefill_ms,
        "ttft_ms": time_to_first_token_ms(records, prefill_ms),
        "itl_p50_ms": percentile(intervals, 50.0),
        "itl_p95_ms": percentile(intervals, 95.0),
        "draft_ms_median": _median_or_none(r.draft_ms for r in spec),
        "verify_ms_median": _median_or_none(r.verify_ms for r in records),
        "rollback_ms_median": _median_or_none(r.rollback_ms for r in spec),
    }
    out.update({
        "plain_step_ms": e.costs.plain_step_ms if e else None,
        "draft_step_ms": e.costs.draft_step_ms if e else None,
        "draft_iteration_ms": e.costs.draft_iteration_ms if e else None,
        "fixed_ms": e.costs.fixed_ms if e else None,
        "stale_costs": list(e.costs.stale) if e else [],
        "verify_ms_by_len": {str(n): ms for n, ms in e.costs.verify_ms_by_len.items()} if e else {},
        "measured_speedup": e.measured.value if e and e.measured else None,
        "measured_speedup_lo": e.measured.lo if e and e.measured else None,
        "measured_speedup_hi": e.measured.hi if e and e.measured else None,
        "measured_speedup_scope": e.measured_scope if e and e.measured else None,
        "measured_speedup_plain_samples": e.plain_samples if e else 0,
        "measured_speedup_busy_iterations_left_out": e.busy_left_out if e else 0,
        "measured_speedup_note": e.measured_reason if e else NOT_ENOUGH,
        "run_measured_speedup": e.run_measured.value if e and e.run_measured else None,
        "predicted_speedup": e.predicted_speedup if e else None,
        # over the iterations the measured figure covers, each at the proposals it made: what to compare it with
        "predicted_speedup_over_measured": e.predicted_span if e else None,
        "k": e.k if e else None,  # the run's k (the user's, or adaptive k's last choice), never an exploration's
        "best_k": e.best_k if e else None,
        "best_k_speedup": e.best_speedup if e else None,
        "verdict": e.verdict if e else None,
    })
    return out
