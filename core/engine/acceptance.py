"""Acceptance rules as pure functions (no models, no caches).

Both take the k proposals and the target's k+1 rows (one per proposal position plus one after the last)
and return ``(n_accepted, next_token)``: the number of leading proposals kept and the token the target
supplies (a correction after a rejection, a bonus when all were accepted).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def _check_shapes(proposals: Sequence[int], rows: torch.Tensor, name: str) -> int:
    k = len(proposals)
    if rows.dim() != 2 or rows.shape[0] != k + 1:
        raise ValueError(f"{name} must have k+1 = {k + 1} rows, got shape {tuple(rows.shape)}")
    return k


def accept_greedy(proposals: Sequence[int], target_logits: torch.Tensor) -> tuple[int, int]:
    """Accept while each proposal is the target's arg-max at its position.

    Ties in the arg-max go to the lowest token id (torch.argmax), the same choice plain greedy decoding
    makes, so the two agree exactly whenever the logits are bitwise equal.
    """
    k = _check_shapes(proposals, target_logits, "target_logits")
    choices = torch.argmax(target_logits, dim=-1).tolist()
    for i in range(k):
        if int(proposals[i]) != choices[i]:
            return i, int(choices[i])
    return k, int(choices[k])


def residual_distribution(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """normalize(max(0, p - q)). If the residual mass is zero (p == q up to rounding), fall back to p."""
    residual = torch.clamp(p - q, min=0.0)
    mass = residual.sum()
    if float(mass) <= 0.0:
        return p
    return residual / mass


def accept_sample(
    proposals: Sequence[int],
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[int, int]:
    """Speculative sampling (Leviathan et al. 2023, Chen et al. 2023).

    Accept proposal x_i with probability min(1, p_i(x)/q_i(x)); at the first rejection draw the correction
    from normalize(max(0, p_i - q_i)); if all pass draw the bonus from p_{k}. ``draft_probs`` is k x V, the
    distributions the drafter actually sampled from; None means a deterministic drafter (each q_i one-hot
    at its proposal), which this handles exactly.
    """
    k = _check_shapes(proposals, target_probs, "target_probs")
    if draft_probs is not None and (draft_probs.dim() != 2 or draft_probs.shape[0] < k):
        raise ValueError(f"draft_probs must have k = {k} rows, got shape {tuple(draft_probs.shape)}")
    target_probs = target_probs.float()
    uniforms = torch.rand(k, generator=generator, device=target_probs.device) if k else None
    for i in range(k):
        x = int(proposals[i])
        p_x = float(target_probs[i, x])
        if draft_probs is None:
            q_row = torch.zeros_like(target_probs[i])
            q_row[x] = 1.0
        else:
            q_row = draft_probs[i].float()
        q_x = float(q_row[x])
        assert uniforms is not None
        # q(x) = 0 cannot happen for a real proposal; treat it as "accept iff the target allows x".
        accepted = p_x > 0.0 if q_x <= 0.0 else float(uniforms[i]) < min(1.0, p_x / q_x)
        if accepted:
            continue
        residual = residual_distribution(target_probs[i], q_row)
        return i, int(torch.multinomial(residual, 1, generator=generator).item())
    return k, int(torch.multinomial(target_probs[k], 1, generator=generator).item())
