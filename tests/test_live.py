"""Live measurement: constructed records, and predicted vs measured speed-up on a pair with known costs.

The controlled pair: a target whose every forward pass sleeps a known time, and a drafter that proposes
the target's greedy token with probability alpha (seeded) and sleeps a known time per proposal. Sleeps
model cost here; nothing waits for a race.
"""

from __future__ import annotations

import random
import time

import pytest
import torch

from specscope.core import costmodel
from specscope.core.controls import Controls
from specscope.core.drafters.base import Drafter, Proposal
from specscope.core.live import LiveMeasurement
from specscope.core.records import BaselineRecord, ControlValues, IterationRecord
from specscope.core.speculative import DecodeOptions, Decoder
from tests.models import tiny_model

VOCAB = 64


class SlowTarget(torch.nn.Module):
    """A model whose forward pass costs ``base_ms + per_token_ms * tokens`` more than the wrapped one."""

    def __init__(self, inner: torch.nn.Module, base_ms: float, per_token_ms: float):
        super().__init__()
        self.inner = inner
        self.config = inner.config
        self.base_ms, self.per_token_ms = base_ms, per_token_ms

    def forward(self, input_ids: torch.Tensor, **kwargs: object) -> object:
        time.sleep((self.base_ms + self.per_token_ms * input_ids.shape[1]) / 1000.0)
        return self.inner(input_ids, **kwargs)


class OracleDrafter(Drafter):
    """Proposes the target's greedy continuation (known in advance), each token right with prob. alpha."""

    name = "oracle"

    def __init__(self, oracle: list[int], alpha: float, step_ms: float, seed: int = 0):
        self.oracle, self.alpha, self.step_ms = oracle, alpha, step_ms
        self.rng = random.Random(seed)

    def reset(self, prompt_ids: list[int]) -> None:
        pass

    def propose(self, context_ids: list[int], k: int, controls: ControlValues,
                generator: torch.Generator | None) -> Proposal:
        time.sleep(self.step_ms * k / 1000.0)
        n = len(context_ids)
        tokens = []
        for i in range(k):
            right = self.oracle[n + i] if n + i < len(self.oracle) else 0
            tokens.append(right if self.rng.random() < self.alpha else (right + 1) % VOCAB)
        return Proposal(tokens=tokens, q_probs=None, q_token_probs=[None] * k)

    def rollback(self, committed_ids: list[int]) -> None:
        pass


def controlled_pair(alpha: float, draft_ms: float, base_ms: float, per_token_ms: float,
                    prompt: list[int], max_new: int, seed: int = 0) -> tuple[SlowTarget, OracleDrafter]:
    inner = tiny_model(7, vocab_size=VOCAB, logit_scale=4.0)
    plain = Decoder(inner, VOCAB).run(prompt, options=DecodeOptions(max_new_tokens=max_new + 20), plain=True)
    oracle = list(prompt) + plain.token_ids
    return SlowTarget(inner, base_ms, per_token_ms), OracleDrafter(oracle, alpha, draft_ms, seed)


def run_live(decoder: Decoder, prompt: list[int], k: int, opts: DecodeOptions,
             live: LiveMeasurement) -> list[IterationRecord]:
    records = []
    for event in decoder.stream(prompt, Controls(ControlValues(k=k)), opts):
        if isinstance(event, BaselineRecord):
            live.observe_baseline(event)
        else:
            live.enrich(event)
            records.append(event)
    return records


# ---- constructed records ----------------------------------------------------------------------------
def rec(i: int, drafted: int, accepted: int, ms: float, draft_ms: float = 2.0, verify_ms: float = 10.0,
        rollback_ms: float = 0.5) -> IterationRecord:
    return IterationRecord(
        iteration=i, mode="speculative", drafter="t", controls=ControlValues(k=drafted), tokens=[],
        n_drafted=drafted, n_accepted=accepted, n_emitted=accepted + 1, draft_ms=draft_ms * drafted,
        verify_ms=verify_ms, rollback_ms=rollback_ms, iteration_ms=ms, context_len=0, generated_len=0,
        t_start_s=0.0, t_end_s=0.0,
    )


