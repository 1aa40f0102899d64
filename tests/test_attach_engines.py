"""Attach against vLLM's and SGLang's wire formats (issue 38): one test per case of the issue's table, each
checking specscope's figures against the truth the simulated engine served, or that the user is told in one
line that they are estimates and why. The fakes (tests/fake_serving.py) follow the engines' released source."""

from __future__ import annotations

import json

import pytest

from specscope.core.attach.client import AttachResult, attach
from specscope.core.attach.options import AttachOptions
from specscope.core.attach.passes import PROMPT_PASS_FLAG
from specscope.core.attach.prometheus import parse_counters
from specscope.core.attach.reconcile import COUNTERS
from specscope.core.attach.request_metrics import SGLANG_DETAILS, VLLM_DETAILED, VLLM_SUMMARY
from specscope.core.trace.files import read_trace
from tests.cli_helpers import cli
from tests.fake_serving import Engine, FakeSglang, FakeVllm, SglangState, Step, steps_of

K = 3


def _attach(url: str, max_tokens: int = 512) -> AttachResult:
    return attach(AttachOptions(url=url, prompt="Count", max_tokens=max_tokens, timeout_s=30.0,
                                scrape_interval_s=0.05))


def truth(steps: list[Step]) -> dict[str, object]:
    """What the engine did for our request, in every definition shown."""
    drafting = [s for s in steps if s.drafted]
    drafted = sum(s.drafted for s in drafting)
    accepted = sum(s.accepted for s in drafting)
    judged = sum(s.accepted + (s.accepted < s.drafted) for s in drafting)
    depth = max(s.drafted for s in drafting)
    return {
        "drafts": len(drafting), "drafted": drafted, "accepted": accepted, "alpha": accepted / judged,
        "draft_acceptance_rate": accepted / drafted, "mean_acceptance_length": 1 + accepted / len(drafting),
        "per_position": [sum(s.accepted > i for s in drafting) / sum(s.drafted > i for s in drafting)
                         for i in range(depth)],
        "per_position_vllm": [sum(s.accepted > i for s in drafting) / len(drafting) for i in range(K)],
    }


# n-gram / suffix / budget-trimmed drafts: fewer than k on some steps, and steps that drafted nothing
VARIABLE = steps_of([(3, 3), (1, 1), (2, 1), (0, 0), (3, 2), (1, 0), (2, 2), (3, 3), (0, 0), (2, 1), (3, 1),
                     (1, 1), (3, 3), (2, 2)])
UNIFORM = steps_of([(3, 3), (3, 1), (3, 0), (3, 2), (3, 3), (3, 1), (3, 0), (3, 0), (3, 2), (3, 3), (3, 1),
                    (3, 0)])


def _figures(result: AttachResult) -> dict[str, object]:
    assert result.reconciliation is not None
    return result.reconciliation.figures.to_dict()


def test_variable_drafts_come_from_the_counters_and_the_estimates_are_named() -> None:
    engine = Engine(k=K, steps=VARIABLE)
    with FakeVllm(engine) as server:
        result = _attach(server.url)
    assert result.error is None, result.error
    t, f, rec = truth(VARIABLE), _figures(result), result.reconciliation
    assert rec is not None
    assert f["source"] == COUNTERS
    assert (f["drafts"], f["drafted"], f["accepted"]) == (t["drafts"], t["drafted"], t["accepted"])
    assert f["draft_acceptance_rate"] == pytest.approx(t["draft_acceptance_rate"])
    assert f["mean_acceptance_length"] == pytest.approx(t["mean_acceptance_length"])
    assert f["per_position_vllm"] == pytest.approx(t["per_position_vllm"])
    # the stream alone would have said k drafted on every one of its passes
    assert sum(r.n_drafted for r in result.records) == K * (len(VARIABLE)) != t["drafted"]
    assert f["alpha_is_lower_bound"] and f["alpha"] <= t["alpha"]
    line = rec.line
    assert "estimates: α (a lower bound)" in line and "which pass accepted what" in line
    assert f"drafts were shorter than k = {K}" in line and "2 step(s) drafted nothing" in line
    assert "--per-request-spec-decode-metrics detailed" in line
    assert "\n" not in line


