"""Baselines that commit their tokens and verify costs from real passes (nothing the profiler times is thrown
away): greedy output identical to plain decoding, every target pass in the run belongs to an iteration that
committed tokens, sampling stays exact, an EAGLE head keeps its features through plain steps, exploration is
bounded, and the baseline spacing follows its budget."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specscope.core.controls import Controls
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.events import RunFinished
from specscope.core.measure.measurement import Measurement
from specscope.core.measure.schedule import BaselineSchedule, VerifyExploration, budget_gap
from specscope.core.records import ControlValues, IterationRecord, TokenStatus
from tests.models import perturbed, tiny_model
from tests.stats import chi_square_pvalue, exact_first_two

V = 64


class CountingTarget(torch.nn.Module):
    """The target with its forward passes counted (what a discarded pass would show up in)."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner, self.config, self.calls = inner, inner.config, 0

    def forward(self, *args: object, **kwargs: object) -> object:
        self.calls += 1
        return self.inner(*args, **kwargs)

    def get_input_embeddings(self) -> torch.nn.Module:
        return self.inner.get_input_embeddings()


def _plain(target: torch.nn.Module, prompt: list[int], n: int) -> list[int]:
    return Decoder(target, V).run(prompt, options=DecodeOptions(max_new_tokens=n), plain=True).token_ids


def test_a_greedy_run_with_baselines_every_two_iterations_is_plain_decoding_and_wastes_no_pass() -> None:
    inner = tiny_model(0, vocab_size=V, logit_scale=3.0)
    target = CountingTarget(inner)
    decoder = Decoder(target, V, drafter=ModelDrafter(perturbed(inner, 0.03), V))
    m = Measurement()
    # the exploration reads a measurement that is never fed, so nothing is priced and it explores as it may: this
    # test is about the loop wasting no pass (on this tiny pair no k pays, and whether exploring pays is
    # test_no_exploration_of_long_k_where_no_k_could_pay's)
    opts = DecodeOptions(max_new_tokens=40, baseline_every=2, baseline_steps=2,
                         explore_k=VerifyExploration(Measurement(), 8, every=4, budget=None))
    for event in decoder.stream([1, 2, 3], Controls(ControlValues(k=3)), opts):
        m.feed(event)
    result = decoder.result
    assert result is not None and result.token_ids == _plain(inner, [1, 2, 3], 40)
    records = result.iterations
    plain = [r for r in records if r.mode == "plain"]
    assert len(plain) >= 10 and all(r.n_emitted == 1 for r in plain)
    assert all(t.status is TokenStatus.TARGET for r in plain for t in r.tokens)  # "target" in the token view
    # one target pass for the prompt, then exactly one per iteration: no pass whose output was thrown away
    assert target.calls == 1 + len(records)
    assert sum(r.n_emitted for r in records) == 40
    explored = [r for r in records if r.explore]
    assert explored and all("exploring" in r.k_note for r in explored)
    assert len(explored) <= len([r for r in records if r.mode == "speculative"]) // 4 + 1
    m.feed(RunFinished(result.finish_reason, len(records), 40, result.elapsed_s, decoder.prefill_ms))
    assert m.fit.max_length == 9  # the explored pass gives the curve its longest length, by a real iteration


def test_an_eagle_head_gets_the_features_of_plain_steps() -> None:
    from specscope.core.engine.drafters.eagle_files import load_head, save_head
    from tests.test_eagle import LAYERS, PROMPTS, RecordingDrafter, head_config, random_head

    target = tiny_model(0, vocab_size=V, layers=LAYERS, logit_scale=3.0)
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as tmp:
        save_head(random_head(target, head_config(), 4), Path(tmp), dtype=torch.float32)
        for prompt in PROMPTS:
            drafter = RecordingDrafter(load_head(Path(tmp), target, V), target.config, V)
            res = Decoder(target, V, drafter=drafter).run(
                prompt, Controls(ControlValues(k=3)), DecodeOptions(max_new_tokens=30, baseline_every=2,
                                                                    baseline_steps=2))
            assert res.token_ids == _plain(target, prompt, 30)
            assert any(r.mode == "plain" for r in res.iterations) and drafter.calls


