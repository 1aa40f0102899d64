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

from specscope.core.commands.cli_checks import EXIT_USAGE, MAX_NEW, Parser, file_path, print_error, whole_number
from specscope.core.drafter_catalogue import DEFAULT_DRAFTER, DEMO_DRAFTER, DRAFTER_KINDS, default_drafter

T0 = time.monotonic()



def build_parser() -> argparse.ArgumentParser:
    p = Parser(prog="specscope", description="Watch speculative decoding live.")
    p.add_argument("--target", help="target model: 'demo', a directory, or a hub id in the local cache")
    p.add_argument("--draft", help="draft model (for --drafter model)")
    p.add_argument("--drafter", choices=DRAFTER_KINDS,
                   help=f"how proposals are made (default: {DEMO_DRAFTER} for the demo, {DEFAULT_DRAFTER} for "
                        "a target of your own)")
    p.add_argument("--device", help="device for the models: cpu, cuda, cuda:N, mps")
    p.add_argument("--dtype", help="auto, float32, float16, bfloat16")
    p.add_argument("--prompt", help="prompt text to put in the editor")
    p.add_argument("--open-trace", metavar="FILE", type=file_path, help="open a saved trace (no model is loaded)")
    p.add_argument("--no-load", action="store_true", help="do not load a model at start")
    p.add_argument("--run", action="store_true", help="start decoding as soon as the pair is loaded")
    p.add_argument("--max-new-tokens", type=MAX_NEW, help="tokens to generate")
    p.add_argument("--screenshot", metavar="PNG", type=file_path, help="save a grab of the window, then quit")
    p.add_argument("--screenshot-after", type=whole_number(0, 10**9), default=0, metavar="N",
                   help="with --screenshot: wait until N iterations are shown (0 = once a trace is shown)")
    p.add_argument("--print-visible-time", action="store_true", help=argparse.SUPPRESS)
    # scripts/measure_launch.py: print each loading step with its time since start, then quit once ready
    p.add_argument("--print-ready-time", action="store_true", help=argparse.SUPPRESS)
    return p


def _unattended_problem(args: argparse.Namespace) -> str | None:
    """Why a ``--screenshot`` run could not end by itself, in one sentence: nobody is there to dismiss a box.
    The grab's path is checked as the CLI checks an output path, and a trace to open is read once first."""
    from specscope.core.commands.cli_checks import CliError, check_writable

    try:
        check_writable(args.screenshot, "--screenshot")
    except CliError as exc:
        return str(exc)
    if args.open_trace:
        from specscope.core.trace.errors import TraceError
        from specscope.core.trace.files import read_trace

        try:
            read_trace(args.open_trace)
        except TraceError as exc:
            return f"cannot open trace {args.open_trace}: {exc}"
        except Exception as exc:  # as the window's Open trace: a foreign file can fail in ways not foreseen
            return f"cannot open trace {args.open_trace}: it is not a specscope trace ({exc})"
    return None


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(argv) if argv is not None else None)
    if args.open_trace and not args.open_trace.exists():
        print_error(f"no such trace: {args.open_trace}")
        return EXIT_USAGE
    if args.screenshot:
        problem = _unattended_problem(args)
        if problem is not None:
            print_error(problem)
            return EXIT_USAGE

    from specscope.app.display_check import display_problem

    no_screen = display_problem()
    if no_screen is not None:  # said before Qt, which would abort the process with a misleading message
        print_error(no_screen)
        return 1
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

    failed: list[str] = []
    if args.screenshot:
        _arm_screenshot(window, str(args.screenshot), args.screenshot_after, failed)
    _close_on_signals(app, window)
    rc = int(app.exec())
    return 1 if failed else rc


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


def _arm_screenshot(window, path: str, after: int, failed: list[str]) -> None:
    """Save a grab once ``after`` iterations are shown (or the run ended), then quit; a grab that cannot be
    saved is one sentence on stderr, noted in ``failed`` (the exit code)."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    def check() -> None:
        enough = len(window.data.records) >= max(1, after)
        ended = not window.state.active and len(window.data.records) > 0
        if enough or ended:
            timer.stop()
            window.tick()
            QApplication.processEvents()
            if not window.grab().save(path, "PNG"):
                failed.append(path)
                print_error(f"the screenshot could not be saved to {path}")
                QTimer.singleShot(0, window.close)
                return
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
