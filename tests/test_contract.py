"""One run, four readers: the CLI's ``--json``, the trace CSV, the app's status values and the bench's row
helpers must agree on α, tokens/s, measured and predicted speed-up and best k, because every one of them
reads ``core.measurement`` and none computes its own."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from specscope.core.cli import main
from specscope.core.measurement import replay, run_summary
from specscope.core.records import BaselineRecord, IterationRecord
from specscope.core.trace import read_trace
from tests.models import perturbed, save_model_dir, tiny_model, word_tokenizer


@pytest.fixture(scope="module")
def one_run(tmp_path_factory) -> tuple[dict, Path]:
    root = tmp_path_factory.mktemp("contract")
    target = tiny_model(5, vocab_size=64, logit_scale=3.0)
    tdir = save_model_dir(root / "target", target, word_tokenizer())
    ddir = save_model_dir(root / "draft", perturbed(target, 0.05), word_tokenizer())
    trace = root / "run.csv"
    argv = ["run", "--target", str(tdir), "--draft", str(ddir), "--prompt", "w5 w6 w7", "--no-chat-template",
            "--max-new-tokens", "64", "--k", "3", "--baseline-every", "2", "--json", "--trace", str(trace),
            "--quiet"]
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue()), trace


def test_cli_json_and_trace_agree(one_run) -> None:
    js, trace = one_run
    m = js["metrics"]
    assert m["measured_speedup"] is not None, "the run is long enough for an interval (>= 5 blocks)"
    loaded = read_trace(trace)
    last = loaded.records[-1]
    # the CSV stores what the measurement put on each record when it was made; the JSON summary is the
    # estimate after the closing baseline, which may have closed one more block
    assert last.alpha_cumulative == pytest.approx(m["alpha"], rel=1e-9)
    assert run_summary(loaded.records)["tokens_per_s"] == pytest.approx(m["tokens_per_s"], rel=1e-9)
    measured = [r for r in loaded.records if r.measured_speedup is not None]
    assert measured and all(r.measured_speedup_lo <= r.measured_speedup <= r.measured_speedup_hi for r in measured)


def _replayed(trace: Path):
    loaded = read_trace(trace)
    events: list[IterationRecord | BaselineRecord] = sorted(
        [*loaded.records, *loaded.baselines],
        key=lambda e: (e.after_iteration, 0) if isinstance(e, BaselineRecord) else (e.iteration, 1))
    est = replay(events).estimate()
    assert est is not None
    return loaded, events, est


def test_a_replayed_trace_gives_the_cli_numbers(one_run) -> None:
    """What the app shows for an opened trace (it replays through the measurement) is what the CLI printed."""
    js, trace = one_run
    m = js["metrics"]
    _, _, est = _replayed(trace)
    assert est.alpha == pytest.approx(m["alpha"], rel=1e-9)
    assert est.tokens_per_s == pytest.approx(m["tokens_per_s"], rel=1e-9)
    assert est.measured is not None and est.measured.value == pytest.approx(m["measured_speedup"], rel=1e-9)
    assert est.predicted_speedup == pytest.approx(m["predicted_speedup"], rel=1e-6)
    assert est.best_k == m["best_k"]


def test_the_app_status_shows_the_same_numbers(one_run, qtbot) -> None:
    from PySide6.QtWidgets import QStatusBar

    from specscope.app.run_data import RunData
    from specscope.app.widgets.status_panel import StatusPanel

    js, trace = one_run
    m = js["metrics"]
    _, events, _ = _replayed(trace)
    data = RunData()
    data.extend(events)
    bar = QStatusBar()
    qtbot.addWidget(bar)
    panel = StatusPanel(bar)
    panel.update(data)
    text = panel.metrics.text()
    assert f"α {m['alpha']:.2f}" in text and f"{m['tokens_per_s']:.1f} tok/s" in text
    assert f"×{m['measured_speedup']:.2f} ({m['measured_speedup_lo']:.2f}–{m['measured_speedup_hi']:.2f})" in text


def test_the_bench_reads_the_same_alpha(one_run) -> None:
    from specscope.core import bench

    js, trace = one_run
    loaded = read_trace(trace)
    row = bench.RunRow(round=0, method="k=3", prompt_id="p", prompt_kind="prose", tokens=0, seconds=1.0)
    bench.fill_acceptance(row, loaded.records)  # what bench.run_specscope fills its row with
    assert row.alpha == pytest.approx(js["metrics"]["alpha"], rel=1e-12)
    assert row.acceptance_rate == pytest.approx(js["metrics"]["acceptance_rate"], rel=1e-12)
