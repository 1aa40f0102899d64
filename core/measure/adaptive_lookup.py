"""Adaptive k for prompt lookup: how many of the matched continuation's tokens to propose, each iteration.

A lookup costs microseconds and finds a whole continuation at once, so the question is not how far to
draft but how much of what was found to send to the target: on a CPU a pass over more tokens costs more,
and tokens after the first likely rejection only add cost. The policy decides after the match is known:

- acceptance by position, conditioned on the size of the n-gram that matched (a 3-gram match is copied
  text far more often than a 1-gram one), measured in this run (``measurement.KeyedPositionCounts``, shrunk
  toward all matches together, then toward ``prior`` before anything was judged);
- the one verify-cost fit and the same speed-up formula as everywhere (``Estimate.scores_for``: lookup's
  draft cost is charged per iteration);
- it proposes the number of tokens with the highest predicted speed-up, none when no length beats a plain
  step. While it proposes none it still probes with one token, per match size: at once for a match size
  never judged, at the next match after an acceptance, and after 2, 4, … up to ``probe_every`` declined
  matches after rejections. An answer that starts with prose and then copies
  (the usual shape) is back to proposing within a few iterations of the copying, and a run that never
  copies pays for a handful of one-token probes.
- It looks at most twice as far (at least ``reach`` further) as the positions judged and the pass lengths
  measured so far, and scores a length whose pass was measured fewer than three times at a lower bound on
  its cost (``Estimate.scores_for(optimistic=True)``): it proposes such a length (and so measures it)
  only when even that bound beats every measured choice. Without any sweep it climbs 1, 2, 4, 8 … while
  everything is accepted, and it measures the plain step first (a match before any length-1 pass
  proposes nothing).

It implements the loop's ``KPolicy`` (``choose_k`` asks the drafter for the whole continuation, ``observe``
feeds the measurement) and ``speculative.ProposalLengthPolicy`` (``proposal_length`` trims the proposal).
"""

from __future__ import annotations

from specscope.core.controls import K_MAX
from specscope.core.measure.estimators import KeyedPositionCounts
from specscope.core.measure.measurement import TRUSTED_PASSES
from specscope.core.measure.snapshot import SnapshotSource
from specscope.core.records import SPECULATIVE_MODE, IterationRecord


class LookupLengthPolicy:
    def __init__(self, measurement: SnapshotSource, k_max: int = K_MAX, prior: float = 0.5, probe_every: int = 8,
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
        self._probe_wait: dict[int, int] = {}  # per match size: declined matches left before the next probe
        self._probe_gap: dict[int, int] = {}  # per match size: the wait after the last probe

    def reset(self) -> None:
        self.counts = KeyedPositionCounts()
        self.scores = {}
        self._pending = None
        self._probe_wait = {}
        self._probe_gap = {}

    # ---- KPolicy -------------------------------------------------------------------------------------
    def choose_k(self, k_max: int) -> int:
        """The whole continuation is asked for (a lookup costs the same at any k); it is trimmed later."""
        return max(1, min(self.k_max, k_max))

    def observe(self, record: IterationRecord) -> None:
        if self._pending is not None and record.mode == SPECULATIVE_MODE and record.n_drafted > 0:
            self.counts.add(self._pending, record)
            # the probe schedule of this match size: after an acceptance look again at the next match; after
            # a rejection of the first proposal wait twice as long as the last time
            last = self._probe_gap.get(self._pending, 0)
            gap = 0 if record.n_accepted > 0 else min(self.probe_every, 2 * max(1, last))
            self._probe_gap[self._pending] = self._probe_wait[self._pending] = gap
        self._pending = None

    # ---- ProposalLengthPolicy ------------------------------------------------------------------------
    def proposal_length(self, match_ngram: int, available: int) -> int:
        """How many of the ``available`` continuation tokens of a match of ``match_ngram`` tokens to propose."""
        choice = self._decide(match_ngram, max(0, available))
        self._pending = match_ngram if choice > 0 else None
        return choice

    def _further(self, n: int) -> int:
        """How far past ``n`` measured positions or pass lengths a choice may look: doubling, at least ``reach``."""
        return n + max(self.reach, n)

    def _position_reach(self) -> int:
        """How many proposals acceptance is known well enough for: double the positions judged."""
        return self._further(self.counts.pooled.depth(1.0))

    def _conditional(self, match_ngram: int, depth: int) -> list[float]:
        """P(accept i | 0..i-1 accepted) for the first ``depth`` proposals of this match (measured, by match size)."""
        return self.counts.conditional(match_ngram, depth, self.prior)

    def _decide(self, match_ngram: int, available: int) -> int:
        if available == 0:
            return 0
        est = self.measurement.estimate()
        if est is None or est.costs.plain_step_ms is None:
            return 0  # a plain step first: every speed-up is measured against it
        # no further than double the positions judged and the pass lengths measured: a run of full
        # acceptances at 2 proposals is not extrapolated to 10 in one jump
        reachable = min(available, self._further(max(0, est.costs.longest_pass - 1)), self._position_reach())
        cond = self._conditional(match_ngram, reachable)
        scores = est.scores_for(cond, 0, reachable)
        self.scores = scores
        if 0 not in scores:
            return 0
        # the best length; on a tie the shorter (cheaper to be wrong)
        best = max(scores, key=lambda k: (scores[k], -k))
        # A length whose verify pass was measured fewer than 3 times (or never) is also scored at a lower bound
        # on its cost: if even that could beat the best measured choice, propose it and so measure it. On a
        # CPU a 2-token pass can cost 1.6 plain steps while a 9-token one costs 2, so climbing only through
        # measured lengths would stall at the expensive short ones, and one slow pass would bar a length
        # for the rest of the run.
        bounds = est.scores_for(cond, 0, reachable, optimistic=True, trusted_passes=TRUSTED_PASSES)
        if bounds:
            explore = max(bounds, key=lambda k: (bounds[k], -k))
            if bounds[explore] > scores[best]:
                best = explore
        if best > 0:
            return best
        if not self.probe_every:
            return 0
        wait = self._probe_wait.get(match_ngram, 0)
        if wait > 0:
            self._probe_wait[match_ngram] = wait - 1
            return 0
        return 1  # a probe: keep measuring acceptance while not proposing
