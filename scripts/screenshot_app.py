"""Drive the real app for the README screenshot: load the demo, decode the showcase preset, grab the window.

Run under a display (scripts/screenshot.sh starts Xvfb). If the demo cannot load, a synthetic trace is
replayed instead so the screenshot still shows every view. Writes the Qt grab to the given PNG and touches
``<png>.done`` so the shell script can take its own ``import -window root`` capture while the app lingers.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


SHOWCASE_PROMPT_ID = "struct-list-field"  # structured ▸ "Repeat a list, adding a field"


def main() -> int:
    from specscope.core.drafter_catalogue import DRAFTER_KINDS  # torch-free: the one list of drafter kinds

    p = argparse.ArgumentParser()
    p.add_argument("out", help="PNG to write")
    p.add_argument("--iterations", type=int, default=70)
    p.add_argument("--linger-ms", type=int, default=4000)
    p.add_argument("--drafter", default="lookup", choices=DRAFTER_KINDS,
                   help="the demo's drafter (lookup: the one that wins on this CPU for structured text)")
    p.add_argument("--timeout-s", type=int, default=240)
    args = p.parse_args()

    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    from specscope.app.qt_check import binding_problem

    problem = binding_problem()
    if problem:
        print(problem, file=sys.stderr)
        return 1
    from specscope.app.pair_choice import PairChoice
    from specscope.app.settings import AppSettings, make_qsettings
    from specscope.app.window import MainWindow

    app = QApplication(sys.argv[:1])
    tmp = Path(tempfile.mkdtemp(prefix="specscope-shot-"))
    window = MainWindow(settings=AppSettings(make_qsettings(str(tmp / "settings.ini"))), data_dir=tmp,
                        check_interrupted=False)
    window.resize(1600, 1000)
    window.panel.max_new.setValue(400)
    # The README's showcase is the shipped preset itself, so the presets give what the screenshot shows.
    from specscope.core.prompts import load_prompt_sets

    showcase = next(p for p in load_prompt_sets()["structured"] if p.id == SHOWCASE_PROMPT_ID)
    window.panel.set_prompt_text(showcase.text)
    window.show()
    state: dict[str, bool] = {"done": False, "frozen": False}

    def fallback(reason: str) -> None:
        if not state.get("tried_lookup"):
            # The demo target without its trained draft: prompt lookup still shows every view.
            state["tried_lookup"] = True
            print(f"demo draft unavailable ({reason}); trying the demo with prompt lookup", flush=True)
            window.load_pair(PairChoice(drafter="lookup"))
            return
        replay_synthetic(reason)

    def replay_synthetic(reason: str) -> None:
        from specscope.core.trace.files import write_trace
        from tests.app_helpers import synthetic_records

        print(f"demo unavailable ({reason}); replaying a synthetic trace", flush=True)
        events = synthetic_records(400, k=4, accept=lambda i: (i * 7) % 5, flag_every=97)
        write_trace(tmp / "synthetic.csv", events, {"note": "synthetic"})
        window.files.open_trace(tmp / "synthetic.csv")

    def check() -> None:
        n = len(window.data.records)
        ended = not window.state.active and n > 0
        if (n >= args.iterations or ended) and not state["frozen"]:
            state["frozen"] = True
            window.tick()
            if window.state == "running":
                window.set_paused(True)  # freeze the view while both captures are taken
            return
        # Grab what a user sees a moment after pausing: every plot caught up with the last record (live,
        # the plots redraw one a tick, so a grab at the pause showed each ending at a different iteration).
        if state["frozen"] and not state["done"] and not window.plots.stale(window.data):
            state["done"] = True
            n = len(window.data.records)
            window.grab().save(args.out, "PNG")
            Path(args.out + ".done").write_text(f"{n}\n")
            print(f"saved {args.out} after {n} iterations", flush=True)
            QTimer.singleShot(args.linger_ms, window.close)

    window.pair_failed.connect(fallback)  # a window signal: handled on the GUI thread
    window.pair_ready.connect(window.start_run)
    QTimer.singleShot(0, lambda: window.load_pair(PairChoice(drafter=args.drafter)))
    poll = QTimer(window)
    poll.timeout.connect(check)
    poll.start(250)
    QTimer.singleShot(args.timeout_s * 1000, lambda: (print("timed out", flush=True), window.close()))
    try:
        return int(app.exec())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # the run's autosave and settings: a few MB a screenshot


if __name__ == "__main__":
    raise SystemExit(main())
