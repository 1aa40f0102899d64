"""What the one-token kernel does to plain decoding and to every speed-up over it: the demo run with one-token
steps on PyTorch's default kernel (``--one-token-kernel default``, what specscope shipped before 2026-12-03)
against the kernel timed fastest at load (``auto``), interleaved.

    .venv/bin/python scripts/bench_one_token_kernel.py [--rounds 2] [--max-new-tokens 128]
        [--drafters plain,eagle,lookup,suffix,model] [--out docs/bench-one-token-kernel.md]

Each run is ``specscope run --demo --drafter D --max-new-tokens N --json`` (plain: ``--plain``) in a process of
its own; the arms alternate which goes first each round. Reported per drafter and arm: the plain step (ms),
the decode rate (tokens/s), the measured speed-up with its interval, and whether the two arms' greedy tokens
agreed (the kernels round differently in the last bits, so a near-tie may flip).
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
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
ARMS = ("default", "auto")


def run_once(drafter: str, arm: str, max_new: int, data_dir: str) -> dict[str, Any]:
    cmd = [str(ROOT / ".venv/bin/specscope"), "run", "--demo", "--max-new-tokens", str(max_new), "--json",
           "--one-token-kernel", arm]
    cmd += ["--plain"] if drafter == "plain" else ["--drafter", drafter]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "SPECSCOPE_DATA_DIR": data_dir},
                         check=True)
    got = json.loads(out.stdout)
    m = got["metrics"]
    return {"tokens": got["token_ids"], "plain_step_ms": m.get("plain_step_ms"), "tokens_per_s": m.get("tokens_per_s"),
            "speedup": m.get("measured_speedup"), "lo": m.get("measured_speedup_lo"),
            "hi": m.get("measured_speedup_hi"), "tokens_per_iteration": m.get("tokens_per_iteration")}


def _median(rows: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return statistics.median(values) if values else None


def _fmt(x: float | None, spec: str) -> str:
    return "—" if x is None else format(x, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--drafters", default="plain,eagle,lookup,suffix,model")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    data_dir = f"/tmp/specscope-otk-{os.getpid()}"
    drafters = args.drafters.split(",")
    results: dict[tuple[str, str], list[dict[str, Any]]] = {(d, a): [] for d in drafters for a in ARMS}
    started = time.time()
    for r in range(args.rounds):
        for d in drafters:
            for arm in (ARMS if r % 2 == 0 else ARMS[::-1]):
                row = run_once(d, arm, args.max_new_tokens, data_dir)
                results[(d, arm)].append(row)
                print(f"round {r} {d:7s} {arm:7s} plain step {_fmt(row['plain_step_ms'], '.1f')} ms, "
                      f"{_fmt(row['tokens_per_s'], '.1f')} tok/s, speed-up {_fmt(row['speedup'], '.2f')} "
                      f"({_fmt(row['lo'], '.2f')}–{_fmt(row['hi'], '.2f')})", flush=True)
    lines = [
        "# The one-token kernel: plain decoding and the speed-up over it (scripts/bench_one_token_kernel.py)",
        "",
        f"{time.strftime('%Y-%m-%d')}, {platform.machine()}, {os.cpu_count()} cores, {args.rounds} interleaved "
        f"rounds, the demo pair, {args.max_new_tokens} new tokens, greedy, each drafter's default k; "
        f"{time.time() - started:.0f} s in all. `default`: one-token steps on PyTorch's kernel (MKL); `auto`: "
        "on the kernel timed fastest at the run's thread count.",
        "",
        "| drafter | arm | plain step ms | decode tok/s | tokens / iteration | measured speed-up (intervals) | "
        "same tokens as the other arm |",
        "|---|---|---|---|---|---|---|",
    ]
    for d in drafters:
        other = {a: [row["tokens"] for row in results[(d, a)]] for a in ARMS}
        same = all(x == y for x, y in zip(other["default"], other["auto"], strict=True))
        for arm in ARMS:
            rows = results[(d, arm)]
            intervals = ", ".join(f"{_fmt(r['speedup'], '.2f')} ({_fmt(r['lo'], '.2f')}–{_fmt(r['hi'], '.2f')})"
                                  for r in rows) if d != "plain" else "—"
            lines.append(f"| {d} | {arm} | {_fmt(_median(rows, 'plain_step_ms'), '.1f')} | "
                         f"{_fmt(_median(rows, 'tokens_per_s'), '.1f')} | "
                         f"{_fmt(_median(rows, 'tokens_per_iteration'), '.2f')} | {intervals} | {same} |")
    lines += ["", f"Command: `.venv/bin/python scripts/bench_one_token_kernel.py --rounds {args.rounds} "
              f"--max-new-tokens {args.max_new_tokens} --drafters {args.drafters}`"]
    report = "\n".join(lines) + "\n"
    print(report)
    if args.out is not None:
        args.out.write_text(report, encoding="utf-8")
    subprocess.run(["rm", "-rf", data_dir], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
