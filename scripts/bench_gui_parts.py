"""The pieces the GUI thread's longest stretches were made of, each timed alone (the GUI thread's CPU time, so a
shared machine's load matters less than for wall-clock latency). Prints one line per number.

    xvfb-run -a -s "-screen 0 1600x1000x24" .venv/bin/python scripts/bench_gui_parts.py

1. A repaint of the six plots, without and with a resize (a line more in the run panel above them), and with
   the splitter holding the plots' size as it does during a live run (app/live_layout.py).
2. The memory plot's first refresh with ten counters, and its first paint.
3. A full garbage collection in the window's process after start-up, with many records alive, and frozen.
4. The token view: appending 30 records at 4,000 to 190,000 tokens shown, and hiding rejected tokens.
5. Each live plot's refresh and repaint, alone (a plot panel without the window), 20 new iterations at a time
   after 2,000 and 6,000, with memory counters that hold between samples as the sampler's do (4 a second).
"""

from __future__ import annotations

import dataclasses
import gc
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

MEMORY_KEYS = ("host_rss_bytes", "host_available_bytes", "swap_used_bytes", "target_weights_cpu_bytes",
               "target_kv_bytes", "draft_weights_cpu_bytes", "draft_kv_bytes", "target_offloaded_bytes",
               "draft_offloaded_bytes", "io_read_bytes")


def cpu_ms(app: object, work: Callable[[], object], settle: int = 5) -> float:
    """The GUI thread's CPU for ``work`` and the events it posts (layouts, paints)."""
    t = time.thread_time()
    work()
    for _ in range(settle):
        app.processEvents()  # type: ignore[attr-defined]
    return 1000 * (time.thread_time() - t)


def sampled_memory(i: int) -> dict[str, float]:
    """Iteration i's memory counters at ~200 iterations/s: a sample every 50 iterations, weights constant."""
    s = i // 50
    return {"host_rss_bytes": 5.4e8 + s * 1e5, "host_available_bytes": 2.32e10 - (s % 7) * 1e6, "swap_used_bytes": 0.0,
            "target_weights_cpu_bytes": 1.7e5, "target_offloaded_bytes": 0.0, "draft_weights_cpu_bytes": 1.7e5,
            "draft_offloaded_bytes": 0.0, "target_kv_bytes": 2.9e5 * (s % 30) / 30,
            "draft_kv_bytes": 2.9e5 * (s % 30) / 30, "io_read_bytes": 0.0,
            "host_read_bytes_per_s": 0.0 if s % 5 else 8192.0,
            "host_rchar_bytes_per_s": 46684.0 + (s * 7919 % 1000)}


def live_plot_cycles(app: object, n: int) -> dict[str, float]:
    """Median CPU ms of one live plot's refresh and repaint, 20 new iterations each, after ``n`` iterations."""
    import numpy as np

    from specscope.app.run_data import RunData
    from specscope.app.widgets.plots_panel import PlotsPanel
    from specscope.core.measure.measurement import feed_all
    from specscope.core.records import IterationRecord
    from tests.app_helpers import synthetic_records

    rng = np.random.default_rng(1)
    events = [dataclasses.replace(e, draft_ms=e.draft_ms * (1 + 0.3 * rng.random()),
                                  verify_ms=e.verify_ms * (1 + 0.5 * rng.random()), memory=sampled_memory(i))
              if isinstance(e, IterationRecord) else e
              for i, e in enumerate(synthetic_records(n + 1600, k=4, baseline_every=40,
                                                      accept=lambda i: int(rng.integers(0, 5))))]
    observed = list(feed_all(events))
    panel = PlotsPanel()
    panel.resize(1290, 690)  # each plot about 640 x 256, as in a 1600 x 1000 window
    panel.show()
    data = RunData()
    data.extend(observed[:n])
    panel.refresh(data)
    for _ in range(10):
        app.processEvents()  # type: ignore[attr-defined]
    times: dict[str, list[float]] = {type(p).__name__: [] for p in panel.live_plots}
    at = n
    for turn in range(80):
        data.extend(observed[at:at + 20])
        at += 20
        plot = panel.live_plots[turn % 4]
        t = time.thread_time()
        plot.refresh(data)
        plot.viewport().repaint()
        times[type(plot).__name__].append(1000 * (time.thread_time() - t))
    panel.hide()
    return {name: statistics.median(xs) for name, xs in times.items()}