V8 = 8
RUNS = 1500


def _exact_first_two(target, prompt, controls: ControlValues) -> np.ndarray:
    return exact_first_two(target, prompt, controls, V8)


@pytest.mark.slow  # 1,500 decodes: the full tier
def test_sampling_with_a_plain_step_first_keeps_the_targets_joint_distribution() -> None:
    """Token 1 from a baseline's plain step (the run's generator), token 2 from speculation: the pair is still
    the target's. 1,500 runs over 64 cells: a χ² test at p > 1e-3 catches a 0.1 total-variation error."""
    target = tiny_model(10, vocab_size=V8, logit_scale=1.0)
    draft = tiny_model(11, vocab_size=V8, logit_scale=1.0)
    controls = ControlValues(k=2, temperature=1.0)
    prompt = [1, 2, 3]
    dec = Decoder(target, V8, drafter=ModelDrafter(draft, V8))
    counts = np.zeros((V8, V8))
    for seed in range(RUNS):
        res = dec.run(prompt, Controls(controls), DecodeOptions(max_new_tokens=2, seed=seed, record_tokens=False,
                                                                baseline_every=1, baseline_steps=1,
                                                                baseline_first=True))
        assert res.iterations[0].mode == "plain" and res.iterations[1].mode == "speculative"
        counts[res.token_ids[0], res.token_ids[1]] += 1
    assert chi_square_pvalue(counts, _exact_first_two(target, prompt, controls)) > 1e-3


def _rec(i: int, mode: str, ms: float, emitted: int) -> IterationRecord:
    return IterationRecord(i, mode, "model" if mode == "speculative" else "none", ControlValues(k=3), [],
                           3 if mode == "speculative" else 0, emitted - 1 if mode == "speculative" else 0,
                           emitted, 0.0, ms, 0.0, ms, 0, 0, 0.0, 0.0)


def test_baselines_spread_out_once_the_speed_up_is_known_and_stay_dense_when_it_does_not_pay() -> None:
    def schedule_after(spec_ms: float) -> int:
        m = Measurement()
        schedule = BaselineSchedule(m, steps=2, min_gap=6, max_gap=48, budget=0.03)
        assert schedule.next_gap() == 6  # nothing known yet: dense, to get the first estimate soon
        it = 0
        for _ in range(8):
            for _ in range(2):
                m.feed(_rec(it, "plain", 10.0, 1))
                it += 1
            for _ in range(6):
                m.feed(_rec(it, "speculative", spec_ms, 2))
                it += 1
        m.feed(_rec(it, "plain", 10.0, 1))
        m.feed(_rec(it + 1, "speculative", spec_ms, 2))
        return schedule.next_gap()

    # 2 tokens in 13.3 ms against 10 ms a token: x1.5; a baseline of 2 steps costs 2 * (1 - 1/1.5) = 0.67 steps,
    # so it comes once per 0.67 / 0.03 = 22 steps of work: 2 * (0.333 / 0.03 - 1) / (2 / 1.5) = 15 iterations
    assert schedule_after(2 * 10.0 / 1.5) == 15
    assert schedule_after(2 * 10.0 / 0.8) == 6  # speculation loses: a plain step costs nothing extra


def test_exploration_is_bounded_and_stops_once_every_length_was_timed() -> None:
    m = Measurement()
    m.fit.add(1, 10.0)
    m.fit.add(4, 12.0)  # the user's k = 3: its pass length is timed
    explore = VerifyExploration(m, 16, every=4, attempts=2, budget=None)
    assert explore.candidates() == [3, 5, 9, 17]
    asked = [explore(3) for _ in range(40)]
    chosen = [k for k in asked if k is not None]
    # only lengths past the longest timed, shortest first, two tries each, one iteration in four at most
    assert chosen == [4, 4, 8, 8, 16, 16] and all(k is None for k in asked[:3])
    for n in (5, 9, 17):
        m.fit.add(n, 10.0)
    assert all(explore(3) is None for _ in range(20))  # every length timed: nothing left to explore


