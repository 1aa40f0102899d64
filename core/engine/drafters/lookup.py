"""Prompt lookup: propose what followed an earlier occurrence (the most recent, or the earliest) of the
context's last n-gram.

No model runs, so drafting costs microseconds; it pays wherever the output copies its input (code edits,
JSON, tables, quotations). Proposals are deterministic, so q is one-hot at each proposal and the loop's
rule stays exact (``q_probs`` None).
"""

from __future__ import annotations

import torch

from specscope.core.engine.drafters.base import Drafter, Proposal
from specscope.core.records import ControlValues

MATCH_CHOICES = ("recent", "earliest")


class PromptLookupDrafter(Drafter):
    """Longest match first, from ``max_ngram`` down to ``min_ngram``; up to ``num_tokens`` (and k) proposals.

    The index maps every n-gram of the committed context to the position where its most recent occurrence
    ends (``match="recent"``) or its first (``match="earliest"``, transformers' choice); it grows with the
    context (O(new tokens) per call), so long contexts cost no rescans. An n-gram is
    indexed only once a token follows it, so a lookup never finds the context's own suffix. When the copied
    continuation runs into the end of the context (a short period, e.g. "ab ab ab"), copying continues from
    the proposals themselves, as an LZ77 back-reference does, so periodic text still yields full proposals.
    """

    name = "lookup"

    def __init__(self, max_ngram: int = 3, num_tokens: int = 10, min_ngram: int = 1, match: str = "recent"):
        if not 1 <= min_ngram <= max_ngram:
            raise ValueError(f"need 1 <= min_ngram <= max_ngram, got {min_ngram} and {max_ngram}")
        if num_tokens < 1:
            raise ValueError(f"num_tokens must be at least 1, got {num_tokens}")
        if match not in MATCH_CHOICES:
            raise ValueError(f"match must be one of {', '.join(MATCH_CHOICES)}, got {match!r}")
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram
        self.num_tokens = num_tokens
        self.match = match
        self.last_match_ngram = 0  # the n-gram size of the last lookup's match (0 = none)
        self._tokens: list[int] = []
        self._index: dict[int, dict[tuple[int, ...], int]] = {}
        self._indexed = 0  # n-grams ending before this position are in the index
        self.reset([])

    def reset(self, prompt_ids: list[int]) -> None:
        self._tokens = []
        self._index = {n: {} for n in range(self.min_ngram, self.max_ngram + 1)}
        self._indexed = 0
        self._sync(prompt_ids)

    def _sync(self, context_ids: list[int]) -> None:
        """Extend the index to ``context_ids`` (rebuilt if the context is not an extension of the last)."""
        known = len(self._tokens)
        if len(context_ids) < known or (known and context_ids[known - 1] != self._tokens[-1]):
            self.reset(context_ids)
            return
        self._tokens.extend(int(t) for t in context_ids[known:])
        tokens = self._tokens
        last = len(tokens) - 1  # the n-gram ending at the last token has no follower yet
        earliest = self.match == "earliest"
        for end in range(self._indexed, last):
            for n, table in self._index.items():
                if end - n + 1 >= 0:
                    key = tuple(tokens[end - n + 1 : end + 1])
                    if earliest:
                        table.setdefault(key, end)
                    else:
                        table[key] = end
        self._indexed = max(self._indexed, last)

    def lookup(self, context_ids: list[int], k: int) -> list[int]:
        """The proposals for ``context_ids`` (possibly none)."""
        self._sync(context_ids)
        tokens = self._tokens
        size = len(tokens)
        want = min(k, self.num_tokens)
        self.last_match_ngram = 0
        if want <= 0:
            return []
        for n in range(min(self.max_ngram, size), self.min_ngram - 1, -1):
            end = self._index[n].get(tuple(tokens[size - n :]))
            if end is None:
                continue
            self.last_match_ngram = n
            start = end + 1
            out: list[int] = []
            for i in range(want):
                src = start + i
                out.append(tokens[src] if src < size else out[src - size])
            return out
        return []

    def propose(
        self,
        context_ids: list[int],
        k: int,
        controls: ControlValues,
        generator: torch.Generator | None,
    ) -> Proposal:
        tokens = self.lookup(context_ids, k)
        return Proposal(tokens=tokens, q_probs=None, q_token_probs=[1.0] * len(tokens),
                        match_ngram=self.last_match_ngram if tokens else 0)

    def rollback(self, committed_ids: list[int]) -> None:
        """Nothing to undo: only committed tokens are ever indexed (the next call extends the index)."""

    def release(self) -> None:
        self.reset([])
