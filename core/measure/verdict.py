"""The verdict a snapshot carries: what the measured speed-up says, and the caveats that withhold it
(too few quiet records, an interval too wide, adaptive k choosing k = 0).
"""

from __future__ import annotations

from specscope.core.measure.snapshot import (
    VERDICT_MAX_SPREAD,
    Estimate,
)


def with_verdict(est: Estimate, busy_records: int, quiet_records: int) -> Estimate:
    """The snapshot with its verdict: one sentence when speculation measurably loses and the data can carry
    it, else the reason no verdict is given (or None when there is nothing to say)."""
    from dataclasses import replace

    m = est.measured
    if m is None or m.hi >= 1.0:
        return est
    if est.adaptive and est.k == 0:
        sentence = ("Adaptive k chose not to speculate (k = 0): the controller predicts plain decoding is "
                    f"faster at {est.alpha_text()}; it drafts again when a probe finds acceptance rising")
    elif busy_records > quiet_records:
        sentence = (f"No verdict: not enough quiet data ({busy_records} of {busy_records + quiet_records} "
                    "iterations ran while the machine was busy)")
    elif m.spread > VERDICT_MAX_SPREAD:
        sentence = f"No verdict yet: the interval {m.text()} is too wide to say ({m.n} plain steps)"
    else:
        c = est.costs
        parts = [f"Speculation is slower than plain decoding ({m.text()}, {est.measured_scope})"]
        if c.plain_step_ms and c.draft_step_ms is not None:
            parts.append(f"a draft step costs {100 * c.draft_step_ms / c.plain_step_ms:.0f}% of a target step")
        be = est.break_even_alpha(est.k) if est.k else None
        if be is not None and est.alpha is not None:
            parts.append(f"break-even α at k={est.k} is {be:.2f}, measured {est.alpha_text()}")
        if est.best_k and est.best_speedup is not None and est.best_speedup > 1.0:
            parts.append(f"best k = {est.best_k} (predicted ×{est.best_speedup:.2f})")
        elif est.best_k == 0:
            parts.append("the cost model predicts plain decoding is fastest at every k")
        sentence = "; ".join(parts)
    return replace(est, verdict=sentence)
