"""Suffix decoding: propose the most frequent continuation of the context's suffix, from this run's prompt and
output and from earlier responses.

Two suffix trees (``suffix_tree.SuffixTree``), as in SuffixDecoding and vLLM's ``method="suffix"``:

- this run's tree, over the prompt and every committed token so far;
- the cross-run cache (the "global tree"), over the responses of earlier runs with the same drafter in this
  process (a session): the same task on new data, as in agentic loops, repeats whole stretches of earlier
  answers. At most ``max_cached_requests`` responses are kept, the oldest evicted first; 0 turns it off.

Each tree proposes its best draft (every match length tried; the most frequent child followed; drafting
stops below ``min_token_prob``; length capped by match length × ``max_spec_factor``, ``max_tree_depth`` and
k). The run's own draft is taken unless it is empty or the cache matched a longer stretch of the context:
on a prompt the cache has never seen, short matches into other answers carry count ratios of 1.0 from one
occurrence and would outscore the run's own text (the replay in docs/bench-demo-suffix.md: comparing the
scores lost 5% against transformers' lookup on unseen structured prompts, and gained nothing on repeated
tasks, where the cache's matches are the longer ones).

When neither tree matches the context's last token (a token never seen before), the drafter backs off to the
empty context, the trie's root: it proposes the run's most frequent token (``backoff``). The guess is rarely
right (about 5% of such passes in the replay, 0-10% by prompt kind), but a verify pass of two tokens can
cost no more than a plain step: on a GPU, where small passes are memory-bound, and on this project's CPU
while one-token steps ran on PyTorch's default kernel and two-token passes on the prepacked one
(core/engine/cpu_linear.py): 0.72-0.83 of a one-token step (docs/bench-demo-suffix.md §1). Where two-token
passes cost more (since one-token steps take the faster kernel, about 1.1 steps on the AVX-512 EPYC; 1.4
on the AVX2 machine of 1 December), turn it off, or use adaptive k, which sends the guess only when the
measured pass costs say it pays.

Proposals are deterministic, so the draft distribution is a point mass on them (q = 1, ``q_probs`` None) and
the loop stays exact, as with prompt lookup.

Per iteration the work is O(new tokens × max_tree_depth) to follow the context plus the drafting itself:
the run's tree keeps the nodes of the context's suffixes as it grows, and the drafter keeps the cache's
matched nodes the same way (``SuffixTree.extend_matches``), so nothing is matched from the root again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from specscope.core.engine.drafters.base import Drafter, Proposal
from specscope.core.engine.drafters.suffix_defaults import (  # the defaults live without torch
    DEFAULT_BACKOFF,
    DEFAULT_MAX_CACHED_REQUESTS,
    DEFAULT_MAX_SPEC_FACTOR,
    DEFAULT_MAX_TREE_DEPTH,
    DEFAULT_MIN_TOKEN_PROB,
    check_suffix_parameters,
)
from specscope.core.engine.drafters.suffix_tree import ROOT, SuffixDraft, SuffixTree
from specscope.core.records import ControlValues

LOCAL_SEQ = 0


class ResponseCache:
    """Earlier responses in one suffix tree, at most ``max_cached_requests`` of them (oldest out first)."""

    def __init__(self, max_tree_depth: int = DEFAULT_MAX_TREE_DEPTH,
                 max_cached_requests: int = DEFAULT_MAX_CACHED_REQUESTS):
        self.tree = SuffixTree(max_tree_depth)
        self.max_cached_requests = max_cached_requests
        self.version = 0  # changes whenever the tree does: nodes a drafter matched may be gone
        self._next_id = 0

    def __len__(self) -> int:
        return len(self.tree.sequence_ids())

    def add(self, response: Sequence[int]) -> None:
        if self.max_cached_requests <= 0 or not response:
            return
        self.tree.extend(self._next_id, [int(t) for t in response])
        self._next_id += 1
        self.version += 1
        ids = self.tree.sequence_ids()  # insertion order: the oldest first
        for old in ids[: max(0, len(ids) - self.max_cached_requests)]:
            self.tree.remove(old)

    def clear(self) -> None:
        for seq_id in self.tree.sequence_ids():
            self.tree.remove(seq_id)
        self.version += 1


class SuffixDrafter(Drafter):
    """Suffix decoding over this run (prompt + output) and a cache of earlier responses.

    A run's response enters the cache when the next run starts (``reset``): only finished text, never the
    current run's own answer, so a proposal never draws on the output it is verifying against.
    """

    name = "suffix"

    @classmethod
    def from_spec(cls, spec: Any) -> SuffixDrafter:
        """The drafter a pair spec asks for (its ``suffix_*`` fields, as the CLI and the app set them)."""
        return cls(max_tree_depth=spec.suffix_max_tree_depth, max_spec_factor=spec.suffix_max_spec_factor,
                   min_token_prob=spec.suffix_min_token_prob, max_cached_requests=spec.suffix_max_cached_requests,
                   backoff=spec.suffix_backoff)

    def __init__(self, max_tree_depth: int = DEFAULT_MAX_TREE_DEPTH,
                 max_spec_factor: float = DEFAULT_MAX_SPEC_FACTOR,
                 min_token_prob: float = DEFAULT_MIN_TOKEN_PROB,
                 max_cached_requests: int = DEFAULT_MAX_CACHED_REQUESTS,
                 cache: ResponseCache | None = None, backoff: bool = DEFAULT_BACKOFF):
        check_suffix_parameters(max_tree_depth, max_spec_factor, min_token_prob, max_cached_requests)
        self.max_tree_depth = max_tree_depth
        self.max_spec_factor = max_spec_factor
        self.min_token_prob = min_token_prob
        self.backoff = backoff  # propose the run's most frequent token when nothing matches
        self.cache = cache if cache is not None else ResponseCache(max_tree_depth, max_cached_requests)
        self.last_draft = SuffixDraft()
        self.last_source = ""  # "run", "cache" or "backoff": where the last proposal came from
        self._local = SuffixTree(max_tree_depth)
        self._tokens: list[int] = []
        self._prompt_len = 0
        self._cache_matches: list[int] = []  # the cache tree's nodes of the context's suffixes, shortest first
        self._cache_version = -1
        self._commonest, self._commonest_count = -1, 0  # the run's most frequent token (the backoff guess)

    @property
    def max_cached_requests(self) -> int:
        return self.cache.max_cached_requests

    def reset(self, prompt_ids: list[int]) -> None:
        response = self._tokens[self._prompt_len :]
        if response:
            self.cache.add(response)
        self._start(prompt_ids)

    def _start(self, prompt_ids: list[int]) -> None:
        self._local = SuffixTree(self.max_tree_depth)
        self._tokens = [int(t) for t in prompt_ids]
        self._prompt_len = len(self._tokens)
        self._local.extend(LOCAL_SEQ, self._tokens)
        self._commonest, self._commonest_count = -1, 0
        self._note_commonest(self._tokens)
        self._cache_version = -1  # matched afresh at the next proposal

    def _sync(self, context_ids: list[int]) -> None:
        """Add the committed tokens the tree has not seen (rebuilt if the context is not an extension)."""
        known = len(self._tokens)
        if len(context_ids) < known or (known and context_ids[known - 1] != self._tokens[-1]):
            prompt_len = min(self._prompt_len, len(context_ids))
            self._start(list(context_ids[:prompt_len]))
            known = prompt_len
        new = [int(t) for t in context_ids[known:]]
        self._tokens += new
        self._local.extend(LOCAL_SEQ, new)
        self._note_commonest(new)
        if self._cache_version == self.cache.version:
            tree = self.cache.tree
            for token in new:
                self._cache_matches = tree.extend_matches(self._cache_matches, token)

    def _note_commonest(self, tokens: list[int]) -> None:
        """Keep the run's most frequent token up to date (counts only grow within a run: O(1) per token)."""
        for token in tokens:
            count = self._local.count(self._local.child(ROOT, token))
            if count > self._commonest_count:
                self._commonest, self._commonest_count = token, count

    def _cache_nodes(self) -> list[int]:
        """The cache's matched nodes for the context, matched from the root only after the cache changed."""
        if self._cache_version != self.cache.version:
            self._cache_matches = self.cache.tree.match_suffixes(self._tokens[-self.max_tree_depth :])
            self._cache_version = self.cache.version
        return self._cache_matches

    def speculate(self, context_ids: list[int], k: int) -> SuffixDraft:
        """The best draft of at most ``k`` tokens for ``context_ids``: the run's or the cache's, else the backoff
        guess (empty if nothing matched and ``backoff`` is off, or the run has no tokens yet)."""
        self._sync(context_ids)
        self.last_draft, self.last_source = SuffixDraft(), ""
        if k <= 0:
            return self.last_draft
        best = self._local.speculate_matches(self._local.suffix_nodes(LOCAL_SEQ), k, self.max_spec_factor,
                                             self.min_token_prob)
        source = "run" if best.tokens else ""
        if len(self.cache):
            cached = self.cache.tree.speculate_matches(self._cache_nodes(), k, self.max_spec_factor,
                                                       self.min_token_prob)
            if cached.tokens and (not best.tokens or cached.match_len > best.match_len):
                best, source = cached, "cache"
        if not best.tokens and self.backoff and self._commonest >= 0:
            # the empty context's draft: one token, its frequency as its probability (below min_token_prob,
            # which a match's draft must pass: this one is sent because its pass costs no more than none)
            total = self._local.n_tokens
            p = self._commonest_count / total
            best = SuffixDraft(tokens=[self._commonest], probs=[p], score=p, match_len=0,
                               conditional=[self._commonest_count / (total + 1)])
            source = "backoff"
        self.last_draft, self.last_source = best, source
        return best

    def propose(
        self,
        context_ids: list[int],
        k: int,
        controls: ControlValues,
        generator: torch.Generator | None,
    ) -> Proposal:
        draft = self.speculate(context_ids, k)
        return Proposal(tokens=list(draft.tokens), q_probs=None, q_token_probs=[1.0] * len(draft.tokens),
                        match_ngram=draft.match_len, expected_accepted=draft.score if draft.tokens else None)

    def rollback(self, committed_ids: list[int]) -> None:
        """Nothing to undo (only committed tokens are ever added); the committed ones are added now, so the
        run's whole response is known when the next run starts, even if no proposal followed its end."""
        self._sync(committed_ids)

    def release(self) -> None:
        self._start([])
        self.cache.clear()
