"""specscope verify: the draw machinery has power against wrong rules, and the report on a real tiny pair."""

from __future__ import annotations

import argparse
import json
import math

import pytest
import torch

from specscope.core.commands import verify
from specscope.core.commands.verify import verify_pair
from specscope.core.commands.verify_statistics import (
    RULES,
    chi2_sf,
    chi_square_top,
    simulate_first_token,
    total_variation,
    wrong_rule_gaps,
)
from specscope.core.engine.models import load_pair
from specscope.core.engine.pair_spec import PairSpec
from specscope.core.prompts import PROMPT_KINDS, Prompt, load_prompt_sets
from specscope.core.records import ControlValues
from tests.models import perturbed, save_model_dir, tiny_model, word_tokenizer


@pytest.mark.parametrize("stat", [0.0, 0.3, 4.0, 12.0, 95.0])
def test_chi2_survival_with_two_degrees_is_exp_of_minus_half(stat: float) -> None:
    # with 2 degrees of freedom the chi-square survival function is exp(-x/2) exactly
    assert chi2_sf(stat, 2) == pytest.approx(math.exp(-stat / 2.0), rel=1e-12)


def test_chi2_survival_falls_with_the_statistic_and_rises_with_the_degrees() -> None:
    assert chi2_sf(0.0, 5) == 1.0 and chi2_sf(math.inf, 5) == 0.0
    assert chi2_sf(3.0, 5) > chi2_sf(6.0, 5) > chi2_sf(60.0, 5) > 0.0
    assert chi2_sf(10.0, 5) < chi2_sf(10.0, 10) < chi2_sf(10.0, 20)
    assert chi2_sf(59.0, 60) > 0.5 > chi2_sf(95.0, 60)  # the median of chi-square(60) is about 59.3


def test_chi_square_top_passes_matching_counts_and_fails_far_ones() -> None:
    p = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
    assert chi_square_top(torch.tensor([500.0, 300.0, 200.0]), p).pvalue == pytest.approx(1.0)
    assert chi_square_top(torch.tensor([300.0, 300.0, 400.0]), p).pvalue < 1e-12


def far_apart(vocab: int = 200) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    p = torch.softmax(2.0 * torch.randn(vocab, generator=g, dtype=torch.float64), 0)
    q = torch.softmax(2.0 * torch.randn(vocab, generator=g, dtype=torch.float64), 0)
    return p, q


def test_draws_accept_the_right_rule_and_catch_both_wrong_ones() -> None:
    p, q = far_apart()
    assert total_variation(p, q) > 0.4
    g = torch.Generator().manual_seed(1)
    pvalues = {rule: chi_square_top(simulate_first_token(p, q, 200_000, rule, g), p).pvalue
               for rule in RULES}
    assert pvalues["correct"] > 1e-3
    assert pvalues["resample-from-p"] < 1e-6 and pvalues["keep-draft"] < 1e-6


def test_wrong_rule_gaps_match_the_draws_and_vanish_where_rules_coincide() -> None:
    p, q = far_apart()
    overlap = torch.minimum(p, q)
    resample_out = overlap + (1 - overlap.sum()) * p  # what resampling from p after a rejection emits
    g = torch.Generator().manual_seed(3)
    counts = simulate_first_token(p, q, 200_000, "resample-from-p", g)
    assert chi_square_top(counts, resample_out).pvalue > 1e-3
    gaps = wrong_rule_gaps(p, q)
    assert gaps["resample-from-p"] == pytest.approx(total_variation(resample_out, p))
    assert gaps["keep-draft"] == pytest.approx(total_variation(p, q))
    never = torch.zeros_like(p)
    never[int(torch.argmin(p))] = 1.0  # a proposal the target (almost) never accepts: rules coincide
    assert wrong_rule_gaps(p, never)["resample-from-p"] < 1e-3


def test_a_deterministic_draft_is_exact_with_the_residual() -> None:
    p, _ = far_apart(50)
    q = torch.zeros(50, dtype=torch.float64)
    q[int(torch.argsort(p)[-2])] = 1.0  # the target's second choice, proposed every time
    g = torch.Generator().manual_seed(2)
    assert chi_square_top(simulate_first_token(p, q, 100_000, "correct", g), p).pvalue > 1e-3
    assert chi_square_top(simulate_first_token(p, q, 100_000, "resample-from-p", g), p).pvalue < 1e-6


def test_chi_square_pools_the_tail_and_flags_impossible_tokens() -> None:
    p = torch.tensor([0.5, 0.3, 0.2 - 1e-6, 1e-6, 0.0])
    counts = torch.tensor([500, 300, 200, 0, 0])
    ok = chi_square_top(counts, p, top_n=2)
    assert ok.df == 2 and ok.pvalue > 0.5  # two top bins + pooled remainder
    assert chi_square_top(torch.tensor([500, 300, 199, 0, 1]), p).pvalue == 0.0