def test_exploration_stays_within_its_share_of_the_wall_time() -> None:
    """A dear draft (50 ms a proposal against a 10 ms step) may explore k=4 from k=2 only once the run is long
    enough for 2 x 50 ms to be 2% of it."""
    def run_of(iterations: int) -> Measurement:
        m = Measurement()
        t = 0.0
        for i in range(iterations):
            mode = "plain" if i % 8 == 0 else "speculative"
            r = _rec(i, mode, 10.0 if mode == "plain" else 112.0, 1 if mode == "plain" else 2)
            if mode == "speculative":
                r.n_drafted, r.draft_ms, r.verify_ms = 2, 100.0, 11.0
            r.t_start_s, r.t_end_s = t, t + r.iteration_ms / 1000.0
            t = r.t_end_s
            m.feed(r)
        return m

    short, long = run_of(10), run_of(60)  # about 1 s and 6 s of wall time
    assert not VerifyExploration(short, 16, every=1).affordable(2, 4)  # 100 ms > 2% of 1 s
    assert VerifyExploration(long, 16, every=1).affordable(2, 4)  # 100 ms < 2% of 6 s


def _lookup_rec(i: int, drafted: int, accepted: int, ms: float) -> IterationRecord:
    return IterationRecord(i, "speculative", "lookup", ControlValues(k=3), [], drafted, accepted, accepted + 1,
                           0.0, ms, 0.0, ms, 0, 0, 0.0, 0.0)


def test_no_baseline_before_the_first_iteration_and_every_plain_step_is_a_plain_sample() -> None:
    """Baselines every 3 speculative iterations, one plain step each, none before the first: each plain step is
    one plain sample of the measured speed-up, and so is an iteration that proposed nothing (the last one, with
    one token of room left)."""
    inner = tiny_model(0, vocab_size=V, logit_scale=3.0)
    decoder = Decoder(inner, V, drafter=ModelDrafter(perturbed(inner, 0.03), V))
    m = Measurement()
    opts = DecodeOptions(max_new_tokens=60, baseline_every=3, baseline_steps=1)
    for event in decoder.stream([1, 2, 3], Controls(ControlValues(k=2)), opts):
        m.feed(event)
    result = decoder.result
    assert result is not None and result.token_ids == _plain(inner, [1, 2, 3], 60)
    modes = "".join("P" if r.mode == "plain" else "s" for r in result.iterations)
    assert modes.startswith("sssP") and "PP" not in modes
    m.feed(RunFinished(result.finish_reason, len(result.iterations), 60, result.elapsed_s, decoder.prefill_ms))
    est = m.estimate()
    nothing_proposed = sum(1 for r in result.iterations if r.mode == "speculative" and r.n_drafted == 0)
    assert est is not None and est.plain_samples == modes.count("P") + nothing_proposed
    assert est.measured is not None and est.measured.n == est.plain_samples


def test_a_first_baseline_is_priced_by_the_predicted_speed_up_when_a_plain_pass_was_timed() -> None:
    """Prompt lookup times a pass of length 1 itself (a match before any such pass proposes nothing): the recent
    window's rate against it prices the first baseline, and where speculation pays ×3 it is put off; a run that
    does not pay gets its first baseline after ``min_gap`` speculative iterations."""
    def gap_after(accepted: int, ms: float) -> int:
        m = Measurement()
        m.feed(_lookup_rec(0, 0, 0, 10.0))  # nothing proposed: a length-1 pass, the plain step's cost
        for i in range(1, 7):
            m.feed(_lookup_rec(i, 3, accepted, ms))
        return BaselineSchedule(m, min_gap=6).next_gap(6, 1000)

    assert gap_after(3, 12.0) > 6  # 4 tokens in 12 ms against 10 ms a token
    assert gap_after(0, 12.0) == 6  # 1 token in 12 ms: speculation loses, a plain step costs nothing extra


