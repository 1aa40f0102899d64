"""Adaptive k: policies that choose the number of proposals for the next iteration.

``CostModelKPolicy`` maximises the predicted speed-up that ``core.measure.measurement`` gives for each k (the same
curve, verify fit and acceptance by position the app and the CLI show); it adds only the policy: when to
explore, probe and switch. ``HeuristicKPolicy`` is transformers' schedule, for comparison. Both implement
``speculative.KPolicy``.
"""

from __future__ import annotations

from specscope.core.measure.snapshot import SnapshotSource
from specscope.core.records import SPECULATIVE_MODE, IterationRecord


class CostModelKPolicy:
    """Chooses k to maximise predicted speed-up = E(k) / (k*draft + verify(k+1) + fixed), k = 0 included.

    - k = 0 (no draft this iteration: a plain target step through the loop) is a candidate: when no k >= 1
      is predicted to beat it (the draft costs more than its acceptance earns), the policy stops drafting,
      and every ``probe_every`` choices it drafts one proposal to re-measure acceptance (and the draft
      step), so it comes back when acceptance rises. A probe costs little: k = 1 is near break-even then.
      It stops drafting only once ``skip_after`` proposals were judged: one unlucky first iteration must
      not stop the measuring.
    - The scores are the snapshot's curve (``Estimate.scores``): E(k) from per-position conditional
      acceptance (acceptance comes in runs, so the iid alpha under-predicts what the positions after an
      accepted one are worth) and the one verify-cost fit; k with no verify data has no score and is never chosen.
    - Every ``explore_every`` choices it tries one more proposal than its choice, so the acceptance at the
      next position and the verify cost at the next length keep being measured; but only when that k is
      predicted to lose at most ``explore_margin`` (relative): where drafting is dear, a deeper probe
      costs much more than what it could reveal.
    - It never goes more than ``reach`` positions past the positions it has measured (judged at least
      ``min_trials`` times), so a run of full acceptances at k=4 is not extrapolated to k=16 in one jump;
      while everything is accepted it climbs by ``reach`` per iteration, as fast as the heuristic.
    - It changes k only when the gain over the current k exceeds ``hysteresis`` (relative), so noise in the
      timings does not make it flap.
    Until ``min_iterations`` speculative iterations are in the window it keeps ``initial_k``: one
    iteration, because the first already measures the draft step, and where drafting is dear a too-large
    k costs much per iteration (k = 2 risks little either way; it climbs by ``reach`` from there).
    """

    def __init__(
        self,
        measurement: SnapshotSource,
        k_min: int = 0,
        k_max: int = 16,
        initial_k: int = 2,
        min_iterations: int = 1,
        explore_every: int = 8,
        probe_every: int = 8,
        explore_margin: float = 0.1,
        skip_after: float = 8.0,
        hysteresis: float = 0.03,
        min_trials: float = 1.0,
        reach: int = 2,
    ):
        if not 0 <= k_min <= k_max or k_max < 1:
            raise ValueError(f"need 0 <= k_min <= k_max and k_max >= 1, got k_min={k_min}, k_max={k_max}")
        if min(hysteresis, explore_every, probe_every, explore_margin, skip_after) < 0 or reach < 1:
            raise ValueError("hysteresis, explore_every, probe_every, explore_margin and skip_after must be >= 0, "
                             "reach >= 1")
        self.measurement = measurement
        self.k_min, self.k_max = k_min, k_max
        self.initial_k = min(max(initial_k, k_min, 1), k_max)  # it cannot measure anything without drafting
        self.min_iterations = min_iterations
        self.explore_every = explore_every
        self.probe_every = probe_every
        self.explore_margin = explore_margin
        self.skip_after = skip_after
        self.hysteresis = hysteresis
        self.min_trials = min_trials
        self.reach = reach
        self.k = self.initial_k
        self.scores: dict[int, float] = {}  # last predicted speed-up over plain per k, for display
        self.note = ""  # why the last choice is not simply the best predicted k ("" when it is)
        self._choices = 0

    def reset(self) -> None:
        self.k = self.initial_k
        self.scores = {}
        self.note = ""
        self._choices = 0

    def observe(self, record: IterationRecord) -> None:
        """Nothing to learn beyond the measurement, which the session feeds (the one feeder)."""

    def predicted_scores(self, hi: int) -> dict[int, float] | None:
        """The snapshot's predicted speed-up for k in k_min..hi, at most ``reach`` past measured positions."""
        est = self.measurement.estimate()
        if est is None or est.window < self.min_iterations or est.recently_judged <= 0:
            return None
        hi = max(self.k_min, min(hi, est.acceptance_depth(self.min_trials) + self.reach))
        # not drafting stops the measuring: only on the evidence of enough judged proposals
        lo = self.k_min if est.recently_judged >= self.skip_after else max(self.k_min, 1)
        return est.scores(lo, hi) or None

    def choose_k(self, k_max: int) -> int:
        hi = max(self.k_min, min(self.k_max, k_max))
        self.k = min(max(self.k, self.k_min), hi)
        self._choices += 1
        scores = self.predicted_scores(hi)
        if scores is None:
            self.note = f"starting at k={self.k} until acceptance and costs are measured"
            return self.k
        self.scores = scores
        self.note = ""
        # on a tie the smaller k (cheaper to be wrong), but drafting over not drafting: it keeps measuring
        # acceptance (a free draft that nothing accepted ties with not drafting)
        best = max(scores, key=lambda k: (scores[k], k > 0, -k))
        if scores.get(self.k, 0.0) < scores[best] * (1.0 - self.hysteresis):
            self.k = best
        elif best != self.k:
            self.note = (f"keeps k={self.k}: best k={best} predicts under {100 * self.hysteresis:.0f}% more "
                         "(hysteresis against noise)")
        if self.k == 0:
            probe = self.probe_every and self._choices % self.probe_every == 0 and hi >= 1
            if probe:
                self.note = "probing k=1 to re-measure acceptance while not drafting"
            return 1 if probe else 0
        explore = self.explore_every and self._choices % self.explore_every == 0 and self.k < hi
        if explore and scores.get(self.k + 1, 0.0) >= scores[self.k] * (1.0 - self.explore_margin):
            self.note = f"exploring k={self.k + 1} to measure the next position and pass length"
            return self.k + 1
        return self.k


class HeuristicKPolicy:
    """transformers' "heuristic" schedule: +2 after an iteration that accepted everything, else -1 (min 1)."""

    def __init__(self, initial_k: int = 5, k_min: int = 1, k_max: int = 16):
        if not 1 <= k_min <= k_max:
            raise ValueError(f"need 1 <= k_min <= k_max, got k_min={k_min}, k_max={k_max}")
        self.k_min, self.k_max = k_min, k_max
        self.initial_k = min(max(initial_k, k_min), k_max)
        self.k = self.initial_k

    def reset(self) -> None:
        self.k = self.initial_k

    def choose_k(self, k_max: int) -> int:
        return max(self.k_min, min(self.k, self.k_max, k_max))

    def observe(self, record: IterationRecord) -> None:
        if record.mode != SPECULATIVE_MODE:
            return
        if record.n_accepted == record.n_drafted:
            self.k = min(self.k + 2, self.k_max)
        else:
            self.k = max(self.k_min, self.k - 1)

