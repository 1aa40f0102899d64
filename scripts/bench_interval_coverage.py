"""How often the measured speed-up's interval covers the truth, on synthetic event streams with a known speed-up
(tests/interval_sim.py: lognormal noise on every pass, spikes, slow drift; plain steps where a schedule puts them),
for the method the measurement uses (core/measure/speedup.py) and the block method it replaced (issue 25).

Per scenario: runs that gave an interval, the share of those whose interval covered the truth (nominal 95%),
the median hi/lo width, and the mean log error of the centre.

    .venv/bin/python scripts/bench_interval_coverage.py [--seeds 300] [--out docs/bench-interval-coverage.md]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import numpy as np

from tests.interval_sim import SCENARIOS, Coverage, block_interval, coverage


def cell(c: Coverage) -> str:
    if not c.shown:
        return f"0 / {c.runs} | — | — | —"
    return (f"{c.shown} / {c.runs} | {100 * c.rate:.1f}% | {c.median_width:.2f} | "
            f"{100 * float(np.mean(c.errors)):+.1f}%")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=300)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    started = time.time()
    lines = [
        f"Synthetic runs, {args.seeds} seeds a scenario (tests/interval_sim.py); 95% intervals.",
        "",
        "| scenario | plain steps at | new: shown | covers | hi/lo | bias | blocks: shown | covers | hi/lo | bias |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for sc in SCENARIOS:
        seeds = range(args.seeds)
        new, old = coverage(sc, seeds), coverage(sc, seeds, block_interval)
        where = ", ".join(str(p) for p in sc.plain_at) if len(sc.plain_at) <= 8 else f"{len(sc.plain_at)} steps"
        lines.append(f"| {sc.name} | {where} | {cell(new)} | {cell(old)} |")
        print(lines[-1], flush=True)
    lines += ["", f"{time.time() - started:.0f} s."]
    report = "\n".join(lines) + "\n"
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")
    else:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
