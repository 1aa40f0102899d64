"""The bench's machinery on tiny random models (2 rounds, a few tokens): runs, ratios, checks, reports."""

from __future__ import annotations

import argparse
import csv

import pytest
import torch

from specscope.core.commands import bench, bench_report, bench_runs
from specscope.core.drafter_catalogue import DEMO_DRAFTER
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.pair import LoadedModel, ModelPair
from specscope.core.measure import costmodel
from tests.models import perturbed, tiny_model

VOCAB = 64


class DigitTokenizer:
    """Just enough tokenizer for the loop's token texts."""

    chat_template = None

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return " ".join(str(i) for i in ids)

    def __call__(self, text: str) -> dict[str, list[int]]:
        return {"input_ids": [int(t) % VOCAB for t in text.split()]}


@pytest.fixture(scope="module")
def pair() -> ModelPair:
    target = tiny_model(3, vocab_size=VOCAB, logit_scale=4.0)
    draft = perturbed(target, 0.05)
    cpu = torch.device("cpu")
    return ModelPair(
        target=LoadedModel(target, "tiny-target", cpu, torch.float32),
        tokenizer=DigitTokenizer(),
        drafter=ModelDrafter(draft, VOCAB, cpu),
        drafter_kind="model",
        draft=LoadedModel(draft, "tiny-draft", cpu, torch.float32),
        vocab_size=VOCAB,
        description="tiny random pair",
    )


PROMPTS = [bench_runs.BenchPrompt("p1", "prose", [1, 2, 3, 4, 5]),
           bench_runs.BenchPrompt("c1", "code", [9, 8, 7, 9, 8, 7])]


@pytest.fixture(scope="module")
def rows(pair: ModelPair) -> list[bench_runs.RunRow]:
    methods = bench_runs.default_methods([3], pair, lookup_tokens=3)
    return bench_runs.run_bench(pair, PROMPTS, methods, rounds=2, max_new_tokens=12, warmup=False)


def test_every_method_runs_on_every_prompt_every_round(rows: list[bench_runs.RunRow]):
    names = ["plain", "k=3", "adaptive", "heuristic", "hf-assisted k=3", "hf-lookup n=3"]
    assert {r.method for r in rows} == set(names)
    assert len(rows) == len(names) * len(PROMPTS) * 2
    assert all(r.tokens == 12 for r in rows)
    # the order rotates: round 2 does not start with the same method as round 1
    firsts = [next(r.method for r in rows if r.round == rnd) for rnd in (0, 1)]
    assert firsts[0] != firsts[1]


def test_greedy_outputs_all_identical_to_plain(rows: list[bench_runs.RunRow], pair: ModelPair):
    assert bench_runs.find_mismatches(rows, pair, PROMPTS) == []
    assert all(r.matches_plain for r in rows if r.method != "plain")


def test_ratios_and_acceptance_are_filled(rows: list[bench_runs.RunRow]):
    for r in rows:
        assert r.ratio_to_plain is not None and r.ratio_to_plain > 0
        if r.method in ("k=3", "adaptive", "heuristic"):
            assert r.alpha is not None and 0.0 <= r.alpha <= 1.0
            assert r.predicted_speedup is not None and r.measured_decode_speedup is not None
            assert r.tokens_per_pass is not None and 1.0 <= r.tokens_per_pass <= 4.0
    plain = [r for r in rows if r.method == "plain"]
    assert all(r.ratio_to_plain == 1.0 and r.tokens_per_pass == 1.0 for r in plain)
    k3 = [r for r in rows if r.method == "k=3"]
    assert all(r.mean_k is not None and r.mean_k <= 3.0 for r in k3)


def test_assistant_generation_config_is_restored(rows: list[bench_runs.RunRow], pair: ModelPair):
    assert pair.draft is not None
    gc = pair.draft.model.generation_config
    assert gc.num_assistant_tokens != 3 and gc.assistant_confidence_threshold != 0.0


