"""``specscope attach`` against bad input and a misbehaving server (issue 31, items 5 and 9): URLs, options and
server JSON of every odd shape end in one sentence (exit 2 bad input, 1 a server fault), what arrived is
kept, and a URL's password is never printed. The server is a scripted fake (tests/fake_engine.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specscope.core.attach.client import attach
from specscope.core.attach.options import AttachError, AttachOptions, base_url, redact_url
from specscope.core.trace.files import read_trace
from tests.cli_helpers import cli, one_sentence
from tests.fake_engine import LLAMACPP_METRICS, FakeEngine, Script, good_stream, llama_chunk

FAST = ["--prompt", "hi", "--max-tokens", "8", "--scrape-interval", "0.05", "--timeout", "10"]


# --- bad URLs and options: exit 2 before any request ----------------------------------------------------------

BAD_URLS = [
    ("http://127.0.0.1:99999", "the port in 'http://127.0.0.1:99999' must be a whole number from 1 to 65535"),
    ("http://127.0.0.1:abc/", "the port in 'http://127.0.0.1:abc/' must be a whole number from 1 to 65535"),
    ("http://127.0.0.1:0", "the port in 'http://127.0.0.1:0' must be a whole number from 1 to 65535"),
    ("http://[::1", "'http://[::1' is not a valid URL (Invalid IPv6 URL)"),
    ("http://127.0.0.1:8080/a b", "the URL 'http://127.0.0.1:8080/a b' holds a space or a control character"),
    ("http://127.0.0.1\x00:8080", "the URL 'http://127.0.0.1\\x00:8080' holds a space or a control character"),
    ("ftp://user:PASSWORD@127.0.0.1/", "'ftp://***@127.0.0.1/' is not an http:// or https:// URL"),
    ("http://user:PASSWORD@[::1:80", "'http://***@[::1:80' is not a valid URL"),
    ("", "the server URL is empty"),
]


@pytest.mark.parametrize(("url", "sentence"), BAD_URLS)
def test_bad_url_is_one_sentence_and_exit_2(capsys, url, sentence) -> None:
    rc, out, err = cli(capsys, "attach", url, "--prompt", "hi")
    assert rc == 2 and out == ""
    assert sentence in one_sentence(err)
    assert "PASSWORD" not in err


BAD_OPTIONS = [
    (["--temperature", "nan"], "argument --temperature: must be 0 (greedy) or from 0.001 to 100, got nan"),
    (["--temperature", "inf"], "argument --temperature: must be 0 (greedy) or from 0.001 to 100, got inf"),
    (["--timeout", "inf"], "argument --timeout: must be a finite number above 0 and at most 86400, got 'inf'"),
    (["--scrape-interval", "inf"], "argument --scrape-interval: must be a finite number from 0.01 to 3600"),
    (["--max-tokens", "99999999999999999999"], "argument --max-tokens: must be from 1 to 131,072"),
    (["--max-new-tokens", "0"], "argument --max-new-tokens: must be from 1 to 131,072, got 0"),
    (["--rounds", "99999999"], "argument --rounds: must be from 1 to 1,000"),
    (["--prompt", ""], "--prompt is empty: give some text to continue"),
    (["--prompt", "hi \udcff"], "--prompt is not valid UTF-8 text"),
    (["--plain-url", "http://[::1"], "--plain-url: 'http://[::1' is not a valid URL (Invalid IPv6 URL)"),
]


@pytest.mark.parametrize(("argv", "sentence"), BAD_OPTIONS)
def test_bad_attach_option_is_one_sentence_and_no_request(capsys, argv, sentence) -> None:
    with FakeEngine() as engine:
        rc, out, err = cli(capsys, "attach", engine.url, *argv)
        assert engine.script.requests == []
    assert rc == 2 and out == ""
    assert sentence in one_sentence(err)


def test_non_utf8_prompt_file_is_one_sentence(capsys, tmp_path) -> None:
    bad = tmp_path / "p.txt"
    bad.write_bytes(b"hi \xff\xfe")
    rc, _, err = cli(capsys, "attach", "http://127.0.0.1:9", "--prompt-file", str(bad))
    assert rc == 2 and f"prompt file {bad} is not UTF-8 text (invalid byte at offset 3)" in one_sentence(err)


def test_prompt_file_that_is_a_device_is_refused(capsys) -> None:
    rc, _, err = cli(capsys, "attach", "http://127.0.0.1:9", "--prompt-file", "/dev/zero")
    assert rc == 2 and "prompt file /dev/zero is a character device, not a regular file" in one_sentence(err)


def test_url_helpers_keep_ipv6_brackets_and_drop_credentials() -> None:
    assert base_url("http://[::1]:18082/v1") == "http://[::1]:18082"
    assert redact_url("http://user:pw@[::1]:18082/v1?key=x") == "http://[::1]:18082/v1"
    assert redact_url("http://u:p@w@host:1/") == "http://host:1/"  # a password holding an @
    with pytest.raises(AttachError, match="must be a whole number from 1 to 65535"):
        base_url("http://[::1]:99999")


def test_attach_options_are_checked_in_the_library_too() -> None:
    """The app builds AttachOptions itself: the same checks hold without the CLI's argparse."""
    for bad, sentence in [(dict(timeout_s=float("inf")), "the timeout must be a finite number"),
                          (dict(scrape_interval_s=float("nan")), "the scrape interval must be a finite number"),
                          (dict(temperature=float("nan")), "the temperature must be a finite number"),
                          (dict(max_tokens=10**20), "max tokens must be from 1 to 131,072"),
                          (dict(prompt="  "), "the prompt is empty")]:
        options = AttachOptions(url="http://127.0.0.1:9", prompt="hi")
        for key, value in bad.items():
            setattr(options, key, value)
        with pytest.raises(AttachError, match=sentence):
            attach(options)


