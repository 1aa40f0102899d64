"""GUI speed benchmark: time to window visible, event-loop latency while decoding, redraw rate with 20,000
iterations loaded, and memory growth over a long session. Prints one line per number (no pass/fail).

    .venv/bin/python scripts/bench_gui.py [--decode-seconds 10] [--iterations 20000] [--hogs 2]
    .venv/bin/python scripts/bench_gui.py --latency-only --engine thread|process   # an A/B of the two paths
    xvfb-run -s "-screen 0 1600x1000x24" .venv/bin/python scripts/bench_gui.py   # as users see it
    ... scripts/bench_gui.py --dump-pauses /tmp/pauses [--native]   # what every thread did in each pause
    ... scripts/bench_gui.py --latency-only --stretches [--profile-over 20]   # the GUI thread's CPU per event

Runs offscreen (QT_QPA_PLATFORM=offscreen unless a display is set); decoding uses a tiny random pair, so
the loop runs at full speed and the GUI gets the most records per second it will ever see. ``--hogs N``
starts N busy processes (one per core loads the machine fully) for the latency measurement, to show the
window on a machine that is doing something else too. ``--engine process`` (the app's default) decodes in a
worker process the window talks to through the worker protocol; ``--engine thread`` decodes on a thread of
the window's own process (``SPECSCOPE_IN_PROCESS=1``), as the app did before.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from specscope.core.measure.metrics import percentile  # noqa: E402  (after the platform is chosen)


def rss_mib() -> float:
    import psutil

    return psutil.Process().memory_info().rss / 2**20


def time_to_visible(runs: int = 3) -> list[float]:
    """Wall time from spawning ``specscope`` to its window being shown (no model load)."""
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "SPECSCOPE_SETTINGS_FILE": f"{tmp}/s.ini", "SPECSCOPE_DATA_DIR": tmp}
        for _ in range(runs):
            t0 = time.monotonic()
            proc = subprocess.Popen([sys.executable, "-m", "specscope.app.main", "--no-load",
                                     "--print-visible-time"], stdout=subprocess.PIPE, text=True, env=env)
            assert proc.stdout is not None
            line = proc.stdout.readline()
            elapsed = time.monotonic() - t0
            proc.kill()
            proc.wait()
            if "window visible" not in line:
                raise RuntimeError(f"the app did not report a visible window: {line!r}")
            out.append(elapsed)
    return out


def count_plot_paints() -> list[int]:
    """Count every plot's paint from now on (a wrapper around pyqtgraph's GraphicsView.paintEvent)."""
    import pyqtgraph as pg

    count = [0]
    paint = pg.GraphicsView.paintEvent

    def counted(view: object, event: object) -> object:
        count[0] += 1
        return paint(view, event)

    pg.GraphicsView.paintEvent = counted
    return count


def start_pause_watch(folder: Path, native: bool) -> tuple[mmap.mmap, subprocess.Popen]:
    """A heartbeat the GUI thread writes, and a watcher process that dumps stacks when it goes stale."""
    folder.mkdir(parents=True, exist_ok=True)
    beat_path = folder / "heartbeat"
    beat_path.write_bytes(b"\0" * 8)
    beat_file = beat_path.open("r+b")
    heartbeat = mmap.mmap(beat_file.fileno(), 8)
    watcher = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "pause_watch.py"), str(os.getpid()),
                                str(beat_path), str(folder / "pause")] + (["--native"] if native else []))
    return heartbeat, watcher


def tiny_pair_dirs(root: Path) -> tuple[Path, Path]:
    """A tiny random target and draft saved as model folders, made in a subprocess: importing torch here
    would put it in the window's process, which the worker-process path keeps free of it. Their context is
    long enough to decode for the whole measurement (the tests' 512 positions end the run after 2-3 s)."""
    code = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
            "from tests.models import save_model_dir, tiny_model, word_tokenizer; r = Path(sys.argv[2]); "
            "t, d = tiny_model(0, logit_scale=4.0), tiny_model(1, logit_scale=4.0); "
            "t.config.max_position_embeddings = d.config.max_position_embeddings = 1 << 16; "
            "save_model_dir(r / 'target', t, word_tokenizer()); save_model_dir(r / 'draft', d, word_tokenizer())")
    subprocess.run([sys.executable, "-c", code, str(ROOT), str(root)], check=True, capture_output=True)
    return root / "target", root / "draft"


# The demo's answer to the window's default prompt ends by itself after ~3.7 s, which left most of a 10 s
# measurement an idle window; asked for a long list, the embedded demo decodes for minutes.
DEMO_PROMPT = "List one hundred facts about the ocean, numbered, one per line."