def test_a_different_output_is_reported_with_its_first_position(rows: list[bench_runs.RunRow]):
    changed = [bench_runs.RunRow(**{**r.__dict__}) for r in rows if r.round == 0 and r.prompt_id == "p1"]
    victim = next(r for r in changed if r.method == "k=3")
    victim.token_ids = [*victim.token_ids[:5], (victim.token_ids[5] + 1) % VOCAB, *victim.token_ids[6:]]
    (m,) = bench_runs.find_mismatches(changed)
    assert (m.method, m.prompt_id, m.position) == ("k=3", "p1", 5)


def test_reports(rows: list[bench_runs.RunRow], tmp_path):
    summary = bench_report.summarize_methods(rows)
    assert [s.method for s in summary] == list(dict.fromkeys(r.method for r in rows))
    plain = next(s for s in summary if s.method == "plain")
    assert plain.ratio is not None and plain.ratio.value == pytest.approx(1.0) and plain.runs == 4
    k3 = next(s for s in summary if s.method == "k=3")
    assert k3.ratio is not None and k3.ratio.lo <= k3.ratio.value <= k3.ratio.hi and k3.ratio.n == 4
    assert plain.tps_min <= plain.tps_median <= plain.tps_max
    text = bench_report.markdown_report(rows, [], "tiny random pair", "specscope bench --rounds 2", 2, 12)
    assert "| adaptive |" in text and "prose | code" in text and "identical to plain decoding" in text
    path = tmp_path / "r.csv"
    bench_report.write_csv(rows, path)
    with path.open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == len(rows) and set(bench_report.CSV_FIELDS) == set(table[0])


def test_the_report_names_the_decode_rate_the_wall_rate_and_the_measurements_own_cost(rows: list[bench_runs.RunRow]):
    ours = [r for r in rows if not r.method.startswith("hf-")]
    assert ours and all(r.snapshot is not None for r in ours)
    for r in ours:
        assert r.measurement_overhead is not None and 0.0 <= r.measurement_overhead < 1.0
        assert r.decode_tokens_per_s is not None and r.wall_tokens_per_s is not None
        # the wall span holds every iteration and the time between them: never a higher rate (clock rounding aside)
        assert r.wall_tokens_per_s <= r.decode_tokens_per_s * 1.001
    assert all(r.snapshot is None and r.measurement_overhead is None for r in rows if r.method.startswith("hf-"))
    text = bench_report.markdown_report(rows, [], "tiny random pair", "cmd", 2, 12)
    section = text[text.index("Decode rate, wall rate and the measurement's own cost"):]
    section = section[:section.index("\n#")] if "\n#" in section else section
    assert "| method | decode tok/s | wall tok/s | measurement overhead |" in section
    assert "| k=3 |" in section and "| plain |" in section and "hf-" not in section


def test_costs_and_needed_alpha_come_from_the_runs_estimate(rows: list[bench_runs.RunRow]):
    k3 = [r for r in rows if r.method == "k=3"]
    assert k3 and all(r.cost_k == 3 and r.estimate is not None for r in k3)
    for r in k3:
        assert r.plain_step_ms and r.verify_ms and r.draft_ms and r.verify_ms > 0 and r.draft_ms > 0
        for goal in (1.0, 1.3):
            a = r.alpha_needed(goal)
            if a is None or a == 0.0:
                continue
            fixed = r.estimate.costs.fixed_ms or 0.0
            # the needed alpha, put back into the one cost model with the row's own costs, gives the goal
            tokens = costmodel.expected_tokens_per_iteration(a, 3)
            assert costmodel.speedup(tokens, r.plain_step_ms, r.draft_ms, r.verify_ms,
                                     fixed) == pytest.approx(goal, rel=1e-6)
        assert r.break_even_alpha == r.alpha_needed(1.0)
    assert all(r.estimate is None and r.verify_ms is None for r in rows if r.method == "plain")
    text = bench_report.markdown_report(rows, [], "tiny random pair", "cmd", 2, 12, goals=[1.3])
    section = text[text.index("Costs, and the α each k would need"):]
    assert "| α prose | α code | α for ×1.00 | α for ×1.30 |" in section
    assert "| k=3 |" in section and "| plain |" not in section


