"""Adaptive k for prompt lookup: the proposal-length policy on constructed records and costs, in the loop with a
tiny model, and greedy equality on every preset prompt of the demo."""

from __future__ import annotations

import pytest
import torch

from specscope.core.commands import bench_report, bench_runs
from specscope.core.controls import Controls
from specscope.core.engine.drafters.lookup import PromptLookupDrafter
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.measure.adaptive_lookup import LookupLengthPolicy
from specscope.core.measure.estimators import KeyedPositionCounts
from specscope.core.measure.measurement import Measurement
from specscope.core.records import BaselineRecord, ControlValues, IterationRecord
from tests.loop_helpers import run_fed, show
from tests.models import tiny_model

RISING = {n: 10.0 + 2.0 * (n - 1) for n in range(1, 18)}  # a CPU: each verified token costs a fifth of a step
FLAT = {n: 10.0 for n in range(1, 18)}  # an accelerator with room: verifying more costs nothing



def rec(drafted: int, accepted: int, verify: dict[int, float]) -> IterationRecord:
    v = verify[drafted + 1]
    return IterationRecord(
        iteration=0, mode="speculative", drafter="lookup", controls=ControlValues(k=drafted, adaptive_k=True),
        tokens=[], n_drafted=drafted, n_accepted=accepted, n_emitted=accepted + 1, draft_ms=0.01, verify_ms=v,
        rollback_ms=0.1, iteration_ms=v + 0.11, context_len=0, generated_len=0, t_start_s=0.0, t_end_s=0.0,
    )


def policy_with(verify: dict[int, float], **kw: object) -> LookupLengthPolicy:
    measurement = Measurement(window=64)
    measurement.feed(BaselineRecord(0, 10, [verify[1]] * 3, verify_ms_by_len=dict(verify)))
    # the policy reads the snapshot, which exists from the first iteration on: a plain step opens the run
    measurement.feed(IterationRecord(
        iteration=0, mode="plain", drafter="none", controls=ControlValues(k=1, adaptive_k=True), tokens=[],
        n_drafted=0, n_accepted=0, n_emitted=1, draft_ms=0.0, verify_ms=verify[1], rollback_ms=0.0,
        iteration_ms=verify[1], context_len=0, generated_len=0, t_start_s=0.0, t_end_s=0.0))
    return LookupLengthPolicy(measurement, **kw)  # type: ignore[arg-type]


def feed(policy: LookupLengthPolicy, match_ngram: int, drafted: int, accepted: int,
         verify: dict[int, float]) -> None:
    """One iteration as the loop runs it: the policy is asked, then sees the record of what it chose."""
    chosen = policy.proposal_length(match_ngram, drafted)
    n = min(chosen, drafted) if chosen else 0
    show(policy, rec(n, min(accepted, n), verify))


def test_everything_accepted_with_flat_verification_proposes_the_whole_continuation():
    policy = policy_with(FLAT)
    climb = []
    for _ in range(6):  # it doubles the positions judged each iteration
        climb.append(policy.proposal_length(3, 10))
        show(policy, rec(climb[-1], climb[-1], FLAT))
    assert climb == [1, 2, 4, 8, 10, 10]
    assert policy.proposal_length(3, 10) == 10
    assert policy.proposal_length(3, 4) == 4  # never more than the match offers


def test_proposals_that_are_never_accepted_stop_and_only_probes_remain():
    policy = policy_with(RISING, probe_every=4)
    for _ in range(12):
        feed(policy, 2, 8, 0, RISING)
    choices = []
    for _ in range(15):  # what it chose is judged: the probes' rejections are counted too
        choices.append(policy.proposal_length(2, 8))
        show(policy, rec(choices[-1], 0, RISING))
    assert set(choices) == {0, 1} and choices.count(1) == 3  # backed off to one probe per probe_every + 1
    assert policy.scores[0] > policy.scores[1]


STEEP = {n: 10.0 + 8.0 * (n - 1) for n in range(1, 18)}  # a 2-token pass costs 1.8 plain steps


