"""The cost model of speculative decoding: predicted speed-up from acceptance and measured step costs.

Pure functions of floats. Times in milliseconds. ``alpha`` is the probability that one proposal is
accepted given that every earlier one in the iteration was (assumed the same at every position), which is
the measurement's α, accepted / checked proposals — not ``accepted / drafted``, which shrinks with k because
proposals after the first rejection are never checked.

One iteration drafts k tokens (k draft steps), verifies them in one target pass of length k+1 and rolls
the caches back; it emits on average E(alpha, k) tokens. Plain decoding emits one token per target step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


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


def expected_tokens_by_k(conditional: Sequence[float], k_max: int) -> list[float]:
    """:func:`expected_tokens_from_positions` for every k from 0 to ``k_max`` in one pass (the same sums, in the
    same order, so each value is the same float)."""
    _check_k(k_max)
    if k_max and not conditional:
        raise ValueError("conditional acceptance needs at least one position")
    out, total, run = [1.0], 1.0, 1.0
    for i in range(k_max):
        c = conditional[min(i, len(conditional) - 1)]
        _check_alpha(c)
        run *= c
        total += run
        out.append(total)
    return out


def iteration_cost_ms(k: int, draft_ms: float, verify_ms: float, rollback_ms: float = 0.0) -> float:
    """Time of one iteration: k draft steps, one verify pass, one rollback."""
    _check_k(k)
    _check_costs(draft_ms=draft_ms, verify_ms=verify_ms, rollback_ms=rollback_ms)
    return k * draft_ms + verify_ms + rollback_ms


def speedup(tokens_per_iteration: float, target_ms: float, draft_ms_per_iteration: float, verify_ms: float,
            fixed_ms: float = 0.0) -> float | None:
    """The one formula: speculative over plain tokens/s = target_ms * E / (draft + verify + fixed) per
    iteration. None when the iteration costs nothing (no measurement)."""
    cost = draft_ms_per_iteration + verify_ms + fixed_ms
    return target_ms * tokens_per_iteration / cost if cost > 0.0 else None


def speedup_at_k(k: int, tokens_per_iteration: float, plain_ms: float, draft_ms_per_iteration: float,
                 verify_ms: float, fixed_ms: float = 0.0) -> float | None:
    """:func:`speedup` for an iteration at ``k``. At k = 0 the iteration proposes nothing: it is one target pass
    of one token committing one token, which is what a plain step is, so it costs the plain step and its
    speed-up is 1 by construction, whatever the verify fit and the bookkeeping read."""
    _check_k(k)
    if k == 0:
        return speedup(1.0, plain_ms, 0.0, plain_ms)
    return speedup(tokens_per_iteration, plain_ms, draft_ms_per_iteration, verify_ms, fixed_ms)


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
