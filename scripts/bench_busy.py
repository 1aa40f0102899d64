"""Busy-machine benchmark (issue 10): is the measured speed-up robust to another program taking the CPU?

Runs ``specscope run --demo --drafter lookup`` on a structured preset whose answer copies its input (so
speculation pays and the run is long enough for several plain steps among its iterations), alternately on a quiet
machine and with CPU hogs beside it (one busy process per core), ``--rounds`` times each, and reports the
measured speed-up with its interval, and how many iterations were flagged "machine busy" or as paging.
The busy runs must be flagged, and their interval must cover the quiet figure or be within 10% of it.

    .venv/bin/python scripts/bench_busy.py --rounds 3 --out docs/bench-busy.md
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run_once(prompt: str, max_new: int, hogs: int) -> dict:
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(hogs)]
    try:
        t0 = time.monotonic()
        out = subprocess.run(
            [sys.executable, "-m", "specscope.core.commands.cli", "run", "--demo", "--drafter", "lookup",
             "--prompt", prompt, "--max-new-tokens", str(max_new), "--json", "--quiet"],
            capture_output=True, text=True, timeout=1800, check=False)
        wall = time.monotonic() - t0
    finally:
        for p in procs:
            p.kill()
            p.wait()
    if out.returncode != 0:
        raise SystemExit(f"specscope run failed: {out.stderr.strip()[-500:]}")
    js = json.loads(out.stdout)
    js["wall_s"] = wall
    return js


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=200)
    ap.add_argument("--preset", default="struct-list-field",
                    help="structured preset id (the demo answers struct-table-json in 27 tokens: too short)")
    ap.add_argument("--hogs", type=int, default=os.cpu_count() or 2, help="busy processes beside the busy runs")
    ap.add_argument("--out", type=Path, default=Path("docs/bench-busy.md"))
    args = ap.parse_args()
    from specscope.core.prompts import load_prompt_sets

    presets = {p.id: p for p in load_prompt_sets()["structured"]}
    if args.preset not in presets:
        raise SystemExit(f"no structured preset {args.preset!r}; choose one of {', '.join(presets)}")
    preset = presets[args.preset]
    rows = []
    for rnd in range(args.rounds):
        for label, hogs in (("quiet", 0), ("busy", args.hogs)) if rnd % 2 == 0 else (("busy", args.hogs), ("quiet", 0)):
            js = run_once(preset.text, args.max_new_tokens, hogs)
            m = js["metrics"]
            rows.append({"round": rnd + 1, "label": label, "iterations": m["iterations"],
                         "measured": m["measured_speedup"], "lo": m["measured_speedup_lo"],
                         "hi": m["measured_speedup_hi"], "plain": m["measured_speedup_plain_samples"],
                         "note": m["measured_speedup_note"], "busy": len(js["busy_flags"]),
                         "left_out": m.get("measured_speedup_busy_iterations_left_out", 0),
                         "paging": len(js["paging_flags"]), "tok_s": m["tokens_per_s"],
                         "plain_ms": m["plain_step_ms"], "wall_s": js["wall_s"]})
            print(rows[-1], file=sys.stderr, flush=True)
    quiet = [r for r in rows if r["label"] == "quiet" and r["measured"] is not None]
    busy = [r for r in rows if r["label"] == "busy"]
    quiet_figure = statistics.median(r["measured"] for r in quiet) if quiet else None
    lines = [
        "# Measured speed-up on a quiet and a busy machine",
        "",
        f"- Command: `.venv/bin/python scripts/bench_busy.py --rounds {args.rounds} --max-new-tokens "
        f"{args.max_new_tokens} --hogs {args.hogs} --preset {preset.id}`",
        f"- What runs: `specscope run --demo --drafter lookup --prompt <structured preset '{preset.id}'> "
        f"--max-new-tokens {args.max_new_tokens} --json`; busy runs have {args.hogs} `while True: pass` "
        "processes beside them; quiet and busy alternate, the order flipping each round.",
        f"- Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.",
        "",
        "| round | machine | iterations | measured × plain (95% interval) | plain steps used "
        "| busy iterations left out | busy flags | paging flags | tok/s | plain step ms |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        measured = (f"{r['measured']:.2f} ({r['lo']:.2f}–{r['hi']:.2f})" if r["measured"] is not None
                    else r["note"])
        lines.append(f"| {r['round']} | {r['label']} | {r['iterations']} | {measured} | {r['plain']} "
                     f"| {r['left_out']} | {r['busy']} "
                     f"| {r['paging']} | {r['tok_s']:.1f} | {r['plain_ms']:.1f} |")
    lines += ["", "## Verdict", ""]
    if quiet_figure is None:
        lines.append("No quiet run reached enough plain steps for a measured speed-up.")
    else:
        lines.append(f"Quiet figure (median of the quiet runs' centres): ×{quiet_figure:.2f}.")
        for r in busy:
            flagged = r["busy"] > 0 and r["paging"] == 0
            if r["measured"] is None:
                ok_text = f"no measured number ({r['note']})"
            else:
                covers = r["lo"] <= quiet_figure <= r["hi"]
                near = abs(r["measured"] / quiet_figure - 1.0) <= 0.10
                ok_text = (f"interval {'covers' if covers else 'misses'} the quiet figure, centre "
                           f"{100 * (r['measured'] / quiet_figure - 1):+.0f}% "
                           f"({'ok' if covers or near else 'NOT ok'})")
            verdict = "flagged busy, not paging" if flagged else "NOT flagged as it should be"
            lines.append(f"- busy round {r['round']}: {verdict}; {ok_text}")
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
