"""The acceptance rules as pure functions: greedy, and speculative sampling against two wrong rules.

The sampling rule is checked exactly (tests/exact_step.py): every tuple of draft proposals is enumerated with
its probability, each position's acceptance probability is read off the rule itself, and the step's output
distribution must equal the target's to float32 rounding. No draws, so no test power to state: a wrong rule
fails with certainty, and the two wrong rules below show that it does."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from specscope.core.engine import acceptance
from specscope.core.engine.acceptance import accept_greedy, accept_sample, residual_distribution
from tests.exact_step import random_rows, step_distribution, target_joint

P = torch.tensor([0.30, 0.25, 0.20, 0.12, 0.08, 0.05])
Q = torch.tensor([0.05, 0.10, 0.15, 0.20, 0.25, 0.25])
THIS_MODULE = sys.modules[__name__]


def _fixed(row: torch.Tensor):
    """The same distribution after every prefix."""
    values = row.numpy().astype(np.float64)
    return lambda prefix: values


def _one_hot_at(choose):
    """A deterministic drafter: after ``prefix`` it proposes ``choose(prefix)`` (q one-hot there)."""
    return lambda prefix: np.eye(len(P))[choose(prefix)]


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
    """k = 1 with the six-token p and q: the first token's distribution is p, the bonus after it p again."""
    got = step_distribution(accept_sample, acceptance, 1, _fixed(P), _fixed(Q))
    np.testing.assert_allclose(got.sum(axis=1), P.numpy(), atol=1e-6)
    np.testing.assert_allclose(got, target_joint(_fixed(P), 2), atol=1e-6)


@pytest.mark.parametrize("k", [1, 2, 3])
@pytest.mark.parametrize("zeros", [0, 1], ids=["full-support", "truncated"])
def test_every_position_keeps_the_targets_conditional_distribution(k: int, zeros: int) -> None:
    """p and q differ after every prefix (as a context's distributions do); ``truncated``: each row gives one of
    its four tokens no mass, as top-k/top-p do, so proposals p forbids and tokens q never proposes both occur."""
    p, q = random_rows(10 + k, 4, zeros), random_rows(20 + k, 4, zeros)
    got = step_distribution(accept_sample, acceptance, k, p, q)
    np.testing.assert_allclose(got, target_joint(p, k + 1), atol=1e-6)


@pytest.mark.parametrize("rule", [wrong_resample_from_p, wrong_keep_draft])
def test_wrong_rules_fail_the_same_test(rule) -> None:
    got = step_distribution(rule, THIS_MODULE, 1, _fixed(P), _fixed(Q))
    assert np.abs(got.sum(axis=1) - P.numpy()).max() > 0.02  # 2 points off p, not rounding


def test_equal_distributions_accept_everything() -> None:
    g = torch.Generator().manual_seed(1)
    rows = torch.stack([P, P, P, P])
    for _ in range(500):
        proposals = [int(torch.multinomial(P, 1, generator=g)) for _ in range(3)]
        n_acc, _ = accept_sample(proposals, torch.stack([P, P, P]), rows, g)
        assert n_acc == 3


@pytest.mark.parametrize("k", [1, 3])
def test_deterministic_drafter_stays_exact(k: int) -> None:
    """q one-hot (None): accept x with probability p(x), else draw from p without x renormalised."""
    drafter = _one_hot_at(lambda prefix: 4) if k == 1 else _one_hot_at(lambda prefix: (3 * len(prefix) + 1) % 6)
    got = step_distribution(accept_sample, acceptance, k, _fixed(P), drafter, one_hot_q=True)
    np.testing.assert_allclose(got, target_joint(_fixed(P), k + 1), atol=1e-6)


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
