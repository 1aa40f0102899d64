"""The cost model against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from specscope.core.measure import costmodel as cm


def iid_speedup(alpha: float, k: int, target_ms: float, draft_ms: float, verify_ms: float,
                rollback_ms: float = 0.0) -> float | None:
    """The one formula at iid acceptance: E(alpha, k) tokens for k draft steps, a verify pass and a rollback."""
    return cm.speedup(cm.expected_tokens_per_iteration(alpha, k), target_ms, k * draft_ms, verify_ms, rollback_ms)


def test_expected_tokens_limits_and_a_middle_case():
    assert cm.expected_tokens_per_iteration(0.0, 4) == 1.0  # only the target's own token
    assert cm.expected_tokens_per_iteration(1.0, 4) == 5.0  # every proposal plus the bonus
    assert cm.expected_tokens_per_iteration(0.5, 2) == pytest.approx(1.75)
    assert cm.expected_tokens_per_iteration(0.3, 0) == 1.0


def test_expected_tokens_from_positions():
    iid = cm.expected_tokens_per_iteration(0.5, 3)
    assert cm.expected_tokens_from_positions([0.5], 3) == pytest.approx(iid)
    assert cm.expected_tokens_from_positions([1.0, 0.5, 0.0], 3) == pytest.approx(2.5)
    assert cm.expected_tokens_from_positions([], 0) == 1.0


def test_iid_speedup_hand_computed():
    # E(0.5, 2) = 1.75; iteration = 2*2 + 12 = 16 ms; plain 10 ms/token -> 17.5 / 16
    assert iid_speedup(0.5, 2, 10.0, 2.0, 12.0) == pytest.approx(1.09375)
    # alpha = 0: one token for the whole iteration's cost
    assert iid_speedup(0.0, 3, 10.0, 2.0, 11.0, rollback_ms=1.0) == pytest.approx(10.0 / 18.0)
    # alpha = 1: k+1 tokens
    assert iid_speedup(1.0, 3, 10.0, 2.0, 11.0, rollback_ms=1.0) == pytest.approx(40.0 / 18.0)


def test_cheap_draft_with_lower_alpha_beats_dear_draft_with_higher_alpha():
    cheap = iid_speedup(0.7, 4, 10.0, 1.0, 11.0)  # E = 2.7731, cost 15 ms -> 1.849
    dear = iid_speedup(0.9, 4, 10.0, 6.0, 11.0)  # E = 4.0951, cost 35 ms -> 1.170
    assert cheap == pytest.approx(1.8487, abs=1e-3)
    assert dear == pytest.approx(1.1700, abs=1e-3)
    assert cheap > dear


def test_break_even_alpha_is_the_goal_one():
    # k=1: need 1 + a = (5 + 10) / 10 -> a = 0.5
    assert cm.alpha_for_speedup(1, 1.0, 10.0, 5.0, 10.0) == pytest.approx(0.5, abs=1e-9)
    # k=2: 1 + a + a^2 = 1.6 -> a = (-1 + sqrt(3.4)) / 2
    assert cm.alpha_for_speedup(2, 1.0, 10.0, 2.0, 12.0) == pytest.approx((-1 + math.sqrt(3.4)) / 2, abs=1e-9)
    # speed-up at the break-even alpha is 1
    a = cm.alpha_for_speedup(4, 1.0, 10.0, 2.5, 12.0, rollback_ms=0.5)
    assert a is not None
    assert iid_speedup(a, 4, 10.0, 2.5, 12.0, 0.5) == pytest.approx(1.0, abs=1e-9)
    # verification cheaper than a plain step: pays at any alpha
    assert cm.alpha_for_speedup(1, 1.0, 10.0, 0.0, 9.0) == 0.0
    # a draft dearer than the target cannot pay even at alpha = 1
    assert cm.alpha_for_speedup(2, 1.0, 10.0, 11.0, 10.0) is None


@pytest.mark.parametrize("speedup", [0.8, 1.0, 1.3, 1.9])
def test_alpha_for_speedup_reaches_the_goal(speedup):
    a = cm.alpha_for_speedup(3, speedup, 10.0, 0.6, 14.0, rollback_ms=0.2)
    assert a is not None and 0.0 < a < 1.0
    assert iid_speedup(a, 3, 10.0, 0.6, 14.0, 0.2) == pytest.approx(speedup, abs=1e-9)


def test_alpha_for_speedup_edges():
    # k=1, draft 1 ms, verify 12 ms: 1.3x needs 1 + a = 1.3 * 13 / 10 = 1.69
    assert cm.alpha_for_speedup(1, 1.3, 10.0, 1.0, 12.0) == pytest.approx(0.69, abs=1e-9)
    # a higher goal needs a higher alpha
    assert cm.alpha_for_speedup(2, 1.5, 10.0, 1.0, 12.0) > cm.alpha_for_speedup(2, 1.2, 10.0, 1.0, 12.0)
    # k=1 can never emit more than 2 tokens per iteration: 2.0x over a 13 ms iteration is out of reach
    assert cm.alpha_for_speedup(1, 2.0, 10.0, 1.0, 12.0) is None
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            cm.alpha_for_speedup(2, bad, 10.0, 1.0, 12.0)


def test_speedup_is_the_one_formula_hand_computed():
    # alpha 0.8, plain 10 ms, draft 2 ms a step, verify 10 + 0.5 (n - 1):
    # k=2: 2.44/15 * 10 = 1.627, k=3: 2.952/17.5 * 10 = 1.687, k=4: 3.3616/20 * 10 = 1.681
    def at(k: int) -> float | None:
        return cm.speedup(cm.expected_tokens_per_iteration(0.8, k), 10.0, 2.0 * k, 10.0 + 0.5 * k)

    assert at(3) == pytest.approx(1.6869, abs=1e-3)
    assert max(range(1, 8), key=lambda k: at(k) or 0.0) == 3
    assert cm.speedup(2.0, 10.0, 0.0, 0.0) is None  # an iteration that costs nothing was not measured


@pytest.mark.parametrize(
    "call",
    [
        lambda: cm.expected_tokens_per_iteration(1.5, 2),
        lambda: cm.expected_tokens_per_iteration(0.5, -1),
        lambda: cm.iteration_cost_ms(2, -1.0, 12.0),
        lambda: cm.alpha_for_speedup(2, 1.0, 0.0, 1.0, 1.0),
    ],
)
def test_bad_input_is_a_clear_value_error(call):
    with pytest.raises(ValueError):
        call()