def test_merged_chunks_are_split_at_k_and_alpha_comes_from_the_counters() -> None:
    # 13 engine outputs (prefill + 12 steps) in 5 chunks, as when the HTTP side lags
    engine = Engine(k=K, steps=UNIFORM, merge=[1, 4, 3, 3, 2])
    with FakeVllm(engine) as server:
        result = _attach(server.url)
    assert result.error is None, result.error
    t, f, rec = truth(UNIFORM), _figures(result), result.reconciliation
    assert rec is not None
    assert max(r.n_drafted for r in result.records) == K  # never more positions than k
    assert max(len(r.tokens) for r in result.records) <= K + 1
    assert f["source"] == COUNTERS
    assert f["alpha"] == pytest.approx(t["alpha"]) and not f["alpha_is_lower_bound"]  # every step drafted k
    assert f["draft_acceptance_rate"] == pytest.approx(t["draft_acceptance_rate"])
    assert f["per_position"] == pytest.approx(t["per_position"])
    assert "merged engine steps into one chunk" in rec.line and "α" in rec.line.split("estimates")[0]
    assert "estimates: which pass accepted what" in rec.line


def test_detailed_per_request_metrics_rebuild_every_pass_exactly() -> None:
    engine = Engine(k=K, steps=VARIABLE, merge=[2, 3, 1, 5, 1, 3], per_request="detailed")
    with FakeVllm(engine) as server:
        result = _attach(server.url)
    assert result.error is None, result.error
    assert result.records_rebuilt and result.spec_report is not None and result.spec_report.source == VLLM_DETAILED
    decode = [r for r in result.records if PROMPT_PASS_FLAG not in r.flags]
    # every step that drafted, in order; the steps that drafted nothing (one token each) counted, though inside a
    # merged chunk a one-token step that drafted nothing and one that drafted and accepted none look alike
    assert [(r.n_drafted, r.n_accepted) for r in decode if r.n_drafted] == \
        [(s.drafted, s.accepted) for s in VARIABLE if s.drafted]
    assert sum(1 for r in decode if not r.n_drafted) == sum(1 for s in VARIABLE if not s.drafted)
    assert sum(r.n_emitted for r in result.records) == 1 + sum(s.tokens for s in VARIABLE)
    t, f, rec = truth(VARIABLE), _figures(result), result.reconciliation
    assert rec is not None and f["source"] == VLLM_DETAILED
    assert f["alpha"] == pytest.approx(t["alpha"]) and f["per_position"] == pytest.approx(t["per_position"])
    assert rec.line.startswith("exact: drafted, accepted, passes, α, per-position rates, every pass")
    assert "times of steps streamed together" in rec.line  # merged steps share their chunk's time
    assert result.placement_certain is False  # 1-token steps in merged chunks: a step accepting 0 looks alike
    assert "where the steps that drafted nothing fall among the others" in rec.line
    # without merged chunks every pass is placed exactly
    engine = Engine(k=K, steps=VARIABLE, per_request="detailed")
    with FakeVllm(engine) as server:
        unmerged = _attach(server.url)
    decode = [r for r in unmerged.records if PROMPT_PASS_FLAG not in r.flags]
    assert [(r.n_drafted, r.n_accepted) for r in decode] == [(s.drafted, s.accepted) for s in VARIABLE]
    assert unmerged.placement_certain and unmerged.reconciliation is not None and unmerged.reconciliation.all_exact


def test_summary_per_request_metrics_give_exact_totals_and_alpha_with_uniform_drafts() -> None:
    engine = Engine(k=K, steps=UNIFORM, merge=[1, 4, 3, 3, 2], per_request="summary")
    with FakeVllm(engine) as server:
        result = _attach(server.url)
    t, f, rec = truth(UNIFORM), _figures(result), result.reconciliation
    assert rec is not None and f["source"] == VLLM_SUMMARY
    assert (f["drafted"], f["accepted"]) == (t["drafted"], t["accepted"])
    assert f["alpha"] == pytest.approx(t["alpha"]) and f["per_position"] == pytest.approx(t["per_position"])
    assert "estimates: which pass accepted what" in rec.line and "detailed" in rec.line


