"""Attach, the parts that need no server: Prometheus text → counters, engine detection, chunks → passes."""

from __future__ import annotations

import json
import math

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from specscope.core.attach.chunks import ChunkError, parse_sse_data
from specscope.core.attach.options import AttachError, base_url, redact_url
from specscope.core.attach.passes import PROMPT_PASS_FLAG, PassBuilder, RecordContext, RecordMaker
from specscope.core.attach.prometheus import Engine, MetricsError, parse_counters
from specscope.core.attach.summary import summarize_attached
from specscope.core.records import ControlValues, TokenStatus

# Rendered exactly as llama.cpp's server_task_result_metrics::to_metrics() writes it (build 11434).
LLAMACPP_TEXT = """# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed, excluding cached tokens
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 30
# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 40
# HELP llamacpp:spec_decode_num_accepted_tokens_total Speculative: Total draft tokens accepted by the target model
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 37
# HELP llamacpp:spec_decode_num_drafts_total Speculative: Total speculative decoding verification steps
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 10
# HELP llamacpp:predicted_tokens_seconds Average generation throughput in tokens/s
# TYPE llamacpp:predicted_tokens_seconds gauge
llamacpp:predicted_tokens_seconds 51.5
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 10
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 10
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 9
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 8
"""


def vllm_text(drafts: int, draft_tokens: int, accepted: int, per_pos: list[int], engines: int = 1) -> str:
    """vLLM registers its counters with prometheus_client; render them the same way it does."""
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    c_drafts = Counter("vllm:spec_decode_num_drafts", "drafts", labels, registry=reg)
    c_tokens = Counter("vllm:spec_decode_num_draft_tokens", "draft tokens", labels, registry=reg)
    c_acc = Counter("vllm:spec_decode_num_accepted_tokens", "accepted", labels, registry=reg)
    c_pos = Counter("vllm:spec_decode_num_accepted_tokens_per_pos", "per pos", [*labels, "position"], registry=reg)
    for e in range(engines):
        lv = ("smol", str(e))
        c_drafts.labels(*lv).inc(drafts)
        c_tokens.labels(*lv).inc(draft_tokens)
        c_acc.labels(*lv).inc(accepted)
        for i, v in enumerate(per_pos):
            c_pos.labels(*lv, str(i)).inc(v)
    return generate_latest(reg).decode()


def test_llamacpp_counters_and_detection():
    snap = parse_counters(LLAMACPP_TEXT, 1.0)
    assert snap.engine is Engine.LLAMA_CPP
    assert (snap.drafts, snap.draft_tokens, snap.accepted_tokens) == (10, 40, 37)
    assert snap.accepted_per_pos == [10, 10, 9, 8]


def test_vllm_counters_summed_over_engines_and_per_position():
    snap = parse_counters(vllm_text(5, 20, 12, [5, 4, 2, 1], engines=2), 2.0)
    assert snap.engine is Engine.VLLM
    assert (snap.drafts, snap.draft_tokens, snap.accepted_tokens) == (10, 40, 24)
    assert snap.accepted_per_pos == [10, 8, 4, 2]
    before = parse_counters(vllm_text(1, 4, 3, [1, 1, 1, 0]), 1.0)
    d = snap.minus(before)
    assert (d.drafts, d.draft_tokens, d.accepted_tokens) == (9, 36, 21)
    assert d.accepted_per_pos == [9, 7, 3, 2]


def test_sglang_gauge_mean_over_ranks():
    reg = CollectorRegistry()
    g = Gauge("sglang:spec_accept_length", "mean accept length", ["tp_rank"], registry=reg)
    g.labels("0").set(2.0)
    g.labels("1").set(3.0)
    snap = parse_counters(generate_latest(reg).decode(), 0.0)
    assert snap.engine is Engine.SGLANG
    assert snap.accept_length == pytest.approx(2.5)
    assert snap.drafts is None and snap.has_speculation_counters


