"""The cost model of speculative decoding: predicted speed-up from acceptance and measured step costs.

Pure functions of floats. Times in milliseconds. ``alpha`` is the probability that one proposal is
accepted given that every earlier one in the iteration was (assumed the same at every position), which is
what :func:`specscope.core.metrics.alpha_estimate` measures — not ``accepted / drafted``, which shrinks with
k because proposals after the first rejection are never checked.

One iteration drafts k tokens (k draft steps), verifies them in one target pass of length k+1 and rolls
the caches back; it emits on average E(alpha, k) tokens. Plain decoding emits one token per target step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence

VerifyCost = Mapping[int, float] | Callable[[int], float]


def _check_alpha(alpha: float) -> None:
    if not 0.0 <= alpha <= 1.0 or math.isnan(alpha):
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")


def _check_k(k: int) -> None:
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")


def _check_costs(**costs: float) -> None:
    for name, value in costs.items():
        if math.isnan(value) or value < 0.0:
            raise ValueError(f"{name} must be a time >= 0 ms, got {value}")


def expected_tokens_per_iteration(alpha: float, k: int) -> float:
    """E = 1 + alpha + ... + alpha^k = (1 - alpha^(k+1)) / (1 - alpha); k+1 when alpha = 1."""
    _check_alpha(alpha)
    _check_k(k)
    if alpha >= 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_tokens_from_positions(conditional: Sequence[float], k: int) -> float:
    """E for position-dependent acceptance: 1 + sum_i prod_{j<=i} c_j, c_j = P(accept j | accepted < j).

    Positions beyond ``conditional`` reuse its last value (alpha of the iid model when it has one entry).
    """
    _check_k(k)
    if k and not conditional:
        raise ValueError("conditional acceptance needs at least one position")
    total, run = 1.0, 1.0
    for i in range(k):
        c = conditional[min(i, len(conditional) - 1)]
        _check_alpha(c)
        run *= c
        total += run
    return total


def iteration_cost_ms(k: int, draft_ms: float, verify_ms: float, rollback_ms: float = 0.0) -> float:
    """Time of one iteration: k draft steps, one verify pass, one rollback."""
    _check_k(k)
    _check_costs(draft_ms=draft_ms, verify_ms=verify_ms, rollback_ms=rollback_ms)
    return k * draft_ms + verify_ms + rollback_ms


def predicted_speedup(
    alpha: float, k: int, target_ms: float, draft_ms: float, verify_ms: float, rollback_ms: float = 0.0
) -> float:
    """Speculative over plain tokens/s: target_ms * E / (k * draft_ms + verify_ms + rollback_ms)."""
    _check_costs(target_ms=target_ms)
    cost = iteration_cost_ms(k, draft_ms, verify_ms, rollback_ms)
    if cost <= 0.0:
        raise ValueError("an iteration must cost more than 0 ms")
    return target_ms * expected_tokens_per_iteration(alpha, k) / cost


def alpha_for_speedup(
    k: int, speedup: float, target_ms: float, draft_ms: float, verify_ms: float, rollback_ms: float = 0.0
) -> float | None:
    """The alpha at which speculation at this k runs ``speedup`` times as fast as plain decoding.

    It answers "what acceptance would this draft need" from measured costs: the iteration must emit
    ``speedup * iteration_cost / target_ms`` tokens on average. 0.0 when it reaches the goal even with nothing
    accepted; None when it cannot even with everything accepted (the goal needs more than k+1 tokens).
    """
    _check_costs(target_ms=target_ms)
    if target_ms <= 0.0:
        raise ValueError("target_ms must be > 0")
    if not speedup > 0.0 or math.isinf(speedup):
        raise ValueError(f"speedup must be a finite number > 0, got {speedup}")
    need = speedup * iteration_cost_ms(k, draft_ms, verify_ms, rollback_ms) / target_ms  # tokens/iteration
    if need <= 1.0:
        return 0.0
    if need > k + 1:
        return None
    lo, hi = 0.0, 1.0  # E rises monotonically from 1 (alpha = 0) to k+1 (alpha = 1)
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if expected_tokens_per_iteration(mid, k) < need:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def break_even_alpha(
    k: int, target_ms: float, draft_ms: float, verify_ms: float, rollback_ms: float = 0.0
) -> float | None:
    """The alpha at which speculation at this k is as fast as plain decoding.

    0.0 when it pays even with nothing accepted (verification cheaper than a plain step); None when it
    cannot pay even with everything accepted (the iteration costs more than k+1 plain steps).
    """
    return alpha_for_speedup(k, 1.0, target_ms, draft_ms, verify_ms, rollback_ms)


def verify_cost_function(verify_ms_by_len: VerifyCost) -> Callable[[int], float]:
    """Verify time as a function of pass length: a callable as is, or a piecewise-linear fit of a mapping.

    Between measured lengths it interpolates; outside them it extends the nearest segment's line (a single
    measured length gives a constant). Never below 0.
    """
    if callable(verify_ms_by_len):
        return verify_ms_by_len
    points = sorted((int(n), float(ms)) for n, ms in verify_ms_by_len.items() if not math.isnan(ms))
    if not points:
        raise ValueError("verify cost needs at least one measured pass length")
    for n, ms in points:
        if n < 1 or ms < 0.0:
            raise ValueError(f"bad verify measurement: length {n}, {ms} ms")

    def cost(n: int) -> float:
        if len(points) == 1:
            return points[0][1]
        if n <= points[0][0]:
            (n0, m0), (n1, m1) = points[0], points[1]
        elif n >= points[-1][0]:
            (n0, m0), (n1, m1) = points[-2], points[-1]
        else:
            i = next(i for i in range(1, len(points)) if points[i][0] >= n)
            (n0, m0), (n1, m1) = points[i - 1], points[i]
        return max(0.0, m0 + (m1 - m0) * (n - n0) / (n1 - n0))

    return cost


def speedup_curve(
    alpha: float,
    target_ms: float,
    draft_ms: float,
    verify_ms_by_len: VerifyCost,
    rollback_ms: float = 0.0,
    k_range: Iterable[int] = range(1, 17),
) -> list[tuple[int, float]]:
    """(k, predicted speed-up) for each k, verify cost taken at pass length k+1: the "which k" plot."""
    verify = verify_cost_function(verify_ms_by_len)
    return [
        (k, predicted_speedup(alpha, k, target_ms, draft_ms, verify(k + 1), rollback_ms)) for k in k_range
    ]


def best_k(
    alpha: float,
    target_ms: float,
    draft_ms: float,
    verify_ms_by_len: VerifyCost,
    rollback_ms: float = 0.0,
    k_range: Iterable[int] = range(1, 17),
) -> tuple[int, float]:
    """The k with the highest predicted speed-up (the smallest such k on ties) and that speed-up."""
    curve = speedup_curve(alpha, target_ms, draft_ms, verify_ms_by_len, rollback_ms, k_range)
    if not curve:
        raise ValueError("k_range is empty")
    return max(curve, key=lambda kv: (kv[1], -kv[0]))
