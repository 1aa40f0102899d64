"""Suffix decoding: the trie's counts, the proposal's stopping rule, the bounded cross-run cache, and that the
loop stays exact with it (greedy equality, sampling distribution)."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
import torch

from specscope.core.controls import Controls
from specscope.core.engine.drafters.suffix import ResponseCache, SuffixDrafter, check_suffix_parameters
from specscope.core.engine.drafters.suffix_tree import NO_NODE, ROOT, SuffixDraft, SuffixTree
from specscope.core.engine.sampling import processed_probs
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.measure.adaptive_suffix import SuffixLengthPolicy
from specscope.core.measure.measurement import Measurement
from specscope.core.records import BaselineRecord, ControlValues, IterationRecord, TokenStatus
from tests.loop_helpers import run_fed
from tests.models import tiny_model
from tests.stats import chi_square_pvalue

V8 = 8


def substring_counts(seqs: list[list[int]], depth: int) -> Counter[tuple[int, ...]]:
    """Reference: every substring of length 1..depth of each sequence, counted."""
    out: Counter[tuple[int, ...]] = Counter()
    for seq in seqs:
        for start in range(len(seq)):
            for n in range(1, depth + 1):
                if start + n <= len(seq):
                    out[tuple(seq[start : start + n])] += 1
    return out


def trie_counts(tree: SuffixTree) -> Counter[tuple[int, ...]]:
    out: Counter[tuple[int, ...]] = Counter()
    stack: list[tuple[int, tuple[int, ...]]] = [(ROOT, ())]
    while stack:
        node, path = stack.pop()
        for token, child in tree.children(node):
            out[(*path, token)] = tree.count(child)
            stack.append((child, (*path, token)))
    return out


# ---- the trie ---------------------------------------------------------------------------------------
def test_counts_are_substring_occurrences_and_removal_takes_them_back() -> None:
    rng = random.Random(1)
    depth = 5
    tree = SuffixTree(depth)
    seqs: dict[int, list[int]] = {}
    for seq_id in range(6):
        seqs[seq_id] = [rng.randrange(4) for _ in range(rng.randrange(5, 40))]
        for t in seqs[seq_id]:  # token by token, as a run grows
            tree.append(seq_id, t)
    assert trie_counts(tree) == substring_counts(list(seqs.values()), depth)
    assert tree.n_tokens == sum(len(s) for s in seqs.values())
    for seq_id in (2, 0, 5):
        tree.remove(seq_id)
        del seqs[seq_id]
        assert trie_counts(tree) == substring_counts(list(seqs.values()), depth)
    fresh = SuffixTree(depth)
    for seq_id, seq in seqs.items():
        fresh.extend(seq_id, seq)
    assert tree.n_nodes == fresh.n_nodes  # freed nodes are really gone, not left behind with count 0
    for seq_id in list(seqs):
        tree.remove(seq_id)
    assert tree.n_nodes == 1 and tree.n_tokens == 0


# ---- the proposal's stopping rule ---------------------------------------------------------------------
def hand_built() -> SuffixTree:
    """After "1 2", 3 followed four times and 4 once; after "1 2 3", 5 three times and 6 once."""
    tree = SuffixTree(8)
    for i, tail in enumerate(([3, 5, 7], [3, 5, 7], [3, 5, 8], [3, 6], [4])):
        tree.extend(i, [1, 2, *tail])
    return tree


def test_the_draft_follows_the_most_frequent_child_and_carries_the_product_of_count_ratios() -> None:
    tree = hand_built()
    node = tree.match([1, 2])
    assert node != NO_NODE and tree.count(node) == 5
    draft = tree.best_path(node, 10, 0.0)
    assert draft.tokens == [3, 5, 7]
    assert draft.probs == pytest.approx([4 / 5, 4 / 5 * 3 / 4, 4 / 5 * 3 / 4 * 2 / 3])
    assert draft.score == pytest.approx(sum(draft.probs))  # expected accepted tokens


def test_drafting_stops_below_the_minimum_probability() -> None:
    tree = hand_built()
    node = tree.match([1, 2])
    assert tree.best_path(node, 10, 0.5).tokens == [3, 5]  # 7 would have 0.4
    assert tree.best_path(node, 10, 0.6).tokens == [3, 5]  # 0.6 itself passes
    assert tree.best_path(node, 10, 0.61).tokens == [3]
    assert tree.best_path(node, 10, 0.81).tokens == []


def test_the_length_is_capped_by_match_length_times_the_factor_by_k_and_by_depth() -> None:
    tree = hand_built()
    draft = tree.speculate([9, 1, 2], 10, 1.0, 0.0)  # "9 1 2" never occurred: the match is "1 2"
    assert (draft.match_len, draft.tokens) == (2, [3, 5])  # 2 tokens matched x factor 1.0
    assert tree.speculate([9, 1, 2], 10, 1.5, 0.0).tokens == [3, 5, 7]  # floor(2 x 1.5) = 3
    assert tree.speculate([9, 1, 2], 1, 4.0, 0.0).tokens == [3]  # k
    shallow = SuffixTree(3)  # substrings of up to 3 tokens: after a 2-token match, one more level
    for i, tail in enumerate(([3, 5, 7], [3, 5, 7])):
        shallow.extend(i, [1, 2, *tail])
    assert shallow.best_path(shallow.match([1, 2]), 10, 0.0).tokens == [3]
    draft = shallow.speculate([1, 2], 10, 4.0, 0.0)  # the 1-token match "2" reaches further, and wins
    assert (draft.match_len, draft.tokens) == (1, [3, 5])


def test_the_highest_expected_accepted_count_wins_over_match_lengths() -> None:
    # After "2" alone: 9 (three times) beats 3 (twice); after "1 2": always 3, 4.
    tree = SuffixTree(8)
    for i, seq in enumerate(([1, 2, 3, 4], [1, 2, 3, 4], [2, 9], [2, 9], [2, 9])):
        tree.extend(i, seq)
    one = tree.speculate([2], 10, 4.0, 0.0)
    assert one.tokens == [9] and one.score == pytest.approx(3 / 5)
    both = tree.speculate([1, 2], 10, 4.0, 0.0)
    assert (both.tokens, both.match_len) == ([3, 4], 2) and both.score == pytest.approx(2.0)


def test_a_run_that_never_matches_proposes_nothing_without_the_backoff() -> None:
    d = SuffixDrafter(backoff=False)
    context = list(range(10, 40))  # no token repeats, and the cache is empty
    d.reset(context[:5])
    for end in range(5, len(context)):
        proposal = d.propose(context[:end], 8, ControlValues(), None)
        assert proposal.tokens == [] and proposal.match_ngram == 0 and proposal.expected_accepted is None


# ---- the backoff: the run's most frequent token when nothing matches ----------------------------------------
def test_the_backoff_proposes_the_runs_most_frequent_token_when_nothing_matches() -> None:
    d = SuffixDrafter()  # on by default
    d.reset([5, 6, 5, 7, 6, 5])  # 5 three times, 6 twice, 7 once
    proposal = d.propose([5, 6, 5, 7, 6, 5, 9], 8, ControlValues(), None)  # 9 never occurred
    assert proposal.tokens == [5] and proposal.match_ngram == 0 and d.last_source == "backoff"
    assert proposal.q_probs is None and proposal.q_token_probs == [1.0]
    assert proposal.expected_accepted == pytest.approx(3 / 7)  # its frequency among the run's 7 tokens
    assert d.last_draft.conditional == pytest.approx([3 / 8])  # shrunk as a drafted token's count ratio is
    # the run's own text keeps counting: 6 overtakes 5 (ties keep the first to reach the count)
    context = [5, 6, 5, 7, 6, 5, 9, 6, 8, 6, 4]
    assert d.propose(context, 8, ControlValues(), None).tokens == [6]
    assert d.last_draft.score == pytest.approx(4 / 11)
    assert d.propose(context, 0, ControlValues(), None).tokens == []  # k = 0: nothing, guess or not


def test_the_backoff_never_replaces_a_match() -> None:
    d = SuffixDrafter(max_spec_factor=2.0)
    d.reset([5, 6, 7, 5, 5, 5])
    assert d.propose([5, 6, 7, 5, 5, 5, 6], 8, ControlValues(), None).tokens == [7, 5, 5, 5]  # "5 6" matched
    assert d.last_source == "run"
    d.cache.add([9, 4, 4])
    assert d.propose([5, 6, 7, 5, 5, 5, 6, 9], 8, ControlValues(), None).tokens == [4, 4]
    assert d.last_source == "cache"  # only the cache knows "9": its draft, not the guess
    off = SuffixDrafter(backoff=False)
    off.reset([])
    assert off.propose([3], 8, ControlValues(), None).tokens == []
    empty = SuffixDrafter()
    empty.reset([])
    assert empty.speculate([], 8).tokens == []  # no token yet: nothing to guess


def test_the_drafter_reports_what_it_matched() -> None:
    d = SuffixDrafter(max_spec_factor=2.0)
    d.reset([5, 6, 7, 8, 5, 6])
    proposal = d.propose([5, 6, 7, 8, 5, 6], 8, ControlValues(temperature=1.0), None)
    assert proposal.tokens == [7, 8, 5, 6] and proposal.match_ngram == 2 and d.last_source == "run"
    assert proposal.q_probs is None and proposal.q_token_probs == [1.0] * 4  # q: a point mass on the proposal
    # "5 6" occurred twice (once at the end, with no continuation yet): 1/2 for each drafted token
    assert proposal.expected_accepted == pytest.approx(4 * 0.5)


def test_the_backoff_is_on_by_default_and_the_cli_turns_it_off() -> None:
    import argparse

    from specscope.core.commands import bench
    from specscope.core.commands.pair_arguments import add_pair_arguments, spec_from_args

    parser = argparse.ArgumentParser()
    add_pair_arguments(parser)
    on = spec_from_args(parser.parse_args(["--demo", "--drafter", "suffix"]))
    off = spec_from_args(parser.parse_args(["--demo", "--drafter", "suffix", "--suffix-no-backoff"]))
    assert (on.suffix_backoff, off.suffix_backoff) == (True, False)
    assert (SuffixDrafter.from_spec(on).backoff, SuffixDrafter.from_spec(off).backoff) == (True, False)
    bench_parser = argparse.ArgumentParser()
    bench.add_arguments(bench_parser)
    lines = [bench.command_line(bench_parser.parse_args(["--drafter", "suffix", *extra]))
             for extra in ([], ["--suffix-no-backoff"])]
    assert "--suffix-no-backoff" not in lines[0] and "--suffix-no-backoff" in lines[1]  # the bench's reproduction
    from specscope.core.commands.bench_runs import fresh_suffix_drafter

    for backoff in (True, False):  # each bench run's drafter is a fresh copy of the pair's, the backoff included
        assert fresh_suffix_drafter(SuffixDrafter(backoff=backoff), [[1, 2]]).backoff is backoff  # type: ignore[attr-defined]


# ---- the cross-run cache ------------------------------------------------------------------------------
def test_the_cache_holds_earlier_responses_only_and_stays_bounded() -> None:
    d = SuffixDrafter(max_cached_requests=2, backoff=False)
    responses = [[40 + i, 50 + i, 60 + i, 70 + i] for i in range(4)]
    for response in responses:
        d.reset([1, 2])
        # the run's own answer is not in the cache while it runs
        assert d.propose([1, 2, *response[:2]], 4, ControlValues(), None).tokens == []
        d.propose([1, 2, *response], 4, ControlValues(), None)  # the run commits its response
    d.reset([1, 2])  # the last response enters the cache here
    assert len(d.cache) == 2
    assert [d.cache.tree.sequence(s) for s in d.cache.tree.sequence_ids()] == responses[2:]
    fresh = SuffixTree(d.max_tree_depth)
    for i, response in enumerate(responses[2:]):
        fresh.extend(i, response)
    assert d.cache.tree.n_nodes == fresh.n_nodes  # evicted responses left nothing behind
    # a new run that repeats an earlier answer draws on the cache; an evicted answer is gone
    assert d.propose([1, 2, 43, 53], 4, ControlValues(), None).tokens == [63, 73]
    assert d.last_source == "cache"
    assert d.propose([1, 2, 43, 53, 41, 51], 4, ControlValues(), None).tokens == []


def test_no_cache_when_max_cached_requests_is_zero() -> None:
    cache = ResponseCache(8, 0)
    cache.add([1, 2, 3])
    assert len(cache) == 0 and cache.tree.n_nodes == 1


@pytest.mark.parametrize(("args", "message"), [
    ((1, 1.0, 0.1, 4), "max_tree_depth"), ((8, 0.0, 0.1, 4), "max_spec_factor"),
    ((8, float("nan"), 0.1, 4), "max_spec_factor"), ((8, 1.0, 1.5, 4), "min_token_prob"),
    ((8, 1.0, 0.1, -1), "max_cached_requests"),
])
def test_parameters_out_of_range_are_refused(args: tuple[int, float, float, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_suffix_parameters(*args)


# ---- exactness through the loop -----------------------------------------------------------------------
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [7, 7, 8, 7, 7, 8, 7], [11, 12, 13, 11, 12, 13, 20, 11]]


@pytest.mark.parametrize("k", [1, 3, 8])
def test_greedy_output_equals_plain_decoding_with_the_cache_filling(k: int) -> None:
    target = tiny_model(21, vocab_size=64, layers=3, logit_scale=3.0)
    drafter = SuffixDrafter(max_spec_factor=2.0, max_cached_requests=4)
    dec = Decoder(target, 64, drafter=drafter)
    accepted = guesses = 0
    for rnd in range(2):  # the second round finds the first round's answers in the cache
        for prompt in PROMPTS:
            opts = DecodeOptions(max_new_tokens=30)
            spec = dec.run(prompt, Controls(ControlValues(k=k)), opts)
            assert spec.token_ids == dec.run(prompt, options=opts, plain=True).token_ids, (rnd, prompt)
            accepted += sum(t.status is TokenStatus.ACCEPTED for r in spec.iterations for t in r.tokens)
            matched = [r for r in spec.iterations if r.n_drafted]
            assert all(r.expected_accepted is not None and r.expected_accepted > 0
                       for r in matched)  # what the proposal matched is on the record
            # a draft without a match is the backoff's one-token guess
            guesses += sum(not r.match_len for r in matched)
            assert all(r.n_drafted == 1 for r in matched if not r.match_len)
            assert all(r.match_len is None and r.expected_accepted is None
                       for r in spec.iterations if not r.n_drafted and r.generated_len < 30)
    assert accepted > 0 and guesses > 0  # the drafter was really exercised, the backoff too
    assert len(drafter.cache) == 4


@pytest.mark.slow
def test_sampling_stays_exact_with_the_cross_run_cache() -> None:
    model = tiny_model(10, vocab_size=V8, logit_scale=1.5)
    controls = ControlValues(k=2, temperature=0.9, top_p=0.95)
    prompt = [2, 5, 7, 2, 5]
    drafter = SuffixDrafter(max_spec_factor=1.0, max_cached_requests=16)
    drafter.reset(prompt)
    assert drafter.propose(prompt, 2, controls, None).tokens == [7, 2]
    with torch.no_grad():
        p7 = float(processed_probs(model(torch.tensor([prompt])).logits[0, -1], controls)[0, 7])
        joint = np.zeros((V8, V8))
        p1 = processed_probs(model(torch.tensor([prompt])).logits[0, -1], controls)[0]
        for a in range(V8):
            p2 = processed_probs(model(torch.tensor([[*prompt, a]])).logits[0, -1], controls)[0]
            joint[a] = float(p1[a]) * p2.numpy()
    assert 0.05 < p7 < 0.95  # the proposal is accepted only sometimes: the rule is really tested
    dec = Decoder(model, V8, drafter=drafter)
    counts = np.zeros((V8, V8))
    for seed in range(3000):  # each run's answer joins the cache: later proposals depend on earlier samples
        ids = dec.run(prompt, Controls(controls), DecodeOptions(max_new_tokens=2, seed=seed,
                                                                record_tokens=False)).token_ids
        counts[ids[0], ids[1]] += 1
    assert len(drafter.cache) == 16
    assert chi_square_pvalue(counts, joint) > 1e-3


def test_what_the_proposal_matched_survives_a_trace_round_trip(tmp_path) -> None:
    from specscope.core.trace.files import read_trace, write_trace

    target = tiny_model(21, vocab_size=64, layers=3, logit_scale=3.0)
    dec = Decoder(target, 64, drafter=SuffixDrafter(max_spec_factor=2.0))
    records = dec.run(PROMPTS[1], Controls(ControlValues(k=4)), DecodeOptions(max_new_tokens=20)).iterations
    assert any(r.match_len for r in records)
    write_trace(tmp_path / "run.csv", records)
    loaded = read_trace(tmp_path / "run.csv").records
    assert [(r.match_len, r.expected_accepted) for r in loaded] == [
        (r.match_len, pytest.approx(r.expected_accepted) if r.expected_accepted is not None else None)
        for r in records]


# ---- following the context incrementally -----------------------------------------------------------------
def test_matches_followed_token_by_token_equal_matching_from_the_root() -> None:
    """The drafter keeps the matched nodes of both trees as the context grows; what it proposes from them is
    what a walk from the root over the context's last tokens would propose, through cache changes and a
    context that is not an extension (rebuilt)."""
    rng = random.Random(3)
    d = SuffixDrafter(max_tree_depth=6, max_spec_factor=2.0, min_token_prob=0.0, max_cached_requests=3,
                      backoff=False)
    for _ in range(5):
        context = [rng.randrange(5) for _ in range(8)]
        d.reset(context)
        for _ in range(40):
            context = context + [rng.randrange(5) for _ in range(rng.randrange(1, 4))]
            if rng.random() < 0.1:
                context = context[:-5]  # not an extension of what the drafter saw
            draft = d.speculate(context, 5)
            pattern = context[-d.max_tree_depth :]
            assert d._cache_nodes() == d.cache.tree.match_suffixes(pattern)
            local = d._local.speculate(pattern, 5, 2.0, 0.0)
            cached = d.cache.tree.speculate(pattern, 5, 2.0, 0.0) if len(d.cache) else local
            expected = cached if cached.tokens and (not local.tokens or cached.match_len > local.match_len) else local
            assert (draft.tokens, draft.match_len) == (expected.tokens, expected.match_len)
        d.rollback(context)
    assert len(d.cache) == 3


def test_the_conditional_of_each_drafted_token_is_its_count_ratio_shrunk() -> None:
    tree = hand_built()
    draft = tree.best_path(tree.match([1, 2]), 10, 0.0)
    # "1 2" 5 times, "1 2 3" 4 times, "1 2 3 5" 3 times, "1 2 3 5 7" twice
    assert draft.conditional == pytest.approx([4 / 6, 3 / 5, 2 / 4])
    once = SuffixTree(8)
    once.extend(0, [1, 2, 3])
    assert once.best_path(once.match([1]), 10, 0.0).conditional == pytest.approx([1 / 2, 1 / 2])


def test_the_runs_own_draft_wins_unless_the_cache_matched_a_longer_stretch() -> None:
    d = SuffixDrafter(max_spec_factor=4.0, min_token_prob=0.0)
    d.cache.add([7, 8, 9, 1, 1, 1])  # an earlier answer: after "8 9" came 1
    d.cache.add([8, 9, 1])
    d.reset([5, 9, 4, 5])  # this run: after "9" came 4
    assert d.propose([5, 9, 4, 5, 9], 4, ControlValues(), None).tokens[:1] == [4]
    assert d.last_source == "run"  # equal match lengths (1): the run's own text, though the cache's counts are higher
    assert d.propose([5, 9, 4, 5, 9, 4, 8, 9], 4, ControlValues(), None).tokens[:1] == [1]
    assert d.last_source == "cache"  # the cache matched "8 9", longer than the run's "9"


# ---- adaptive k by the draft's own count ratios -------------------------------------------------------------
def suffix_policy(verify: dict[int, float], conditional: list[float]) -> SuffixLengthPolicy:
    """A policy whose measurement knows the verify costs and one judged proposal (the draft's cost), and
    whose drafter just drafted tokens with these conditionals."""
    measurement = Measurement(window=64)
    for _ in range(3):  # every pass length measured often enough to be trusted (no exploring)
        measurement.feed(BaselineRecord(0, 10, [verify[1]] * 3, verify_ms_by_len=dict(verify)))
    drafter = SuffixDrafter()
    policy = SuffixLengthPolicy(measurement, drafter)
    probe = IterationRecord(
        iteration=0, mode="speculative", drafter="suffix", controls=ControlValues(k=1, adaptive_k=True), tokens=[],
        n_drafted=1, n_accepted=1, n_emitted=2, draft_ms=0.01, verify_ms=verify[2], rollback_ms=0.1,
        iteration_ms=verify[2] + 0.11, context_len=0, generated_len=0, t_start_s=0.0, t_end_s=0.0)
    measurement.feed(probe)
    policy.observe(probe)
    drafter.last_draft = SuffixDraft(tokens=list(range(len(conditional))), conditional=conditional)
    return policy


STEEP = {n: 10.0 + 8.0 * (n - 1) for n in range(1, 18)}  # a 2-token pass costs 1.8 plain steps
FLAT = {n: 10.0 for n in range(1, 18)}


def test_the_suffix_policy_sends_what_pays_at_the_measured_verify_costs() -> None:
    likely = [0.95, 0.9, 0.9, 0.3, 0.3, 0.3]
    assert suffix_policy(FLAT, likely).proposal_length(3, 6) == 6  # free to verify: everything
    steep = suffix_policy(STEEP, likely)
    n = steep.proposal_length(3, 6)
    assert 1 <= n <= 3  # the unlikely tail never pays for its pass
    assert steep.scores[n] == max(steep.scores.values()) and steep.scores[n] > steep.scores[0]
    unlikely = suffix_policy(STEEP, [0.2, 0.2, 0.2])
    assert unlikely.proposal_length(1, 3) <= 1  # nothing pays: no more than a probe
    assert unlikely.scores[0] > unlikely.scores[1]


def test_the_suffix_policy_sends_the_backoff_guess_only_where_its_pass_costs_no_more() -> None:
    guess = [0.05]  # the backoff's token: the run's commonest, right about one time in twenty
    flat = suffix_policy(FLAT, guess)
    assert flat.proposal_length(0, 1) == 1 and flat.scores[1] > flat.scores[0]
    steep = suffix_policy(STEEP, guess)
    assert steep.proposal_length(0, 1) == 1  # a match size never judged is probed once ...
    assert steep.scores[1] < steep.scores[0]  # ... though at 1.8 plain steps for its pass the guess does not pay
    steep.observe(rejected_guess(STEEP))
    assert [steep.proposal_length(0, 1) for _ in range(2)] == [0, 0]  # then it is left alone while it fails


def rejected_guess(verify: dict[int, float]) -> IterationRecord:
    return IterationRecord(
        iteration=1, mode="speculative", drafter="suffix", controls=ControlValues(k=1, adaptive_k=True), tokens=[],
        n_drafted=1, n_accepted=0, n_emitted=1, draft_ms=0.01, verify_ms=verify[2], rollback_ms=0.1,
        iteration_ms=verify[2] + 0.11, context_len=0, generated_len=0, t_start_s=0.0, t_end_s=0.0)


def test_the_suffix_policy_keeps_the_loop_exact() -> None:
    target = tiny_model(21, vocab_size=64, layers=3, logit_scale=3.0)
    drafter = SuffixDrafter(max_cached_requests=4)
    measurement = Measurement(window=64)
    dec = Decoder(target, 64, drafter=drafter, k_policy=SuffixLengthPolicy(measurement, drafter))
    drafted = 0
    for prompt in PROMPTS * 2:  # the second time round the cache holds the first answers
        opts = DecodeOptions(max_new_tokens=30)
        spec = run_fed(dec, prompt, Controls(ControlValues(k=8, adaptive_k=True)), opts, measurement)
        assert spec.token_ids == dec.run(prompt, options=opts, plain=True).token_ids, prompt
        drafted += spec.n_drafted
    assert drafted > 0  # it proposed once the plain step was measured
