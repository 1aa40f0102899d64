"""Paging you can see: paging and busy bands apart, the drill's iterations, the models' bytes on the memory plot's
axis (the machine's totals on request), what a step read as a rate, and the time plot pointing at the same
iterations."""

from __future__ import annotations

import os
from dataclasses import replace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("pytestqt")

from specscope.app.run_data import BUSY, PAGING, RunData
from specscope.core.measure.busy import BUSY_PREFIX
from specscope.core.memory.detector import step_read_rates
from specscope.core.records import DrillEvent
from specscope.core.units import GIB, MIB

from .app_helpers import make_window, qt_binding_broken, synthetic_records, synthetic_stream

needs_qt = pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))

BUSY_SENTENCE = f"{BUSY_PREFIX}: the process got 30% of a core during this step"
STREAMING = "target: 30 of 30 layers on disk, 405 MiB read during the step — weights are being streamed from disk."
DRILL_AT, DRILL_END = 12, 20  # the drill holds the target's layers on disk for iterations 12..19


def drill_run(n: int = 30) -> list:
    """A busy machine all along (every iteration flagged busy) with a target drill in the middle: its
    iterations streamed 405 MiB a step and say so; the models' bytes are small beside the host's totals."""
    records = synthetic_records(n, k=4)
    out = []
    for r in records:
        drilled = DRILL_AT <= r.iteration < DRILL_END
        memory = {"host_available_bytes": 21 * GIB, "host_rss_bytes": 1.7 * GIB, "swap_used_bytes": 0.5 * GIB,
                  "target_weights_cpu_bytes": 0.0 if drilled else 0.4 * GIB,
                  "target_weights_disk_bytes": 0.4 * GIB if drilled else 0.0,
                  "target_kv_bytes": 0.01 * GIB, "target_offload_read_bytes": 405 * MIB if drilled else 0.0}
        flags = [BUSY_SENTENCE] + ([STREAMING] if drilled else [])
        out.append(replace(r, memory=memory, flags=flags, iteration_ms=500.0, draft_ms=100.0, verify_ms=399.0))
    events = synthetic_stream(out)
    at = next(i for i, e in enumerate(events) if getattr(e, "iteration", None) == DRILL_AT)
    events.insert(at, DrillEvent("start", "target", 30, 30, "disk", DRILL_AT, moved_bytes=int(0.4 * GIB)))
    end = next(i for i, e in enumerate(events) if getattr(e, "iteration", None) == DRILL_END)
    events.insert(end, DrillEvent("end", "target", 30, 30, "disk", DRILL_END, moved_bytes=int(0.4 * GIB)))
    return events


def test_paging_and_busy_flags_are_bands_of_their_own_and_the_drill_a_span():
    data = RunData()
    data.extend([(e, None) for e in drill_run()])
    # busy everywhere: one busy band over the whole run; the drill's streaming flags one paging band, not
    # merged into the busy one ("68 flags in this band; the last: draft: 3 of 3 layers on disk")
    first = data.records[0].iteration
    last = data.records[-1].iteration
    assert [(b.start, b.end, b.kind) for b in data.busy_bands] == [(first, last, BUSY)]
    assert [(b.start, b.end, b.kind, b.count) for b in data.paging_bands] == [
        (DRILL_AT, DRILL_END - 1, PAGING, DRILL_END - DRILL_AT)]
    assert [(d.start, d.end) for d in data.drills] == [(DRILL_AT, DRILL_END - 1)]
    # the run panel's warning names paging while it is no older than the busy band
    warning = data.latest_warning()
    assert warning is not None and warning.kind == PAGING


def test_a_step_read_is_a_rate_over_the_phase_it_was_read_in():
    r = synthetic_records(1, k=4)[-1]
    r = replace(r, draft_ms=100.0, iteration_ms=500.0, mode="speculative",
                memory={"target_offload_read_bytes": 400 * MIB, "draft_offload_read_bytes": 10 * MIB,
                        "io_read_bytes": 50 * MIB})
    rates = step_read_rates(r)
    assert rates["target_read_bytes_per_s"] == pytest.approx(400 * MIB / 0.4)  # over the verify phase
    assert rates["draft_read_bytes_per_s"] == pytest.approx(10 * MIB / 0.1)  # over the draft phase
    assert rates["io_read_bytes_per_s"] == pytest.approx(50 * MIB / 0.5)
    plain = replace(r, mode="plain", draft_ms=0.0, memory={"target_offload_read_bytes": 400 * MIB})
    assert step_read_rates(plain) == {"target_read_bytes_per_s": pytest.approx(400 * MIB / 0.5)}
    assert step_read_rates(replace(r, memory={})) == {}


@needs_qt
def test_the_memory_plot_spans_the_models_bytes_and_the_machines_totals_on_request(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.ingest(drill_run())
    memory = w.plots.memory
    drawn = {k for k, item in memory.series.items() if item.isVisible()}
    assert drawn == {"target_weights_cpu_bytes", "target_weights_disk_bytes", "target_kv_bytes",
                     "target_read_bytes_per_s"}
    assert "host_available_bytes" in memory.series  # there, not drawn
    # the left axis spans the weights (0.4 GiB), not the host's 21 GiB available
    assert memory.plot_item.vb.viewRange()[1][1] < 1.0
    # what the drill read is a rate on the right axis: 405 MiB in 0.4 s of verify
    rate = memory.series["target_read_bytes_per_s"].getData()[1]
    assert max(rate) == pytest.approx(405 / 0.4)
    assert memory.right.viewRange()[1][1] >= 405 / 0.4
    assert not any("host" in k.group for k in memory.keys)

    memory.totals_box.setChecked(True)
    assert memory.series["host_available_bytes"].isVisible()
    assert memory.plot_item.vb.viewRange()[1][1] >= 21.0
    colours = {e.colour for e in memory.keys if e.group == "host"}
    assert len(colours) == 3  # rss, available, swap: a colour each
    memory.totals_box.setChecked(False)
    assert memory.plot_item.vb.viewRange()[1][1] < 1.0


@needs_qt
def test_the_time_plot_and_the_memory_plot_point_at_the_drills_iterations(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.ingest(drill_run())
    for plot in (w.plots.timing, w.plots.memory):
        lanes = plot.lanes
        assert [(b.start, b.end) for b in lanes.paging.bands] == [(DRILL_AT - 0.5, DRILL_END - 0.5)]
        assert [(b.start, b.end) for b in lanes.drill.bands] == [(DRILL_AT - 0.5, DRILL_END - 0.5)]
        assert len(lanes.busy.bands) == 1
        # the paging band is the one under the mouse at a drilled iteration, and says paging
        assert "paging" in (lanes.paging.band_at(DRILL_AT + 1).tip if lanes.paging.band_at(DRILL_AT + 1) else "")
        assert lanes.paging.zValue() > lanes.busy.zValue()
        assert lanes.busy.lane[1] < 0.1  # busy is a strip at the bottom, paging spans the plot
        assert lanes.paging.lane == (0.0, 1.0)
    w.plots.reset()
    assert not w.plots.timing.lanes.paging.bands and not w.plots.memory.lanes.drill.bands
