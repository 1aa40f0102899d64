"""Adaptive k for suffix decoding: how much of the suffix draft to send to the target, each iteration.

Prompt lookup's policy (``core/adaptive_lookup``) learns acceptance by position from the run itself, keyed on
the match size, because a lookup match says nothing about how likely its continuation is. A suffix draft
does: each token carries the observed frequency of that continuation (``SuffixDraft.conditional``, a count
ratio shrunk toward an even bet when the counts are small). This policy takes those as the conditional
acceptance of each proposal and keeps everything else of lookup's policy: the one verify-cost fit and
speed-up formula of the measurement, the probes, and the exploration of pass lengths never measured.

So the draft is trimmed where one more token's expected gain no longer pays for the longer pass on this
machine: on a CPU whose passes of up to ~10 tokens cost one plain step it sends nearly every drafted token;
where a 2-token pass costs 1.3 steps it sends only the likely ones (docs/bench-demo-suffix.md §2: the same
policy replayed on both cost curves).

Acceptance is not learned from the run: the positions reached need not be doubled before a longer draft is
sent, since the count ratios already say how far the draft is likely right; only the pass lengths measured
limit how far it reaches.
"""

from __future__ import annotations

from typing import Any, Protocol

from specscope.core.controls import K_MAX
from specscope.core.measure.adaptive_lookup import LookupLengthPolicy
from specscope.core.measure.snapshot import SnapshotSource


class CountedDrafter(Protocol):
    """What the policy reads of the suffix drafter (core/engine/drafters/suffix.py), by duck type: the last
    draft's conditional count ratios. The measurement layer does not import the engine."""

    @property
    def last_draft(self) -> Any: ...


class SuffixLengthPolicy(LookupLengthPolicy):
    def __init__(self, measurement: SnapshotSource, drafter: CountedDrafter, k_max: int = K_MAX, probe_every: int = 8):
        super().__init__(measurement, k_max=k_max, probe_every=probe_every)
        self.drafter = drafter

    def _position_reach(self) -> int:
        return self.k_max

    def _conditional(self, match_ngram: int, depth: int) -> list[float]:
        """The last draft's own count ratios (the draft the loop is trimming was made just before)."""
        return list(self.drafter.last_draft.conditional[:depth])