def test_an_iteration_that_proposed_nothing_counts_as_a_baseline_for_the_schedule() -> None:
    """Prompt lookup in prose proposes nothing: each such iteration is a plain sample, so no baseline is due
    until the priced gap has passed since the last of them."""
    m = Measurement()
    for i in range(8):
        m.feed(_lookup_rec(i, 0 if i % 2 == 0 else 3, 3, 12.0))  # every other iteration proposes nothing
    schedule = BaselineSchedule(m, min_gap=6)
    assert m.estimate().since_plain_sample == 1
    assert not schedule.due(8, 1000)  # 8 iterations since the last baseline (none), 1 since a plain sample
    for i in range(8, 40):
        m.feed(_lookup_rec(i, 3, 3, 12.0))  # copying from here on: 4 tokens in 12 ms
    assert m.estimate().since_plain_sample == 33 and schedule.due(40, 1000)


def test_a_plain_step_dearer_than_a_short_pass_prices_the_baselines_as_timed() -> None:
    """On this CPU a one-token pass can cost more than a 4-token one; the verify fit pools them (it never falls
    with length), but the plain step the schedule prices is the length-1 passes as timed."""
    m = Measurement()
    m.feed(_rec(0, "plain", 10.0, 1))
    for i in range(1, 20):
        r = _rec(i, "speculative", 9.0, 3)  # 3 tokens in 9 ms, a 4-token pass of 8 ms
        r.verify_ms = 8.0
        m.feed(r)
    assert m.fit.points[1] < 10.0  # pooled with the cheaper 4-token passes
    assert m.estimate().provisional_speedup == pytest.approx(3 / 9.0 * 10.0)


def _one_plain_step(speedup: float) -> Measurement:
    """6 speculative iterations of 2 tokens, one plain step of 10 ms, one more iteration: speculation runs
    ``speedup`` times as fast, and one plain sample of the two the measured speed-up needs is in."""
    m = Measurement()
    for i in range(6):
        m.feed(_rec(i, "speculative", 2 * 10.0 / speedup, 2))
    m.feed(_rec(6, "plain", 10.0, 1))
    m.feed(_rec(7, "speculative", 2 * 10.0 / speedup, 2))
    return m


def test_until_the_interval_exists_baselines_are_spread_to_give_it_within_the_run_when_that_is_affordable() -> None:
    m = _one_plain_step(1.5)
    est = m.estimate()
    assert est is not None and est.plain_samples == 1 and est.measured is None
    assert m.estimate().provisional_speedup == pytest.approx(1.5)
    schedule = BaselineSchedule(m, min_gap=2, budget=0.03, early_budget=0.045)
    # x1.5 at 2 tokens an iteration (1.33 plain-step times): a plain step costs 1/3 of a step more than
    # speculation, so the 3% budget allows one every (0.33 / 0.03 - 1) / 1.33 = 7.6 iterations, 4.5% every 4.8
    assert schedule.next_gap(1) == 8  # no horizon: the budget's spacing
    assert schedule.next_gap(1, 400) == 8  # 200 iterations left: the one more baseline needed comes anyway
    # 26 tokens left (14 iterations from the last baseline): one more baseline halfway gives the interval before
    # the end, within 4.5%
    assert schedule.next_gap(1, 26) == 7
    # 12 tokens left (7 iterations from the last baseline): a third of a plain step in 9.3 plain-step times,
    # 3.3%: halfway, 3.5 iterations on
    assert schedule.next_gap(1, 12) == 4
    # 4 tokens left: a third of a step in 4 is dearer than 4.5%: the 3% spacing, and no interval in this run
    assert schedule.next_gap(1, 4) == 8
    # asked as the iterations come, with 12 tokens left: due halfway through what is left since the baseline
    for i in range(8, 12):
        m.feed(_rec(i, "speculative", 2 * 10.0 / 1.5, 2))
    assert m.estimate().since_plain_sample == 5 and not schedule.due(5, 12)  # 11 iterations: 5.5 -> 6
    m.feed(_rec(12, "speculative", 2 * 10.0 / 1.5, 2))
    assert schedule.due(6, 12)


