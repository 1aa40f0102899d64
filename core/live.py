"""Live measurement: running alpha, measured costs, and measured vs predicted speed-up per iteration.

The machine drifts (clocks, other processes, a display GPU), so every speed-up compares the recent window
of speculative iterations with the most recent plain-step baseline measured on the live context
(``BaselineRecord``), never with one taken at the start. Thread-safe: the loop's thread writes, the GUI
may read the current estimates.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from statistics import median

from . import costmodel
from .metrics import alpha_estimate, checked_proposals
from .records import BaselineRecord, IterationRecord

MIN_SAMPLES_PER_LENGTH = 3  # window verify timings at a pass length override the sweep from this many on


class LiveMeasurement:
    """Joins records with the latest adjacent baseline; keeps the window's alpha and phase costs.

    ``observe`` / ``observe_baseline`` are idempotent per object, so the adaptive policy (fed by the loop)
    and the session (which enriches records) can both pass the same record without counting it twice.
    """

    def __init__(self, window: int = 32):
        if window < 1:
            raise ValueError(f"the window must hold at least 1 iteration, got {window}")
        self.window = window
        self._lock = threading.Lock()
        self._recent: deque[IterationRecord] = deque(maxlen=window)
        self._seen_ids: deque[int] = deque(maxlen=4)  # ids of the last records observed (idempotence)
        self._cum_accepted = 0
        self._cum_checked = 0
        self._baseline: BaselineRecord | None = None
        self._sweep: dict[int, float] = {}

    # ---- feeding ----------------------------------------------------------------------------------
    def observe_baseline(self, b: BaselineRecord) -> None:
        with self._lock:
            if b is self._baseline:
                return
            self._baseline = b
            if b.verify_ms_by_len:
                self._sweep = dict(b.verify_ms_by_len)

    def observe(self, record: IterationRecord) -> None:
        """Add a speculative record to the window (plain records carry no acceptance or draft cost)."""
        with self._lock:
            self._observe_locked(record)

    def _observe_locked(self, record: IterationRecord) -> None:
        if id(record) in self._seen_ids or record.mode != "speculative":
            return
        self._seen_ids.append(id(record))
        self._recent.append(record)
        self._cum_accepted += record.n_accepted
        self._cum_checked += checked_proposals(record)

    def enrich(self, record: IterationRecord) -> None:
        """Observe the record, then fill its measurement fields (None where a quantity is not known yet)."""
        with self._lock:
            self._observe_locked(record)
            record.plain_step_ms = self._plain_step_locked()
            if record.mode != "speculative":
                return
            record.alpha_window = alpha_estimate(list(self._recent))
            record.alpha_cumulative = self._cum_accepted / self._cum_checked if self._cum_checked else None
            record.measured_speedup = self._measured_locked()
            record.predicted_speedup = self._predicted_locked()

    def reset(self) -> None:
        """Forget everything (a new prompt on a different machine state)."""
        with self._lock:
            self._recent.clear()
            self._seen_ids.clear()
            self._cum_accepted = self._cum_checked = 0
            self._baseline = None
            self._sweep = {}

    # ---- current estimates (for the adaptive policy and the GUI) -----------------------------------
    def window_records(self) -> list[IterationRecord]:
        with self._lock:
            return list(self._recent)

    @property
    def alpha(self) -> float | None:
        """The cost model's alpha over the window (accepted / checked proposals)."""
        with self._lock:
            return alpha_estimate(list(self._recent))

    @property
    def alpha_cumulative(self) -> float | None:
        with self._lock:
            return self._cum_accepted / self._cum_checked if self._cum_checked else None

    @property
    def plain_step_ms(self) -> float | None:
        with self._lock:
            return self._plain_step_locked()

    @property
    def draft_step_ms(self) -> float | None:
        with self._lock:
            return self._draft_step_locked()

    @property
    def rollback_ms(self) -> float | None:
        with self._lock:
            return self._median_locked(lambda r: r.rollback_ms)

    @property
    def overhead_ms(self) -> float | None:
        """Per-iteration time outside draft, verify and rollback (bookkeeping, token records)."""
        with self._lock:
            return self._median_locked(self._overhead)

    @property
    def fixed_ms(self) -> float | None:
        """Rollback plus overhead: the per-iteration cost that does not grow with k."""
        with self._lock:
            return self._fixed_locked()

    @property
    def verify_ms_by_len(self) -> dict[int, float]:
        """Pass length -> verify ms: the latest sweep, overridden by the window's medians (enough samples)."""
        with self._lock:
            return self._verify_locked()

    @property
    def measured_speedup(self) -> float | None:
        with self._lock:
            return self._measured_locked()

    @property
    def predicted_speedup(self) -> float | None:
        with self._lock:
            return self._predicted_locked()

    # ---- internals (lock held) ---------------------------------------------------------------------
    @staticmethod
    def _overhead(r: IterationRecord) -> float:
        return max(0.0, r.iteration_ms - r.draft_ms - r.verify_ms - r.rollback_ms)

    def _median_locked(self, f: Callable[[IterationRecord], float]) -> float | None:
        values = [float(f(r)) for r in self._recent]
        return float(median(values)) if values else None

    def _plain_step_locked(self) -> float | None:
        if self._baseline is None or not self._baseline.step_ms:
            return None
        return self._baseline.median_step_ms

    def _draft_step_locked(self) -> float | None:
        steps = [r.draft_ms / r.n_drafted for r in self._recent if r.n_drafted]
        return float(median(steps)) if steps else None

    def _fixed_locked(self) -> float | None:
        return self._median_locked(lambda r: r.rollback_ms + self._overhead(r))

    def _verify_locked(self) -> dict[int, float]:
        by_len: dict[int, list[float]] = {}
        for r in self._recent:
            by_len.setdefault(r.n_drafted + 1, []).append(r.verify_ms)
        out = dict(self._sweep)
        for n, values in by_len.items():
            if len(values) >= MIN_SAMPLES_PER_LENGTH or n not in out:
                out[n] = float(median(values))
        return dict(sorted(out.items()))

    def _measured_locked(self) -> float | None:
        plain = self._plain_step_locked()
        ms = sum(r.iteration_ms for r in self._recent)
        if plain is None or ms <= 0.0:
            return None
        return sum(r.n_emitted for r in self._recent) * plain / ms

    def _predicted_locked(self) -> float | None:
        """plain * sum_i E(alpha, k_i) / sum_i cost(k_i) over the window (k_i = proposals actually drafted).

        Costs here are window means, not medians: the cost model is linear in them and the measured speed-up
        pays for every stall, so the mean is what predicts throughput. (The medians exposed above are the
        robust figures for display and for choosing k.)
        """
        plain = self._plain_step_locked()
        recent = list(self._recent)
        alpha = alpha_estimate(recent)
        if plain is None or alpha is None or not recent:
            return None
        drafted = sum(r.n_drafted for r in recent)
        draft = sum(r.draft_ms for r in recent) / drafted if drafted else 0.0
        fixed = sum(r.rollback_ms + self._overhead(r) for r in recent) / len(recent)
        by_len: dict[int, list[float]] = {}
        for r in recent:
            by_len.setdefault(r.n_drafted + 1, []).append(r.verify_ms)
        verify = {n: sum(v) / len(v) for n, v in by_len.items()}
        tokens = sum(costmodel.expected_tokens_per_iteration(alpha, r.n_drafted) for r in recent)
        cost = sum(r.n_drafted * draft + verify[r.n_drafted + 1] + fixed for r in recent)
        return plain * tokens / cost if cost > 0 else None