def thread_cpu() -> dict[str, float]:
    """CPU seconds so far of each thread of this process, by name (threads of one name summed): a Python
    thread by its ``threading`` name (the GUI thread is MainThread), any other by the system's."""
    import psutil

    python_names = {t.native_id: t.name for t in threading.enumerate()}
    out: dict[str, float] = {}
    for t in psutil.Process().threads():
        try:
            name = python_names.get(t.id) or Path(f"/proc/self/task/{t.id}/comm").read_text().strip()
        except OSError:
            name = "?"
        out[name] = out.get(name, 0.0) + t.user_time + t.system_time
    return out


def run_delay_ns() -> int:
    """Nanoseconds the calling thread has so far spent runnable but waiting for a core (the kernel's
    schedstat; 0 where the system does not keep it)."""
    try:
        return int(Path(f"/proc/self/task/{threading.get_native_id()}/schedstat").read_text().split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--decode-seconds", type=float, default=10.0)
    p.add_argument("--iterations", type=int, default=20_000)
    p.add_argument("--hogs", type=int, default=0, help="busy processes beside the decode (latency part)")
    p.add_argument("--pair", choices=("tiny", "demo", "none"), default="tiny",
                   help="tiny: a random pair decoding as fast as the loop goes (the most records a second); "
                        "demo: the embedded demo with its default drafter, as a first-time user runs it; none: no "
                        "decode, the idle window's lateness (what the machine alone costs)")
    p.add_argument("--session-iterations", type=int, default=54_000, help="30 min at 30 iterations/s")
    p.add_argument("--dump-pauses", metavar="DIR", type=Path,
                   help="while decoding, save py-spy stack dumps of every thread whenever the GUI thread "
                        "stalls over 150 ms (scripts/pause_watch.py; needs py-spy)")
    p.add_argument("--native", action="store_true", help="with --dump-pauses: C/C++ frames too (slow)")
    p.add_argument("--engine", choices=("process", "thread"), default="process",
                   help="process: a worker process decodes (the app's default); thread: the window's own process")
    p.add_argument("--stretches", action="store_true",
                   help="time every event the GUI thread dispatches while decoding (its CPU) and list the longest "
                        "(scripts/gui_stretches.py)")
    p.add_argument("--profile-over", metavar="MS", type=float,
                   help="with --stretches: cProfile each stretch and print the profiles of the longest over MS")
    p.add_argument("--latency-only", action="store_true",
                   help="only the latency while decoding (no time to visible, redraw or memory parts)")
    args = p.parse_args()
    if args.engine == "thread":
        os.environ["SPECSCOPE_IN_PROCESS"] = "1"
    else:
        os.environ.pop("SPECSCOPE_IN_PROCESS", None)

    from specscope.app.qt_check import binding_problem

    if not args.latency_only:
        visible = time_to_visible()
        print(f"time to window visible: median {statistics.median(visible):.2f} s (runs: "
              + ", ".join(f"{v:.2f}" for v in visible) + ")")

    from PySide6.QtCore import QElapsedTimer, QEventLoop, QTimer
    from PySide6.QtWidgets import QApplication

    if args.stretches:
        from scripts.gui_stretches import StretchApplication

        app: QApplication = StretchApplication(sys.argv[:1])
    else:
        app = QApplication(sys.argv[:1])
    problem = binding_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    from specscope.app.pair_choice import PairChoice
    from specscope.app.run_controller import TICK_MS
    from specscope.app.settings import AppSettings, make_qsettings
    from specscope.app.window import MainWindow

    tmp = Path(tempfile.mkdtemp(prefix="specscope-bench-"))
    paints = count_plot_paints()  # before the plots exist: PySide binds a virtual override at construction
    window = MainWindow(settings=AppSettings(make_qsettings(str(tmp / "s.ini"))), data_dir=tmp,
                        check_interrupted=False)
    window.resize(1600, 1000)
    window.show()

    # 1. Event-loop latency while decoding at full speed (tiny pair: hundreds of iterations per second).
    loaded = []
    window.pair_ready.connect(lambda: loaded.append(True))
    failed: list[str] = []
    window.pair_failed.connect(failed.append)
    if args.pair == "demo":
        window.load_pair(PairChoice())
    elif args.pair == "tiny":
        target, draft = tiny_pair_dirs(tmp / "tiny")
        window.load_pair(PairChoice(target=str(target), draft=str(draft), drafter="model"))
    else:
        loaded.append(True)
    while not loaded and not failed:
        app.processEvents()
    if failed:
        print(f"the pair did not load: {failed[0]}", file=sys.stderr)
        return 1
    window.panel.max_new.setValue(1_000_000)
    if args.pair == "demo":
        window.panel.set_prompt_text(DEMO_PROMPT)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.hogs)]
    paints[0] = 0
    cpu_before, wall_before = thread_cpu(), time.monotonic()
    if args.stretches:
        app.start(args.profile_over)  # type: ignore[attr-defined]
    ended_at: list[tuple[float, str]] = []  # the run ended by itself during the measurement: when, and how
    window.run_ended.connect(lambda how: ended_at.append((time.monotonic() - wall_before, how)))
    if args.pair != "none":
        window.start_run()
    lateness: list[float] = []
    probe_at: list[float] = []  # when each probe ran, seconds after Start
    probe_wall: list[float] = []  # ... on the monotonic clock (to line probes up with --stretches)
    clock = QElapsedTimer()
    clock.start()
    last = [clock.nsecsElapsed()]
    period_ms = 10

    pauses: list[tuple[float, float]] = []  # (seconds after Start, ms) of each pause over 150 ms
    heartbeat = watcher = None
    if args.dump_pauses is not None:
        heartbeat, watcher = start_pause_watch(args.dump_pauses, args.native)

    # The GUI thread's own CPU time between probes: on a shared machine a late probe is either the window
    # computing (its own work) or the window waiting for a core or for the GIL (the machine, another thread).
    own_ms: list[float] = []
    last_cpu = [time.thread_time()]
    # ... and how long it sat runnable without a core (the kernel's run delay; Linux only)
    waited_ms: list[float] = []
    last_wait = [run_delay_ns()]

    def probe() -> None:
        if heartbeat is not None:
            heartbeat[:8] = struct.pack("q", time.monotonic_ns())
        now = clock.nsecsElapsed()
        cpu = time.thread_time()
        lateness.append(max(0.0, (now - last[0]) / 1e6 - period_ms))
        probe_at.append(now / 1e9)
        probe_wall.append(time.monotonic())
        own_ms.append(1000 * (cpu - last_cpu[0]))
        wait = run_delay_ns()
        waited_ms.append((wait - last_wait[0]) / 1e6)
        last_wait[0] = wait
        if lateness[-1] > 150:
            pauses.append((now / 1e9, lateness[-1]))
        last[0] = now
        last_cpu[0] = cpu

    timer = QTimer()
    timer.setInterval(period_ms)
    timer.timeout.connect(probe)
    timer.start()
    # A local loop, not app.exec(): quitting the application would shut the window's worker down with it.
    loop = QEventLoop()
    QTimer.singleShot(int(args.decode_seconds * 1000), loop.quit)
    loop.exec()
    timer.stop()
    ended_early = list(ended_at)  # before the stop below ends it too
    if args.stretches:
        app.stop()  # type: ignore[attr-defined]
    cpu_after, wall = thread_cpu(), time.monotonic() - wall_before
    if watcher is not None:
        watcher.terminate()
        watcher.wait()
        print(f"stack dumps of the pauses: {args.dump_pauses}/pause.N")
    for h in hogs:
        h.kill()
        h.wait()
    n_live = len(window.data.records)
    ended: list[str] = []
    window.run_ended.connect(ended.append)
    window.stop_run()
    while not ended and window.controller.state.active:  # the run may have ended by itself already
        app.processEvents()
    where = f"display {os.environ['DISPLAY']}" if os.environ.get("QT_QPA_PLATFORM") != "offscreen" else "offscreen"
    print(f"event-loop latency while decoding ({args.pair} pair, decoding in a {args.engine}, {where}, "
          f"{args.hogs} busy processes beside it, "
          f"{n_live / args.decode_seconds:.0f} iterations/s, "
          f"{len(lateness)} probes): p50 {percentile(lateness, 50):.1f} ms, "
          f"p99 {percentile(lateness, 99):.1f} ms, max {max(lateness):.1f} ms, "
          f"{sum(1 for x in lateness if x > 150)} pauses over 150 ms")
    if ended_early:
        print(f"the run ended by itself {ended_early[0][0]:.1f} s after Start ({ended_early[0][1]}): the rest of the "
              "measurement is the window idle after it")
    if pauses:
        print("pauses over 150 ms (s after Start: ms): " + ", ".join(f"{t:.2f}: {ms:.0f}" for t, ms in pauses))
    # where the tail is: a run's first second (every plot's first curves, axes and key) or its steady state
    latest = sorted(range(len(lateness)), key=lateness.__getitem__, reverse=True)[:max(8, len(lateness) // 100)]
    print("the latest probes (s after Start: ms late, ms of the GUI thread's CPU, ms it waited for a core): "
          + ", ".join(f"{probe_at[i]:.2f}: {lateness[i]:.0f}, {own_ms[i]:.0f}, {waited_ms[i]:.0f}"
                      for i in sorted(latest)))
    late = [(x, c) for x, c in zip(lateness, own_ms, strict=True) if x > 100]
    print(f"the GUI thread's own CPU between probes: p99 {percentile(own_ms, 99):.1f} ms, max "
          f"{max(own_ms):.1f} ms; of the {len(late)} probes later than 100 ms, "
          f"{sum(1 for _, c in late if c > 50)} were mostly its own work (over 50 ms of CPU)")
    print(f"plot paints while decoding: {paints[0] / args.decode_seconds:.0f} a second (6 plots; the tick, "
          f"~{1000 / TICK_MS:.0f} a second, redraws one plot in turn)")
    if args.stretches:
        from scripts.gui_stretches import report, report_collections

        # what the GUI thread did between each of the latest probes and the one before (its stretches)
        t0 = app._t0  # type: ignore[attr-defined]
        for i in sorted(latest):
            if i == 0:
                continue
            lo, hi = probe_wall[i - 1] - t0, probe_wall[i] - t0
            inside = [s for s in app.stretches if lo <= s.end_s <= hi and s.cpu_ms >= 0.5]  # type: ignore[attr-defined]
            print(f"  probe at {probe_at[i]:.2f} s, {lateness[i]:.0f} ms late: " + ", ".join(
                f"{s.label} {s.cpu_ms:.1f}" + (" (" + ", ".join(f"{k} {v:.1f}" for k, v in s.paints.items()
                                                                 if v >= 0.5) + ")" if s.paints else "")
                for s in inside))

        print(report(app.stretches))  # type: ignore[attr-defined]
        print(report_collections(app.collections))  # type: ignore[attr-defined]
    print(f"torch imported in the window's process: {'yes' if 'torch' in sys.modules else 'no'}")
    used = {n: cpu_after.get(n, 0.0) - cpu_before.get(n, 0.0) for n in cpu_after}
    busiest = sorted(((v, n) for n, v in used.items() if v > 0.005 * wall), reverse=True)[:4]
    print(f"the window's process used {100 * sum(used.values()) / wall:.0f}% of a core while decoding ("
          + ", ".join(f"{n} {100 * v / wall:.0f}%" for v, n in busiest) + ")")
    if args.latency_only:
        window.close()
        shutil.rmtree(tmp, ignore_errors=True)  # the tiny pair and the run's autosave
        return 0
    from tests.app_helpers import synthetic_records

    # 2. Redraw rate with many iterations loaded: one new record per frame, then a synchronous repaint.
    window._reset_view()
    events = synthetic_records(args.iterations + 200, k=4, flag_every=500)
    rss0 = rss_mib()
    t0 = time.perf_counter()
    window.ingest(events[: args.iterations + 1])
    t_ingest = time.perf_counter() - t0
    app.processEvents()
    frames = 40
    t0 = time.perf_counter()
    for i in range(frames):
        window.ingest([events[args.iterations + 1 + i]])
        window.plots.refresh(window.data)  # every plot, not one per tick
        window.plots.grab()  # forces a full, synchronous paint of all six plots
    fps = frames / (time.perf_counter() - t0)
    print(f"redraw with {args.iterations} iterations loaded: {fps:.1f} frames/s (all six plots, one new "
          f"iteration per frame); loading them took {t_ingest:.2f} s")
    per_it = (rss_mib() - rss0) * 2**20 / args.iterations
    print(f"memory: {rss_mib() - rss0:.0f} MiB for {args.iterations} iterations ({per_it / 1024:.1f} KiB per "
          "iteration: records, tokens, plot columns)")

    # 3. A long session fed like a live run (10 iterations per tick); RSS sampled along the way.
    window._reset_view()
    app.processEvents()
    base = rss_mib()
    samples = []
    batch = 10
    template = synthetic_records(batch, k=4)[1:]
    for i in range(0, args.session_iterations, batch):
        window.ingest(template)
        if i % (args.session_iterations // 6) < batch:
            samples.append((i, rss_mib() - base))
    samples.append((args.session_iterations, rss_mib() - base))
    print("session growth (iterations: MiB above start): "
          + ", ".join(f"{i}: {m:.0f}" for i, m in samples))
    window.close()
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
