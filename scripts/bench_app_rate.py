"""The app's decode rate against the command line's on the same tiny pair: iterations per second of a run.

A tiny random pair (tests/app_helpers.py, "partial": a draft that is another tiny model) decodes as fast as
the loop goes, so what is measured is everything around the model: the session's joins, the measurement, the
autosave recorder and, in the app, the GUI thread draining the buffer, updating the run's data and
redrawing the plots while the worker decodes. Two paths, interleaved A B, B A, ...:

- ``cli``: what ``specscope run`` does — a ``Session`` with the autosave recorder as its sink, consumed in a
  plain loop with the loaded objects frozen (core/commands/cli.py ``cmd_run``);
- ``app``: the real window, offscreen, started with its Run action (``MainWindow.start_run``); the worker
  thread runs the session, the GUI timer drains and draws.

Each run's rate is its iterations over its decode span (first iteration's start to last one's end), so
loading and start-up do not count. Beside it, the process's CPU time per iteration (every thread: in the app
the GUI thread's work too), which other programs on a shared machine disturb far less than wall time. Prints
one line per run and the median ratios app / cli.

    QT_QPA_PLATFORM=offscreen .venv/bin/python scripts/bench_app_rate.py [--rounds 3] [--max-new-tokens 1500]
        [--profile FILE]   # cProfile of the GUI thread over one more app run, written to FILE
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if not os.environ.get("DISPLAY"):
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

PROMPT = "a tiny prompt for a tiny pair"


def span_rate(records: list[Any], cpu_s: float) -> tuple[int, float, float]:
    """(iterations, iterations per second over the decode span, process CPU ms per iteration)."""
    span = records[-1].t_end_s - records[0].t_start_s
    return len(records), len(records) / span if span > 0 else 0.0, 1000.0 * cpu_s / len(records)


def cli_run(values: Any, max_new: int, folder: Path) -> tuple[int, float, float]:
    from specscope.core.controls import Controls
    from specscope.core.gc_freeze import loaded_objects_frozen
    from specscope.core.session import Session, SessionOptions
    from specscope.core.trace.autosave import start_recorder
    from tests.app_helpers import make_pair

    pair = make_pair("partial")
    recorder, problem = start_recorder(folder, {"command": "run", "prompt": PROMPT})
    if recorder is None:
        raise RuntimeError(problem)
    session = Session(pair, Controls(values), SessionOptions(max_new_tokens=max_new, prompt_text=PROMPT),
                      sinks=[recorder])
    cpu0 = time.process_time()
    with loaded_objects_frozen():
        for _ in session.stream(pair.encode_prompt(PROMPT)):
            pass
    recorder.close(ok=True)
    return span_rate(session.records, time.process_time() - cpu0)


def app_run(window: Any, max_new: int, timeout_s: float = 600.0) -> tuple[int, float, float]:
    from PySide6.QtCore import QEventLoop, QTimer

    window.panel.max_new.setValue(max_new)
    loop = QEventLoop()
    ended: list[str] = []

    def on_end(how: str) -> None:
        ended.append(how)
        loop.quit()

    window.run_ended.connect(on_end)
    QTimer.singleShot(int(timeout_s * 1000), loop.quit)
    cpu0 = time.process_time()
    if not window.start_run():
        raise RuntimeError("the window did not start a run")
    loop.exec()
    cpu_s = time.process_time() - cpu0
    window.run_ended.disconnect(on_end)
    if not ended or not ended[0].startswith("finished"):
        raise RuntimeError(f"the app's run did not finish: {ended}")
    return span_rate(list(window.data.records), cpu_s)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=1500)
    ap.add_argument("--profile", type=Path, default=None)
    args = ap.parse_args()

    import torch
    from PySide6.QtCore import QEventLoop
    from PySide6.QtWidgets import QApplication

    torch.set_num_threads(1)
    from specscope.app.settings import AppSettings, make_qsettings
    from specscope.app.window import MainWindow
    from tests.app_helpers import pair_factory

    app = QApplication.instance() or QApplication(sys.argv)
    tmp = Path(tempfile.mkdtemp(prefix="specscope-rate-"))
    window = MainWindow(settings=AppSettings(make_qsettings(str(tmp / "settings.ini"))), data_dir=tmp / "data")
    window.resize(1400, 900)
    window.show()
    loop = QEventLoop()
    window.pair_ready.connect(loop.quit)
    window.load_pair(pair_factory("partial"))
    loop.exec()
    window.panel.set_prompt_text(PROMPT)
    values = window.panel.values()
    print(f"tiny 'partial' pair, k={values.k}, {args.max_new_tokens} new tokens, torch threads 1, "
          f"{args.rounds} interleaved rounds; load average {os.getloadavg()[0]:.1f}", flush=True)
    rates: dict[str, list[float]] = {"cli": [], "app": []}
    cpu: dict[str, list[float]] = {"cli": [], "app": []}
    app_run(window, 64)  # warm both paths once
    cli_run(values, 64, tmp / "cli")
    for r in range(args.rounds):
        for path in (("app", "cli") if r % 2 == 0 else ("cli", "app")):
            t0 = time.monotonic()
            n, rate, cpu_ms = app_run(window, args.max_new_tokens) if path == "app" else cli_run(
                values, args.max_new_tokens, tmp / "cli")
            rates[path].append(rate)
            cpu[path].append(cpu_ms)
            print(f"round {r} {path}: {n} iterations, {rate:.0f} iterations/s, {cpu_ms:.1f} ms CPU an iteration "
                  f"({time.monotonic() - t0:.1f} s)", flush=True)
    if args.rounds:
        ratios = [a / c for a, c in zip(rates["app"], rates["cli"], strict=True)]
        cpu_ratios = [a / c for a, c in zip(cpu["app"], cpu["cli"], strict=True)]
        print(f"app / cli iterations/s: median {statistics.median(ratios):.3f} (min {min(ratios):.3f}, max "
              f"{max(ratios):.3f}); app median {statistics.median(rates['app']):.0f}/s, cli median "
              f"{statistics.median(rates['cli']):.0f}/s")
        print(f"app / cli CPU an iteration: median {statistics.median(cpu_ratios):.3f} (min {min(cpu_ratios):.3f}, "
              f"max {max(cpu_ratios):.3f}); load average {os.getloadavg()[0]:.1f}")
    if args.profile is not None:
        import cProfile

        prof = cProfile.Profile()
        prof.enable()  # the GUI thread only: cProfile follows the thread that enabled it
        app_run(window, args.max_new_tokens)
        prof.disable()
        prof.dump_stats(str(args.profile))
        print(f"GUI thread profile: {args.profile}")
    window.close()
    app.processEvents()
    return 0


if __name__ == "__main__":
    sys.exit(main())
