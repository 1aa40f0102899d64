"""Logits -> the distributions actually sampled from, identically for the target and the drafter.

The rule min(1, p/q) is only exact when p and q are the distributions each model really samples from, so
temperature, top-k and top-p go through one function used for both. The warpers are transformers' own
(not hand-written copies), applied row-wise: each row of a (n, V) logits matrix is one position.
"""

from __future__ import annotations

from typing import cast

import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from specscope.core.records import ControlValues


def build_warpers(controls: ControlValues) -> LogitsProcessorList:
    """The processing chain for sampling (temperature > 0), in transformers' own order."""
    warpers = LogitsProcessorList()
    if controls.temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(controls.temperature))
    if controls.top_k > 0:
        warpers.append(TopKLogitsWarper(top_k=controls.top_k, min_tokens_to_keep=1))
    if controls.top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p=controls.top_p, min_tokens_to_keep=1))
    return warpers


def processed_probs(logits: torch.Tensor, controls: ControlValues) -> torch.Tensor:
    """(n, V) raw logits -> (n, V) float32 probabilities after temperature/top-k/top-p.

    Greedy (temperature 0) returns the plain softmax, used only for reporting p(x) and q(x).
    """
    scores = logits.float()
    if scores.dim() == 1:
        scores = scores.unsqueeze(0)
    if not controls.greedy:
        # The warpers ignore input_ids for these three; a dummy keeps the call signature.
        dummy_ids = cast(torch.LongTensor, torch.zeros((scores.shape[0], 1), dtype=torch.long, device=scores.device))
        scores = build_warpers(controls)(dummy_ids, cast(torch.FloatTensor, scores))
    return torch.softmax(scores, dim=-1)


def sample_from(probs: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """One draw from a 1-D probability vector."""
    return int(torch.multinomial(probs, 1, generator=generator).item())