def test_probes_back_off_while_rejected_and_resume_at_once_after_an_acceptance():
    policy = policy_with(STEEP)
    choices = []
    for _ in range(16):  # a 1-token probe costs 0.8 of a step here, so the prior 0.5 never pays by itself
        choices.append(policy.proposal_length(2, 8))
        show(policy, rec(choices[-1], 0, STEEP))
    # the first proposal of a match size is tried (it climbs from plain steps); rejected, it is probed
    # again after 2, 4 and 8 declined matches
    assert [i for i, c in enumerate(choices) if c] == [0, 3, 8]
    assert policy.proposal_length(3, 8) == 1  # another match size has its own schedule
    show(policy, rec(1, 1, STEEP))
    assert policy.proposal_length(3, 8) >= 1  # accepted: the next 3-gram match is tried again


def test_a_rising_verify_cost_stops_where_acceptance_no_longer_pays():
    policy = policy_with(RISING)
    for _ in range(20):  # the first three proposals of a 3-gram match are accepted, the fourth never
        feed(policy, 3, 3, 3, RISING)
    long = policy.proposal_length(3, 10)
    show(policy, rec(long, 3, RISING))
    assert 3 <= long <= 6  # at most double the judged positions: it keeps measuring the next ones
    explored = []
    for _ in range(16):  # a pass length measured fewer than 3 times may be tried until it is known not to pay
        explored.append(policy.proposal_length(3, 10))
        show(policy, rec(explored[-1], 3, RISING))
    lengths = {n + 1 for n in explored if n > 3}
    assert all(policy.measurement.fit.passes(n) >= 3 for n in lengths)  # each tried only until measured
    assert explored[-4:] == [3, 3, 3, 3]


def test_acceptance_is_conditioned_on_the_match_size():
    policy = policy_with(RISING)
    for _ in range(10):
        feed(policy, 3, 4, 4, RISING)  # 3-gram matches are copied text
        feed(policy, 1, 4, 0, RISING)  # 1-gram matches are coincidences
    assert policy.proposal_length(3, 4) >= 3
    show(policy, rec(0, 0, RISING))
    assert policy.proposal_length(1, 4) <= 1


def test_keyed_counts_shrink_a_rare_key_toward_all_keys():
    counts = KeyedPositionCounts(decay=1.0)
    for _ in range(20):
        counts.add(3, rec(4, 4, RISING))
    counts.add(1, rec(4, 0, RISING))
    c1, c3, unseen = counts.conditional(1, 2, 0.5), counts.conditional(3, 2, 0.5), counts.conditional(2, 2, 0.5)
    assert c3[0] > unseen[0] > c1[0] > 0.0  # one rejection does not make a key hopeless
    assert KeyedPositionCounts().conditional(2, 3, 0.4) == pytest.approx([0.4, 0.4, 0.4])  # nothing seen: prior


def test_without_a_plain_step_measured_it_proposes_nothing():
    policy = LookupLengthPolicy(Measurement())
    assert policy.proposal_length(3, 10) == 0


def test_bad_settings_are_refused():
    with pytest.raises(ValueError):
        LookupLengthPolicy(Measurement(), prior=1.0)
    with pytest.raises(ValueError):
        PromptLookupDrafter(match="first")


def test_earliest_match_is_transformers_choice():
    context = [1, 2, 7, 9, 1, 2, 8, 5, 1, 2]
    assert PromptLookupDrafter(2, 10, match="earliest").lookup(context, 2) == [7, 9]
    assert PromptLookupDrafter(2, 10, match="recent").lookup(context, 2) == [8, 5]
    d = PromptLookupDrafter(3, 10)
    assert d.propose(context, 2, ControlValues(), None).match_ngram == 2  # (5, 1, 2) never occurred before


def _tiny_run(prompt: list[int], max_new: int, drafter: PromptLookupDrafter | None, policy=None):
    model = tiny_model(3, logit_scale=4.0)
    decoder = Decoder(model, 64, drafter=drafter, k_policy=policy)
    return run_fed(decoder, prompt, Controls(ControlValues(k=4, adaptive_k=policy is not None)),
                   DecodeOptions(max_new_tokens=max_new, record_tokens=False),
                   policy.measurement if policy is not None else Measurement(), plain=drafter is None)


def test_in_the_loop_a_run_without_matches_proposes_nothing():
    # a 4-gram lookup on 12 new tokens after a prompt of distinct tokens: no 4-gram can have occurred before
    # unless the output repeats itself, which the assertion on the drafter checks
    prompt = list(range(3, 40))
    drafter = PromptLookupDrafter(max_ngram=4, min_ngram=4, num_tokens=10)
    policy = LookupLengthPolicy(Measurement())
    result = _tiny_run(prompt, 12, drafter, policy)
    ids = prompt + result.token_ids
    grams = [tuple(ids[i:i + 4]) for i in range(len(ids) - 3)]
    assert len(set(grams)) == len(grams), "the output repeated a 4-gram: pick another prompt"
    assert all(r.n_drafted == 0 and r.controls.k == 0 for r in result.iterations)
    assert result.token_ids == _tiny_run(prompt, 12, None).token_ids