def test_prompt_sets_are_shipped() -> None:
    sets = load_prompt_sets()
    assert set(sets) == set(PROMPT_KINDS)
    for kind, prompts in sets.items():
        assert len(prompts) >= 5 and all(p.kind == kind and len(p.text) > 40 for p in prompts)
    ids = [p.id for ps in sets.values() for p in ps]
    assert len(ids) == len(set(ids))
    chosen = verify.select_prompts("code,prose", limit=2)
    assert [p.kind for p in chosen] == ["code", "code", "prose", "prose"]
    with pytest.raises(ValueError, match="unknown prompt set 'poetry'"):
        verify.select_prompts("poetry")


@pytest.fixture(scope="module")
def tiny_pair_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("verify")
    target = tiny_model(31, vocab_size=64, layers=2, logit_scale=2.5)
    save_model_dir(root / "t", target, word_tokenizer())
    save_model_dir(root / "d", perturbed(target, 0.3), word_tokenizer())
    return root


PROMPTS = [Prompt("a", "custom", "a", "w5 w6 w7 w5 w6"), Prompt("b", "custom", "b", "w40 w41 w42 w43")]


def test_verify_pair_reports_equality_pvalues_and_tv(tiny_pair_dir) -> None:
    pair = load_pair(PairSpec(str(tiny_pair_dir / "t"), str(tiny_pair_dir / "d")))
    pair.eos_token_ids = frozenset()  # a random model says </s> early; fixed lengths keep the test simple
    report = verify_pair(pair, PROMPTS, k_values=(1, 3), max_new_tokens=12, context_offsets=(0, 4),
                         draws=50_000, sampling=ControlValues(temperature=1.0))
    assert [(g.prompt_id, g.k) for g in report.greedy] == [("a", 1), ("a", 3), ("b", 1), ("b", 3)]
    assert report.greedy_ok and all(g.n_tokens == 12 for g in report.greedy)
    assert len(report.sampling) == 4 and report.sampling_ok and report.ok
    contexts = [s.context_len for s in report.sampling]
    assert contexts == [5, 9, 4, 8]
    assert all(0.0 < s.tv < 1.0 and set(s.pvalues) == set(RULES) for s in report.sampling)
    big = [s for s in report.sampling if s.tv > 0.3]
    assert big and all(s.wrong_rules_caught(1e-3) for s in big)
    assert all(s.gaps["keep-draft"] == pytest.approx(s.tv) for s in report.sampling)
    assert report.lines()[-1] == "Result: speculation keeps the target's output"


def test_verify_with_prompt_lookup_reports_plain_steps(tiny_pair_dir) -> None:
    pair = load_pair(PairSpec(str(tiny_pair_dir / "t"), drafter="lookup"))
    report = verify_pair(pair, PROMPTS, k_values=(4,), max_new_tokens=10, context_offsets=(0,), draws=20_000)
    assert report.ok
    repeat, fresh = report.sampling  # "w5 w6" repeats in prompt a; prompt b has no repeat to look up
    assert repeat.pvalues and repeat.tv > 0.0
    assert not fresh.pvalues and "proposes nothing" in fresh.note


def test_command_line(tiny_pair_dir, tmp_path, capsys) -> None:
    prompts = tmp_path / "mine.json"
    one = {"id": "x", "title": "x", "text": "w9 w8 w9"}
    prompts.write_text(json.dumps({"kind": "custom", "prompts": [one]}))
    parser = argparse.ArgumentParser()
    verify.add_arguments(parser)
    out_json = tmp_path / "report.json"
    args = parser.parse_args(["--target", str(tiny_pair_dir / "t"), "--draft", str(tiny_pair_dir / "d"),
                              "--prompts", str(prompts), "--k", "2", "--max-new-tokens", "6",
                              "--draws", "20000", "--json", str(out_json)])
    assert verify.main(args) == 0
    assert "Greedy: 1 of 1 speculative runs identical" in capsys.readouterr().out
    assert json.loads(out_json.read_text())["ok"] is True
    bad = parser.parse_args(["--target", str(tmp_path / "missing"), "--drafter", "lookup"])
    from specscope.core.commands.cli_checks import CliError

    with pytest.raises(CliError) as err:  # one sentence; the CLI's error path prints it and exits 2
        verify.main(bad)
    assert err.value.exit_code == 2 and "no model directory" in str(err.value)


def test_a_greedy_difference_is_explained_with_its_gap(tiny_pair_dir) -> None:
    pair = load_pair(PairSpec(str(tiny_pair_dir / "t"), drafter="lookup"))
    detail = verify._near_tie_detail(pair, [5, 6, 7], [9, 10, 11], [9, 12, 11], 1)
    assert detail.startswith("outputs differ at position 1: 10 'w10' vs 12 'w12'") and "ulp" in detail
