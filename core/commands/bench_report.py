"""The bench's report: per-method summaries (medians and ratios to plain with their intervals), the markdown
report with the measurement's overhead, decode and wall rates, the CSV, and where the files go.
"""

from __future__ import annotations

import csv
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import torch

from specscope.core.commands.bench_arguments import DEFAULT_GOALS
from specscope.core.commands.bench_runs import Mismatch, RunRow
from specscope.core.measure.measurement import RatioInterval
from specscope.core.measure.statistics import paired_ratio
from specscope.core.trace.cells import spreadsheet_safe
from specscope.core.trace.errors import TraceError
from specscope.core.trace.files import atomic_text_files


@dataclass
class MethodSummary:
    method: str
    runs: int
    tps_median: float
    tps_min: float
    tps_max: float
    ratio: RatioInterval | None  # paired ratio over (prompt, round) pairs with its interval
    alpha: float | None
    tokens_per_pass: float | None
    mean_k: float | None
    predicted_median: float | None
    measured_decode: RatioInterval | None
    identical: str  # "yes", "no (n of m)" or "—"


def _median(values: Sequence[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return float(statistics.median(vs)) if vs else None


def summarize_methods(rows: Sequence[RunRow], kind: str | None = None) -> list[MethodSummary]:
    """One line per method (in first-seen order), optionally only over one prompt kind."""
    selected = [r for r in rows if kind is None or r.prompt_kind == kind]
    order = list(dict.fromkeys(r.method for r in selected))
    out = []
    for name in order:
        rs = [r for r in selected if r.method == name]
        tps = [r.tokens_per_s for r in rs]
        ratios = [r.ratio_to_plain for r in rs if r.ratio_to_plain is not None]
        checked = [r.matches_plain for r in rs if r.matches_plain is not None]
        differ = sum(1 for c in checked if not c)
        identical = "—" if name == "plain" or not checked else ("yes" if not differ else
                                                                 f"no ({differ} of {len(checked)})")
        passes = sum(r.target_passes or 0 for r in rs)
        out.append(MethodSummary(
            method=name, runs=len(rs), tps_median=float(statistics.median(tps)), tps_min=min(tps),
            tps_max=max(tps), ratio=paired_ratio(ratios, min_pairs=1), alpha=_median([r.alpha for r in rs]),
            tokens_per_pass=sum(r.tokens for r in rs) / passes if passes else None,
            mean_k=_median([r.mean_k for r in rs]),
            predicted_median=_median([r.predicted_speedup for r in rs]),
            measured_decode=paired_ratio([r.measured_decode_speedup for r in rs
                                          if r.measured_decode_speedup is not None], min_pairs=1),
            identical=identical,
        ))
    return out


CSV_FIELDS = ("threads", "round", "prompt_id", "prompt_kind", "method", "tokens", "seconds", "tokens_per_s",
              "decode_tokens_per_s", "wall_tokens_per_s", "measurement_overhead", "ratio_to_plain", "target_passes",
              "tokens_per_pass", "alpha", "acceptance_rate", "mean_k", "predicted_speedup",
              "measured_decode_speedup", "matches_plain", "ratio_to_hf_lookup", "plain_step_ms", "draft_ms",
              "verify_ms", "break_even_alpha")


def write_csv(rows: Sequence[RunRow], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        write_csv_rows(rows, f)


def write_csv_rows(rows: Sequence[RunRow], f: IO[str]) -> None:
    w = csv.writer(f)
    w.writerow(CSV_FIELDS)
    for r in rows:
        w.writerow([_cell(getattr(r, name)) for name in CSV_FIELDS])


def _cell(v: object) -> object:
    if isinstance(v, float):
        return f"{v:.4f}"
    if isinstance(v, str):
        return spreadsheet_safe(v)  # a prompt id or method name must not run as a spreadsheet formula
    return "" if v is None else v


def _f(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _ratio_cell(s: MethodSummary | None) -> str:
    """The centre with its interval; from fewer than 6 pairs the interval is their range and says so."""
    if s is None or s.ratio is None:
        return "—"
    r = s.ratio
    if r.n == 1:
        return f"{r.value:.2f} (one pair)"
    if r.confidence < 0.95:
        return f"{r.value:.2f} (range {r.lo:.2f}–{r.hi:.2f}, n={r.n})"
    return f"{r.value:.2f} ({r.lo:.2f}–{r.hi:.2f})"


def markdown_report(rows: Sequence[RunRow], mismatches: Sequence[Mismatch], pair_description: str,
                    command: str, rounds: int, max_new_tokens: int,
                    goals: Sequence[float] = DEFAULT_GOALS, note: str = "") -> str:
    """The whole report; with runs at more than one thread count, one section per thread count. ``note``, when
    given, is the first bullet (a bench a signal stopped says so)."""
    kinds = list(dict.fromkeys(r.prompt_kind for r in rows))
    n_prompts = len({r.prompt_id for r in rows})
    thread_counts = list(dict.fromkeys(r.threads for r in rows))
    threads_text = ", ".join(str(t) for t in thread_counts if t) or str(torch.get_num_threads())
    lines = [
        "# specscope bench",
        "",
        *([f"- **{note}.**"] if note else []),
        f"- Command: `{command}`",
        f"- Pair: {pair_description}",
        f"- Machine: {platform.machine()} {platform.system()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, torch threads: {threads_text}",
        f"- {n_prompts} prompts ({', '.join(kinds)}), {rounds} rounds, up to {max_new_tokens} new tokens, "
        "greedy",
        "- Methods run back to back per prompt, order rotating per round; ratios are to the plain run of the "
        "same prompt in the same round. Speeds include the prefill.",
        "- × plain: the paired ratio over (prompt, round) pairs, Hodges-Lehmann centre with its 95% distribution-free "
        "interval (specscope.core.measure.statistics.paired_ratio).",
        "- α = accepted / judged proposals (the cost model's α); predicted = the measurement's cost model at the "
        "k most of the run's iterations drafted, its plain step from the adjacent plain run, decode only; "
        "measured = the same ratio measured, paired like × plain.",
    ]
    if len(thread_counts) == 1:
        lines += _method_sections(rows, mismatches, kinds, "##")
        lines += _cost_section(rows, kinds, "##", goals)
    else:
        for t in thread_counts:
            lines += ["", f"## {t} thread{'s' if t != 1 else ''}"]
            lines += _method_sections([r for r in rows if r.threads == t],
                                      [m for m in mismatches if m.threads == t], kinds, "###")
            lines += _cost_section([r for r in rows if r.threads == t], kinds, "###", goals)
    return "\n".join(lines) + "\n"


def _method_sections(rows: Sequence[RunRow], mismatches: Sequence[Mismatch], kinds: Sequence[str],
                     heading: str) -> list[str]:
    lines = [
        "",
        "| method | tok/s median (min–max) | × plain (95% interval) | α | tokens/pass | mean k "
        "| predicted | measured | identical to plain |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summarize_methods(rows):
        ratio = "—" if s.method == "plain" else _ratio_cell(s)
        lines.append(
            f"| {s.method} | {s.tps_median:.1f} ({s.tps_min:.1f}–{s.tps_max:.1f}) | {ratio} | {_f(s.alpha)} "
            f"| {_f(s.tokens_per_pass)} | {_f(s.mean_k, 1)} | {_f(s.predicted_median)} "
            f"| {_f(s.measured_decode.value if s.measured_decode else None)} | {s.identical} |"
        )
    lines += _rate_lines(rows, heading)
    if len(kinds) > 1:
        lines += ["", f"{heading} × plain (paired ratio) by prompt kind", "",
                  "| method | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        per_kind = {k: {s.method: s for s in summarize_methods(rows, k)} for k in kinds}
        for name in dict.fromkeys(r.method for r in rows):
            cells = [_ratio_cell(per_kind[k].get(name)) for k in kinds]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if any(r.ratio_to_hf_lookup is not None for r in rows):
        lines += ["", f"{heading} × transformers' prompt lookup (paired ratio over prompts and rounds) by prompt kind",
                  "", "| method | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        for name in dict.fromkeys(r.method for r in rows if r.ratio_to_hf_lookup is not None):
            cells = []
            for k in kinds:
                hf = paired_ratio([r.ratio_to_hf_lookup for r in rows if r.method == name and r.prompt_kind == k
                                      and r.ratio_to_hf_lookup is not None], min_pairs=1)
                cells.append("—" if hf is None else f"{hf.value:.2f} ({hf.lo:.2f}–{hf.hi:.2f})")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", f"{heading} Greedy outputs", ""]
    if not mismatches:
        lines.append("Every run's output is identical to plain decoding's.")
    for m in mismatches:
        detail = f": {m.detail}" if m.detail else ""
        lines.append(f"- {m.method}, {m.prompt_id}, round {m.round + 1}: first difference at token "
                     f"{m.position}{detail}")
    return lines


def _rate_lines(rows: Sequence[RunRow], heading: str) -> list[str]:
    """Per specscope method, from each run's own snapshot: tokens/s as the decode rate and as the wall rate, and
    the measurement's own share of the wall time (medians over runs)."""
    measured = [r for r in rows if r.snapshot is not None]
    if not measured:
        return []
    lines = ["", f"{heading} Decode rate, wall rate and the measurement's own cost", "",
             "Decode rate = tokens over the time inside iterations; wall rate = tokens over the span from the first "
             "iteration's start to the last one's end (what the user waits); measurement overhead = the share of "
             "that wall time spent between iterations and on plain baseline steps and exploration beyond what "
             "speculation would have taken (the run's own snapshot, as `specscope run` reports it). Medians over "
             "runs; the prefill is in neither.", "",
             "| method | decode tok/s | wall tok/s | measurement overhead |", "|---|---|---|---|"]
    for name in dict.fromkeys(r.method for r in measured):
        rs = [r for r in measured if r.method == name]
        share = _median([r.measurement_overhead for r in rs])
        lines.append(f"| {name} | {_f(_median([r.decode_tokens_per_s for r in rs]), 1)} "
                     f"| {_f(_median([r.wall_tokens_per_s for r in rs]), 1)} "
                     f"| {'—' if share is None else f'{100 * share:.1f}%'} |")
    return lines


def _cost_section(rows: Sequence[RunRow], kinds: Sequence[str], heading: str, goals: Sequence[float]) -> list[str]:
    """Per speculative method: the measured costs the prediction used and the α its k would need to break
    even and to reach each goal, beside the α measured per prompt kind (medians over runs)."""
    measured = [r for r in rows if r.estimate is not None and r.cost_k]
    if not measured:
        return []
    speedups = [1.0, *(g for g in goals if g != 1.0)]
    lines = [
        "", f"{heading} Costs, and the α each k would need", "",
        "Medians over the runs; the plain step comes from the adjacent plain run, draft and verify times are at "
        "the k most of the run's iterations drafted (verify: one pass of k + 1 tokens). α needed = the cost "
        "model's α at which those costs give that speed-up (— : no α reaches it).", "",
        "| method | plain step ms | draft ms / iteration | verify ms | "
        + " | ".join(f"α {k}" for k in kinds) + " | "
        + " | ".join(f"α for ×{g:.2f}" for g in speedups) + " |",
        "|---|---|---|---|" + "---|" * (len(kinds) + len(speedups)),
    ]
    for name in dict.fromkeys(r.method for r in measured):
        rs = [r for r in measured if r.method == name]
        alphas = [_f(_median([r.alpha for r in rs if r.prompt_kind == k])) for k in kinds]
        needed = []
        for g in speedups:
            values = [r.alpha_needed(g) for r in rs]
            # an unreachable goal in most runs reads as unreachable, not as the median of the rest
            reachable = [v for v in values if v is not None]
            needed.append(_f(_median(reachable)) if len(reachable) * 2 > len(values) else "—")
        lines.append(f"| {name} | {_f(_median([r.plain_step_ms for r in rs]), 1)} "
                     f"| {_f(_median([r.draft_ms for r in rs]), 1)} | {_f(_median([r.verify_ms for r in rs]), 1)} "
                     f"| " + " | ".join(alphas) + " | " + " | ".join(needed) + " |")
    return lines


def write_report_files(report: str, rows: Sequence[RunRow], md: Path, csv_path: Path) -> None:
    with atomic_text_files([md]) as (f,):
        f.write(report)
    with atomic_text_files([csv_path]) as (f,):
        write_csv_rows(rows, f)


def _save_elsewhere(report: str, rows: Sequence[RunRow], name: str) -> Path | None:
    """The report files in the data folder's ``bench`` folder, when ``--out`` failed late (disk full)."""
    from datetime import datetime

    from specscope.core.trace.autosave import default_data_dir

    folder = default_data_dir() / "bench"
    stem = folder / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{name}"
    md, csv_path = report_paths(stem)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_report_files(report, rows, md, csv_path)
    except (OSError, TraceError):
        return None
    return md


def report_paths(stem: Path) -> tuple[Path, Path]:
    """STEM.md and STEM.csv (a suffix the stem has is replaced: ``--out report.md`` writes report.md)."""
    return stem.with_suffix(".md"), stem.with_suffix(".csv")