def test_in_the_loop_a_periodic_output_is_proposed_and_kept_identical():
    torch.manual_seed(0)
    prompt = [5, 6, 7, 8] * 6
    drafter = PromptLookupDrafter(max_ngram=3, num_tokens=10)
    measurement = Measurement()
    result = _tiny_run(prompt, 24, drafter, LookupLengthPolicy(measurement))
    assert result.token_ids == _tiny_run(prompt, 24, None).token_ids
    assert sum(r.n_drafted for r in result.iterations) > 0


# ---- the demo -------------------------------------------------------------------------------------------
FAST_TIER_SETS = ("code", "repeated-task")  # lookup's ordinary case and its best one (the most proposals)


def _preset_prompts():
    """Every preset prompt; the fast tier runs the first of the code and repeated-task sets, the full tier
    (``slow``) the rest too: each is a plain and a speculative decode of the 135M demo (4-5 s on 2 cores), and
    the loop's identity with plain decoding is checked on tiny models above in milliseconds."""
    from specscope.core.prompts import load_prompt_sets

    return [pytest.param(p, id=p.id, marks=() if i == 0 and kind in FAST_TIER_SETS else pytest.mark.slow)
            for kind, ps in load_prompt_sets().items() for i, p in enumerate(ps)]


@pytest.fixture(scope="module")
def demo_lookup_pair(demo_target):  # the session's converted demo (tests/conftest.py)
    from specscope.core.engine import demo

    try:
        return demo.load_demo_pair("lookup")
    except demo.DemoUnavailable as e:
        pytest.skip(str(e))


@pytest.mark.demo
@pytest.mark.parametrize("prompt", _preset_prompts())
def test_demo_greedy_output_equals_plain_with_adaptive_lookup(demo_lookup_pair, prompt) -> None:
    pair = demo_lookup_pair
    ids = pair.encode_prompt(prompt.text)
    opts = DecodeOptions(max_new_tokens=12, eos_token_ids=pair.eos_token_ids, record_tokens=False)
    plain = Decoder(pair.target.model, pair.vocab_size).run(ids, Controls(), opts, plain=True)
    policy = LookupLengthPolicy(Measurement())
    decoder = Decoder(pair.target.model, pair.vocab_size, drafter=pair.drafter, k_policy=policy)
    spec = decoder.run(ids, Controls(ControlValues(k=4, adaptive_k=True)), opts)
    assert spec.token_ids == plain.token_ids


# ---- the bench's options for this issue -------------------------------------------------------------------
def test_bench_reads_thread_lists_and_lookup_variants_and_reports_per_thread_count():
    import argparse

    from specscope.core.commands import bench

    assert bench._thread_list("1,2,1") == [1, 2]
    with pytest.raises(argparse.ArgumentTypeError):
        bench._thread_list("1,x")
    assert bench_runs.LookupVariant.parse("earliest:2:1") == bench_runs.LookupVariant("earliest", 2, 1)
    with pytest.raises(ValueError):
        bench_runs.LookupVariant.parse("latest:2:1")
    assert bench._int_list("none") == []
    rows = []
    for threads in (1, 2):
        part = [bench_runs.RunRow(0, "plain", "p", "structured", 10, 1.0, token_ids=[1, 2]),
                bench_runs.RunRow(0, "adaptive (lookup policy)", "p", "structured", 10, 0.5, token_ids=[1, 2]),
                bench_runs.RunRow(0, "hf-lookup n=10", "p", "structured", 10, 0.8, token_ids=[1, 2])]
        bench_runs.compare_with_plain(part)
        for r in part:
            r.threads = threads
        rows += part
    assert rows[1].ratio_to_plain == pytest.approx(2.0) and rows[1].ratio_to_hf_lookup == pytest.approx(1.6)
    report = bench_report.markdown_report(rows, [], "pair", "cmd", 1, 10)
    assert "## 1 thread\n" in report and "## 2 threads\n" in report
    assert "× transformers' prompt lookup" in report