def test_unknown_engine_and_bad_text():
    snap = parse_counters("# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total 3\n", 0.0)
    assert snap.engine is Engine.UNKNOWN and not snap.has_speculation_counters
    with pytest.raises(MetricsError):
        parse_counters("<html>not metrics</html>\n{", 0.0)


def test_url_handling():
    assert redact_url("http://user:secret@host:8000/v1?key=abc") == "http://host:8000/v1"
    assert base_url("http://h:1/v1/") == "http://h:1"
    with pytest.raises(AttachError):
        base_url("ftp://h")
    with pytest.raises(AttachError):
        base_url("not a url")


def _llama_chunk(t: float, text: str, n: int, drafted: int, accepted: int) -> str:
    timings: dict[str, object] = {"predicted_n": n, "predicted_ms": 10.0 * n}
    if drafted:
        timings.update(draft_n=drafted, draft_n_accepted=accepted)
    return json.dumps({"choices": [{"text": text, "finish_reason": None}], "timings": timings})


def test_llamacpp_chunks_group_into_passes_with_exact_counts():
    # prompt pass (1 token), then pass A: drafted 4 accepted 2 (3 tokens), pass B: drafted 4 accepted 4
    # (5 tokens), then an undrafted step (1 token, counters unchanged), then a final empty chunk.
    stream = [(1, 0, 0)] + [(n, 4, 2) for n in (2, 3, 4)] + [(n, 8, 6) for n in (5, 6, 7, 8, 9)] + [(10, 8, 6)]
    builder = PassBuilder()
    passes = []
    for i, (n, d, a) in enumerate(stream):
        chunk = parse_sse_data(_llama_chunk(float(i), f"t{i}", n, d, a), float(i))
        assert chunk is not None
        passes += builder.add(chunk)
    passes += builder.finish()
    assert [(p.n_drafted, p.n_accepted, p.n_emitted) for p in passes] == [(0, 0, 1), (4, 2, 3), (4, 4, 5), (0, 0, 1)]
    ctx = RecordContext(drafter="llama.cpp draft", controls=ControlValues(k=4), prompt_tokens=10, t_request_s=-1.0)
    maker = RecordMaker(ctx)
    records = [maker.record(p) for p in passes]
    assert PROMPT_PASS_FLAG in records[0].flags
    assert [t.status for t in records[1].tokens] == [TokenStatus.ACCEPTED] * 2 + [TokenStatus.CORRECTION]
    assert [t.status for t in records[2].tokens] == [TokenStatus.ACCEPTED] * 4 + [TokenStatus.BONUS]
    assert [t.position for r in records for t in r.tokens] == list(range(10))
    assert math.isnan(records[1].verify_ms)  # not reported by the engine: never 0
    s = summarize_attached(records)
    assert (s["drafted"], s["accepted"]) == (8, 6)
    # judged = pass A: 2 accepted + 1 rejected; pass B: 4 (all accepted); undrafted step: 0
    assert s["alpha"] == pytest.approx(6 / 7)
    assert s["acceptance_rate"] == pytest.approx(6 / 8)


def test_chunks_without_counters_are_one_pass_each():
    builder = PassBuilder(draft_len=3)
    passes = []
    for i, total in enumerate([1, 3, 7, 8]):
        body = json.dumps({"choices": [{"text": "x", "finish_reason": None}], "usage": {"completion_tokens": total}})
        chunk = parse_sse_data(body, float(i))
        assert chunk is not None
        passes += builder.add(chunk)
    passes += builder.finish()
    assert [(p.n_drafted, p.n_accepted, p.n_emitted) for p in passes] == [(0, 0, 1), (3, 1, 2), (3, 3, 4), (3, 0, 1)]
    assert all(p.drafted_assumed for p in passes[1:])


def test_sse_errors_are_sentences():
    assert parse_sse_data("[DONE]", 0.0) is None
    with pytest.raises(ChunkError, match="not JSON"):
        parse_sse_data("{oops", 0.0)
    with pytest.raises(ChunkError, match="error mid-stream: boom"):
        parse_sse_data(json.dumps({"error": {"message": "boom"}}), 0.0)


