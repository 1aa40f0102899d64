"""What measuring costs a run: the decode span with the default measurement against the same run with it off.

For each drafter, in interleaved rounds (A B, then B A, ...), ``specscope run --demo --json`` decodes the same
prompt greedily twice: with the default measurement (baselines of plain steps that commit their tokens, spaced
by the budget; occasional exploration of unmeasured pass lengths) and with both off (``--baseline-every 0
--explore-every 0``). Reported per drafter, as medians over rounds:

- the span ratio: wall time from the first iteration's start to the last one's end, measured over off — the
  number the issue's 1.05 target is about (the same tokens are decoded either way: greedy outputs are checked
  identical);
- the measurement's own overhead share as the run reports it (``measurement_overhead`` in ``--json``);
- the measured speed-up and the width of its interval (hi / lo) with the measurement on;
- the decode CPU ratio: the process CPU time inside iterations (each record's ``cpu_ms``, read from the run's
  trace), measured over off. Other programs on a shared machine stretch wall time far more than CPU time,
  so this says what the measurement's own work costs when the span ratio drowns in their noise (it leaves
  out the bookkeeping between iterations, which the overhead share reports).

    .venv/bin/python scripts/bench_overhead.py [--drafters model,lookup,eagle] [--rounds 2] [--max-new-tokens 128]
        [--threads 2] [--out docs/bench-overhead.md]

Whole processes are timed by the run itself (its own span), so start-up and model loading do not count.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = {
    "model": "Explain in a short paragraph why the sky is blue.",
    "eagle": "Write a Python function that returns the n-th Fibonacci number, with a docstring.",
    "lookup": "Repeat this list exactly, adding a field 'ok': true to each item: "
              "[{'id': 1, 'name': 'alpha'}, {'id': 2, 'name': 'beta'}, {'id': 3, 'name': 'gamma'}]",
}


def one_run(drafter: str, measured: bool, max_new: int, threads: int) -> dict:
    from specscope.core.records import IterationRecord
    from specscope.core.trace.files import read_trace

    folder = Path(tempfile.mkdtemp(prefix="specscope-overhead-"))
    trace = folder / "run.csv"
    cmd = [sys.executable, "-m", "specscope", "run", "--demo", "--drafter", drafter, "--json", "--quiet",
           "--max-new-tokens", str(max_new), "--prompt", PROMPTS[drafter], "--trace", str(trace)]
    if not measured:
        cmd += ["--baseline-every", "0", "--explore-every", "0"]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env, cwd=ROOT).stdout
    js = json.loads(out)
    m = js["metrics"]
    records = [e for e in read_trace(trace).events if isinstance(e, IterationRecord)]
    shutil.rmtree(folder, ignore_errors=True)
    return {"tokens": js["token_ids"], "span_ms": m["measurement_overhead_ms"]["wall"],
            "overhead": m["measurement_overhead"], "measured": m["measured_speedup"],
            "lo": m["measured_speedup_lo"], "hi": m["measured_speedup_hi"], "note": m["measured_speedup_note"],
            "plain_iterations": m["plain_iterations"], "iterations": m["iterations"],
            "explored": m["exploration_iterations"], "cpu_ms": sum(r.cpu_ms or 0.0 for r in records),
            "modes": "".join("P" if r.mode == "plain" else "x" if r.explore else "0" if r.n_drafted == 0 else "."
                             for r in records)}


def interval_text(run: dict) -> str:
    if run["measured"] is None:
        return f"— ({run['note']})"
    return f"×{run['measured']:.2f} ({run['lo']:.2f}–{run['hi']:.2f})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drafters", default="model,lookup,eagle")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    drafters = [d for d in args.drafters.split(",") if d]
    rows: dict[str, list[tuple[dict, dict]]] = {d: [] for d in drafters}
    started = time.time()
    for r in range(args.rounds):
        for d in drafters:
            order = (True, False) if r % 2 == 0 else (False, True)
            got = {m: one_run(d, m, args.max_new_tokens, args.threads) for m in order}
            rows[d].append((got[True], got[False]))
            on, off = got[True], got[False]
            print(f"round {r} {d}: span on {on['span_ms']:.0f} ms, off {off['span_ms']:.0f} ms, ratio "
                  f"{on['span_ms'] / off['span_ms']:.3f}, decode CPU ratio {on['cpu_ms'] / off['cpu_ms']:.3f}, "
                  f"overhead {on['overhead']:.3f}, identical {on['tokens'] == off['tokens']}, load "
                  f"{os.getloadavg()[0]:.1f}; on: {on['modes']}; measured {interval_text(on)}", flush=True)
    lines = [
        "# Measurement overhead (scripts/bench_overhead.py)",
        "",
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {args.threads} threads, {args.rounds} interleaved "
        f"rounds, {args.max_new_tokens} new tokens, demo pair, greedy; {time.time() - started:.0f} s in all; load "
        f"average {os.getloadavg()[0]:.1f} at the end.",
        "",
        "| drafter | span on / off (median, min–max) | decode CPU on / off (median, min–max) | overhead share "
        "reported | measured speed-up (interval), each round | hi/lo | plain steps / iterations | explored | outputs "
        "identical |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for d, pairs in rows.items():
        ratios = [on["span_ms"] / off["span_ms"] for on, off in pairs]
        cpu = [on["cpu_ms"] / off["cpu_ms"] for on, off in pairs]
        shares = [on["overhead"] for on, _ in pairs if on["overhead"] is not None]
        last = pairs[-1][0]
        interval = "; ".join(interval_text(on) for on, _ in pairs)
        spread = "; ".join(f"{on['hi'] / on['lo']:.2f}" if on["measured"] is not None else "—" for on, _ in pairs)
        lines.append(
            f"| {d} | {statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f}) | "
            f"{statistics.median(cpu):.3f} ({min(cpu):.3f}–{max(cpu):.3f}) | "
            f"{100 * statistics.median(shares):.1f}% | {interval} | {spread} | "
            f"{last['plain_iterations']} / {last['iterations']} | {last['explored']} | "
            f"{all(on['tokens'] == off['tokens'] for on, off in pairs)} |")
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