def test_command_line_rejects_bad_values():
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--k", "0,2"])
    with pytest.raises(SystemExit):
        parser.parse_args(["--k", "1,2", "--rounds", "0"])
    args = parser.parse_args(["--k", "1,2", "--rounds", "2"])
    assert args.k == [1, 2]
    assert bench.command_line(args).startswith(f"specscope bench --target demo --drafter {DEMO_DRAFTER}")
    assert "--k 1,2 --rounds 2" in bench.command_line(args)
    assert "--goals 1.25,1.5" in bench.command_line(args)
    for bad in ("0", "x", "1.2,-1", ""):
        with pytest.raises(SystemExit):
            parser.parse_args(["--goals", bad])
    assert parser.parse_args(["--goals", "1.15,1.3"]).goals == [1.15, 1.3]


def test_a_suffix_bench_runs_its_peers_and_fills_the_cache_only_with_earlier_prompts(
    pair: ModelPair, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specscope.core.engine.drafters.suffix import SuffixDrafter

    suffix_pair = ModelPair(target=pair.target, tokenizer=pair.tokenizer, drafter=SuffixDrafter(max_cached_requests=8),
                            drafter_kind="suffix", vocab_size=VOCAB, description="tiny target with suffix decoding")
    methods = bench_runs.default_methods([4], suffix_pair, heuristic=False, lookup_tokens=3)
    names = [m.name for m in methods]
    assert names == ["plain", "suffix k=4", "suffix k=4 no cache", "suffix adaptive",
                     "lookup adaptive (lookup policy)", "hf-lookup n=3"]
    seen: list[list[list[int]]] = []  # each suffix run's cache, in run order
    fresh = bench_runs.fresh_suffix_drafter

    def spy(like: object, earlier: list[list[int]]) -> object:
        drafter = fresh(like, earlier)  # type: ignore[arg-type]
        tree = drafter.cache.tree  # type: ignore[attr-defined]
        seen.append([tree.sequence(s) for s in tree.sequence_ids()])
        return drafter

    monkeypatch.setattr(bench_runs, "fresh_suffix_drafter", spy)
    prompts = [*PROMPTS, bench_runs.BenchPrompt("p2", "prose", [1, 2, 3, 4, 6])]
    rows = bench_runs.run_bench(suffix_pair, prompts, methods, rounds=2, max_new_tokens=10, warmup=False)
    assert not bench_runs.find_mismatches(rows)
    plain = {(r.round, r.prompt_id): r.token_ids for r in rows if r.method == "plain"}
    # per round and prompt: 3 suffix runs (k=4, no cache, adaptive), in the rotated order
    runs = iter(seen)
    for rnd in range(2):
        for i in range(len(prompts)):
            caches = [next(runs) for _ in range(3)]
            earlier = [plain[(rnd, q.id)] for q in prompts[:i]]
            assert sorted(map(len, caches)) == sorted([0, len(earlier), len(earlier)])  # no cache: empty
            assert all(c in ([], earlier) for c in caches)  # never this prompt's own answer
    assert all(r.ratio_to_hf_lookup is not None for r in rows if r.method != "hf-lookup n=3")


def test_a_prompt_kind_can_be_cut_to_its_first_n_beyond_the_limit() -> None:
    chosen = bench.choose_bench_prompts("prose,repeated-task:4", limit=1)
    assert [p.kind for p in chosen] == ["prose", *["repeated-task"] * 4]
    every = bench.choose_bench_prompts("repeated-task")
    assert [p.id for p in chosen[1:]] == [p.id for p in every[:4]]
    with pytest.raises(ValueError, match="unknown prompt kind"):
        bench.choose_bench_prompts("telepathy:3")
