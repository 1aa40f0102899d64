"""The definitions: acceptance and timing metrics over iteration records, with the serving engines' meanings.

Pure functions of records. ``core.measure.measurement`` is the one owner that applies them to a run (and adds costs,
speed-ups and best k); consumers read its estimates and ``run_summary``, not these functions directly.

Acceptance metrics read the records whose proposals were judged (``JUDGING_MODES``: this loop's
speculative iterations and an attached engine's passes; plain records have nothing drafted); token timing
reads every record. Positions are 0-based: position i is the (i+1)-th proposal of an iteration.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specscope.core.records import JUDGING_MODES, IterationRecord


def _speculative(records: Sequence[IterationRecord]) -> list[IterationRecord]:
    return [r for r in records if r.mode in JUDGING_MODES]


def acceptance_rate(records: Sequence[IterationRecord]) -> float | None:
    """accepted / drafted (vLLM's "draft acceptance rate"); falls as k grows past the first rejection."""
    spec = _speculative(records)
    drafted = sum(r.n_drafted for r in spec)
    return sum(r.n_accepted for r in spec) / drafted if drafted else None


def checked_proposals(record: IterationRecord) -> int:
    """Proposals the rule actually judged: the accepted ones plus the first rejected one, if any."""
    return record.n_accepted + (1 if record.n_accepted < record.n_drafted else 0)


def mean_acceptance_length(records: Sequence[IterationRecord]) -> float | None:
    """1 + accepted / iterations: tokens per target pass with the bonus/correction counted."""
    spec = _speculative(records)
    return 1.0 + sum(r.n_accepted for r in spec) / len(spec) if spec else None


def accepted_histogram(records: Sequence[IterationRecord]) -> list[int]:
    """counts[n] = number of speculative iterations that accepted exactly n proposals."""
    spec = _speculative(records)
    counts = [0] * (max((r.n_accepted for r in spec), default=-1) + 1)
    for r in spec:
        counts[r.n_accepted] += 1
    return counts


def time_to_first_token_ms(records: Sequence[IterationRecord], prefill_ms: float = 0.0) -> float | None:
    """Prefill plus the first iteration (its first token appears when it ends)."""
    return prefill_ms + records[0].iteration_ms if records else None


def inter_token_intervals_ms(records: Sequence[IterationRecord]) -> list[float]:
    """Gaps between consecutive emitted tokens, after the first token.

    An iteration emitting n tokens adds one interval (its iteration_ms) and n-1 zeros: speculation emits
    bursts. The first iteration's first token is the time to first token, not an interval. Intervals use
    iteration_ms, so pauses and baseline measurements between iterations do not count.
    """
    out: list[float] = []
    first = True
    for r in records:
        if r.n_emitted <= 0:
            continue
        if not first:
            out.append(r.iteration_ms)
        first = False
        out.extend([0.0] * (r.n_emitted - 1))
    return out


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between order statistics (numpy's default); None
    with no values. The project's one percentile: summaries, benches and their reports use it."""
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile must be in [0, 100], got {q}")
    if not values:
        return None
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)

