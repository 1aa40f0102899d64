"""The drafter interface: anything that proposes k tokens and says with what distribution it did.

Sampling stays exact only if the loop knows q, the distribution each proposal was really drawn from, so
``propose`` returns it: k x V rows for a stochastic drafter, or None for a deterministic one (q one-hot at
each proposal; prompt lookup, or any drafter under greedy decoding).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from specscope.core.records import ControlValues


@dataclass
class Proposal:
    tokens: list[int]
    q_probs: torch.Tensor | None  # (len(tokens), V) processed proposal distributions; None = one-hot
    # Softmax of the drafter's raw logits (greedy) or processed q (sampling) at each proposal, for records.
    q_token_probs: list[float | None]
    # Prompt lookup: the size of the n-gram whose match gave these tokens; suffix decoding: the match length
    # (0 = neither, or no match).
    # Acceptance depends on it, so adaptive k for lookup conditions on it.
    match_ngram: int = 0
    # Suffix decoding: the proposal's expected number of accepted tokens (the sum of each token's estimated
    # probability); None for drafters that make no such estimate.
    expected_accepted: float | None = None


class Drafter(ABC):
    """Proposes tokens for the committed context. Stateful drafters keep their own cache."""

    name: str = "drafter"
    # Target layers whose hidden inputs the drafter reads (EAGLE-3). Non-empty: the loop asks the target
    # for its hidden states in the passes it runs anyway and hands the committed rows to
    # ``observe_target_features``; no extra target forward.
    feature_layers: tuple[int, ...] = ()

    @abstractmethod
    def reset(self, prompt_ids: list[int]) -> None:
        """Start a new sequence with this prompt (drop all state)."""

    @abstractmethod
    def propose(
        self,
        context_ids: list[int],
        k: int,
        controls: ControlValues,
        generator: torch.Generator | None,
    ) -> Proposal:
        """Up to k proposals continuing ``context_ids`` (the whole committed sequence, prompt included).

        May return fewer than k (prompt lookup with no match may return none).
        """

    @abstractmethod
    def rollback(self, committed_ids: list[int]) -> None:
        """Make internal state consistent with the committed sequence after verification."""

    def observe_target_features(self, first_position: int, features: torch.Tensor) -> None:  # noqa: B027
        """The target's hidden inputs to ``feature_layers``, concatenated: (T, n_layers * H) for the committed
        positions first_position .. first_position + T - 1. Called only when ``feature_layers`` is set."""

    def release(self) -> None:  # noqa: B027 - optional hook
        """Drop caches and references so memory can be freed."""


def append_feature_rows(pending: list[torch.Tensor], start: int, first_position: int,
                        features: torch.Tensor) -> int:
    """Append the target's feature rows for positions ``first_position``.. to ``pending`` (rows not yet used
    by a drafter that reads target features, starting at position ``start``); return the new start. The rows
    must continue the pending ones: a gap means a pass's features were lost, which would draft from the wrong
    context."""
    if features.shape[0] == 0:
        return start
    if not pending:
        pending.append(features)
        return first_position
    have = start + sum(int(f.shape[0]) for f in pending)
    if first_position != have:
        raise RuntimeError(f"target features arrived for position {first_position}, expected {have}")
    pending.append(features)
    return start
