"""A draft model: any causal LM sharing the target's tokenizer, with its own KV cache."""

from __future__ import annotations

import torch
from transformers import DynamicCache, PreTrainedModel

from specscope.core.engine.drafters.base import Drafter, Proposal
from specscope.core.engine.rollback import CacheRollback
from specscope.core.engine.sampling import processed_probs, sample_from
from specscope.core.records import ControlValues


class ModelDrafter(Drafter):
    """Runs the draft model k times, one token at a time, feeding back its own proposals.

    The cache holds the tokens the draft has been through (``self._seen``). After verification it is cut
    back to the longest prefix of the committed sequence it has seen; tokens it has not seen yet (the
    target's correction or bonus, and the last proposal when all were accepted, which the draft never fed
    back in) go into the next call's first pass. The cache is returned by the rules of ``rollback.py``; a
    rollback point is marked after every forward of a proposal step, so a recurrent state (linear attention,
    Mamba) is restored from the copy taken at the committed length, never recomputed.
    """

    name = "model"

    def __init__(self, model: PreTrainedModel, vocab_size: int, device: torch.device | str | None = None):
        self.model = model
        self.vocab_size = vocab_size
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        self.cache: DynamicCache | None = None
        self.cache_rollback: CacheRollback | None = None
        self._seen: list[int] = []
        self._known_good = 0  # length of the prefix of _seen known to equal the committed sequence

    def reset(self, prompt_ids: list[int]) -> None:
        self.cache = DynamicCache(config=self.model.config)
        self.cache_rollback = CacheRollback(self.cache)
        self._seen = []
        self._known_good = 0

    def _forward(self, ids: list[int]) -> torch.Tensor:
        assert self.cache is not None
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)
        out = self.model(inp, cache=self.cache, use_cache=True, logits_to_keep=1)
        self._seen.extend(ids)
        return out.logits[0, -1, : self.vocab_size]

    def _mark(self) -> None:
        """The cache may have to return here: after the first pass of a call (the committed context, so a
        long prompt is never recorded) and after each proposal fed back."""
        assert self.cache_rollback is not None
        self.cache_rollback.mark(len(self._seen))

    @torch.inference_mode()
    def propose(
        self,
        context_ids: list[int],
        k: int,
        controls: ControlValues,
        generator: torch.Generator | None,
    ) -> Proposal:
        if self.cache is None:
            self.reset(context_ids)
        unseen = context_ids[len(self._seen) :]
        self._known_good = len(context_ids)
        if not unseen:  # never happens in the loop: the target's token is always new
            raise RuntimeError("draft has no new token to condition on")
        tokens: list[int] = []
        q_rows: list[torch.Tensor] = []
        q_token: list[float | None] = []
        logits = self._forward(unseen)
        self._mark()
        for i in range(k):
            probs = processed_probs(logits.unsqueeze(0), controls)[0]
            if controls.greedy:
                x = int(torch.argmax(logits).item())
            else:
                x = sample_from(probs, generator)
                q_rows.append(probs)
            tokens.append(x)
            q_token.append(float(probs[x]))
            if i + 1 < k:  # the last proposal is never fed back: the target checks it
                logits = self._forward([x])
                self._mark()
        q = torch.stack(q_rows) if q_rows else None
        return Proposal(tokens=tokens, q_probs=q, q_token_probs=q_token)

    def rollback(self, committed_ids: list[int]) -> None:
        limit = min(len(self._seen), len(committed_ids))
        keep = min(self._known_good, limit)  # the context of the last call matched; check only the rest
        while keep < limit and self._seen[keep] == committed_ids[keep]:
            keep += 1
        if self.cache_rollback is not None and self._seen:
            def refeed(start: int, end: int) -> None:  # only if a mark were missing: every step marks one
                self._forward_only(committed_ids[start:end])

            self.cache_rollback.crop_to(keep, refeed)  # also trims recorded window rows when nothing drops
            del self._seen[keep:]
        self._known_good = keep

    def _forward_only(self, ids: list[int]) -> None:
        inp = torch.tensor([ids], dtype=torch.long, device=self.device)
        self.model(inp, cache=self.cache, use_cache=True, logits_to_keep=1)

    def release(self) -> None:
        self.cache = None
        self.cache_rollback = None
        self._seen = []
        self._known_good = 0
