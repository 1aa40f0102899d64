"""Time every read of the legacy trace reader's cell-level fuzz (tests/trace_cell_fuzz.py) and count outcomes.

    .venv/bin/python scripts/trace_cell_fuzz.py [--rows 100] [--out docs/trace-cell-fuzz.md]

Every column of the three CSVs of two traces (the 0.1.0 autosave form with its JSON columns, and the current
export form read without its event log) × every hostile value, one cell at a time in a middle row. The traces
are the tests' five sample iterations, and the same grown to ``--rows`` iterations (so a per-read time bound is
judged on a trace of some size). Prints the outcome counts, the read times (median, 99th percentile, max) per
trace, and the slowest cases; any outcome other than a trace or a TraceError is listed and fails the script.
The bound a read must keep: at most 3 times the time to read the same trace unharmed, plus 50 ms (nothing
a value does may make the reader slower than the file's size explains); a read over it is timed again, best
of 3, since a shared machine pauses a process now and then.
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specscope.core.trace.files import read_trace, write_trace
from specscope.core.trace.legacy_csv import legacy_stream
from tests.trace_cell_fuzz import HOSTILE_CELLS, fuzz_cases, read_outcome
from tests.trace_samples import make_record, sample_baselines, sample_records

DATA = Path(__file__).resolve().parents[1] / "tests" / "data"


def grown_records(n: int) -> list:
    records = [make_record(i, texts=["a", "b", "c"]) for i in range(n)]
    records[-1] = dataclasses.replace(records[-1], finished=True, finish_reason="max_new_tokens")
    return records


def time_read(main: Path, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        read_trace(main)
        best = min(best, time.perf_counter() - t0)
    return best


def time_read_outcome(main: Path, repeat: int = 3) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        read_outcome(main)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100, help="iterations of the grown trace")
    parser.add_argument("--out", type=Path, default=None, help="also write the report (markdown) here")
    args = parser.parse_args()
    lines: list[str] = []

    def say(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    failures: list[str] = []
    with tempfile.TemporaryDirectory(prefix="specscope-cellfuzz-") as tmp:
        d = Path(tmp)
        shutil.copytree(DATA / "trace-0.1.0" / "autosave", d / "autosave")
        for name, records in (("export", sample_records()), ("grown", grown_records(args.rows))):
            (d / name).mkdir()
            write_trace(d / name / "run.csv", legacy_stream(records, sample_baselines(), {}), {"k": 4})
            (d / name / "run.events.jsonl").unlink()
        say(f"{len(HOSTILE_CELLS)} hostile values × every column of each CSV, one cell at a time (middle row)\n")
        say("| trace | iterations | unharmed read (ms) | cases | read | TraceError | other | median (ms) | "
            "p99 (ms) | max (ms) | bound (ms) | over the bound |")
        say("|---|---|---|---|---|---|---|---|---|---|---|---|")
        slowest: list[tuple[float, str]] = []
        for name, main_name in (("autosave", "trace.csv"), ("export", "run.csv"), ("grown", "run.csv")):
            main = d / name / main_name
            n_it = len(read_trace(main).records)
            clean = time_read(main)
            bound = 3 * clean + 0.050
            counts = {"read": 0, "trace_error": 0, "crash": 0}
            times: list[float] = []
            over = 0
            for case in fuzz_cases([main], d / "work"):
                t0 = time.perf_counter()
                outcome, message = read_outcome(case.main)
                dt = time.perf_counter() - t0
                counts[outcome] += 1
                times.append(dt)
                if outcome == "crash":
                    failures.append(f"{name} {case.label}: {message}")
                if dt > bound:  # timed again (best of 3): a busy machine's pause is not the value's doing
                    dt = min(dt, time_read_outcome(case.main))
                    times[-1] = dt
                    if dt > bound:
                        over += 1
                        failures.append(f"{name} {case.label}: {dt * 1000:.0f} ms, over the {bound * 1000:.0f} ms "
                                        "bound")
                slowest.append((dt, f"{name} {case.label}"))
            times.sort()
            p99 = times[min(len(times) - 1, int(0.99 * len(times)))]
            say(f"| {name} | {n_it} | {clean * 1000:.1f} | {len(times)} | {counts['read']} | "
                f"{counts['trace_error']} | {counts['crash']} | {statistics.median(times) * 1000:.1f} | "
                f"{p99 * 1000:.1f} | {times[-1] * 1000:.1f} | {bound * 1000:.0f} | {over} |")
        slowest.sort(reverse=True)
        say("\nSlowest reads:\n")
        for dt, label in slowest[:5]:
            say(f"- {dt * 1000:.1f} ms: {label}")
    say(f"\n{len(failures)} failures" + ("".join(f"\n- {f}" for f in failures[:20]) if failures else ""))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
