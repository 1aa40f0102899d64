"""EAGLE-3 drafting: a one-layer head (``eagle_head``) that reads the target's own hidden states.

Drafting, with the committed sequence x_0..x_{N-1} (the target's cache holds x_0..x_{N-2}): head position
p reads the target's feature at p and the token x_{p+1} and predicts x_{p+2}. The first draft step runs
every position whose feature arrived since the last call (up to N-2) and predicts x_N; each later step
feeds back the head's own pre-norm hidden state with the token it just drafted. Only positions fed by the
target's features stay in the head's KV cache; the drafted ones are dropped after each call, as the
engines do, because the next verify pass supplies real features for whatever was accepted.
"""

from __future__ import annotations

from typing import Any

import torch

from specscope.core.engine.drafters.base import Drafter, Proposal, append_feature_rows
from specscope.core.engine.drafters.eagle_head import Eagle3Head, attend, default_aux_layer_ids
from specscope.core.engine.sampling import processed_probs, sample_from
from specscope.core.records import ControlValues


# ---- the drafter -----------------------------------------------------------------------------------
class EagleDrafter(Drafter):
    """Drafts with an EAGLE-3 head fed by the target's hidden states from the loop's verify passes."""

    name = "eagle"

    def __init__(self, head: Eagle3Head, target_config: Any, vocab_size: int,
                 device: torch.device | str | None = None):
        self.head = head
        tc = target_config.get_text_config() if hasattr(target_config, "get_text_config") else target_config
        n_layers = int(tc.num_hidden_layers)
        ids = head.cfg.aux_layer_ids if head.cfg.aux_layer_ids is not None else default_aux_layer_ids(n_layers)
        self.feature_layers = tuple(ids)
        self.vocab_size = vocab_size
        self.device = torch.device(device) if device is not None else head.fc.weight.device
        self._targets = head.target_ids().to(self.device)
        self.release()

    # ---- state --------------------------------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.release()

    def release(self) -> None:
        self._k: torch.Tensor | None = None  # (1, nkv, L, d): positions 0..L-1, all fed by target features
        self._v: torch.Tensor | None = None
        self._pending: list[torch.Tensor] = []  # target features (T, 3H) not yet run through the head
        self._pending_start = 0  # position of the first pending row

    @property
    def cache_len(self) -> int:
        return 0 if self._k is None else int(self._k.shape[2])

    def observe_target_features(self, first_position: int, features: torch.Tensor) -> None:
        """The target's fused-layer inputs (T, 3H) at committed positions first_position.. (from verify)."""
        self._pending_start = append_feature_rows(self._pending, self._pending_start, first_position, features)

    def rollback(self, committed_ids: list[int]) -> None:
        # The cache only ever holds positions fed by the target's features for committed tokens: nothing
        # to undo. Drafted positions were dropped at the end of propose.
        return

    # ---- drafting -----------------------------------------------------------------------------------
    def _step(self, tokens: list[int], hidden: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Run positions start.. through the head with the cache; return (draft logits, pre-norm) of the last."""
        head = self.head
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        positions = torch.arange(start, start + len(tokens), device=self.device).unsqueeze(0)
        q, k, v, residual = head.project(head.embed(ids), hidden, positions)
        if self._k is not None:
            k = torch.cat([self._k, k], dim=2)
            v = torch.cat([self._v, v], dim=2) if self._v is not None else v
        self._k, self._v = k, v
        t_new, t_all = q.shape[2], k.shape[2]
        mask = None
        if t_new > 1:  # causal among the new rows; every cached row is visible
            mask = torch.ones(t_new, t_all, dtype=torch.bool, device=self.device).tril(t_all - t_new)
        normed, prenorm = head.finish(attend(q, k, v, mask), residual)
        return head.draft_logits(normed[:, -1])[0], prenorm[:, -1:]

    def _full_row(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits spread over the target's ids; -inf (q = 0) outside the draft vocabulary."""
        row = draft_logits.new_full((self.vocab_size,), float("-inf"))
        row[self._targets] = draft_logits
        return row

    @torch.inference_mode()
    def propose(
        self,
        context_ids: list[int],
        k: int,
        controls: ControlValues,
        generator: torch.Generator | None,
    ) -> Proposal:
        n = len(context_ids)
        empty = Proposal(tokens=[], q_probs=None, q_token_probs=[])
        start = self.cache_len
        n_pending = sum(int(f.shape[0]) for f in self._pending)
        if self._pending and self._pending_start != start:
            raise RuntimeError(f"the head's cache ends at {start} but features start at {self._pending_start}")
        if start + n_pending < n - 1 or n < 2:
            return empty  # no feature for position n-2 yet (a one-token prompt): nothing to draft from
        feats = torch.cat(self._pending)[: n - 1 - start].to(self.device)
        self._pending = []
        real_len = n - 1
        hidden = self.head.fc(feats.to(self.head.fc.weight.dtype)).unsqueeze(0)
        tokens_in = context_ids[start + 1 : n]
        tokens: list[int] = []
        q_rows: list[torch.Tensor] = []
        q_token: list[float | None] = []
        logits, prenorm = self._step(tokens_in, hidden, start)
        for i in range(k):
            if controls.greedy:
                j = int(torch.argmax(logits).item())
                x = int(self._targets[j])
                q_token.append(float(torch.softmax(logits.float(), -1)[j]))
            else:
                probs = processed_probs(self._full_row(logits).unsqueeze(0), controls)[0]
                x = sample_from(probs, generator)
                q_rows.append(probs)
                q_token.append(float(probs[x]))
            tokens.append(x)
            if i + 1 < k:  # the last proposal is never fed back: the target checks it
                logits, prenorm = self._step([x], prenorm, real_len + i)
        # Keep only the positions fed by the target's features; the drafted ones are recomputed next time.
        if self._k is not None and self._v is not None:
            self._k, self._v = self._k[:, :, :real_len], self._v[:, :, :real_len]
        q = torch.stack(q_rows) if q_rows else None
        return Proposal(tokens=tokens, q_probs=q, q_token_probs=q_token)
