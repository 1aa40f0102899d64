"""When the loop measures: baselines and exploration of unmeasured pass lengths, within one budget.

Nothing here throws work away: a baseline is a few real plain iterations and an exploration is a real
speculative iteration at another k; both commit their tokens. What they cost is the time they run slower
than speculation at the user's k would have (``MeasurementCost.iterations_ms``), and **one budget bounds the
two together**: ``MEASUREMENT_BUDGET`` of the run's wall time. The measured speed-up comes first.

- :class:`BaselineSchedule` decides when a baseline (``steps`` plain steps, one by default) runs. The run opens
  with ``min_gap`` speculative iterations and no baseline before them. From the first rough speed-up S on
  (speculation's rate over the recent window against the plain step, known once a length-1 pass was timed:
  a baseline, or prompt lookup's own pass that proposed nothing), each plain step costs (1 − 1/S) of a plain
  step more than speculation would have, and a speculative iteration takes c = L / S plain-step times (L:
  tokens per speculative iteration).

  Until the measured speed-up exists (``MIN_PLAIN_SAMPLES`` plain samples: baselines, or iterations that
  proposed nothing) the baselines still needed are spread evenly over the rest of the run so that it exists
  before the run's last token, if they cost at most ``early_budget`` of the rest; a run too short for that
  says "not enough data" (2 plain steps cost 2·(1 − 1/S) plain-step times: at ×3 that is 3% of a 128-token
  run). So is one more when the measured speed-up's interval is too wide for a verdict (hi/lo over
  ``VERDICT_MAX_SPREAD``) and its plain samples are most of its uncertainty: two plain steps that disagree
  give an interval with 1 degree of freedom (t = 12.7; ×1.37–5.92 in one run), a third gives 2 (t = 4.3).

  Otherwise baselines are never closer than the steady spacing that keeps their share at ``budget``,
  g = steps·((1 − 1/S)/budget − 1)/c iterations, and the next also waits until what the measurement's
  iterations have cost so far, it included, is within ``budget`` of the run's wall time: with W the wall
  time so far and X what was spent (both in plain-step times), ((X + x)/budget − W − steps)/c more
  iterations, x = steps·(1 − 1/S). In a short run the early baselines have spent the budget already and no
  third comes (each costs ~1.4% of a 128-token run at ×2.8); a run that has spent little still waits the
  steady spacing (S is a rough figure: prompt lookup's rises several-fold once it starts copying). Where
  speculation does not pay (S ≤ 1) a plain step costs nothing extra and the gap stays at
  ``min_gap``; it is never more than ``max_gap`` (the measured speed-up follows a run whose text changes). An
  iteration that proposed nothing (prompt lookup or suffix decoding without a match) is a plain sample too,
  at no cost: the gap counts from the last plain sample of either kind, so a drafter that gives them needs
  no baseline while it does.
- :class:`VerifyExploration` runs an occasional speculative iteration at a k whose verify pass length
  (k + 1) was never timed and lies past the longest length timed, shortest first (of 3, 5, 9, 17 for k up
  to 16), so the verify fit covers the curve by interpolation: at most one in ``every`` speculative
  iterations, at most ``attempts`` tries per length (a lookup drafter may not find that many tokens to
  propose), not before the measured speed-up exists where baselines give it (``after_measured``), and only
  while what the measurement's iterations have cost, plus what this one is predicted to cost (the extra
  draft steps and verify tokens at the measured costs), stays within ``budget`` of the run's wall time so
  far. A dear draft model explores little; free proposals (lookup, suffix) explore every length. A length is
  explored only while timing it could change the advice: the k it would price, at a lower bound on its
  pass's cost (``Estimate.curve_bound``), beats plain decoding and the best k priced now. Where the advisor
  says not to speculate and no longer k could pay, nothing is explored.
"""

from __future__ import annotations

from specscope.core.measure.snapshot import VERDICT_MAX_SPREAD, Costs, Estimate, SnapshotSource
from specscope.core.measure.speedup import MIN_PLAIN_SAMPLES