def _timed(records: list[IterationRecord]) -> list[IterationRecord]:
    """The records end to end in time, from t = 0."""
    t = 0.0
    for r in records:
        r.t_start_s, r.t_end_s = t, t + r.iteration_ms / 1000.0
        t = r.t_end_s
    return records


def test_one_budget_bounds_baselines_and_exploration_together() -> None:
    """Baselines and exploration share one budget: a run whose plain steps cost 3.75% of its wall time has
    nothing left to explore with within 3%, however cheap the exploration; and where baselines give the
    measured speed-up, exploration waits for it."""
    records = []
    for i in range(40):
        mode = "plain" if i in (10, 30) else "speculative"
        r = _rec(i, mode, 10.0, 1 if mode == "plain" else 4)
        if mode == "speculative":  # 3 proposals at 2 ms each, a 4-token pass of 4 ms
            r.draft_ms, r.verify_ms = 6.0, 4.0
        records.append(r)
    m = Measurement()
    for r in _timed(records):
        m.feed(r)
    est = m.estimate()
    assert est is not None and est.cost is not None and est.run_measured is not None
    assert est.cost.iterations_ms / est.cost.wall_ms == pytest.approx(2 * 7.5 / 400)  # 3.75% of the wall
    assert not VerifyExploration(m, 16, every=1, budget=0.03).affordable(3, 3)  # spent already
    assert VerifyExploration(m, 16, every=1, budget=0.05).affordable(3, 3)  # nothing extra predicted
    assert VerifyExploration(m, 16, every=1, budget=0.05).affordable(3, 4)  # 15 + 2 ms within 5% of 400 ms
    assert not VerifyExploration(m, 16, every=1, budget=0.04).affordable(3, 4)  # 15 + 2 ms past 4%

    early = Measurement()  # one plain step so far: no measured speed-up yet
    for r in _timed([_rec(i, "plain" if i == 6 else "speculative", 10.0, 1 if i == 6 else 4) for i in range(12)]):
        early.feed(r)
    est = early.estimate()
    assert est is not None and est.run_measured is None
    assert not VerifyExploration(early, 16, every=1, budget=None, after_measured=True).affordable(3, 4)
    assert VerifyExploration(early, 16, every=1, budget=None).affordable(3, 4)


def test_after_the_early_baselines_the_next_waits_until_the_run_has_paid_for_them() -> None:
    """An EAGLE-like run at x2.8: the two plain steps the measured speed-up needs come early (the first after
    6 iterations, the second to give the interval within the run) and cost more than 3% of the wall time so
    far; the third waits until what all of them cost is within 3% of the run, far past the steady spacing,
    so a 128-token run ends with two."""
    def spec(i: int) -> IterationRecord:
        return _rec(i, "speculative", 10.7, 3)  # 3 tokens in 10.7 ms against a 10 ms plain step: x2.80

    records = [spec(i) for i in range(6)] + [_rec(6, "plain", 10.0, 1)]
    records += [spec(i) for i in range(7, 26)] + [_rec(26, "plain", 10.0, 1), spec(27)]
    m = Measurement()
    for r in _timed(records):
        m.feed(r)
    est = m.estimate()
    assert est is not None and est.run_measured is not None and est.cost is not None
    s = m.estimate().provisional_speedup
    assert s == pytest.approx(3 / 10.7 * 10.0)
    spent = 2 * (10.0 - 10.7 / 3)  # each plain step beyond what speculation takes for its token
    assert est.cost.iterations_ms == pytest.approx(spent)
    schedule = BaselineSchedule(m, min_gap=6, max_gap=48, budget=0.03)
    # the third plain step is due when the 2 spent and it (6.43 ms each) are 3% of the wall time: 643 ms against
    # 298 ms so far and 10 ms for it, 31.3 iterations of 10.7 ms on, 1 after the last baseline
    wait = ((spent + 10.0 * (1 - 1 / s)) / 0.03 - 10.0 - est.cost.wall_ms) / 10.7
    assert wait == pytest.approx(31.3, abs=0.1)
    assert schedule.next_gap(1) == round(1 + wait) == 32
    assert budget_gap(0.03, 1, s, 3 / s) == pytest.approx(19.1, abs=0.1)  # the steady spacing, for contrast
    assert not schedule.due(17, 50)  # 50 tokens left, 17 iterations since: none in this run


