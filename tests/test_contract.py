"""One run, every reader: live, replayed, the CLI's ``--json``, the CSV export, the app's status bar and plot
titles, and the bench's row helper give the same α, speed-up (with its interval) and best k, at the end and at
a control change, because all of them display one owner's snapshot (``core.measure.measurement``) and replay is the
same stream fed through the same owner.

The recorded run changes k and then the temperature mid-run (from a sink, as the window's controls do between
iterations), runs a paging drill on the draft, and has a stretch the busy detector flags. The busy detector is
scripted: a truly busy machine cannot be summoned on demand in a unit test; the real detector has its own tests.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from specscope.core.commands import bench_runs
from specscope.core.commands.cli import main
from specscope.core.controls import Controls
from specscope.core.drill_spec import DrillSpec
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.pair import LoadedModel, ModelPair
from specscope.core.events import ControlChange, Event, RunFinished, RunStarted
from specscope.core.measure.busy import BUSY_PREFIX, BusyDetector
from specscope.core.measure.run import Run, feed_all, replay
from specscope.core.measure.snapshot import Estimate
from specscope.core.measure.summary import run_summary
from specscope.core.records import ControlValues, DrillEvent, IterationRecord
from specscope.core.session import Session, SessionOptions
from specscope.core.trace.autosave import SessionRecorder
from specscope.core.trace.files import read_trace, write_trace
from tests.models import perturbed, save_model_dir, tiny_model, word_tokenizer

VOCAB = 64
CPU = torch.device("cpu")


class DigitTokenizer:
    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return " ".join(str(i) for i in ids)


class ScriptedBusy(BusyDetector):
    """Flags iterations in [start, end) as a busy machine would be flagged."""

    def __init__(self, start: int, end: int):
        super().__init__(threads=1)
        self.start, self.end = start, end

    def observe(self, record: IterationRecord) -> list[str]:
        if self.start <= record.iteration < self.end:
            return [f"{BUSY_PREFIX}: the process got 30% of a core during this step (scripted)"]
        return []


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> tuple[list[tuple[Event, Estimate | None]], Path]:
    """A live run's (event, snapshot) pairs, as every sink saw them, and its autosave folder."""
    root = tmp_path_factory.mktemp("contract")
    target = tiny_model(5, vocab_size=VOCAB, logit_scale=3.0)
    draft = perturbed(target, 0.05)
    pair = ModelPair(target=LoadedModel(target, "tiny-target", CPU, torch.float32), tokenizer=DigitTokenizer(),
                     drafter=ModelDrafter(draft, VOCAB, CPU), drafter_kind="model",
                     draft=LoadedModel(draft, "tiny-draft", CPU, torch.float32), vocab_size=VOCAB)
    controls = Controls(ControlValues(k=3))
    live: list[tuple[Event, Estimate | None]] = []

    def user(event: Event, snapshot: Estimate | None) -> None:
        live.append((event, snapshot))
        if isinstance(event, IterationRecord):  # the user moves the controls between iterations
            if event.iteration == 40:
                controls.update(k=5)
            elif event.iteration == 90:
                controls.update(temperature=0.7)

    recorder = SessionRecorder(root / "sessions", {"prompt": "contract"}, writer_thread=True)
    options = SessionOptions(max_new_tokens=220, seed=3, memory_period_s=0, baseline_every=3, baseline_steps=2,
                             explore_every=8, drill=DrillSpec("draft", None, 20, 30), drill_folder=str(root),
                             measure_bandwidth=False, prompt_text="contract prompt")
    session = Session(pair, controls, options, run=Run(sinks=[recorder, user]))
    session.busy = ScriptedBusy(50, 62)
    session.run([3, 14, 15, 9, 26])
    recorder.close()
    return live, recorder.folder


def _snapshots(observed: list[tuple[Event, Estimate | None]]) -> list[Estimate | None]:
    return [s for _, s in observed]


