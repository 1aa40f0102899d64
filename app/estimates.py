"""What the cost model says about the run so far: speed-up versus k, the best k, and — when speculation
is losing to plain decoding — a plain sentence saying why. All numbers come from ``core.live`` (window
estimates) and ``core.costmodel``; this module only phrases them."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specscope.core import costmodel

from .run_data import FALLBACK_WINDOW, RunData


@dataclass
class Advice:
    alpha: float
    k: int  # the k the last iteration ran with
    curve: list[tuple[int, float]]  # (k, predicted speed-up)
    best_k: int
    best_speedup: float
    draft_fraction: float  # one draft step as a fraction of a plain target step
    break_even_alpha: float | None  # at the current k; None = cannot pay at any alpha
    measured_speedup: float | None
    verdict: str | None  # set when speculation measurably loses


def advise(data: RunData) -> Advice | None:
    live = data.live
    alpha, plain, draft = live.alpha, live.plain_step_ms, live.draft_step_ms
    verify_by_len = live.verify_ms_by_len
    if alpha is None or plain is None or not plain or not verify_by_len or not data.records:
        return None
    draft = draft or 0.0
    fixed = live.fixed_ms or 0.0
    try:
        curve = costmodel.speedup_curve(alpha, plain, draft, verify_by_len, fixed)
        best_k, best = costmodel.best_k(alpha, plain, draft, verify_by_len, fixed)
        k = data.records[-1].controls.k
        verify = costmodel.verify_cost_function(verify_by_len)
        break_even = costmodel.break_even_alpha(k, plain, draft, verify(k + 1), fixed)
    except ValueError:
        return None
    measured = data.last("measured_speedup")
    advice = Advice(alpha, k, curve, best_k, best, draft / plain, break_even, measured, None)
    advice.verdict = losing_verdict(data, advice)
    return advice


def stable_window(data: RunData) -> bool:
    """Enough iterations since the start and since the last control change to trust the window."""
    if len(data.records) < FALLBACK_WINDOW:
        return False
    if data.control_changes:
        return data.records[-1].iteration - data.control_changes[-1].iteration >= FALLBACK_WINDOW
    return True


def losing_verdict(data: RunData, a: Advice) -> str | None:
    if a.measured_speedup is None or math.isnan(a.measured_speedup) or a.measured_speedup >= 1.0:
        return None
    if not stable_window(data):
        return None
    if a.break_even_alpha is None:
        why = f"at k={a.k} an iteration costs more than k+1 plain steps even if every proposal is accepted"
    else:
        why = f"break-even α at k={a.k} is {a.break_even_alpha:.2f}, measured α {a.alpha:.2f}"
    advice = (f"; best k = {a.best_k} (predicted ×{a.best_speedup:.2f})" if a.best_speedup > 1.0
              else "; plain decoding wins at every k")
    return (f"Speculation is slower than plain decoding (×{a.measured_speedup:.2f}): drafting costs "
            f"{100 * a.draft_fraction:.0f}% of a target step; {why}{advice}")