# --- a real request to the fake server ----------------------------------------------------------------


def test_ipv6_server_can_be_attached(capsys) -> None:
    with FakeEngine(ipv6=True) as engine:
        rc, out, err = cli(capsys, "attach", engine.url, *FAST, "--json")
        assert len(engine.script.requests) == 1
    assert rc == 0, err
    result = json.loads(out)
    assert result["error"] is None and result["session"]["url"] == engine.url
    assert result["summary"]["drafted"] == 6 and result["summary"]["accepted"] == 3


def test_credentials_in_the_url_are_sent_but_never_printed(capsys, tmp_path) -> None:
    with FakeEngine() as engine:
        url = engine.url.replace("http://", "http://alice:S3CRET@")
        rc, out, err = cli(capsys, "attach", url, *FAST, "--json", "--trace", str(tmp_path / "a.csv"))
        sent = engine.script.auth_headers
    assert rc == 0, err
    assert sent and all(h is not None and h.startswith("Basic ") for h in sent)  # used, in the header
    written = "".join(p.read_text() for p in tmp_path.iterdir())
    assert "S3CRET" not in out + err + written and "alice" not in out + written


def test_stream_cut_without_done_is_incomplete_and_kept(capsys, tmp_path) -> None:
    script = Script(chunks=good_stream()[:3], done=False)  # the prompt pass and one pass, then the close
    with FakeEngine(script=script) as engine:
        rc, out, err = cli(capsys, "attach", engine.url, *FAST, "--json", "--trace", str(tmp_path / "cut.csv"))
    assert rc == 1
    line = one_sentence(err)
    assert line == (f"specscope: error: the stream from {engine.url} ended after 3 chunks without [DONE] or a finish "
                    "reason: the completion is incomplete; what arrived is kept")
    result = json.loads(out)
    assert result["error"] == line.removeprefix("specscope: error: ") and result["text"] == "at2t3"
    saved = read_trace(tmp_path / "cut.csv")
    assert sum(r.n_emitted for r in saved.records) == 3
    assert saved.records[-1].finish_reason == "error"


def test_stream_with_a_finish_reason_but_no_done_is_complete_with_a_note(capsys) -> None:
    with FakeEngine(script=Script(done=False)) as engine:
        rc, out, err = cli(capsys, "attach", engine.url, *FAST)
    assert rc == 0, err
    assert "the stream ended without its closing [DONE] line after the finish reason" in out


HOSTILE_CHUNKS = [
    ("delta a string", json.dumps({"choices": [{"delta": "oops"}]}),
     "the stream sent choices[0].delta = 'oops' where an object belongs"),
    ("predicted_n NaN", '{"choices": [{"text": "x"}], "timings": {"predicted_n": NaN}}',
     "the stream sent timings.predicted_n = nan where a count of tokens belongs"),
    ("text a number", llama_chunk(5, 4), "the stream sent choices[0].text = 5 where text belongs"),
    ("choices an object", json.dumps({"choices": {"text": "x"}}), "where a list belongs"),
    ("a count of 10^9 tokens", llama_chunk("x", 10**9), "the stream counted 1,000,000,000 tokens generated"),
    ("a count of 10^15 tokens", llama_chunk("x", 10**15), "timings.predicted_n = 1000000000000000 where a count"),
    ("counters going back", llama_chunk("x", 4, 1, 0), "the stream's cumulative draft counters went backwards"),
    ("more accepted than drafted", llama_chunk("x", 4, 9, 12), "accepted of only 9 drafted"),
    ("JSON nested 100,000 deep", "[" * 100_000 + "]" * 100_000, "JSON nested too deeply"),
]


