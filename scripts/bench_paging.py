"""Paging drill benchmark on the demo: how visible is paging, and how well is it flagged?

For the draft and for the target, one run of the demo (model drafter) with DRILLS live drills asked for
through the controls, as the app's Run panel does: QUIET iterations, then DRILL iterations with the model's
layers moved off its device (on a CPU: to disk through accelerate's disk offload), and so on. Reports:

- the step-time ratio during each drill (the drilled model's median step in the drill over its median in the
  quiet stretch just before);
- the detection rate: drill iterations after the first flagged with that model's paging sentence;
- false flags per 1,000 quiet iterations (any flag, and flags that claim paging);
- the time from the drill's start to its first flag (seconds and iterations).

    python scripts/bench_paging.py --drills 5 --report docs/bench-paging.md
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from specscope.core.controls import Controls
from specscope.core.drill_spec import DrillSpec
from specscope.core.engine.models import load_pair
from specscope.core.engine.pair_spec import PairSpec
from specscope.core.measure.busy import BUSY_PREFIX
from specscope.core.memory.detector import PagingDetector
from specscope.core.records import ControlValues, DrillEvent, IterationRecord
from specscope.core.session import Session, SessionOptions

PROMPT = ("Write a long, detailed story about a lighthouse keeper who finds a message in a bottle, "
          "with many chapters.")
PAGING_WORDS = ("streamed", "likely paging", "on disk")


@dataclass
class DrillResult:
    ratio: float
    detected: int
    judged: int
    detected_time_only: int
    first_flag_s: float | None
    first_flag_iterations: int | None
    sentence: str = ""


@dataclass
class ModelResult:
    model: str
    drills: list[DrillResult] = field(default_factory=list)
    quiet_iterations: int = 0
    quiet_flags: int = 0
    quiet_paging_flags: int = 0
    quiet_busy_flags: int = 0
    quiet_flag_examples: list[str] = field(default_factory=list)
    seconds: float = 0.0
    layers: str = ""


def step_ms(r: IterationRecord, model: str) -> float | None:
    return r.draft_step_ms if model == "draft" else r.verify_ms


def judged(r: IterationRecord, model: str) -> bool:
    return model == "target" or bool(r.n_drafted)


def run_model(pair, model: str, drills: int, quiet: int, drill_len: int, k: int) -> ModelResult:
    controls = Controls(ControlValues(k=k))
    total = quiet + drills * (drill_len + quiet)
    session = Session(pair, controls, SessionOptions(max_new_tokens=total * (k + 1), baseline_every=0))
    res = ModelResult(model)
    records: list[IterationRecord] = []
    events: list[DrillEvent] = []
    started = time.perf_counter()
    for event in session.stream(pair.encode_prompt(PROMPT)):
        if isinstance(event, DrillEvent):
            events.append(event)
            continue
        if not isinstance(event, IterationRecord):
            continue
        records.append(event)
        n = len(records)
        cycle = (n - quiet) % (drill_len + quiet)
        if n >= quiet and n < total and cycle == 0 and sum(e.kind == "start" for e in events) < drills:
            controls.start_drill(DrillSpec(model=model))
        elif n > quiet and cycle == drill_len:
            controls.end_drill()
        if n >= total:
            controls.stop()
    res.seconds = time.perf_counter() - started
    starts = [e for e in events if e.kind == "start" and not e.error]
    ends = [e for e in events if e.kind == "end"]
    if starts:
        res.layers = f"{starts[0].layers} of {starts[0].total_layers} layers to {starts[0].place}"
    # The same records through the detector without the offload-hook evidence: the time rule alone.
    stripped = [replace(r, memory={k: v for k, v in r.memory.items() if not k.endswith("_offload_read_bytes")})
                for r in records]
    time_only = PagingDetector().flag_trace(stripped)
    in_drill: set[int] = set()
    for s, e in zip(starts, ends, strict=False):
        span = [r for r in records if s.iterations_done <= r.iteration < e.iterations_done]
        in_drill.update(r.iteration for r in span)
        before = [r for r in records if s.iterations_done - quiet <= r.iteration < s.iterations_done
                  and judged(r, model) and r.iteration not in in_drill]
        during = [r for r in span if judged(r, model)]
        base = statistics.median(step_ms(r, model) or 0.0 for r in before) if before else float("nan")
        slow = statistics.median(step_ms(r, model) or 0.0 for r in during) if during else float("nan")
        flagged = [r for r in during if any(f.startswith(f"{model}: ") for f in r.flags)]
        after_first = during[1:]
        detected = sum(1 for r in after_first if any(f.startswith(f"{model}: ") for f in r.flags))
        first = flagged[0] if flagged else None
        by_time = sum(1 for r in after_first if any(f.startswith(f"{model} ") for f in time_only.get(r.iteration, [])))
        res.drills.append(DrillResult(
            ratio=slow / base if base else float("nan"), detected=detected, judged=len(after_first),
            detected_time_only=by_time,
            first_flag_s=(first.t_end_s - s.t_s) if first else None,
            first_flag_iterations=(first.iteration - s.iterations_done) if first else None,
            sentence=next((f for f in first.flags if f.startswith(model)), "") if first else ""))
    quiet_records = [r for r in records if r.iteration not in in_drill]
    res.quiet_iterations = len(quiet_records)
    res.quiet_flags = sum(1 for r in quiet_records if r.flags)
    res.quiet_busy_flags = sum(1 for r in quiet_records if any(f.startswith(BUSY_PREFIX) for f in r.flags))
    res.quiet_paging_flags = sum(1 for r in quiet_records if any(w in f for f in r.flags for w in PAGING_WORDS))
    res.quiet_flag_examples = [f for r in quiet_records for f in r.flags][:3]
    return res


def report(results: list[ModelResult], args: argparse.Namespace, load: str) -> str:
    lines = [
        "# Paging drill on the demo",
        "",
        f"`python scripts/bench_paging.py --drills {args.drills} --quiet {args.quiet} --drill-len {args.drill_len} "
        f"--k {args.k} --threads {args.threads}` — the demo (SmolLM2-135M-Instruct target, its distilled 3-layer "
        "draft), model drafter, greedy, fp32, CPU.",
        "",
        "**The machine was shared**: 2 CPU cores used by about six other agents at the same time (load average "
        f"{load} when the run ended). Step times are noisy and the ratios below are between iterations "
        "interleaved in time (each drill against the quiet stretch just before it).",
        "",
        "| model | layers moved | drills | step-time ratio in the drill, median (min–max) | detection rate "
        "(drill iterations after the first) | time rule alone (no hook evidence) | flags / 1,000 quiet "
        "iterations: any; machine busy; claiming paging | drill start → first flag, median (max) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratios = [d.ratio for d in r.drills]
        det = sum(d.detected for d in r.drills)
        n = sum(d.judged for d in r.drills)
        firsts = [d.first_flag_s for d in r.drills if d.first_flag_s is not None]
        first_its = [d.first_flag_iterations for d in r.drills if d.first_flag_iterations is not None]
        per_k = 1000.0 / max(1, r.quiet_iterations)
        lines.append(
            f"| {r.model} | {r.layers} | {len(r.drills)} | {statistics.median(ratios):.2f} "
            f"({min(ratios):.2f}–{max(ratios):.2f}) | {det}/{n} = {det / max(1, n):.0%} | "
            f"{sum(d.detected_time_only for d in r.drills) / max(1, n):.0%} | "
            f"{r.quiet_flags * per_k:.0f}; {r.quiet_busy_flags * per_k:.0f}; {r.quiet_paging_flags * per_k:.0f} "
            f"(of {r.quiet_iterations}) | "
            + (f"{statistics.median(firsts) * 1000:.0f} ms ({max(firsts) * 1000:.0f} ms); "
               f"iteration +{max(first_its)} at most" if firsts else "never") + " |")
    lines += ["", "Per drill (ratio, detected/judged, first flag):", ""]
    for r in results:
        for i, d in enumerate(r.drills):
            first = f"{d.first_flag_s * 1000:.0f} ms" if d.first_flag_s is not None else "none"
            lines.append(f"- {r.model} drill {i + 1}: ×{d.ratio:.2f}, {d.detected}/{d.judged}, first flag after "
                         f"{first}")
        lines.append(f"- {r.model}: run took {r.seconds:.0f} s")
    lines += ["", "A first flag, as the detector words it:", ""]
    for r in results:
        if r.drills and r.drills[0].sentence:
            lines.append(f"> {r.drills[0].sentence}")
            lines.append("")
    examples = [e for r in results for e in r.quiet_flag_examples]
    if examples:
        lines += ["Flags on quiet iterations (examples):", ""] + [f"- {e}" for e in examples] + [""]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--drills", type=int, default=5)
    ap.add_argument("--quiet", type=int, default=12, help="quiet iterations before each drill")
    ap.add_argument("--drill-len", type=int, default=8, help="iterations per drill")
    ap.add_argument("--k", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--models", default="draft,target")
    ap.add_argument("--report", type=Path, default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    pair = load_pair(PairSpec(target="demo", drafter="model"))
    pair.eos_token_ids = frozenset()  # keep decoding through every drill
    results = []
    for model in args.models.split(","):
        res = run_model(pair, model.strip(), args.drills, args.quiet, args.drill_len, args.k)
        results.append(res)
        print(f"{model}: {len(res.drills)} drills, ratios {[round(d.ratio, 2) for d in res.drills]}, "
              f"detected {sum(d.detected for d in res.drills)}/{sum(d.judged for d in res.drills)}, "
              f"quiet flags {res.quiet_flags}/{res.quiet_iterations} ({res.quiet_busy_flags} busy, "
              f"{res.quiet_paging_flags} paging)",
              flush=True)
    import os

    load = f"{os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else "unknown"
    text = report(results, args, load)
    print(text)
    if args.report is not None:
        args.report.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
