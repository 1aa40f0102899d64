"""The statistics of ``specscope verify``'s sampling test: the first token an acceptance rule emits, drawn
many times (vectorised), a chi-square test of the draws against the target's distribution, and how far
apart each wrong rule's output is from it (how visible a wrong rule can be at a context).

The rules are the speculative sampling rule and two wrong ones (resample from p after a rejection; keep the
draft's token whatever p says), so that the test shows its power where it runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from scipy.special import chdtrc

from specscope.core.engine.acceptance import residual_distribution

RULES = ("correct", "resample-from-p", "keep-draft")


def chi2_sf(stat: float, df: int) -> float:
    """P(χ²_df ≥ stat)."""
    return 0.0 if math.isinf(stat) else float(chdtrc(df, stat))


@dataclass
class ChiSquare:
    statistic: float
    df: int
    pvalue: float


def chi_square_top(counts: torch.Tensor, p: torch.Tensor, top_n: int = 60,
                   min_expected: float = 5.0) -> ChiSquare:
    """Chi-square of ``counts`` against p over the ``top_n`` most likely tokens plus a pooled remainder.

    A top token whose expected count is under ``min_expected`` joins the remainder (the χ² approximation
    needs it). Draws where p has no mass at all make the statistic infinite (p-value 0).
    """
    counts = counts.double().cpu()
    p = p.double().cpu()
    n = float(counts.sum())
    if bool((counts[p <= 0] > 0).any()):  # a token the target can never emit was emitted
        return ChiSquare(math.inf, 1, 0.0)
    expected = p * n
    top = torch.argsort(p, descending=True)[:top_n]
    top = top[expected[top] >= min_expected]
    obs = counts[top].tolist()
    exp = expected[top].tolist()
    rest_obs = n - sum(obs)
    rest_exp = n - sum(exp)
    if rest_exp > 1e-9 * n:
        obs.append(rest_obs)
        exp.append(rest_exp)
    elif rest_obs > 0.5:
        return ChiSquare(math.inf, max(1, len(obs) - 1), 0.0)
    if len(obs) < 2:
        return ChiSquare(0.0, 0, 1.0)
    stat = sum((o - e) ** 2 / e for o, e in zip(obs, exp, strict=True))
    return ChiSquare(stat, len(obs) - 1, chi2_sf(stat, len(obs) - 1))


def total_variation(p: torch.Tensor, q: torch.Tensor) -> float:
    return 0.5 * float((p.double() - q.double()).abs().sum())


def wrong_rule_gaps(p: torch.Tensor, q: torch.Tensor) -> dict[str, float]:
    """Exact TV between each wrong rule's first-token distribution and p: how visible it can be here.

    Resampling from p after a rejection emits min(p, q) + (1 - β) p with β = Σ min(p, q), which equals p
    both where the draft is perfect (β = 1) and where it is always rejected (β = 0); keeping the draft's
    token emits q.
    """
    p, q = p.double(), q.double()
    overlap = torch.minimum(p, q)
    beta = overlap.sum()
    return {"resample-from-p": 0.5 * float((overlap - beta * p).abs().sum()), "keep-draft": total_variation(p, q)}


def simulate_first_token(p: torch.Tensor, q: torch.Tensor, draws: int, rule: str = "correct",
                         generator: torch.Generator | None = None) -> torch.Tensor:
    """Counts per token of the first token ``rule`` emits, over ``draws`` independent proposals from q.

    ``correct`` is the speculative sampling rule (residual from :func:`residual_distribution`);
    ``resample-from-p`` draws a rejected position's token from p instead of the residual;
    ``keep-draft`` emits the draft's token whatever p says (its output is q).
    """
    if rule not in RULES:
        raise ValueError(f"unknown rule {rule!r}: one of {', '.join(RULES)}")
    p = p.double().cpu()
    q = q.double().cpu()
    p, q = p / p.sum(), q / q.sum()
    x = torch.multinomial(q, draws, replacement=True, generator=generator)
    if rule == "keep-draft":
        return torch.bincount(x, minlength=p.numel())
    u = torch.rand(draws, generator=generator, dtype=torch.float64)
    rejected = ~(u * q[x] < p[x])  # u < p/q without dividing
    n_rejected = int(rejected.sum())
    if n_rejected:
        fallback = residual_distribution(p, q) if rule == "correct" else p
        x[rejected] = torch.multinomial(fallback, n_rejected, replacement=True, generator=generator)
    return torch.bincount(x, minlength=p.numel())
