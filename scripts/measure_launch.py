#!/usr/bin/env python3
"""Launch-to-ready time of the app on the embedded demo (model already converted in the cache), with and
without one CPU hog, in interleaved rounds.

Each launch runs ``specscope --print-ready-time`` (offscreen, its own settings file, so the demo's default
drafter), which prints each loading step the status bar shows with its time since start and quits when the
pair is ready. Reported per launch: wall time to the window and to ready, the CPU seconds the app used, the
1-minute load average before it started, and the time spent in each step. A hog is one busy Python loop.

    .venv/bin/python scripts/measure_launch.py --rounds 3 [--drafter eagle] [--out launch.json]
    .venv/bin/python scripts/measure_launch.py --rounds 2 --engines process,thread   # the two paths, interleaved

``--engines``: process (the app's default: a worker process loads and decodes) and thread (the pair loads in
the window's own process, ``SPECSCOPE_IN_PROCESS=1``); several are interleaved within each round.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

STEP_LINE = re.compile(r"^\s*(\d+) ms\s+(.*)$")
READY_LINE = re.compile(r"^ready after (\d+) ms$")
# The status bar's progress lines, grouped into the steps the docs name (first match wins).
STEPS = (
    ("window visible", "imports (torch, transformers)"),
    ("Demo model found", "model load"),
    ("Loading the demo model", "model load"),
    ("Loading the demo", "drafter load"),
    ("Demo ready", "prepack"),
    ("Packing", "prepack"),
    ("Ready", "prepack"),
    ("Warming up", "warm-up (decode imports, bandwidth probe)"),
)
HOG = "while True:\n    pass\n"


def step_name(message: str) -> str:
    return next((name for prefix, name in STEPS if message.startswith(prefix)), message)


def launch(app: Path, drafter: str, timeout_s: float, engine: str = "process") -> dict[str, object]:
    """One launch; the step a line starts lasts until the next line."""
    with tempfile.TemporaryDirectory(prefix="specscope-launch-") as tmp:
        env = dict(os.environ, QT_QPA_PLATFORM="offscreen", SPECSCOPE_SETTINGS_FILE=str(Path(tmp) / "s.ini"),
                   SPECSCOPE_DATA_DIR=str(Path(tmp) / "data"), HF_HUB_OFFLINE="1")
        env.pop("SPECSCOPE_IN_PROCESS", None)
        if engine == "thread":
            env["SPECSCOPE_IN_PROCESS"] = "1"
        load = os.getloadavg()[0]
        started = time.monotonic()
        child = subprocess.Popen([str(app), "--drafter", drafter, "--print-ready-time"], env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines: list[tuple[float, str]] = []
        ready_ms = None
        assert child.stdout is not None
        for raw in child.stdout:
            m = STEP_LINE.match(raw)
            if m:
                lines.append((float(m.group(1)), m.group(2)))
            r = READY_LINE.match(raw.strip())
            if r:
                ready_ms = float(r.group(1))
            if time.monotonic() - started > timeout_s:
                child.kill()
                break
        _, status, usage = os.wait4(child.pid, 0)
        wall_s = time.monotonic() - started
    if ready_ms is None:
        raise SystemExit(f"the app did not report ready (exit status {status}); lines: {lines}")
    steps: dict[str, float] = {}
    marks = [*lines, (ready_ms, "ready")]
    for (t0, message), (t1, _) in itertools.pairwise(marks):
        name = step_name(message)
        steps[name] = steps.get(name, 0.0) + (t1 - t0) / 1000
    visible_s = next(t for t, m in lines if m == "window visible") / 1000
    return {"load_average": round(load, 2), "wall_s": round(wall_s, 2), "visible_s": round(visible_s, 2),
            "ready_s": round(ready_ms / 1000, 2), "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
            "steps_s": {k: round(v, 2) for k, v in steps.items()}}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--drafter", default="eagle")
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--out", type=Path, help="write every launch as JSON here")
    p.add_argument("--engines", default="process", help="process, thread or both (comma-separated)")
    args = p.parse_args()
    engines = [e.strip() for e in args.engines.split(",") if e.strip()]
    if not engines or any(e not in ("process", "thread") for e in engines):
        print("measure_launch: --engines takes process, thread or process,thread", file=sys.stderr)
        return 2
    if args.rounds < 1:
        print("measure_launch: --rounds must be at least 1", file=sys.stderr)
        return 2
    app = Path(sys.executable).with_name("specscope")
    results: dict[str, list[dict[str, object]]] = {}
    for r in range(args.rounds):
        for condition in (("quiet", "one hog") if r % 2 == 0 else ("one hog", "quiet")):  # interleaved
            for engine in (engines if r % 2 == 0 else engines[::-1]):
                hog = subprocess.Popen([sys.executable, "-c", HOG]) if condition == "one hog" else None
                try:
                    result = launch(app, args.drafter, args.timeout, engine)
                finally:
                    if hog is not None:
                        hog.kill()
                        hog.wait()
                key = condition if engines == ["process"] else f"{condition}, {engine}"
                results.setdefault(key, []).append(result)
                print(f"round {r + 1} {key:18s} load {result['load_average']:5.2f}  visible "
                      f"{result['visible_s']:5.1f} s  ready {result['ready_s']:5.1f} s  cpu {result['cpu_s']:5.1f} s  "
                      + "  ".join(f"{k} {v:.1f}" for k, v in result["steps_s"].items()), flush=True)  # type: ignore[union-attr]
    for condition, runs in results.items():
        ready = [float(x["ready_s"]) for x in runs]  # type: ignore[arg-type]
        cpu = [float(x["cpu_s"]) for x in runs]  # type: ignore[arg-type]
        print(f"{condition}: ready median {statistics.median(ready):.1f} s (min {min(ready):.1f}, max "
              f"{max(ready):.1f}); CPU median {statistics.median(cpu):.1f} s")
    if args.out:
        args.out.write_text(json.dumps({"drafter": args.drafter, "cpus": os.cpu_count(), "launches": results},
                                       indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