BASELINE_MIN_GAP = 6
BASELINE_MAX_GAP = 48
MEASUREMENT_BUDGET = 0.03  # baselines and exploration together, as a share of the wall time
BASELINE_EARLY_BUDGET = 0.045  # the most the baselines may take of the rest to give a measured speed-up in the run
EXPLORE_EVERY = 16
EXPLORE_ATTEMPTS = 2


def budget_gap(budget: float, steps: int, speedup: float, iteration_cost: float) -> float:
    """Speculative iterations between baselines of ``steps`` plain steps that keep their share of the wall time
    at ``budget``, at speed-up ``speedup`` and ``iteration_cost`` plain-step times per speculative iteration."""
    return steps * ((1.0 - 1.0 / speedup) / budget - 1.0) / iteration_cost


def budget_wait(budget: float, steps: int, speedup: float, iteration_cost: float, spent: float,
                wall: float) -> float:
    """Speculative iterations from now until a baseline of ``steps`` plain steps keeps what the measurement's
    iterations cost (``spent`` so far, in plain-step times) within ``budget`` of the wall time (``wall`` so
    far, likewise); ≤ 0: affordable now. With spent = budget · wall it is :func:`budget_gap`."""
    extra = steps * (1.0 - 1.0 / speedup)
    return ((spent + extra) / budget - steps - wall) / iteration_cost