def main() -> int:
    from PySide6.QtWidgets import QApplication

    app = QApplication(sys.argv[:1])
    from specscope.app.live_layout import hold_plot_size
    from specscope.app.run_data import RunData
    from specscope.app.settings import AppSettings, make_qsettings
    from specscope.app.widgets.memory_plot import MemoryPlot
    from specscope.app.widgets.token_view import TokenView
    from specscope.app.window import MainWindow
    from specscope.core.measure.measurement import feed_all
    from specscope.core.records import IterationRecord
    from tests.app_helpers import synthetic_records

    plots_kept: list[object] = []

    tmp = Path(tempfile.mkdtemp(prefix="specscope-parts-"))
    w = MainWindow(settings=AppSettings(make_qsettings(str(tmp / "s.ini"))), data_dir=tmp, check_interrupted=False)
    w.resize(1600, 1000)
    w.show()
    for _ in range(20):
        app.processEvents()

    gc.unfreeze()  # what the window's first tick froze (app/run_controller.py): as before it did
    gc.collect()
    tracked = len(gc.get_objects())
    at_start = cpu_ms(app, gc.collect, settle=0)
    gc.freeze()
    w.ingest(synthetic_records(2000, k=4, flag_every=50))
    for _ in range(20):
        app.processEvents()
    plots = [*w.plots.live_plots, w.plots.positions, w.plots.k_advisor]

    def repaint_all() -> None:
        for p in plots:
            p.viewport().update()

    panel = w.run_panel
    rows = []
    for _ in range(3):
        plain = cpu_ms(app, repaint_all)
        grown = cpu_ms(app, lambda: panel.setMinimumHeight(panel.height() + 20))
        cpu_ms(app, lambda: panel.setMinimumHeight(0))
        hold_plot_size(w.splitter, True)
        held = cpu_ms(app, lambda: panel.setMinimumHeight(panel.height() + 20))
        cpu_ms(app, lambda: panel.setMinimumHeight(0))
        hold_plot_size(w.splitter, False)
        rows.append((plain, grown, held))
    print("1. the six plots repainted: " + ", ".join(f"{a:.1f}" for a, _, _ in rows) + " ms; a run panel 20 px "
          "taller (every plot resized and repainted): " + ", ".join(f"{b:.1f}" for _, b, _ in rows) + " ms; the same "
          "with the plots' size held (the token view takes it): " + ", ".join(f"{c:.1f}" for _, _, c in rows) + " ms")

    records = [dataclasses.replace(e, memory={k: 1e9 + i for i, k in enumerate(MEMORY_KEYS)})
               if isinstance(e, IterationRecord) else e for e in synthetic_records(50, k=4)]
    data = RunData()
    data.extend(list(feed_all(records)))
    firsts = []
    for _ in range(3):
        plot = MemoryPlot()
        plot.resize(600, 300)
        plot.show()
        app.processEvents()
        t = time.thread_time()
        plot.refresh(data)
        refresh = 1000 * (time.thread_time() - t)
        firsts.append((refresh, cpu_ms(app, lambda: None)))
        plot.hide()
        plots_kept.append(plot)  # a Qt wrapper collected later, inside a paint, can crash PySide
    print("2. the memory plot's first refresh with ten counters: " + ", ".join(f"{a:.1f}" for a, _ in firsts)
          + " ms; its first paint: " + ", ".join(f"{b:.1f}" for _, b in firsts) + " ms")

    recs = [r for r in synthetic_records(60_000, k=4) if isinstance(r, IterationRecord)]
    view = TokenView()
    view.resize(1200, 350)
    view.show()
    app.processEvents()
    i = 0
    lines = []
    for target in (1_000, 5_000, 20_000, 50_000):
        while i < target:
            view.append_records(recs[i:i + 200])
            i += 200
        app.processEvents()
        t = time.thread_time()
        view.append_records(recs[i:i + 30])
        append = 1000 * (time.thread_time() - t)
        lines.append(f"{len(view.shown_tokens()):,} tokens shown: {append:.1f} ms + {cpu_ms(app, lambda: None):.1f} ms "
                     "of events")
        i += 30
    hide = cpu_ms(app, lambda: view.set_show_rejected(False))
    print("4. the token view appending 30 records at " + "; ".join(lines) + f"; hiding rejected tokens then: "
          f"{hide:.0f} ms")

    for n in (2_000, 6_000):
        medians = live_plot_cycles(app, n)
        print(f"5. a live plot's refresh and repaint, 20 new iterations after {n:,}: "
              + ", ".join(f"{name} {ms:.1f}" for name, ms in medians.items()) + " ms (median of 20 each)")

    gc.unfreeze()
    gc.collect()
    alive = len(gc.get_objects())
    full = cpu_ms(app, gc.collect, settle=0)
    gc.freeze()
    frozen = cpu_ms(app, gc.collect, settle=0)
    print(f"3. a full garbage collection in the window's process after start-up: {at_start:.0f} ms ({tracked:,} "
          f"objects); with all of the above alive (60,000 records made for part 4): {full:.0f} ms ({alive:,} "
          f"objects); with them frozen: {frozen:.1f} ms")
    os._exit(0)  # no teardown: destroying the widgets is not what is measured


if __name__ == "__main__":
    raise SystemExit(main())