def test_the_run_has_what_the_contract_is_about(recorded) -> None:
    live, _ = recorded
    events = [e for e, _ in live]
    assert isinstance(events[0], RunStarted) and isinstance(events[-1], RunFinished)
    changes = [e for e in events if isinstance(e, ControlChange)]
    assert [c.label for c in changes] == ["k 3→5", "T 0→0.7"]
    assert [e.kind for e in events if isinstance(e, DrillEvent)] == ["start", "end"]
    records = [e for e in events if isinstance(e, IterationRecord)]
    assert any(r.mode == "plain" for r in records) and any(r.explore for r in records)
    assert any(f.startswith(BUSY_PREFIX) for r in records for f in r.flags)
    final = live[-1][1]
    assert final is not None and final.segments == 3 and final.measured is not None


def test_replay_shows_exactly_what_the_live_run_showed(recorded) -> None:
    live, folder = recorded
    loaded = read_trace(folder)  # the autosaved event log
    assert loaded.warnings == [] and loaded.events == [e for e, _ in live]
    replayed = list(feed_all(loaded.events))
    assert _snapshots(replayed) == _snapshots(live)  # every snapshot, not only the last


def test_the_export_csv_and_json_summary_carry_the_snapshot(recorded, tmp_path) -> None:
    import csv

    live, _ = recorded
    events = [e for e, _ in live]
    paths = write_trace(tmp_path / "run.csv", events, {"prompt": "contract"})
    with paths.iterations.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    after_iteration = [s for e, s in live if isinstance(e, IterationRecord)]
    after_iteration[-1] = live[-1][1]  # the last row: the snapshot the run ends on (after run_finished)
    assert len(rows) == len(after_iteration)
    for row, snap in zip(rows, after_iteration, strict=True):
        assert snap is not None
        assert (float(row["alpha_run"]) if row["alpha_run"] else None) == snap.alpha
        if snap.measured is not None:
            assert float(row["measured_speedup"]) == snap.measured.value
            assert float(row["measured_speedup_lo"]) == snap.measured.lo
            assert row["measured_scope"] == snap.measured_scope
    assert rows[-1]["finish_reason"] == "max_new_tokens"
    final = live[-1][1]
    records = [e for e in events if isinstance(e, IterationRecord)]
    summary = run_summary(records, estimate=final)
    assert final is not None and final.measured is not None
    assert summary["alpha"] == final.alpha and summary["measured_speedup"] == final.measured.value
    assert summary["best_k"] == final.best_k and summary["verdict"] == final.verdict


def test_at_the_control_change_the_numbers_keep_their_scope(recorded) -> None:
    live, _ = recorded
    i = next(n for n, (e, _) in enumerate(live) if isinstance(e, ControlChange) and e.label == "T 0→0.7")
    before = live[i - 1][1]
    # the first iterations after a change are a baseline (plain steps): the first speculative one after them
    after = next(s for e, s in live[i + 1:] if isinstance(e, IterationRecord) and e.mode == "speculative")
    assert before is not None and after is not None and before.measured is not None
    # nothing blanks: the speed-up keeps a value and says what it is over; α stays the whole run's
    assert after.measured is not None and after.measured_scope == "run"
    assert after.segment is not None and after.segment.label.startswith("k=5, T=0.7 since it.")
    assert after.alpha_text().startswith(f"α {after.alpha:.2f} (run) · ")


def test_the_app_surfaces_show_the_snapshot(recorded, qtbot) -> None:
    from PySide6.QtWidgets import QStatusBar

    from specscope.app.run_data import RunData
    from specscope.app.widgets.alpha_plot import AlphaPlot
    from specscope.app.widgets.speedup_plot import SpeedupPlot
    from specscope.app.widgets.status_panel import StatusPanel

    live, _ = recorded
    data = RunData()
    data.extend(live)
    est = live[-1][1]
    assert est is not None and data.estimate == est
    bar = QStatusBar()
    qtbot.addWidget(bar)
    panel = StatusPanel(bar)
    panel.update(data)
    text = panel.metrics.text()
    assert est.alpha_text() in text and est.speedup_text() in text and est.rates_text() in text
    alpha_plot, speedup_plot = AlphaPlot(), SpeedupPlot()
    qtbot.addWidget(alpha_plot)
    qtbot.addWidget(speedup_plot)
    assert est.alpha_text() in alpha_plot.title_for(data)
    assert est.speedup_text() in speedup_plot.title_for(data)


