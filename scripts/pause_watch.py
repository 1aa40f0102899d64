"""Dump every thread's stack of a process while its GUI thread is stalled (used by bench_gui.py).

    python scripts/pause_watch.py PID HEARTBEAT_FILE OUT_PREFIX [--max-dumps 12] [--stale-ms 150] [--native]

The watched process writes ``time.monotonic_ns()`` as 8 bytes into HEARTBEAT_FILE from its GUI thread every
few milliseconds. This watcher runs in its own process, so it keeps running when the watched one holds its
GIL, and it runs ``py-spy dump`` whenever the heartbeat is older than ``--stale-ms``: one dump per poll
while the stall lasts, so a long pause gets a series. ``--native`` adds C/C++ frames; each such dump stops
the process for 0.3-1.5 s on 2 cores, so it lengthens the pause it records. Each dump goes to
``OUT_PREFIX.N`` with the staleness on its first line.
"""

from __future__ import annotations

import argparse
import mmap
import os
import shutil
import struct
import subprocess
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("pid", type=int)
    p.add_argument("heartbeat")
    p.add_argument("out_prefix")
    p.add_argument("--max-dumps", type=int, default=12)
    p.add_argument("--stale-ms", type=float, default=100.0)
    p.add_argument("--native", action="store_true")
    args = p.parse_args()
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        print("pause_watch: py-spy is not installed (pip install py-spy); no dumps", file=sys.stderr)
        return 2
    with open(args.heartbeat, "r+b") as f:
        beat = mmap.mmap(f.fileno(), 8)
        dumps = 0
        while dumps < args.max_dumps:
            time.sleep(0.01)
            try:
                os.kill(args.pid, 0)
            except OSError:
                return 0
            last = struct.unpack("q", beat[:8])[0]
            if last == 0:
                continue
            stale_ms = (time.monotonic_ns() - last) / 1e6
            if stale_ms < args.stale_ms:
                continue
            cmd = [py_spy, "dump", "--pid", str(args.pid)] + (["--native"] if args.native else [])
            out = subprocess.run(cmd, capture_output=True, text=True)
            with open(f"{args.out_prefix}.{dumps}", "w", encoding="utf-8") as o:
                o.write(f"GUI thread stalled for {stale_ms:.0f} ms when this dump began\n{out.stdout}{out.stderr}")
            dumps += 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
