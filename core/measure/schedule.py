"""When the loop measures: baseline spacing within a cost budget, and exploration of unmeasured pass lengths.

Nothing here throws work away: a baseline is a few real plain iterations and an exploration is a real
speculative iteration at another k; both commit their tokens. What they cost is the time they run slower
than speculation at the user's k would have, and that is what these two bound.

- :class:`BaselineSchedule` spaces baselines ``min_gap`` speculative iterations apart until the measured
  speed-up is known, then as far apart as keeps the baselines' share of wall time under ``budget``: b plain
  steps cost b·(1 − 1/S) plain-step times more than speculation at speed-up S would have, against a period of
  g iterations of c plain-step times each, so g ≥ b·((1 − 1/S)/budget − 1)/c. Where speculation does not
  pay (S ≤ 1) a plain step costs nothing extra and the gap stays at ``min_gap``.
- :class:`VerifyExploration` runs an occasional speculative iteration at a k whose verify pass length
  (k + 1) was never timed and lies past the longest length timed, shortest first (of 3, 5, 9, 17 for k up
  to 16), so the verify fit covers the curve by interpolation: at most one in ``every`` speculative
  iterations, at most ``attempts`` tries per length (a lookup drafter may not find that many tokens to
  propose), and only while what exploring has cost, plus what the next one is predicted to cost (the extra
  draft steps and verify tokens at the measured costs), stays within ``budget`` of the run's wall time so
  far. A dear draft model explores little; free proposals (lookup, suffix) explore every length.
"""

from __future__ import annotations

from specscope.core.measure.measurement import Measurement

BASELINE_MIN_GAP = 6
BASELINE_MAX_GAP = 48
BASELINE_BUDGET = 0.03  # the baselines' share of wall time once the speed-up is known
EXPLORE_EVERY = 16
EXPLORE_ATTEMPTS = 2
EXPLORE_BUDGET = 0.02  # exploration's share of the wall time


class BaselineSchedule:
    def __init__(self, measurement: Measurement, steps: int, min_gap: int = BASELINE_MIN_GAP,
                 max_gap: int = BASELINE_MAX_GAP, budget: float = BASELINE_BUDGET):
        if min_gap < 1 or max_gap < min_gap or not 0.0 < budget < 1.0 or steps < 1:
            raise ValueError("need steps >= 1, 1 <= min_gap <= max_gap and 0 < budget < 1")
        self.measurement = measurement
        self.steps, self.min_gap, self.max_gap, self.budget = steps, min_gap, max_gap, budget

    def next_gap(self) -> int:
        """Speculative iterations until the next baseline."""
        est = self.measurement.estimate()
        if est is None or est.run_measured is None or est.mean_acceptance_length is None:
            return self.min_gap  # dense until the first measured speed-up
        s = est.run_measured.value
        if s <= 1.0:
            return self.min_gap
        cost_in_plain_steps = est.mean_acceptance_length / s  # one iteration, in plain-step times
        gap = self.steps * ((1.0 - 1.0 / s) / self.budget - 1.0) / cost_in_plain_steps
        return int(min(self.max_gap, max(self.min_gap, round(gap))))


class VerifyExploration:
    def __init__(self, measurement: Measurement, k_max: int, every: int = EXPLORE_EVERY,
                 attempts: int = EXPLORE_ATTEMPTS, budget: float | None = EXPLORE_BUDGET):
        if every < 1 or attempts < 1 or k_max < 1 or (budget is not None and budget <= 0):
            raise ValueError("need every >= 1, attempts >= 1, k_max >= 1 and a budget > 0 (or None: no budget)")
        self.measurement = measurement
        self.k_max, self.every, self.attempts, self.budget = k_max, every, attempts, budget
        self._since = 0
        self._tried: dict[int, int] = {}

    def candidates(self) -> list[int]:
        """Pass lengths worth timing, in order: the longest the curve offers, then halfway points."""
        out, n = [], self.k_max + 1
        while n > 2:  # 17, 9, 5, 3 for k up to 16
            out.append(n)
            n = (n + 1) // 2
        return sorted(out)

    def affordable(self, k: int, other: int) -> bool:
        """Whether exploring at ``other`` instead of ``k`` keeps exploration within its budget (no budget, or
        nothing measured yet to predict from: yes)."""
        est = self.measurement.estimate()
        if self.budget is None or est is None or est.cost is None:
            return True
        c = est.costs
        points = c.verify_ms_by_len
        longest = max(points, default=1)
        slope = (points[longest] - points[min(points)]) / (longest - min(points)) if len(points) > 1 else 0.0
        extra = max(0, other - k)
        predicted = extra * ((c.draft_step_ms or 0.0) + max(slope, 0.0))
        return est.cost.exploration_ms + predicted <= self.budget * est.cost.wall_ms

    def __call__(self, k: int) -> int | None:
        """The k to run this iteration at instead of ``k`` (None: run at ``k``)."""
        self._since += 1
        if self._since < self.every:
            return None
        fit = self.measurement.fit
        for length in self.candidates():
            # a length inside the measured range is interpolated already: only longer ones add to the curve
            if length <= max(fit.max_length, k + 1) or self._tried.get(length, 0) >= self.attempts:
                continue
            if not self.affordable(k, length - 1):
                return None  # the cheaper lengths come first: a dearer one cannot be affordable either
            self._since = 0
            self._tried[length] = self._tried.get(length, 0) + 1
            return length - 1
        return None
