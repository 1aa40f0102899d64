"""Chi-square goodness of fit for sampling tests (cells with small expectation are pooled)."""

from __future__ import annotations

import numpy as np
from scipy import stats


def chi_square_pvalue(counts: np.ndarray, probs: np.ndarray, min_expected: float = 5.0) -> float:
    counts = np.asarray(counts, dtype=float).ravel()
    probs = np.asarray(probs, dtype=float).ravel()
    probs = probs / probs.sum()
    n = counts.sum()
    expected = probs * n
    big = expected >= min_expected
    obs = list(counts[big])
    exp = list(expected[big])
    if (~big).any():
        obs.append(counts[~big].sum())
        exp.append(expected[~big].sum())
    obs_a, exp_a = np.array(obs), np.array(exp)
    keep = exp_a > 0
    if (obs_a[~keep] > 0).any():
        return 0.0  # a draw where the distribution has no mass: certainly wrong
    return float(stats.chisquare(obs_a[keep], exp_a[keep]).pvalue)


def exact_first_two(target, prompt: list[int], controls, vocab: int) -> np.ndarray:
    """The target's exact joint distribution of its first two sampled tokens (what the loop must reproduce)."""
    import torch

    from specscope.core.engine.sampling import processed_probs

    with torch.no_grad():
        p1 = processed_probs(target(torch.tensor([prompt])).logits[0, -1], controls)[0]
        joint = np.zeros((vocab, vocab))
        for a in range(vocab):
            p2 = processed_probs(target(torch.tensor([[*prompt, a]])).logits[0, -1], controls)[0]
            joint[a] = float(p1[a]) * p2.numpy()
    return joint
