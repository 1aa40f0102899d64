"""Adaptive k for prompt lookup: how many of the matched continuation's tokens to propose, each iteration.

A lookup costs microseconds and finds a whole continuation at once, so the question is not how far to
draft but how much of what was found to send to the target: on a CPU a pass over more tokens costs more,
and tokens after the first likely rejection only add cost. The policy decides after the match is known:

- acceptance by position, conditioned on the size of the n-gram that matched (a 3-gram match is copied
  text far more often than a 1-gram one), measured in this run (``measurement.KeyedPositionCounts``, shrunk
  toward all matches together, then toward ``prior`` before anything was judged);
- the one verify-cost fit and the same speed-up formula as everywhere (``Measurement.scores_for``: lookup's
  draft cost is charged per iteration);
- it proposes the number of tokens with the highest predicted speed-up, none when no length beats a plain
  step. While it proposes none it still probes with one token every ``probe_every`` matches, so it comes
  back when the output starts copying.
- It never proposes a length whose verify pass has no measurement, nor a position never judged, except
  ``reach`` past the longest measured when that is the best: so without any sweep it climbs from plain
  steps (one more proposal per iteration while everything is accepted), and it measures the plain step
  first (a match before any length-1 pass proposes nothing).

It implements the loop's ``KPolicy`` (``choose_k`` asks the drafter for the whole continuation, ``observe``
feeds the measurement) and ``speculative.ProposalLengthPolicy`` (``proposal_length`` trims the proposal).
"""

from __future__ import annotations

from .controls import K_MAX
from .measurement import KeyedPositionCounts, Measurement
from .records import BaselineRecord, IterationRecord


class LookupLengthPolicy:
    def __init__(self, measurement: Measurement, k_max: int = K_MAX, prior: float = 0.5, probe_every: int = 8,
                 reach: int = 1):
        if k_max < 1 or not 0.0 < prior < 1.0 or probe_every < 0 or reach < 1:
            raise ValueError("need k_max >= 1, 0 < prior < 1, probe_every >= 0 and reach >= 1")
        self.measurement = measurement
        self.k_max = k_max
        self.prior = prior
        self.probe_every = probe_every
        self.reach = reach
        self.counts = KeyedPositionCounts()
        self.scores: dict[int, float] = {}  # the last decision's predicted speed-up per length, for display
        self._pending: int | None = None  # match size of the proposal the next record judges
        self._declined = 0

    def reset(self) -> None:
        self.counts = KeyedPositionCounts()
        self.scores = {}
        self._pending = None
        self._declined = 0

    # ---- KPolicy -------------------------------------------------------------------------------------
    def choose_k(self, k_max: int) -> int:
        """The whole continuation is asked for (a lookup costs the same at any k); it is trimmed later."""
        return max(1, min(self.k_max, k_max))

    def observe(self, record: IterationRecord) -> None:
        self.measurement.observe(record)  # idempotent: the session feeds the same record
        if self._pending is not None and record.mode == "speculative" and record.n_drafted > 0:
            self.counts.add(self._pending, record)
        self._pending = None

    def observe_baseline(self, baseline: BaselineRecord) -> None:
        self.measurement.observe_baseline(baseline)

    # ---- ProposalLengthPolicy ------------------------------------------------------------------------
    def proposal_length(self, match_ngram: int, available: int) -> int:
        """How many of the ``available`` continuation tokens of a match of ``match_ngram`` tokens to propose."""
        choice = self._decide(match_ngram, max(0, available))
        self._pending = match_ngram if choice > 0 else None
        return choice

    def _decide(self, match_ngram: int, available: int) -> int:
        if available == 0:
            return 0
        fit = self.measurement.fit
        if fit(1) is None:
            return 0  # a plain step first: every speed-up is measured against it
        # no further than ``reach`` past the positions judged and the pass lengths measured: a run of full
        # acceptances at 2 proposals is not extrapolated to 10 in one jump
        measured_positions = self.counts.pooled.depth(1.0)
        reachable = min(available, max(0, fit.max_length - 1) + self.reach, measured_positions + self.reach)
        cond = self.counts.conditional(match_ngram, reachable, self.prior)
        scores = self.measurement.scores_for(cond, 0, reachable)
        self.scores = scores
        if 0 not in scores:
            return 0
        # the best length; on a tie the shorter (cheaper to be wrong)
        best = max(scores, key=lambda k: (scores[k], -k))
        longest = max(scores)
        if best == longest and best < reachable:
            best = min(reachable, best + self.reach)  # the best is at the edge of what was measured: look past
        if best > 0:
            return best
        self._declined += 1
        if self.probe_every and self._declined % self.probe_every == 0:
            return 1  # keep measuring acceptance while not proposing
        return 0
