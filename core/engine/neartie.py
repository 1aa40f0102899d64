"""Near-tie analysis: why a greedy speculative output can differ from plain greedy decoding.

In exact arithmetic the two are identical. In floating point, a pass over k+1 tokens and a pass over one
token reduce in different orders, so two logits that differ by an ulp or two can swap. Given two outputs,
recompute the target's logits at the first difference and report the gap between the two tokens in units
of the dtype's spacing (ulp) at their magnitude: a gap of a few ulps is a near-tie (arithmetic, not a bug);
a large gap means the loop itself is wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

NEAR_TIE_ULPS = 16.0  # gaps up to this many ulps are explained by reduction order


@dataclass
class NearTie:
    position: int  # index in the generated continuation
    token_a: int
    token_b: int
    logit_a: float
    logit_b: float
    gap: float  # logit_a - logit_b in the recomputation
    ulp: float  # spacing of the dtype at max(|logit_a|, |logit_b|)
    dtype: str

    @property
    def gap_ulps(self) -> float:
        return abs(self.gap) / self.ulp if self.ulp > 0 else math.inf

    @property
    def is_near_tie(self) -> bool:
        return self.gap_ulps <= NEAR_TIE_ULPS

    def explain(self, text_a: str = "", text_b: str = "") -> str:
        a = f"{self.token_a} {text_a!r}" if text_a else str(self.token_a)
        b = f"{self.token_b} {text_b!r}" if text_b else str(self.token_b)
        head = (
            f"outputs differ at position {self.position}: {a} vs {b}; the target's logits there differ by "
            f"{abs(self.gap):.3g} = {self.gap_ulps:.1f} ulp of {self.dtype} (ulp {self.ulp:.3g} at "
            f"magnitude {max(abs(self.logit_a), abs(self.logit_b)):.3g})"
        )
        if self.is_near_tie:
            return head + (
                " — a near-tie: batched verification and one-token decoding sum in different orders and "
                "round differently; floating point, not a speculation bug."
            )
        return head + " — not a near-tie: this difference points at a bug (cache misalignment or rule)."


def _mantissa_bits(dtype: torch.dtype) -> int:
    return {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7, torch.float64: 52}.get(dtype, 23)


def spacing(value: float, dtype: torch.dtype) -> float:
    """Spacing between adjacent representable numbers of ``dtype`` at ``value`` (one ulp)."""
    info = torch.finfo(dtype)
    mag = max(abs(value), info.tiny)
    return float(2.0 ** (math.floor(math.log2(mag)) - _mantissa_bits(dtype)))


def first_difference(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


@torch.inference_mode()
def near_tie_report(model: Any, prompt_ids: list[int], ids_a: list[int], ids_b: list[int]) -> NearTie | None:
    """Recompute the target's logits at the first position where ``ids_a`` and ``ids_b`` differ.

    Returns None when the outputs agree (or one is a prefix of the other: nothing to compare there).
    """
    pos = first_difference(ids_a, ids_b)
    if pos is None or pos >= len(ids_a) or pos >= len(ids_b):
        return None
    device = next(model.parameters()).device
    context = torch.tensor([list(prompt_ids) + list(ids_a[:pos])], dtype=torch.long, device=device)
    logits = model(context, logits_to_keep=1).logits[0, -1]
    a, b = int(ids_a[pos]), int(ids_b[pos])
    la, lb = float(logits[a]), float(logits[b])
    dtype = logits.dtype
    return NearTie(
        position=pos,
        token_a=a,
        token_b=b,
        logit_a=la,
        logit_b=lb,
        gap=la - lb,
        ulp=spacing(max(abs(la), abs(lb)), dtype),
        dtype=str(dtype).replace("torch.", ""),
    )