def _cli_json(tdir: object, ddir: object, *extra: str) -> dict:
    import contextlib
    import io
    import json

    from specscope.core.commands.cli import main

    argv = ["run", "--target", str(tdir), "--draft", str(ddir), "--prompt", "w5 w6 w7", "--no-chat-template",
            "--max-new-tokens", "64", "--k", "3", "--json", "--quiet", *extra]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue())["metrics"]


def test_run_json_gives_the_measurements_own_cost_and_it_is_only_bookkeeping_with_the_measurement_off(
        tmp_path, monkeypatch) -> None:
    """``--json`` carries the overhead share and its parts. With baselines and exploration off nothing of it is
    the measurement's doing beyond the time between iterations (records, joins, autosave), which a run has
    either way: no plain step, no explored iteration, no time charged to either."""
    from tests.models import save_model_dir, word_tokenizer

    monkeypatch.setenv("SPECSCOPE_DATA_DIR", str(tmp_path / "data"))
    target = tiny_model(5, vocab_size=64, logit_scale=3.0)
    tdir = save_model_dir(tmp_path / "target", target, word_tokenizer())
    ddir = save_model_dir(tmp_path / "draft", perturbed(target, 0.05), word_tokenizer())
    off = _cli_json(tdir, ddir, "--baseline-every", "0", "--explore-every", "0")
    parts = off["measurement_overhead_ms"]
    assert off["plain_iterations"] == 0 and off["exploration_iterations"] == 0
    assert parts["baselines"] == 0.0 and parts["exploration"] == 0.0
    assert off["measurement_overhead"] == pytest.approx(parts["bookkeeping"] / parts["wall"])
    assert parts["bookkeeping"] == pytest.approx(max(0.0, parts["wall"] - parts["decode"]))
    on = _cli_json(tdir, ddir, "--baseline-every", "2")
    assert on["plain_iterations"] > 0 and on["measurement_overhead"] is not None
    share = on["measurement_overhead_ms"]
    spent = share["bookkeeping"] + share["baselines"] + share["exploration"]
    assert on["measurement_overhead"] == pytest.approx(spent / share["wall"])


def test_an_exploration_costs_its_time_beyond_a_usual_iteration_less_what_it_accepted_past_k() -> None:
    """Exploring k=4 from k=3: 7 ms longer than the usual 40 ms iteration. Accepting 1 of 4 it cost those 7 ms
    (charged by its 2 tokens at the run's 13.3 ms a token it would read 20 ms: the text's luck, not exploring);
    accepting all 4 it gained a token that k=3 could not have accepted, worth more than the 7 ms."""
    def cost_after(accepted: int) -> float:
        m = Measurement()
        records = [_rec(i, "speculative", 40.0, 3) for i in range(10)]  # k=3, 2 accepted + 1: 3 tokens
        explored = _rec(10, "speculative", 47.0, accepted + 1)
        explored.controls, explored.n_drafted, explored.explore = ControlValues(k=4), 4, True
        for r in _timed([*records, explored]):
            m.feed(r)
        est = m.estimate()
        assert est is not None and est.cost is not None and est.cost.exploration_iterations == 1
        return est.cost.exploration_ms

    assert cost_after(1) == pytest.approx(7.0)
    assert cost_after(4) == 0.0