def test_no_baseline_yet_means_no_speedups():
    live = LiveMeasurement(window=4)
    r = rec(0, 2, 1, 15.0)
    live.enrich(r)
    assert r.plain_step_ms is None and r.measured_speedup is None and r.predicted_speedup is None
    assert r.alpha_window == pytest.approx(1 / 2)  # one accepted, one rejected: two judged


def test_measured_and_predicted_on_constructed_records():
    live = LiveMeasurement(window=2)
    live.observe_baseline(BaselineRecord(after_iteration=0, context_len=5, step_ms=[7.0, 6.0, 5.0]))
    records = [rec(0, 2, 0, 99.0), rec(1, 2, 2, 16.0), rec(2, 2, 1, 16.0)]
    for r in records:
        live.enrich(r)
    last = records[-1]
    assert last.plain_step_ms == 6.0  # median of the latest baseline
    # window = the last two: 3 + 2 tokens in 32 ms against 6 ms per plain token
    assert last.measured_speedup == pytest.approx(5 * 6.0 / 32.0)
    assert last.alpha_window == pytest.approx(3 / 4)
    assert last.alpha_cumulative == pytest.approx(3 / 5)
    # costs: 2 ms per draft step, verify 10 ms at length 3, fixed = rollback 0.5 + overhead 16 - 14.5
    assert live.draft_step_ms == 2.0 and live.fixed_ms == pytest.approx(2.0)
    expected = 6.0 * costmodel.expected_tokens_per_iteration(0.75, 2) / (2 * 2.0 + 10.0 + 2.0)
    assert last.predicted_speedup == pytest.approx(expected)


def test_observing_the_same_record_twice_counts_it_once():
    live = LiveMeasurement(window=8)
    r = rec(0, 4, 4, 10.0)
    live.observe(r)
    live.enrich(r)
    assert len(live.window_records()) == 1
    assert live.alpha_cumulative == 1.0


def test_window_verify_timings_override_the_sweep_where_there_are_enough():
    live = LiveMeasurement(window=8)
    live.observe_baseline(BaselineRecord(0, 5, [5.0], verify_ms_by_len={1: 5.0, 2: 6.0, 3: 7.0}))
    for i in range(3):
        live.observe(rec(i, 1, 1, 10.0, verify_ms=9.0))  # pass length 2
    live.observe(rec(3, 2, 1, 10.0, verify_ms=20.0))  # length 3: one sample, the sweep stays
    assert live.verify_ms_by_len == {1: 5.0, 2: 9.0, 3: 7.0}


def test_bad_window():
    with pytest.raises(ValueError):
        LiveMeasurement(window=0)


# ---- predicted vs measured on the controlled pair ---------------------------------------------------
TOLERANCE = 0.05  # absolute: the gap left is E(alpha) from the iid model vs the tokens really emitted


@pytest.mark.parametrize(("alpha", "k"), [(0.8, 2), (0.5, 4)])
def test_predicted_matches_measured_on_a_pair_with_known_alpha_and_costs(alpha, k):
    prompt = [3, 14, 15, 9, 26]
    base_ms, per_token_ms, draft_ms = 16.0, 1.0, 3.0
    target, drafter = controlled_pair(alpha, draft_ms, base_ms, per_token_ms, prompt, max_new=80)
    decoder = Decoder(target, VOCAB, drafter=drafter)
    live = LiveMeasurement(window=1000)
    opts = DecodeOptions(max_new_tokens=80, baseline_every=6, baseline_steps=3)
    records = run_live(decoder, prompt, k, opts, live)
    last = records[-1]
    assert last.measured_speedup is not None and last.predicted_speedup is not None
    assert abs(last.predicted_speedup - last.measured_speedup) <= TOLERANCE
    # alpha as measured recovers the drafter's (seeded, so deterministic) probability
    assert last.alpha_window == pytest.approx(alpha, abs=0.12)
    # the measured costs recover the costs we set (sleeps are lower bounds: compute and contention add)
    assert live.draft_step_ms is not None and live.draft_step_ms >= draft_ms
    assert live.verify_ms_by_len[k + 1] >= base_ms + per_token_ms * (k + 1)
    assert live.plain_step_ms is not None and live.plain_step_ms >= base_ms + per_token_ms