# The final usage chunk exactly as vLLM 0.34.0 dumps it (``model_dump_json(exclude_unset=False,
# exclude_none=True)`` of a CompletionStreamResponse with choices=[], usage and metrics), --per-request-spec-decode-
# metrics detailed: RequestSpecDecodeMetrics.to_dict of four steps.
VLLM_FINAL_CHUNK = (
    '{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":9,'
    '"total_tokens":20,"completion_tokens":11},"metrics":{"speculative_decoding":{"mean_acceptance_length":2.75,'
    '"draft_acceptance_rate":0.7777777777777778,"acceptance_histogram":[1,0,1,2],"num_spec_steps":4,'
    '"num_accepted_draft_tokens":8,"num_draft_tokens":9,"num_spec_tokens":3,"per_step_accepted":[3,0,2,3],'
    '"per_step_drafted":[3,1,2,3]}}}')


def test_vllm_final_usage_chunk_gives_the_exact_per_request_report():
    chunk = parse_sse_data(VLLM_FINAL_CHUNK, 1.0)
    assert chunk is not None and chunk.prompt_tokens == 9 and chunk.completion_tokens == 11
    report = chunk.spec_report
    assert report is not None and report.detailed and report.k == 3
    assert (report.steps, report.draft_tokens, report.accepted) == (4, 9, 8)
    assert report.accepted_per_position() == [3, 3, 2]
    assert report.drafted_per_position() == [4, 3, 2]
    assert report.judged() == 8 + 1  # only the step drafting 1 and accepting 0 rejected


def test_a_malformed_report_is_a_note_not_a_failure():
    bad = json.loads(VLLM_FINAL_CHUNK)
    bad["metrics"]["speculative_decoding"]["per_step_drafted"] = [3, 1]
    chunk = parse_sse_data(json.dumps(bad), 1.0)
    assert chunk is not None and chunk.spec_report is None
    assert chunk.report_problem == ("the stream sent metrics.speculative_decoding with per_step_accepted and "
                                    "per_step_drafted of different lengths: the per-request figures are not used")


def test_sglang_spec_tokens_details_chunk():
    body = {"id": "x", "object": "text_completion", "created": 1, "model": "m", "choices": [], "usage": None,
            "sglext": {"spec_tokens_details": {"spec_verify_ct": 5, "spec_num_correct_drafts": 9,
                                               "spec_num_proposed_drafts": 15, "spec_accept_length": 2.8,
                                               "spec_accept_rate": 0.6,
                                               "spec_correct_drafts_histogram": [1, 0, 2, 2]}}}
    chunk = parse_sse_data(json.dumps(body), 0.0)
    assert chunk is not None and chunk.spec_report is not None
    r = chunk.spec_report
    assert (r.k, r.steps, r.draft_tokens, r.accepted) == (3, 5, 15, 9)
    assert r.judged() == 9 + 5 - 2 and r.accepted_per_position() == [4, 4, 2]


def test_steps_placed_on_chunks_say_when_the_place_is_not_the_only_one():
    from specscope.core.attach.passes import passes_from_steps

    def chunks(totals: list[int]) -> list:
        return [parse_sse_data(json.dumps({"choices": [{"text": "x"}], "usage": {"completion_tokens": n}}), float(i))
                for i, n in enumerate(totals)]

    # steps accepting 2, 0 (3 then 1 token) and one undrafted step between them: chunk sizes 1, 3, 1, 1
    passes, certain = passes_from_steps(chunks([1, 4, 5, 6]), [2, 0], [3, 3])
    assert not certain  # the undrafted step and the step accepting 0 both send one token in chunks of one
    passes, certain = passes_from_steps(chunks([1, 2, 5, 6]), [2, 0], [3, 3])
    assert certain and [(p.n_drafted, p.n_accepted, p.n_emitted) for p in passes] == \
        [(0, 0, 1), (0, 0, 1), (3, 2, 3), (3, 0, 1)]