def test_two_plain_steps_that_disagree_call_a_third_while_the_run_can_afford_it() -> None:
    """Two plain steps 10 and 16 ms among passes that agree to the millisecond: the plain samples are most of the
    interval's uncertainty and it is too wide for a verdict (1 degree of freedom), so one more plain step is
    spread into the rest of the run when that costs at most 4.5% of it; two that agree call none."""
    def run_with(second_plain_ms: float) -> Measurement:
        records = [_rec(i, "speculative", 10.7 + 0.1 * (i % 3), 3) for i in range(6)]
        records += [_rec(6, "plain", 10.0, 1)]
        records += [_rec(i, "speculative", 10.7 + 0.1 * (i % 3), 3) for i in range(7, 26)]
        records += [_rec(26, "plain", second_plain_ms, 1), _rec(27, "speculative", 10.8, 3)]
        for r in records:
            if r.mode == "speculative":
                r.verify_ms = r.iteration_ms - 1.0  # a 4-token pass of ~9.7 ms
        m = Measurement()
        for r in _timed(records):
            m.feed(r)
        return m

    disagree, agree = run_with(16.0), run_with(10.1)
    wide = disagree.estimate()
    assert wide is not None and wide.run_measured is not None and wide.run_plain_limited
    assert wide.run_measured.spread > 1.6
    narrow = agree.estimate()
    assert narrow is not None and narrow.run_measured is not None and narrow.run_measured.spread < 1.6
    # 150 tokens left, 50 iterations: the third halfway through them; with 2 that agree, the budget's wait
    assert BaselineSchedule(disagree, min_gap=6).next_gap(1, 150) == round((1 + 150 / 3) / 2) == 26
    assert BaselineSchedule(agree, min_gap=6).next_gap(1, 150) == 32  # as in the test above: 643 ms of wall first


def _run_at_k3(accepted: int, draft_step_ms: float) -> Measurement:
    """Plain steps of 10 ms and speculative iterations at k = 3 (verify 11 ms) that accept ``accepted`` of 3, each
    draft step ``draft_step_ms``: pass lengths 1 and 4 timed, nothing longer."""
    m = Measurement()
    for i in range(40):
        if i % 8 == 0:
            m.feed(_rec(i, "plain", 10.0, 1))
            continue
        r = _rec(i, "speculative", 3 * draft_step_ms + 11.0, accepted + 1)
        r.draft_ms, r.verify_ms = 3 * draft_step_ms, 11.0
        m.feed(r)
    return m


def test_no_exploration_of_long_k_where_no_k_could_pay() -> None:
    """A dear draft that is rarely right (issue 40: explorations of 8-16 tokens while the advisor said not to
    speculate): even at the cheapest a longer pass could cost, no k past 3 beats plain decoding, so nothing is
    explored. A good cheap draft is explored as before, shortest length first."""
    losing = _run_at_k3(accepted=0, draft_step_ms=6.0)
    est = losing.estimate()
    assert est is not None and est.best_k == 0 and est.best_speedup == 1.0  # the advisor: do not speculate
    assert all((est.bound_at(k) or 0.0) <= 1.0 for k in range(4, 17))
    explore = VerifyExploration(losing, 16, every=1, budget=None)
    assert all(explore(3) is None for _ in range(20))

    paying = _run_at_k3(accepted=3, draft_step_ms=0.5)
    est = paying.estimate()
    assert est is not None and est.best_k == 3 and (est.best_speedup or 0.0) > 2.0
    assert (est.bound_at(4) or 0.0) > est.best_speedup  # a longer k could beat it: worth timing
    explore = VerifyExploration(paying, 16, every=1, budget=None)
    assert [explore(3) for _ in range(3)] == [4, 4, 8]

