"""Adaptive k: policies that choose the number of proposals for the next iteration.

``CostModelKPolicy`` maximises the cost model's predicted speed-up with the live window's measured costs
and position-by-position acceptance. ``HeuristicKPolicy`` is transformers' schedule, for comparison.
Both implement ``speculative.KPolicy``.
"""

from __future__ import annotations

from collections.abc import Callable

from . import costmodel
from .live import LiveMeasurement
from .records import BaselineRecord, IterationRecord


def monotone_verify_costs(verify_ms_by_len: dict[int, float]) -> dict[int, float]:
    """The verify curve made non-decreasing in pass length (pool-adjacent-violators, equal weights).

    A longer pass never costs less; noisy timings that say otherwise would make the policy flap between
    lengths, so violating neighbours are replaced by their mean.
    """
    blocks: list[list[float]] = []  # [sum, count]
    lengths = sorted(verify_ms_by_len)
    for n in lengths:
        blocks.append([verify_ms_by_len[n], 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            total, count = blocks.pop()
            blocks[-1][0] += total
            blocks[-1][1] += count
    values = [b[0] / b[1] for b in blocks for _ in range(int(b[1]))]
    return dict(zip(lengths, values, strict=True))


class PositionCounts:
    """Per-position acceptance counts, exponentially forgotten: position i was *reached* when proposals
    0..i-1 were accepted and i was drafted (so it was judged), and *accepted* when i was accepted too.

    Counting only iterations that reached a position keeps the estimate free of the bias of the k each
    iteration used (proposals after a rejection are never judged). ``decay`` < 1 forgets old iterations
    (memory of about 1/(1-decay) iterations), so the estimate follows the text as it changes.
    """

    def __init__(self, decay: float = 1.0):
        if not 0.0 < decay <= 1.0:
            raise ValueError(f"decay must be in (0, 1], got {decay}")
        self.decay = decay
        self.reached: list[float] = []
        self.accepted: list[float] = []

    def add(self, record: IterationRecord) -> None:
        if record.mode != "speculative":
            return
        if self.decay < 1.0:
            self.reached = [x * self.decay for x in self.reached]
            self.accepted = [x * self.decay for x in self.accepted]
        judged = min(record.n_drafted, record.n_accepted + 1)
        while len(self.reached) < judged:
            self.reached.append(0.0)
            self.accepted.append(0.0)
        for i in range(judged):
            self.reached[i] += 1.0
            if i < record.n_accepted:
                self.accepted[i] += 1.0

    @property
    def judged(self) -> float:
        """Proposals judged, all positions together (forgotten ones weigh less)."""
        return sum(self.reached)

    @property
    def pooled(self) -> float | None:
        """Accepted over judged, all positions together (the iid alpha)."""
        judged = sum(self.reached)
        return sum(self.accepted) / judged if judged > 0 else None

    def depth(self, min_trials: float) -> int:
        """How many leading positions were reached at least ``min_trials`` times."""
        d = 0
        while d < len(self.reached) and self.reached[d] >= min_trials:
            d += 1
        return d

    def conditional(self, depth: int, prior: float, prior_weight: float) -> list[float]:
        """P(accept i | 0..i-1 accepted) for i < depth, each shrunk toward the position before it.

        Position 0 shrinks toward ``prior``; a position never reached takes the value of the one before
        (the iid model beyond the data).
        """
        out: list[float] = []
        previous = prior
        for i in range(depth):
            reached = self.reached[i] if i < len(self.reached) else 0.0
            accepted = self.accepted[i] if i < len(self.accepted) else 0.0
            c = (accepted + prior_weight * previous) / (reached + prior_weight)
            out.append(c)
            previous = c
        return out


def position_counts(records: list[IterationRecord]) -> PositionCounts:
    counts = PositionCounts()
    for r in records:
        counts.add(r)
    return counts


class CostModelKPolicy:
    """Chooses k to maximise predicted speed-up = E(k) / (k*draft + verify(k+1) + fixed), k = 0 included.

    - k = 0 (no draft this iteration: a plain target step through the loop) is a candidate: when no k >= 1
      is predicted to beat it (the draft costs more than its acceptance earns), the policy stops drafting,
      and every ``probe_every`` choices it drafts one proposal to re-measure acceptance (and the draft
      step), so it comes back when acceptance rises. A probe costs little: k = 1 is near break-even then.
      It stops drafting only once ``skip_after`` proposals were judged: one unlucky first iteration must
      not stop the measuring.
    - E(k) uses per-position conditional acceptance (acceptance comes in runs, so the iid alpha
      under-predicts what the positions after an accepted one are worth), counted by the policy itself with
      exponential forgetting (``decay``), a longer memory than the live window: deep positions are judged
      rarely. Costs (draft step, verify by pass length, fixed per-iteration) come from the live window.
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
        live: LiveMeasurement,
        k_min: int = 0,
        k_max: int = 16,
        initial_k: int = 2,
        min_iterations: int = 1,
        explore_every: int = 8,
        probe_every: int = 8,
        explore_margin: float = 0.1,
        skip_after: float = 8.0,
        hysteresis: float = 0.03,
        prior_weight: float = 2.0,
        min_trials: float = 1.0,
        decay: float = 0.98,
        reach: int = 2,
    ):
        if not 0 <= k_min <= k_max or k_max < 1:
            raise ValueError(f"need 0 <= k_min <= k_max and k_max >= 1, got k_min={k_min}, k_max={k_max}")
        if min(hysteresis, prior_weight, explore_every, probe_every, explore_margin, skip_after) < 0 or reach < 1:
            raise ValueError("hysteresis, prior_weight, explore_every, probe_every, explore_margin and "
                             "skip_after must be >= 0, reach >= 1")
        self.live = live
        self.k_min, self.k_max = k_min, k_max
        self.initial_k = min(max(initial_k, k_min, 1), k_max)  # it cannot measure anything without drafting
        self.min_iterations = min_iterations
        self.explore_every = explore_every
        self.probe_every = probe_every
        self.explore_margin = explore_margin
        self.skip_after = skip_after
        self.hysteresis = hysteresis
        self.prior_weight = prior_weight
        self.min_trials = min_trials
        self.reach = reach
        self.counts = PositionCounts(decay)
        self.k = self.initial_k
        self.scores: dict[int, float] = {}  # last predicted speed-up over plain per k, for display
        self._choices = 0

    def reset(self) -> None:
        self.k = self.initial_k
        self.scores = {}
        self._choices = 0
        self.counts = PositionCounts(self.counts.decay)

    def observe(self, record: IterationRecord) -> None:
        self.live.observe(record)
        self.counts.add(record)

    def observe_baseline(self, baseline: BaselineRecord) -> None:
        self.live.observe_baseline(baseline)

    def _costs(self) -> tuple[Callable[[int], float], float, float, float] | None:
        """(verify by pass length, draft step, fixed, plain step) in ms; None before any verify timing.

        A k = 0 iteration is a pass of length 1; its cost is the curve's (the sweep's) where measured, else
        the baseline's plain step, else the shortest measured pass's: never extrapolated below it, so an
        early, noisy slope cannot make not drafting look cheap. The plain step (the unit of the scores)
        is the baseline's, else the cost of a pass of length 1.
        """
        by_len = self.live.verify_ms_by_len
        if not by_len:
            return None
        plain_step = self.live.plain_step_ms
        if 1 not in by_len:
            by_len = {**by_len, 1: plain_step if plain_step is not None else by_len[min(by_len)]}
        verify = costmodel.verify_cost_function(monotone_verify_costs(by_len))
        draft, fixed = self.live.draft_step_ms or 0.0, self.live.fixed_ms or 0.0
        return verify, draft, fixed, plain_step or verify(1)

    def predicted_scores(self, hi: int) -> dict[int, float] | None:
        """Predicted speed-up over plain decoding for k in k_min..hi (and ``reach`` past measured positions)."""
        records = self.live.window_records()
        alpha = self.counts.pooled
        costs = self._costs()
        if len(records) < self.min_iterations or alpha is None or costs is None:
            return None
        verify, draft, fixed, plain = costs
        hi = max(self.k_min, min(hi, self.counts.depth(self.min_trials) + self.reach))
        cond = self.counts.conditional(max(hi, 1), alpha, self.prior_weight)
        scores: dict[int, float] = {}
        # not drafting stops the measuring: only on the evidence of enough judged proposals
        lo = self.k_min if self.counts.judged >= self.skip_after else max(self.k_min, 1)
        for k in range(lo, hi + 1):
            cost = k * draft + verify(k + 1) + fixed
            if cost > 0:
                scores[k] = plain * costmodel.expected_tokens_from_positions(cond, k) / cost
        return scores or None

    def choose_k(self, k_max: int) -> int:
        hi = max(self.k_min, min(self.k_max, k_max))
        self.k = min(max(self.k, self.k_min), hi)
        self._choices += 1
        scores = self.predicted_scores(hi)
        if scores is None:
            return self.k
        self.scores = scores
        # on a tie the smaller k (cheaper to be wrong), but drafting over not drafting: it keeps measuring
        # acceptance (a free draft that nothing accepted ties with not drafting)
        best = max(scores, key=lambda k: (scores[k], k > 0, -k))
        if scores.get(self.k, 0.0) < scores[best] * (1.0 - self.hysteresis):
            self.k = best
        if self.k == 0:
            probe = self.probe_every and self._choices % self.probe_every == 0 and hi >= 1
            return 1 if probe else 0
        explore = self.explore_every and self._choices % self.explore_every == 0 and self.k < hi
        if explore and scores.get(self.k + 1, 0.0) >= scores[self.k] * (1.0 - self.explore_margin):
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
        if record.mode != "speculative":
            return
        if record.n_accepted == record.n_drafted:
            self.k = min(self.k + 2, self.k_max)
        else:
            self.k = max(self.k_min, self.k - 1)

    def observe_baseline(self, baseline: BaselineRecord) -> None:
        pass