def test_the_bench_reads_the_same_alpha(recorded) -> None:

    live, _ = recorded
    records = [e for e, _ in live if isinstance(e, IterationRecord)]
    final = live[-1][1]
    # the snapshot the bench's run ended on (run_specscope keeps it on the row), then what it fills the row with
    row = bench_runs.RunRow(round=0, method="k=3", prompt_id="p", prompt_kind="prose", tokens=0, seconds=1.0,
                            snapshot=final)
    bench_runs.fill_acceptance(row, records)
    assert final is not None and row.alpha == final.alpha and row.alpha is not None


@pytest.fixture(scope="module")
def cli_run(tmp_path_factory) -> tuple[dict, Path]:
    root = tmp_path_factory.mktemp("contract-cli")
    target = tiny_model(5, vocab_size=64, logit_scale=3.0)
    tdir = save_model_dir(root / "target", target, word_tokenizer())
    ddir = save_model_dir(root / "draft", perturbed(target, 0.05), word_tokenizer())
    trace = root / "run.csv"
    argv = ["run", "--target", str(tdir), "--draft", str(ddir), "--prompt", "w5 w6 w7", "--no-chat-template",
            "--max-new-tokens", "96", "--k", "3", "--baseline-every", "2", "--json", "--trace", str(trace),
            "--quiet"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(argv) == 0
    return json.loads(out.getvalue()), trace


def test_a_replayed_cli_trace_gives_the_cli_numbers(cli_run) -> None:
    """What the app shows for an opened trace (it replays the event log through the measurement) is what the
    CLI printed in --json, to the last bit."""
    js, trace = cli_run
    m = js["metrics"]
    assert m["measured_speedup"] is not None, "the run is long enough for an interval (>= 5 blocks)"
    est = replay(read_trace(trace).events).estimate()
    assert est is not None and est.measured is not None
    assert (est.alpha, est.tokens_per_s, est.wall_tokens_per_s) == (m["alpha"], m["tokens_per_s"],
                                                                   m["wall_tokens_per_s"])
    assert (est.measured.value, est.measured.lo, est.measured.hi) == (
        m["measured_speedup"], m["measured_speedup_lo"], m["measured_speedup_hi"])
    assert est.predicted_speedup == m["predicted_speedup"] and est.best_k == m["best_k"]
    assert est.cost is not None and est.cost.share == m["measurement_overhead"]


def test_a_snapshot_is_immutable() -> None:
    est = replay([]).estimate()
    assert est is None
    r = IterationRecord(0, "speculative", "t", ControlValues(k=2), [], 2, 1, 2, 1.0, 5.0, 0.1, 7.0, 0, 0, 0.0, 0.007)
    snap = replay([r]).estimate()
    assert snap is not None
    with pytest.raises(AttributeError):
        snap.alpha = 0.0  # type: ignore[misc]
    assert replace(snap, alpha=0.0).alpha == 0.0 and snap.alpha == 0.5


def test_specscope_report_on_the_autosave_ends_where_the_live_run_ended(recorded, capsys) -> None:
    """`specscope report FOLDER --json` replays the autosaved stream: the numbers the live run ended on."""
    live, folder = recorded
    assert main(["report", str(folder), "--json"]) == 0
    metrics = json.loads(capsys.readouterr().out)["metrics"]
    final = live[-1][1]
    assert final is not None and final.measured is not None
    assert metrics["alpha"] == final.alpha and metrics["best_k"] == final.best_k
    assert (metrics["measured_speedup"], metrics["measured_speedup_lo"], metrics["measured_speedup_hi"]) == (
        final.measured.value, final.measured.lo, final.measured.hi)
    assert metrics["predicted_speedup"] == final.predicted_speedup and metrics["verdict"] == final.verdict
