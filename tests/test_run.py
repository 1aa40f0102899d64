"""The Run (core/measure/run.py): the one place a measurement is built, the α window it records, the snapshots
export writes. No model: synthetic records (tests/app_helpers.py)."""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

from specscope.core.events import ALPHA_WINDOW, RunFinished, RunStarted
from specscope.core.measure.run import Run, replay
from specscope.core.records import ControlValues, IterationRecord
from specscope.core.trace.chrome_trace import chrome_trace
from specscope.core.trace.event_log import decode, encode
from specscope.core.trace.files import read_trace, write_trace
from tests.app_helpers import synthetic_records, synthetic_stream

ROOT = Path(__file__).resolve().parents[1]
# the one module that builds a Measurement; everything else is fed one through a Run
ALLOWED = {Path("core/measure/run.py")}


def _constructions(path: Path) -> list[int]:
    """Lines of ``path`` that call ``Measurement(...)`` (by name or as an attribute)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            if name == "Measurement":
                lines.append(node.lineno)
    return lines


def test_only_the_run_builds_a_measurement() -> None:
    found = {}
    for folder in ("core", "app", "scripts", "specscope_pkg"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            lines = _constructions(path)
            if lines:
                found[path.relative_to(ROOT)] = lines
    assert set(found) == ALLOWED, f"Measurement( built outside core/measure/run.py: {found}"


def _stream(window: int, n: int = 60) -> list:
    """A run that recorded ``window`` as its α window: acceptance that changes every few iterations, so a
    window of 4 and one of 32 give different recent-window numbers."""
    started = RunStarted(source="local", target="t", draft="d", drafter="model", description="", prompt="p",
                         prompt_tokens=3, controls=ControlValues(k=4), max_new_tokens=500, alpha_window=window)
    records = synthetic_records(n, k=4, accept=lambda i: 4 if (i // 5) % 2 else 0, baseline_every=8)
    finished = RunFinished("max_new_tokens", len(records), sum(r.n_emitted for r in records), 1.0, 2.0)
    return [started, *records, finished]


def test_a_non_default_alpha_window_survives_record_and_replay(tmp_path) -> None:
    live = Run()  # the consumer's run: the window comes from the stream's RunStarted
    for event in _stream(4):
        live.feed(event)
    assert live.alpha_window == 4
    final = live.estimate()
    assert final is not None and final.window == 4
    # with the default window the recent numbers differ: the test would catch a replay that ignored the record
    default = Run(alpha_window=ALPHA_WINDOW)
    for event in _stream(4)[1:]:  # no RunStarted: nothing says otherwise
        default.feed(event)
    assert default.estimate() is not None and default.estimate().alpha_window != final.alpha_window

    paths = write_trace(tmp_path / "run.csv", live)
    loaded = read_trace(paths.iterations)
    started = next(e for e in loaded.events if isinstance(e, RunStarted))
    assert started.alpha_window == 4
    replayed = replay(loaded.events)
    assert replayed.alpha_window == 4 and replayed.snapshots == live.snapshots


def test_a_trace_from_before_the_window_was_recorded_opens_with_the_default() -> None:
    line = json.loads(encode(_stream(4)[0]))
    del line["alpha_window"]
    old = decode(line)
    assert isinstance(old, RunStarted) and old.alpha_window == ALPHA_WINDOW == 32


def test_export_writes_the_snapshots_the_run_holds(tmp_path) -> None:
    """Rows are the run's own snapshots, not a fresh replay's: a run measured over 4 iterations whose stream
    does not say so (no RunStarted) exports its window-4 numbers; a replay would have given window-32 ones."""
    events = _stream(4)[1:]
    run = Run(alpha_window=4)
    for event in events:
        run.feed(event)
    paths = write_trace(tmp_path / "run.csv", run)
    with paths.iterations.open(newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    after = [s for e, s in run.observed() if isinstance(e, IterationRecord)]
    after[-1] = run.snapshots[-1]  # the last row: after the run's end
    assert len(rows) == len(after)
    shown = [float(r["alpha_window"]) if r["alpha_window"] else None for r in rows]
    assert shown == [s.alpha_window if s is not None else None for s in after]
    replayed = [s.alpha_window if s is not None else None
                for e, s in replay(events).observed() if isinstance(e, IterationRecord)]
    assert shown[:-1] != replayed[:-1]
    # the Chrome trace's counters are the same snapshots (after each iteration)
    counters = [e["args"]["value"] for e in chrome_trace(run)["traceEvents"]
                if e.get("ph") == "C" and e["name"] == "alpha_window"]
    per_iteration = [s.alpha_window for e, s in run.observed()
                     if isinstance(e, IterationRecord) and s is not None and s.alpha_window is not None]
    assert counters and counters == per_iteration


def test_the_run_hands_each_event_and_its_snapshot_to_its_sinks_in_order() -> None:
    seen: list = []
    run = Run(sinks=[lambda e, s: seen.append((e, s))])
    events = _stream(8, n=20)
    for event, snapshot in run.follow(events):
        assert seen[-1] == (event, snapshot)
    assert seen == run.observed() and [e for e, _ in seen] == events
    assert run.started is events[0] and run.finished is events[-1] and run.records == events[1:-1]


def test_acceptance_by_position_starts_over_at_a_sampling_change_and_says_since_when() -> None:
    """The counts and the iteration they count from have one home (the window's title reads the latter)."""
    values = [ControlValues(k=3)] * 5 + [ControlValues(k=4)] * 5 + [ControlValues(k=4, temperature=0.7)] * 10
    records = synthetic_records(20, k=3, controls=values.__getitem__)
    est = replay(synthetic_stream(records)).estimate()
    changed_at = next(r.iteration for r in records if r.controls.temperature == 0.7)
    assert est is not None and est.positions_since == changed_at  # the k change before it kept the counts
    after = [r for r in records if r.iteration >= changed_at and r.mode == "speculative"]
    assert est.positions[0].reached == sum(1 for r in after if r.n_drafted)


def test_a_run_that_keeps_no_snapshots_still_exports_the_same_ones() -> None:
    events = _stream(5, n=40)
    kept, lean = Run(), Run(keep_snapshots=False)
    for event in events:
        assert kept.feed(event) == lean.feed(event)
    assert lean.snapshots == [] and len(kept.snapshots) == len(events)
    assert lean.observed() == kept.observed() and lean.estimate() == kept.estimate()