def test_other_traffic_is_named_and_the_request_report_stays_exact() -> None:
    other = steps_of([(3, 3)] * 20 + [(3, 1)] * 6)
    engine = Engine(k=K, steps=UNIFORM, engines=2, other_steps=other)
    with FakeVllm(engine) as server:
        result = _attach(server.url)
    assert result.error is None, result.error
    t, rec = truth(UNIFORM), result.reconciliation
    assert rec is not None and rec.other_requests
    totals = result.engine_totals  # the server's counters: ours and the other request's
    assert totals["drafts"] == t["drafts"] + len(other) and totals["accepted_tokens"] != t["accepted"]
    assert "other requests ran on the server during this one (requests_running reached 2)" in rec.line
    assert rec.line.startswith("estimates: drafted, accepted, passes, α, per-position rates")
    # with the per-request report the same request is exact, whatever else ran
    engine = Engine(k=K, steps=UNIFORM, engines=2, other_steps=other, per_request="detailed")
    with FakeVllm(engine) as server:
        exact = _attach(server.url)
    f = _figures(exact)
    assert (f["drafts"], f["drafted"], f["accepted"]) == (t["drafts"], t["drafted"], t["accepted"])
    assert exact.reconciliation is not None and exact.reconciliation.all_exact


def test_max_tokens_trim_is_exact_from_the_counters() -> None:
    """The scheduler counts a step's accepted tokens before max_tokens trims what it sends."""
    steps = steps_of([(3, 3)] * 5)
    engine = Engine(k=K, steps=steps, max_tokens=18)  # 1 + 4 x 4 = 17 sent in full, the fifth step sends 1 of 4
    with FakeVllm(engine) as server:
        result = _attach(server.url, max_tokens=18)
    assert result.error is None, result.error
    f, rec = _figures(result), result.reconciliation
    assert rec is not None and rec.all_exact
    assert (f["drafts"], f["accepted"]) == (5, 15) and sum(r.n_emitted for r in result.records) == 18
    assert "3 accepted token(s) past max_tokens were counted by the engine but not sent" in rec.line


def test_prompt_length_and_per_chunk_latency() -> None:
    engine = Engine(k=K, steps=UNIFORM, prompt_tokens=23)
    with FakeVllm(engine) as server:
        result = _attach(server.url)
    assert result.session["prompt_tokens"] == 23
    assert [r.context_len for r in result.records[:2]] == [24, 24 + result.records[1].n_emitted]
    lat = result.latency
    assert lat["chunks"] == len(UNIFORM) + 1 and lat["itl_p50_ms"] is not None and lat["itl_p50_ms"] > 0
    assert lat["tpot_ms"] is not None and lat["tpot_ms"] > 0
    assert lat["tokens_per_chunk"] == pytest.approx((1 + sum(s.tokens for s in UNIFORM)) / (len(UNIFORM) + 1))


def test_vllm_counters_parse_with_created_series_and_two_engines() -> None:
    engine = Engine(k=K, steps=UNIFORM, engines=2)
    server = FakeVllm(engine)
    for s in UNIFORM:
        server.metrics.observe(s, engine_idx=1)
    text = server.metrics.text()
    assert "vllm:spec_decode_num_drafts_total" in text and "vllm:spec_decode_num_drafts_created" in text
    snap = parse_counters(text, 0.0)
    t = truth(UNIFORM)
    assert snap.drafts == 2 * 7 + t["drafts"] and snap.accepted_tokens == 2 * 13 + t["accepted"]
    assert snap.accepted_per_pos is not None and len(snap.accepted_per_pos) == K
    server.httpd.server_close()


# --- SGLang -----------------------------------------------------------------------------------------------


def test_sglang_fresh_server_with_eagle_is_not_called_disabled_and_reports_exact_totals() -> None:
    engine = Engine(k=K, steps=UNIFORM)
    with FakeSglang(engine, SglangState(fresh=True)) as server:
        result = _attach(server.url)
        body = server.requests[0]
        paths = list(server.info_paths)
    assert result.error is None, result.error
    assert body["return_spec_tokens_details"] is True and paths == ["/server_info"]
    assert not any("disabled" in w for w in result.warnings)
    t, f = truth(UNIFORM), _figures(result)
    assert f["source"] == SGLANG_DETAILS
    assert (f["drafts"], f["drafted"], f["accepted"]) == (t["drafts"], t["drafted"], t["accepted"])
    assert f["alpha"] == pytest.approx(t["alpha"])