class BaselineSchedule:
    def __init__(self, measurement: SnapshotSource, steps: int = 1, min_gap: int = BASELINE_MIN_GAP,
                 max_gap: int = BASELINE_MAX_GAP, budget: float = MEASUREMENT_BUDGET,
                 early_budget: float = BASELINE_EARLY_BUDGET, min_plain: int = MIN_PLAIN_SAMPLES):
        if (min_gap < 1 or max_gap < min_gap or not 0.0 < budget < 1.0 or not budget <= early_budget < 1.0
                or steps < 1 or min_plain < 1):
            raise ValueError("need steps >= 1, 1 <= min_gap <= max_gap, 0 < budget <= early_budget < 1 and "
                             "min_plain >= 1")
        self.measurement = measurement
        self.steps, self.min_gap, self.max_gap = steps, min_gap, max_gap
        self.budget, self.early_budget, self.min_plain = budget, early_budget, min_plain

    def speedup(self) -> float | None:
        """The speed-up the spacing prices plain steps at: speculation's over the recent window against the
        plain step, else the measured one (None: no plain step timed yet)."""
        est = self.measurement.estimate()
        if est is None:
            return None
        if est.provisional_speedup is not None:
            return est.provisional_speedup
        return est.run_measured.value if est.run_measured is not None else None

    def next_gap(self, since: int = 0, remaining_tokens: int | None = None) -> int:
        """Speculative iterations from the last baseline (or the run's start) to the next one, asked ``since``
        speculative iterations after it with ``remaining_tokens`` still to decode (None: unknown)."""
        est = self.measurement.estimate()
        s = self.speedup()
        if s is None or est is None or not est.mean_acceptance_length:
            return self.min_gap  # nothing known yet: the first block, to get a first estimate
        if s <= 1.0:
            return self.min_gap  # a plain step is the faster way to decode: baselines cost nothing
        if "plain step" in est.costs.stale:
            return self.min_gap  # the machine's speed moved since the last plain step (a drill, a busy spell)
        cost = est.mean_acceptance_length / s  # one speculative iteration, in plain-step times
        gap = budget_gap(self.budget, self.steps, s, cost)
        plain_ms = est.costs.plain_step_ms
        if est.cost is not None and est.cost.wall_ms > 0 and plain_ms:  # what was spent so far, all of it
            spent, wall = est.cost.iterations_ms / plain_ms, est.cost.wall_ms / plain_ms
            gap = max(gap, since + budget_wait(self.budget, self.steps, s, cost, spent, wall))
        more = -(-(self.min_plain - est.plain_samples) // self.steps)  # baselines still needed for a measured speed-up
        run = est.run_measured
        if run is not None and run.spread > VERDICT_MAX_SPREAD and est.run_plain_limited:
            more = 1  # too wide for a verdict, and the plain samples limit it: one more narrows it most
        if more > 0 and remaining_tokens is not None:
            stretch = since + remaining_tokens / est.mean_acceptance_length  # iterations from the last baseline
            extra = more * self.steps * (1.0 - 1.0 / s)  # what they cost beyond speculation, in plain-step times
            if extra <= self.early_budget * (stretch * cost + more * self.steps):  # affordable: interval in the run
                gap = min(gap, stretch / (more + 1))  # ``more`` baselines split the stretch evenly
        return int(min(self.max_gap, max(self.min_gap, round(gap))))

    def due(self, since: int, remaining_tokens: int | None = None) -> bool:
        """Whether the baseline runs now, ``since`` speculative iterations after the last one (or the start). An
        iteration that proposed nothing was a plain sample as good as a baseline's: the gap counts from it."""
        est = self.measurement.estimate()
        free = est.since_plain_sample if est is not None else None
        since = min(since, free) if free is not None else since
        return since >= self.next_gap(since, remaining_tokens)


class VerifyExploration:
    def __init__(self, measurement: SnapshotSource, k_max: int, every: int = EXPLORE_EVERY,
                 attempts: int = EXPLORE_ATTEMPTS, budget: float | None = MEASUREMENT_BUDGET,
                 after_measured: bool = False):
        if every < 1 or attempts < 1 or k_max < 1 or (budget is not None and budget <= 0):
            raise ValueError("need every >= 1, attempts >= 1, k_max >= 1 and a budget > 0 (or None: no budget)")
        self.measurement = measurement
        self.k_max, self.every, self.attempts, self.budget = k_max, every, attempts, budget
        self.after_measured = after_measured
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
        """Whether exploring at ``other`` instead of ``k`` keeps the measurement's iterations within their budget
        (no budget, or nothing measured yet to predict from: yes), and, with ``after_measured``, whether the
        measured speed-up exists (the baselines it needs come first)."""
        est = self.measurement.estimate()
        if self.after_measured and (est is None or est.run_measured is None):
            return False
        if self.budget is None or est is None or est.cost is None:
            return True
        return est.cost.iterations_ms + self.predicted_ms(k, other, est.costs) <= self.budget * est.cost.wall_ms

    @staticmethod
    def could_change_advice(est: Estimate, k: int) -> bool:
        """Whether timing a pass at ``k`` could change what the k advisor says: k priced at a lower bound on that
        pass's cost (``Estimate.bound_at``) beats both plain decoding and the best k priced now. Where
        speculation does not pay at the lengths measured, or past the length where it could, an exploration is
        a slow iteration that tells nothing (issue 40: iterations of 8-16 proposals at 637-680 ms while the
        advisor said not to speculate). Nothing priced yet (no plain step, no proposal judged): yes."""
        bound = est.bound_at(k)
        return bound is None or bound > max(1.0, est.best_speedup or 1.0)

    @staticmethod
    def predicted_ms(k: int, other: int, c: Costs) -> float:
        """What an iteration at ``other`` is predicted to take beyond one at ``k``: the extra draft steps and
        verify tokens at the snapshot's measured costs (the verify fit's slope; never below 0)."""
        points = c.verify_ms_by_len
        longest = max(points, default=1)
        slope = (points[longest] - points[min(points)]) / (longest - min(points)) if len(points) > 1 else 0.0
        draft = (c.draft_ms(other) or 0.0) - (c.draft_ms(k) or 0.0)  # lookup: one search whatever k is
        return max(0.0, max(0, other - k) * max(slope, 0.0) + draft)

    def __call__(self, k: int) -> int | None:
        """The k to run this iteration at instead of ``k`` (None: run at ``k``)."""
        self._since += 1
        if self._since < self.every:
            return None
        est = self.measurement.estimate()
        longest = est.costs.longest_pass if est is not None else 0
        for length in self.candidates():
            # a length inside the measured range is interpolated already: only longer ones add to the curve
            if length <= max(longest, k + 1) or self._tried.get(length, 0) >= self.attempts:
                continue
            if est is not None and not self.could_change_advice(est, length - 1):
                continue  # timing it cannot change what the advisor says: a slow iteration for nothing
            if not self.affordable(k, length - 1):
                return None  # the cheaper lengths come first: a dearer one cannot be affordable either
            self._since = 0
            self._tried[length] = self._tried.get(length, 0) + 1
            return length - 1
        return None
