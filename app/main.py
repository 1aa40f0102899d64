"""``specscope``: open the window at once, then load the demo (or the chosen pair) on the worker.

Nothing heavy is imported before the window is visible: torch and transformers load on the worker thread
when the pair loads. ``--screenshot-after N --screenshot FILE`` saves a grab of the window after N
iterations and exits (used by scripts/screenshot.sh).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from specscope.core.drafter_catalogue import DRAFTER_KINDS, default_drafter

T0 = time.monotonic()



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specscope", description="Watch speculative decoding live.")
    p.add_argument("--target", help="target model: 'demo', a directory, or a hub id in the local cache")
    p.add_argument("--draft", help="draft model (for --drafter model)")
    p.add_argument("--drafter", choices=DRAFTER_KINDS, help="how proposals are made (default: model)")
    p.add_argument("--device", help="device for the models: cpu, cuda, cuda:N, mps")
    p.add_argument("--dtype", help="auto, float32, float16, bfloat16")
    p.add_argument("--prompt", help="prompt text to put in the editor")
    p.add_argument("--open-trace", metavar="FILE", help="open a saved trace (no model is loaded)")
    p.add_argument("--no-load", action="store_true", help="do not load a model at start")
    p.add_argument("--run", action="store_true", help="start decoding as soon as the pair is loaded")
    p.add_argument("--max-new-tokens", type=int, help="tokens to generate")
    p.add_argument("--screenshot", metavar="PNG", help="save a grab of the window, then quit")
    p.add_argument("--screenshot-after", type=int, default=0, metavar="N",
                   help="with --screenshot: wait until N iterations are shown (0 = once a trace is shown)")
    p.add_argument("--print-visible-time", action="store_true", help=argparse.SUPPRESS)
    # scripts/measure_launch.py: print each loading step with its time since start, then quit once ready
    p.add_argument("--print-ready-time", action="store_true", help=argparse.SUPPRESS)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        print("specscope: --max-new-tokens must be at least 1", file=sys.stderr)
        return 2
    if args.open_trace and not Path(args.open_trace).exists():
        print(f"specscope: no such trace: {args.open_trace}", file=sys.stderr)
        return 2

    from specscope.app.qt_check import binding_problem

    problem = binding_problem()
    if problem:
        print(f"specscope: {problem}", file=sys.stderr)
        return 1
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from specscope.app.pair_choice import PairChoice
    from specscope.app.window import MainWindow

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("specscope")
    app.setOrganizationName("specscope")
    QApplication.setDesktopFileName("io.github.specscope.Specscope")  # Wayland app_id = packaging/*.desktop
    QApplication.setWindowIcon(_app_icon())
    window = MainWindow(check_interrupted=not args.open_trace and not args.screenshot)
    if args.prompt:
        window.panel.set_prompt_text(args.prompt)
    if args.max_new_tokens:
        window.panel.max_new.setValue(args.max_new_tokens)
    window.show()
    app.processEvents()
    if args.print_visible_time:
        print(f"window visible after {1000 * (time.monotonic() - T0):.0f} ms", flush=True)

    if args.print_ready_time:
        _print_steps_until_ready(window)

    choice = window.pair_choice
    if args.target or args.draft or args.drafter or args.device or args.dtype:
        target = args.target or "demo"
        choice = PairChoice(target=target, draft=args.draft or "",
                            drafter=args.drafter or default_drafter(target), target_device=args.device or "cpu",
                            target_dtype=args.dtype or "auto")
    if args.open_trace:
        window.files.open_trace(args.open_trace)
    elif not args.no_load:
        if args.run:
            window.pair_ready.connect(window.start_run)
        QTimer.singleShot(0, lambda: window.load_pair(choice))

    if args.screenshot:
        _arm_screenshot(window, args.screenshot, args.screenshot_after)
    _close_on_signals(app, window)
    return int(app.exec())


def _close_on_signals(app, window) -> None:
    """SIGTERM and SIGINT close the window as its close button does: the run stops, the autosave closes, and the
    worker process this app started is stopped (killed outright, the window would leave it serving)."""
    import signal

    from PySide6.QtCore import QTimer

    def close(_signum: int, _frame: object) -> None:
        QTimer.singleShot(0, window.close)

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, close)
    # Python runs a handler only when the interpreter runs; Qt's loop waits in C++, so a timer wakes it.
    wake = QTimer(app)
    wake.setObjectName("signal_wake")
    wake.timeout.connect(lambda: None)
    wake.start(250)
    app.aboutToQuit.connect(wake.stop)


def _print_steps_until_ready(window) -> None:
    """Each progress line the status bar shows, with the milliseconds since start; quit when ready."""
    from PySide6.QtCore import QTimer

    def step(message: str, _fraction: float = -1.0) -> None:
        print(f"{1000 * (time.monotonic() - T0):8.0f} ms  {message}", flush=True)

    def ready() -> None:
        print(f"ready after {1000 * (time.monotonic() - T0):.0f} ms", flush=True)
        QTimer.singleShot(0, window.close)

    step("window visible")
    window.controller.progress.connect(step)
    window.pair_ready.connect(ready)
    def failed(message: str) -> None:
        step(f"load failed: {message}")
        window.close()

    window.pair_failed.connect(failed)


def _app_icon():
    from importlib.resources import files

    from PySide6.QtGui import QIcon

    icons = files("specscope.resources") / "icons"
    icon = QIcon()
    for size in (16, 32, 48, 64, 128, 256):
        icon.addFile(str(icons / f"specscope-{size}.png"))
    return icon


def _arm_screenshot(window, path: str, after: int) -> None:
    """Save a grab once ``after`` iterations are shown (or the run ended), then quit."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    def check() -> None:
        enough = len(window.data.records) >= max(1, after)
        ended = not window.state.active and len(window.data.records) > 0
        if enough or ended:
            timer.stop()
            window.tick()
            QApplication.processEvents()
            window.grab().save(path, "PNG")
            print(f"screenshot saved: {path} ({len(window.data.records)} iterations)", flush=True)
            done = os.environ.get("SPECSCOPE_SCREENSHOT_DONE")
            if done:
                Path(done).write_text("ok\n")
            QTimer.singleShot(int(os.environ.get("SPECSCOPE_SCREENSHOT_LINGER_MS", "0")), window.close)

    timer = QTimer(window)
    timer.setInterval(200)
    timer.timeout.connect(check)
    timer.start()


if __name__ == "__main__":
    raise SystemExit(main())