def test_sglang_without_speculation_says_so(capsys) -> None:
    engine = Engine(k=K, steps=steps_of([(0, 0)] * 6))
    with FakeSglang(engine, SglangState(algorithm=None)) as server:
        rc, _, err = cli(capsys, "attach", server.url, "--prompt", "hi", "--scrape-interval", "0.05")
    assert rc == 1
    assert ("the SGLang server runs without speculative decoding (its /server_info gives no speculative_algorithm): "
            "start it with --speculative-algorithm") in err


def test_sglang_k_with_topk_above_1_and_the_deprecated_info_endpoint() -> None:
    engine = Engine(k=7, steps=steps_of([(7, 2), (7, 5), (7, 0)]))
    state = SglangState(num_steps=3, topk=4, num_draft_tokens=8, deprecated_only=True)
    with FakeSglang(engine, state) as server:
        result = _attach(server.url)
        paths = list(server.info_paths)
    assert paths == ["/server_info", "/get_server_info"]
    assert result.session["draft_len"] == 7  # num_draft_tokens - 1, not num_steps (3)
    assert _figures(result)["drafted"] == 3 * 7


def test_sglang_running_requests_gauge_counts_each_request_once_over_tensor_ranks() -> None:
    text = ('# TYPE sglang:num_running_reqs gauge\n'
            'sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0"} 2.0\n'
            'sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="1"} 2.0\n')
    assert parse_counters(text, 0.0).requests_running == 2.0


# --- every surface says it --------------------------------------------------------------------------------


def test_cli_text_json_and_trace_say_which_numbers_are_exact(capsys, tmp_path) -> None:
    engine = Engine(k=K, steps=UNIFORM, merge=[1, 4, 3, 3, 2])
    trace = tmp_path / "merged.csv"
    with FakeVllm(engine) as server:
        rc, out, err = cli(capsys, "attach", server.url, "--prompt", "hi", "--scrape-interval", "0.05",
                           "--trace", str(trace))
        assert rc == 0, err
        rc, js, err = cli(capsys, "attach", server.url, "--prompt", "hi", "--scrape-interval", "0.05", "--json")
    assert rc == 0, err
    t = truth(UNIFORM)
    exact_line = next(line for line in out.splitlines() if line.startswith("exactness"))
    assert "merged engine steps into one chunk" in exact_line
    assert f"draft acceptance rate   {t['draft_acceptance_rate']:.3f}  vLLM's: accepted / drafted" in out
    assert f"mean acceptance length  {t['mean_acceptance_length']:.2f}  vLLM's: 1 + accepted / drafts" in out
    assert f"alpha         {t['alpha']:.3f}  specscope's α: accepted / judged" in out
    assert "inter-token" in out and "TPOT" in out
    result = json.loads(js)
    assert result["figures"]["source"] == COUNTERS and result["exactness"]["line"] == exact_line.split(None, 1)[1]
    saved = read_trace(trace)
    assert saved.session["exactness"]["line"] == exact_line.split(None, 1)[1]
    assert saved.session["prompt_tokens"] == engine.prompt_tokens


def test_the_speed_up_against_a_plain_vllm_server() -> None:
    """A plain vLLM has no spec_decode counters: the plain side of the baseline is expected not to speculate."""
    from specscope.core.attach.baseline import interleaved_baseline

    plain_engine = Engine(k=K, steps=steps_of([(0, 0)] * 20), speculative=False)
    with FakeVllm(Engine(k=K, steps=UNIFORM)) as spec, FakeVllm(plain_engine) as plain:
        options = AttachOptions(url=spec.url, prompt="Count", max_tokens=64, scrape_interval_s=0.05)
        run = interleaved_baseline(options, AttachOptions(url=plain.url, prompt="Count", max_tokens=64,
                                                          scrape_interval_s=0.05), rounds=2)
    assert run.error is None and len(run.ratios) == 2
    assert all(r.no_speculation and r.error is None for r in run.plain)
