"""Adaptive k policies on constructed records with known costs (no timing involved)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from specscope.core.controls import Controls
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.measure.adaptive import CostModelKPolicy, HeuristicKPolicy
from specscope.core.measure.estimators import PositionCounts
from specscope.core.measure.measurement import Measurement
from specscope.core.measure.schedule import VerifyExploration
from specscope.core.measure.statistics import monotone_fit
from specscope.core.records import BaselineRecord, ControlValues, IterationRecord
from tests.loop_helpers import run_fed, show
from tests.models import perturbed, tiny_model

SWEEP = {n: 10.0 + 0.5 * (n - 1) for n in range(1, 18)}  # verify cost by pass length



def rec(drafted: int, accepted: int, draft_step_ms: float = 1.0) -> IterationRecord:
    verify = SWEEP[drafted + 1]
    draft = draft_step_ms * drafted
    return IterationRecord(
        iteration=0, mode="speculative", drafter="t", controls=ControlValues(k=max(1, drafted)), tokens=[],
        n_drafted=drafted, n_accepted=accepted, n_emitted=accepted + 1, draft_ms=draft, verify_ms=verify,
        rollback_ms=0.2, iteration_ms=draft + verify + 0.2, context_len=0, generated_len=0,
        t_start_s=0.0, t_end_s=0.0,
    )


def policy_fed(records: list[IterationRecord], **kw: object) -> CostModelKPolicy:
    """A policy whose live window has seen these records (copies: live counts each object once)."""
    records = [replace(r) for r in records]
    measurement = Measurement(window=64)
    measurement.feed(BaselineRecord(0, 10, [10.0, 10.0, 10.0], verify_ms_by_len=dict(SWEEP)))
    policy = CostModelKPolicy(measurement, explore_every=0, **kw)  # type: ignore[arg-type]
    for r in records:
        show(policy, r)
    return policy


def test_keeps_initial_k_until_it_has_data():
    policy = policy_fed([rec(4, 4) for _ in range(2)], initial_k=3, min_iterations=3)
    assert policy.choose_k(16) == 3


def test_everything_accepted_with_a_cheap_draft_climbs_two_positions_past_the_measured_ones():
    policy = policy_fed([rec(4, 4, draft_step_ms=0.1) for _ in range(8)])
    assert policy.choose_k(16) == 6  # the best is deeper, but positions 5 and 6 have not been measured
    show(policy, rec(6, 6, draft_step_ms=0.1))
    assert policy.choose_k(16) == 8
    assert policy.choose_k(4) == 4  # the loop's k_max caps it
    assert policy_fed([rec(4, 4, draft_step_ms=0.1) for _ in range(8)], reach=1).choose_k(16) == 5


def test_nothing_accepted_stops_drafting_and_probes_with_one_proposal():
    policy = policy_fed([rec(4, 0) for _ in range(12)], probe_every=4)
    assert [policy.choose_k(16) for _ in range(8)] == [0, 0, 0, 1, 0, 0, 0, 1]
    assert policy.scores[0] > policy.scores[1]
    assert policy_fed([rec(4, 0) for _ in range(12)], k_min=1).choose_k(16) == 1
    assert policy_fed([rec(4, 0) for _ in range(12)], probe_every=0).choose_k(16) == 0  # probes off


def test_one_unlucky_iteration_does_not_stop_drafting():
    # fewer than skip_after proposals judged: k = 0 is not a candidate yet, whatever they say
    policy = policy_fed([rec(4, 0)])
    assert policy.choose_k(16) == 1 and 0 not in policy.scores
    assert policy_fed([rec(4, 0)], skip_after=1.0).choose_k(16) == 0


def test_a_dear_draft_makes_every_k_lose_and_rising_acceptance_brings_drafting_back():
    # alpha about 0.4 with a draft step at 0.6 of a plain step: no k pays (k=1: 1.4 / 16.7 < 1 / 10.2)
    records = [rec(1, 1, draft_step_ms=6.0), rec(1, 0, draft_step_ms=6.0), rec(1, 0, draft_step_ms=6.0)] * 3
    policy = policy_fed([*records, rec(1, 1, draft_step_ms=6.0)], probe_every=2)
    assert policy.choose_k(16) == 0
    assert policy.scores[0] == max(policy.scores.values())
    chosen = []
    for _ in range(30):  # the probes now accept everything: acceptance climbs until drafting pays again
        k = policy.choose_k(16)
        chosen.append(k)
        if k:
            show(policy, rec(k, k, draft_step_ms=6.0))
        else:
            show(policy, rec(0, 0))
    assert chosen[:2] == [1, 0]  # a probe every other choice while not drafting
    assert chosen[-5:] == [chosen[-1]] * 5 and chosen[-1] >= 1  # drafting again, every iteration


def test_k_zero_costs_a_plain_step_when_the_sweep_has_no_length_one():
    # a baseline without a sweep: the cost of not drafting is its plain step (12 ms, dear) ...
    records = [rec(1, 1, draft_step_ms=4.0), rec(1, 0, draft_step_ms=4.0)] * 6
    measurement = Measurement(window=64)
    measurement.feed(BaselineRecord(0, 10, [12.0, 12.0, 12.0]))
    policy = CostModelKPolicy(measurement, explore_every=0)
    for r in records:
        show(policy, replace(r))
    assert policy.choose_k(16) >= 1
    # ... and with a cheap plain step (6 ms) drafting does not pay at the same acceptance
    measurement = Measurement(window=64)
    measurement.feed(BaselineRecord(0, 10, [6.0, 6.0, 6.0]))
    policy = CostModelKPolicy(measurement, explore_every=0)
    for r in records:
        show(policy, replace(r))
    assert policy.choose_k(16) == 0


def test_dear_draft_at_middling_alpha_prefers_small_k():
    # alpha 0.6 with draft steps costing half a plain step: k=1 1.6/15.7 beats k=2 1.96/21.2
    records = [rec(3, 0), rec(3, 1), rec(3, 3), rec(3, 1)] * 4  # accepted 5, judged 8 per 4 -> 0.625
    policy = policy_fed([rec(r.n_drafted, r.n_accepted, draft_step_ms=5.0) for r in records])
    assert policy.choose_k(16) == 1


def test_bursty_acceptance_predicts_more_than_iid():
    # half the iterations reject at once, half accept all four: conditional acceptance is 0.5 then 1
    records = [rec(4, 0), rec(4, 4)] * 8
    counts = PositionCounts()
    for r in records:
        counts.add(r)
    assert counts.reached == [16, 8, 8, 8] and counts.accepted == [8, 8, 8, 8]
    assert counts.pooled == pytest.approx(32 / 40)
    cond = counts.conditional(6, prior=0.8, prior_weight=2.0)
    assert cond[0] == pytest.approx((8 + 1.6) / 18)
    assert cond[1] > 0.9 and cond[3] > 0.9
    assert cond[5] == pytest.approx(cond[3])  # unmeasured positions: the last measured value
    assert counts.depth(2) == 4 and counts.depth(9) == 1


def test_position_counts_forget_old_iterations():
    counts = PositionCounts(decay=0.5)
    for r in [rec(2, 2), rec(2, 0)]:
        counts.add(r)
    # the all-accepted iteration now weighs 0.5: position 0 reached 1.5 times, accepted 0.5
    assert counts.reached == [1.5, 0.5] and counts.accepted == [0.5, 0.5]
    with pytest.raises(ValueError):
        PositionCounts(decay=0.0)


def test_hysteresis_keeps_k_when_the_gain_is_small():
    records = [rec(3, 3 - i % 2) for i in range(12)]
    policy = policy_fed(records, initial_k=3, hysteresis=0.5)
    assert policy.choose_k(16) == 3
    best = max(policy.scores, key=lambda k: policy.scores[k])
    assert best != 3 or policy.scores[3] == max(policy.scores.values())
    assert policy_fed(records, initial_k=3, hysteresis=0.0).choose_k(16) == best


def unswept_policy(records: list[IterationRecord]) -> CostModelKPolicy:
    """A policy that has seen these records and no baseline: verify costs only from the window."""
    policy = CostModelKPolicy(Measurement(window=64), explore_every=0, hysteresis=0.0)
    for r in records:
        show(policy, replace(r))
    return policy


def test_before_any_plain_step_nothing_is_predicted_and_k_stays():
    # passes of 2 and 4 timed, but no pass of length 1 (a plain step): the unit of every speed-up is unknown,
    # so there is no score to act on (never an extrapolated plain step)
    policy = unswept_policy([rec(1, 0), rec(3, 0)] * 6)
    assert policy.choose_k(16) == policy.initial_k and policy.scores == {}
    records = [replace(r) for r in [rec(1, 0), rec(3, 0)] * 6]
    m = Measurement()
    for r in records:
        est = m.feed(r)
    assert est.curve[2].speedup is None and "plain step" in est.curve[2].reason


def explorer(draft_step_ms: float) -> CostModelKPolicy:
    """A policy at k=1 with acceptance 0.5 at position 0 and position 1 never judged."""
    measurement = Measurement(window=64)
    measurement.feed(BaselineRecord(0, 10, [10.0], verify_ms_by_len=dict(SWEEP)))
    policy = CostModelKPolicy(measurement, explore_every=3, initial_k=1, reach=1)
    for r in [rec(1, 1, draft_step_ms), rec(1, 0, draft_step_ms)] * 4:
        show(policy, r)
    return policy


def test_explores_one_deeper_every_n_choices_when_it_could_pay():
    # draft 3 ms: k=1 is the best guess (1.5 / 13.7), k=2 would win if position 1 were always accepted
    policy = explorer(3.0)
    assert [policy.choose_k(16) for _ in range(6)] == [1, 1, 2, 1, 1, 2]


def test_does_not_explore_deeper_when_predicted_to_lose_more_than_the_margin():
    # draft 4.5 ms: k=2 predicted 1.75 / 20.2 against k=1's 1.5 / 15.2, 12% worse
    policy = explorer(4.5)
    assert [policy.choose_k(16) for _ in range(6)] == [1] * 6
    assert policy.scores[2] < 0.9 * policy.scores[1]


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        CostModelKPolicy(Measurement(), k_min=5, k_max=2)
    with pytest.raises(ValueError):
        CostModelKPolicy(Measurement(), k_min=0, k_max=0)
    with pytest.raises(ValueError):
        CostModelKPolicy(Measurement(), probe_every=-1)
    with pytest.raises(ValueError):
        CostModelKPolicy(Measurement(), skip_after=-1.0)
    with pytest.raises(ValueError):
        HeuristicKPolicy(k_min=0)


def test_heuristic_is_transformers_schedule():
    h = HeuristicKPolicy(initial_k=5, k_max=10)
    trace = []
    for drafted, accepted in [(5, 5), (7, 7), (9, 3), (8, 8), (10, 0)]:
        assert h.choose_k(16) == drafted
        h.observe(rec(drafted, accepted))
        trace.append(h.k)
    assert trace == [7, 9, 8, 10, 9]  # +2 capped at k_max, -1 after any rejection
    for _ in range(20):
        h.observe(rec(1, 0))
    assert h.k == 1
    h.reset()
    assert h.k == 5


def test_verify_curve_is_made_monotone():
    assert monotone_fit({1: 10.0, 2: 14.0, 3: 12.0, 4: 15.0}) == {1: 10.0, 2: 13.0, 3: 13.0, 4: 15.0}
    assert monotone_fit({1: 5.0, 3: 7.0}) == {1: 5.0, 3: 7.0}
    # weighted by how many passes each length has: the better-measured length moves less
    assert monotone_fit({1: 10.0, 2: 7.0}, {1: 3.0, 2: 1.0}) == {1: 9.25, 2: 9.25}


def test_monotone_fit_is_scipys_weighted_isotonic_regression():
    # the fit stays hand-written only for import time (core/measure/statistics.py says why): it must be scipy's
    from scipy.optimize import isotonic_regression

    rng = np.random.default_rng(3)
    for _ in range(50):
        lengths = sorted(rng.choice(np.arange(1, 20), size=int(rng.integers(1, 12)), replace=False).tolist())
        values = rng.normal(10.0, 3.0, size=len(lengths))
        weights = rng.integers(1, 9, size=len(lengths)).astype(float)
        ours = monotone_fit(dict(zip(lengths, values.tolist(), strict=True)),
                            dict(zip(lengths, weights.tolist(), strict=True)))
        theirs = isotonic_regression(values, weights=weights, increasing=True).x
        assert list(ours) == lengths and list(ours.values()) == pytest.approx(theirs.tolist(), rel=1e-12)


class ScriptedPolicy:
    """Chooses k from a fixed cycle (0 = do not draft), feeding the live measurement like the real one."""

    def __init__(self, cycle: list[int]):
        self.cycle, self.i, self.measurement = cycle, 0, Measurement(window=64)

    def choose_k(self, k_max: int) -> int:
        self.i += 1
        return self.cycle[(self.i - 1) % len(self.cycle)]

    def observe(self, record: IterationRecord) -> None:
        pass  # the run's feeder (run_fed, standing in for the session) feeds the measurement


def test_iterations_without_a_draft_keep_the_output_and_the_measurements_right():
    target = tiny_model(0, vocab_size=64, logit_scale=3.0)
    draft = perturbed(target, 0.03)
    prompt = [7, 8, 9, 10]
    plain = Decoder(target, 64).run(prompt, options=DecodeOptions(max_new_tokens=40), plain=True).token_ids
    # runs of k=0 make the draft catch up on several committed tokens at its next proposal
    policy = ScriptedPolicy([0, 0, 0, 2, 0, 1, 3, 0, 0])
    decoder = Decoder(target, 64, drafter=ModelDrafter(draft, 64), k_policy=policy)
    result = run_fed(decoder, prompt, Controls(ControlValues(k=4, adaptive_k=True)),
                     DecodeOptions(max_new_tokens=40, baseline_every=4, baseline_steps=1), policy.measurement)
    assert result.token_ids == plain
    skipped = [r for r in result.iterations if r.mode == "speculative" and r.controls.k == 0]
    assert skipped and all(r.n_drafted == 0 and r.n_accepted == 0 and r.n_emitted == 1 for r in skipped)
    assert sum(r.n_accepted for r in result.iterations) > 0
    est = policy.measurement.estimate()
    assert est is not None and est.alpha is not None and 0.0 < est.alpha <= 1.0
    assert est.costs.draft_step_ms is not None and est.costs.draft_step_ms > 0.0  # from the iterations that drafted
    assert 1 in est.costs.verify_ms_by_len and est.measured is not None


def test_the_cost_model_policy_drives_the_loop_with_k_zero_allowed():
    target = tiny_model(0, vocab_size=64, logit_scale=3.0)
    useless = tiny_model(1, vocab_size=64, logit_scale=3.0)  # nearly never agrees: drafting cannot pay
    prompt = [1, 2, 3]
    plain = Decoder(target, 64).run(prompt, options=DecodeOptions(max_new_tokens=48), plain=True).token_ids
    policy = CostModelKPolicy(Measurement(window=32))
    decoder = Decoder(target, 64, drafter=ModelDrafter(useless, 64), k_policy=policy)
    result = run_fed(decoder, prompt, Controls(ControlValues(k=4, adaptive_k=True)),
                     DecodeOptions(max_new_tokens=48, baseline_every=16, baseline_steps=1,
                                   explore_k=VerifyExploration(policy.measurement, 4, every=4)),
                     policy.measurement)
    assert result.token_ids == plain
    ks = [r.controls.k for r in result.iterations if r.mode == "speculative"]
    assert ks[0] == 2 and max(ks[1:]) <= 2  # initial_k, then at most a probe or an exploration
    assert ks.count(0) > len(ks) // 2  # mostly not drafting, with a probe now and then