@pytest.mark.parametrize(("case", "chunk", "sentence"), HOSTILE_CHUNKS, ids=[c[0] for c in HOSTILE_CHUNKS])
def test_unexpected_server_json_is_one_sentence_and_keeps_what_arrived(capsys, tmp_path, case, chunk,
                                                                       sentence) -> None:
    script = Script(chunks=[*good_stream()[:3], chunk])  # three good chunks, then the odd one
    with FakeEngine(script=script) as engine:
        rc, out, err = cli(capsys, "attach", engine.url, *FAST, "--json", "--trace", str(tmp_path / "t.csv"))
    assert rc == 1
    assert sentence in one_sentence(err)
    assert json.loads(out)["text"] == "at2t3"  # the three good chunks are kept
    assert sum(r.n_emitted for r in read_trace(tmp_path / "t.csv").records) == 3


def test_props_settings_of_another_shape_are_a_note_not_a_failure(capsys) -> None:
    """/props only describes the server: a request can still run, and the note says what is unknown."""
    script = Script(props={"build_info": "fake", "default_generation_settings": "not an object"})
    with FakeEngine(script=script) as engine:
        rc, out, err = cli(capsys, "attach", engine.url, *FAST)
    assert rc == 0, err
    assert "/props sent default_generation_settings of an unexpected shape" in out


@pytest.mark.parametrize(("metrics", "why"), [
    (LLAMACPP_METRICS.format(drafted="NaN", accepted=0, drafts=0), "is not a count"),
    (LLAMACPP_METRICS.format(drafted="+Inf", accepted=0, drafts=0), "is not a count"),
    ('# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter\n'
     'llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="99999999999"} 1\n', "draft position"),
])
def test_hostile_metrics_are_a_note_and_the_stream_still_counts(capsys, metrics, why) -> None:
    with FakeEngine(script=Script(metrics=metrics)) as engine:
        rc, out, err = cli(capsys, "attach", engine.url, *FAST)
    assert "Traceback" not in err and "Exception" not in err
    assert rc == 0, err
    assert why in out  # the scrape problem is shown as a note; the stream's own counters still give α
    assert "drafted       6" in out


def test_failed_plain_baseline_exits_1_with_a_sentence(capsys) -> None:
    with FakeEngine() as spec, FakeEngine(script=Script(completion_status=500)) as plain:
        rc, out, err = cli(capsys, "attach", spec.url, *FAST, "--plain-url", plain.url, "--rounds", "2")
    assert rc == 1
    line = one_sentence(err)
    assert line.startswith("specscope: error: the plain baseline failed (plain request 1: ")
    assert line.endswith("answered 500 to the completion request: refused by the fake); the speculative results "
                         "above stand")
    assert "baseline      stopped:" in out and "drafted       6" in out


def test_good_stream_is_exit_0_with_exact_counts(capsys, tmp_path: Path) -> None:
    with FakeEngine() as engine:
        rc, out, err = cli(capsys, "attach", engine.url, *FAST, "--json")
        body = engine.script.requests[0]
    assert rc == 0, err
    assert body["max_tokens"] == 8 and body["timings_per_token"] is True
    result = json.loads(out)
    assert result["error"] is None and result["summary"]["tokens"] == 7


# --- issue 41, items 2 and 10 ------------------------------------------------------------------------------


def test_missing_metrics_is_a_failure_and_what_arrived_is_kept(capsys, tmp_path) -> None:
    """README: "/metrics is missing (llama.cpp without --metrics)" is a failure: exit 1, one sentence, the
    stream's passes still in the trace."""
    with FakeEngine(script=Script(metrics_status=404)) as engine:
        rc, out, err = cli(capsys, "attach", engine.url, *FAST, "--trace", str(tmp_path / "m.csv"))
    assert rc == 1
    assert one_sentence(err) == (f"specscope: error: {engine.url}/metrics answered 404: the engine exposes no "
                                 "metrics there (llama.cpp's server needs --metrics)")
    assert "drafted       6" in out
    assert sum(r.n_drafted for r in read_trace(tmp_path / "m.csv").records) == 6


def test_a_first_pass_beyond_what_a_trace_holds_is_clamped_not_lost(capsys, tmp_path) -> None:
    """Counters kept across requests: the first chunk says 122 drafted. The trace keeps every pass, the odd
    field clamped to what the format holds, and says so; nothing that arrived is lost."""
    chunks = [llama_chunk("a", 1), llama_chunk("b", 2, drafted=122, accepted=100), llama_chunk("c", 3, 124, 101),
              llama_chunk("", 3, 124, 101, finish="length")]
    with FakeEngine(script=Script(chunks=chunks)) as engine:
        rc, _, err = cli(capsys, "attach", engine.url, *FAST, "--trace", str(tmp_path / "big.csv"))
    assert rc == 0 and "Traceback" not in err and "_Bad" not in err, err
    saved = read_trace(tmp_path / "big.csv")
    assert "".join(t.text for r in saved.records for t in r.tokens) == "abc"
    assert max(r.n_drafted for r in saved.records) <= 80
    assert any("n_drafted = 122 is outside 0..80; written as 80" in w for w in saved.meta.get("repairs", []))
    assert "n_drafted = 122 is outside 0..80" in err  # said on the command line too
