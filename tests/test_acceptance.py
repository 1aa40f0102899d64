"""The acceptance rules as pure functions: greedy, and speculative sampling against two wrong rules."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specscope.core.acceptance import accept_greedy, accept_sample, residual_distribution
from tests.stats import chi_square_pvalue

P = torch.tensor([0.30, 0.25, 0.20, 0.12, 0.08, 0.05])
Q = torch.tensor([0.05, 0.10, 0.15, 0.20, 0.25, 0.25])
DRAWS = 20_000


def _draw_first_tokens(rule, p: torch.Tensor, q: torch.Tensor, seed: int = 0) -> np.ndarray:
    """k = 1: propose x ~ q, apply ``rule``, return counts of the first committed token."""
    g = torch.Generator().manual_seed(seed)
    counts = np.zeros(len(p))
    target_rows = torch.stack([p, p])  # row 0 checks the proposal, row 1 would give the bonus
    for _ in range(DRAWS):
        x = int(torch.multinomial(q, 1, generator=g).item())
        n_acc, nxt = rule([x], q.unsqueeze(0), target_rows, g)
        counts[x if n_acc == 1 else nxt] += 1
    return counts


def wrong_resample_from_p(proposals, draft_probs, target_probs, generator):
    """Wrong rule 1: the usual acceptance test, but resample from p (not the residual) on rejection."""
    x = proposals[0]
    u = float(torch.rand(1, generator=generator))
    if u < min(1.0, float(target_probs[0, x] / draft_probs[0, x])):
        return 1, int(torch.multinomial(target_probs[1], 1, generator=generator))
    return 0, int(torch.multinomial(target_probs[0], 1, generator=generator))


def wrong_keep_draft(proposals, draft_probs, target_probs, generator):
    """Wrong rule 2: keep the draft's token whatever p says."""
    return 1, int(torch.multinomial(target_probs[1], 1, generator=generator))


def test_correct_rule_reproduces_p() -> None:
    counts = _draw_first_tokens(accept_sample, P, Q)
    assert chi_square_pvalue(counts, P.numpy()) > 1e-3


@pytest.mark.parametrize("rule", [wrong_resample_from_p, wrong_keep_draft])
def test_wrong_rules_fail_the_same_test(rule) -> None:
    counts = _draw_first_tokens(rule, P, Q)
    assert chi_square_pvalue(counts, P.numpy()) < 1e-6


def test_equal_distributions_accept_everything() -> None:
    g = torch.Generator().manual_seed(1)
    rows = torch.stack([P, P, P, P])
    for _ in range(500):
        proposals = [int(torch.multinomial(P, 1, generator=g)) for _ in range(3)]
        n_acc, _ = accept_sample(proposals, torch.stack([P, P, P]), rows, g)
        assert n_acc == 3


def test_deterministic_drafter_stays_exact() -> None:
    """q one-hot (None): accept x with probability p(x), else draw from p without x renormalised."""
    g = torch.Generator().manual_seed(2)
    counts = np.zeros(len(P))
    rows = torch.stack([P, P])
    for _ in range(DRAWS):
        n_acc, nxt = accept_sample([4], None, rows, g)
        counts[4 if n_acc == 1 else nxt] += 1
    assert chi_square_pvalue(counts, P.numpy()) > 1e-3


def test_residual_is_normalised_positive_part() -> None:
    r = residual_distribution(P, Q)
    expected = torch.clamp(P - Q, min=0)
    torch.testing.assert_close(r, expected / expected.sum())
    torch.testing.assert_close(residual_distribution(P, P), P)  # p == q: no residual mass, fall back to p


def test_greedy_rule_accepts_prefix_and_supplies_correction_or_bonus() -> None:
    logits = torch.full((4, 6), -1.0)
    for row, best in enumerate([2, 5, 1, 3]):
        logits[row, best] = 1.0
    assert accept_greedy([2, 5, 1], logits) == (3, 3)  # all accepted: bonus from the last row
    assert accept_greedy([2, 4, 1], logits) == (1, 5)  # rejected at 1: the target's arg-max there
    assert accept_greedy([0, 5, 1], logits) == (0, 2)
    with pytest.raises(ValueError, match="k\\+1"):
        accept_greedy([2, 5], logits)
