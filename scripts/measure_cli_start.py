"""Time ``specscope COMMAND --help`` of two source trees, interleaved (issue 38 item 6: the CLI must not import torch).

    python scripts/measure_cli_start.py BEFORE_TREE AFTER_TREE [--rounds 5] [--commands attach,run]

Each tree is a checkout (e.g. ``git archive COMMIT | tar -x -C DIR``); it is put first on PYTHONPATH through a
folder of links laid out as the installed package (specscope/, specscope/core, specscope/app), so the editable
install of the venv is shadowed. Rounds alternate the order (before, after / after, before) so a change in the
machine's load falls on both sides; each round gives one ratio before / after per command.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def package_view(tree: Path, into: Path) -> Path:
    pkg = into / "specscope"
    pkg.mkdir(parents=True)
    for f in (tree / "specscope_pkg").iterdir():
        (pkg / f.name).symlink_to(f.resolve())
    for name in ("core", "app", "resources"):
        (pkg / name).symlink_to((tree / name).resolve())
    return into


def once(site: Path, command: str) -> float:
    env = dict(os.environ, PYTHONPATH=str(site))
    code = f"from specscope.launcher import main; main([{command!r}, '--help'])"
    t = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - t
    if "usage:" not in done.stdout:
        raise SystemExit(f"{command} --help failed in {site}: {done.stderr[-500:]}")
    return elapsed


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("before", type=Path)
    p.add_argument("after", type=Path)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--commands", default="attach,run")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sites = {"before": package_view(args.before, Path(tmp) / "before"),
                 "after": package_view(args.after, Path(tmp) / "after")}
        for command in args.commands.split(","):
            times: dict[str, list[float]] = {"before": [], "after": []}
            ratios = []
            for r in range(args.rounds):
                order = ["before", "after"] if r % 2 == 0 else ["after", "before"]
                got = {side: once(sites[side], command) for side in order}
                for side in got:
                    times[side].append(got[side])
                ratios.append(got["before"] / got["after"])
                print(f"{command} round {r + 1}: before {got['before']:.2f} s, after {got['after']:.2f} s, "
                      f"ratio {ratios[-1]:.1f}", flush=True)
            print(f"{command} --help: median before {statistics.median(times['before']):.2f} s, after "
                  f"{statistics.median(times['after']):.2f} s; per-round ratio median {statistics.median(ratios):.1f} "
                  f"(min {min(ratios):.1f}, max {max(ratios):.1f}) over {args.rounds} interleaved rounds", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
