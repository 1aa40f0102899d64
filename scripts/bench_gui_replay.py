"""The GUI thread's CPU per tick while a recorded run is fed to the window at the live pace: the same events,
chunk by chunk, through the run controller's tick and the views' live schedule (a 33 ms tick, the 0.1 s period),
offscreen. Only the window's own work is timed (``time.thread_time``), so two trees compare on a shared machine
where wall-clock latency follows the other programs; the decode is not run, so the window gets the same events in
both. Prints one line: CPU per tick (p50, p90, p99, max), the total, the plot turns, and the paints by plot.

    .venv/bin/specscope run --target T --draft D --max-new-tokens 600 --prompt "hello world the cat" --trace RUN
    .venv/bin/python scripts/bench_gui_replay.py RUN [--per-tick 2]
    PYTHONPATH=/tmp/other-tree/pp .venv/bin/python scripts/bench_gui_replay.py RUN   # another tree's app, A/B

(``/tmp/other-tree/pp/specscope`` links ``specscope_pkg``'s files, ``app``, ``core`` and ``resources`` of a
checkout of the other commit: a plain package found on PYTHONPATH before the venv's editable finder.)
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

TICK_S = 0.033  # the run controller's tick


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("trace", type=Path, help="a trace written by specscope run --trace")
    p.add_argument("--per-tick", type=int, default=2,
                   help="events handed to each tick (2: one iteration and its neighbour at ~30 iterations/s)")
    p.add_argument("--dearest", type=int, default=0, metavar="N",
                   help="also list the N dearest ticks: each plot's paint and each axis picture regenerated in them")
    args = p.parse_args()

    import pyqtgraph as pg  # type: ignore[import-untyped]
    from PySide6.QtWidgets import QApplication

    app = QApplication(sys.argv[:1])
    from specscope.app.run_state import RunState
    from specscope.app.settings import AppSettings, make_qsettings
    from specscope.app.window import MainWindow
    from specscope.core.trace.files import read_trace

    try:
        from specscope.core.measure.run import feed_all
    except ImportError:  # a tree from before core/measure/run.py (2 Dec)
        from specscope.core.measure.measurement import feed_all  # type: ignore[attr-defined,no-redef]

    paints: collections.Counter[str] = collections.Counter()
    paint = pg.GraphicsView.paintEvent
    in_tick: list[str] = []  # what the current tick drew, for --dearest

    def counted(view: object, event: object) -> object:
        paints[type(view).__name__] += 1
        started = time.thread_time()
        try:
            return paint(view, event)
        finally:
            in_tick.append(f"{type(view).__name__} {1000 * (time.thread_time() - started):.1f}")

    pg.GraphicsView.paintEvent = counted  # before the plots exist: PySide binds a virtual override at construction
    axis_paint = pg.AxisItem.paint
    axes_redrawn: collections.Counter[str] = collections.Counter()

    def axis_counted(axis: pg.AxisItem, *paint_args: object) -> object:
        if axis.picture is not None:  # replayed from its picture (or not at all: the axes are pixmap-cached)
            return axis_paint(axis, *paint_args)
        views = axis.scene().views() if axis.scene() is not None else []
        name = f"{type(views[0]).__name__ if views else '?'}.{axis.orientation}"
        axes_redrawn[name] += 1
        started = time.thread_time()
        try:
            return axis_paint(axis, *paint_args)
        finally:
            in_tick.append(f"  axis {name} {1000 * (time.thread_time() - started):.1f}")

    pg.AxisItem.paint = axis_counted
    tmp = Path(tempfile.mkdtemp(prefix="specscope-replay-bench-"))
    window = MainWindow(settings=AppSettings(make_qsettings(str(tmp / "s.ini"))), data_dir=tmp,
                        check_interrupted=False)
    window.resize(1600, 1000)
    window.show()
    app.processEvents()
    controller = window.controller
    controller.timer.stop()  # the ticks below are the only ones
    observed = list(feed_all(read_trace(args.trace).events))
    controller.reset_data()
    controller.state = RunState.RUNNING  # the views draw at the live pace (RunViews.on_frame)
    if hasattr(window, "views"):  # and lay out what a live run holds (the run panel's k line, the plots' axes)
        window.views.render_state(controller.state)
    app.processEvents()
    paints.clear()
    costs: list[float] = []
    held: list[list[str]] = []
    due = time.monotonic()
    for i in range(0, len(observed), args.per_tick):
        due += TICK_S
        time.sleep(max(0.0, due - time.monotonic()))
        app.processEvents()
        in_tick.clear()
        started = time.thread_time()
        controller._pending.extend(observed[i:i + args.per_tick])
        controller.tick()
        for _ in range(3):  # the paints the tick asked for (a plot's may wait a turn of the loop: paint_later)
            app.processEvents()
        costs.append(1000 * (time.thread_time() - started))
        held.append(list(in_tick))
    dearest = sorted(range(len(costs)), key=costs.__getitem__, reverse=True)[:args.dearest]
    dear = [(i, costs[i], held[i]) for i in dearest]
    costs.sort()
    n = len(costs)
    print(f"{n} ticks of {args.per_tick} events: the GUI thread's CPU per tick p50 {costs[n // 2]:.1f}, "
          f"p90 {costs[int(0.9 * n)]:.1f}, p99 {costs[min(n - 1, int(0.99 * n))]:.1f}, max {costs[-1]:.1f} ms; "
          f"{sum(costs) / 1000:.2f} s in all; {window.plots._turn} plot turns; paints "
          + ", ".join(f"{k} {v}" for k, v in sorted(paints.items()))
          + "; axis pictures redrawn " + ", ".join(f"{k} {v}" for k, v in sorted(axes_redrawn.items())))
    for i, cost, drawn in dear:
        print(f"  tick {i} ({i * args.per_tick} events in): {cost:.1f} ms: " + ", ".join(drawn))
    controller.state = RunState.STOPPED
    window.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
