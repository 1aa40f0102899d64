"""What ``specscope run`` prints and writes once a run has ended, local or remote alike.

A local run (``core.commands.cli``) and a run on a worker (``core.commands.serve``) hand the same :class:`RunOutcome`
here: the events the run emitted, the records among them, and the snapshot of the one measurement they fed.
Every number printed is ``measurement.run_summary``'s or the snapshot's; nothing here derives one.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from specscope.core.commands.cli_checks import EXIT_FAILURE, CliError, Interrupted, emit, print_error


@dataclass
class RunOutcome:
    token_ids: list[int]
    text: str  # the output as the tokenizer decodes it
    finish_reason: str  # the stream's RunFinished reason
    records: list[Any]  # IterationRecord
    events: list[Any]  # the whole stream, in order
    drill_events: list[Any]
    prefill_ms: float
    estimate: Any  # the measurement's snapshot (snapshot.Estimate) or None
    drafter_kind: str
    residency: dict[str, Any] = field(default_factory=dict)  # name -> memory.residency.Residency
    run: Any = None  # the measure.run.Run that was fed the stream: the traces write its snapshots (None: replayed)


def _fmt(value: float | None, spec: str = ".3f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def report_run(args: argparse.Namespace, outcome: RunOutcome, description: dict[str, Any], recorder: Any, *,
               error: str | None, stopped: Interrupted | None, late: Interrupted | None) -> int:
    """Print the run (summary or ``--json``), write ``--trace``/``--chrome-trace``, say how it ended; the
    exit code."""
    from specscope.core.measure.busy import BUSY_PREFIX
    from specscope.core.measure.summary import run_summary

    records = outcome.records
    flags = [(r.iteration, f) for r in records for f in r.flags]
    estimate = outcome.estimate
    summary = run_summary(records, prefill_ms=outcome.prefill_ms, estimate=estimate)

    trace_error: str | None = None
    if args.trace is not None or args.chrome_trace is not None:
        trace_error = write_traces(args, outcome.run if outcome.run is not None else outcome.events, description,
                                   recorder)

    if args.json:
        out = {
            "token_ids": outcome.token_ids,
            "text": outcome.text,
            "finish_reason": outcome.finish_reason,
            "metrics": summary,
            "residency": {name: {"bytes_by_device": r.bytes_by_device, "warnings": r.warnings}
                          for name, r in outcome.residency.items()},
            "paging_flags": [{"iteration": i, "sentence": s} for i, s in flags if not s.startswith(BUSY_PREFIX)],
            "busy_flags": [{"iteration": i, "sentence": s} for i, s in flags if s.startswith(BUSY_PREFIX)],
            "session_folder": str(recorder.folder) if recorder is not None else None,
            "autosave_error": recorder.error if recorder is not None else None,
            "drill_events": [asdict(e) for e in outcome.drill_events],
            "error": error or trace_error or (stopped.reason if stopped is not None else None),
        }
        emit(json.dumps(out, indent=None, default=str))
    else:
        emit(outcome.text + "\n\n" + summary_text(args, outcome, summary, flags))
    if stopped is None and late is not None:
        print_error(f"{late.signal_name} received after the run ended; its results above are complete")
        return late.exit_code
    if stopped is not None:
        n_it, n_tok = len(records), len(outcome.token_ids)
        print_error(f"stopped by {stopped.signal_name} after {n_it} iteration{'s' * (n_it != 1)} "
                    f"({n_tok} token{'s' * (n_tok != 1)}); what was decoded is kept"
                    + (f" in {recorder.folder}" if recorder is not None else ""))
        return stopped.exit_code
    if error is not None:
        print_error(error)
        return EXIT_FAILURE
    if trace_error is not None:
        print_error(trace_error)
        return EXIT_FAILURE
    return 0


def nothing_decoded(stopped: Interrupted) -> CliError:
    return CliError(f"{stopped.signal_name} received before decoding began; nothing was decoded",
                    exit_code=stopped.exit_code)


def write_traces(args: argparse.Namespace, events: Any, session: dict[str, Any],
                 recorder: Any) -> str | None:
    """Write ``--trace`` and ``--chrome-trace`` from a run (its own snapshots) or a bare stream; when one fails
    this late (disk full), say where the run is:
    the autosaved session folder holds the whole trace, and a chrome trace is saved there instead."""
    from specscope.core.trace.chrome_trace import write_chrome_trace
    from specscope.core.trace.errors import TraceError
    from specscope.core.trace.files import write_trace

    saved = recorder is not None and recorder.error is None
    problems: list[str] = []
    if args.trace is not None:
        try:
            repairs: list[str] = []
            paths = write_trace(Path(args.trace), events, session=session, warnings=repairs)
            for repair in repairs:  # a field beyond what a trace holds, clamped: every event is kept
                print(f"specscope: warning: the trace holds {repair}", file=sys.stderr)
            if not args.json and not args.quiet:
                print(f"trace written: {paths.events} (the event stream) and {paths.iterations} (+ tokens, "
                      "session) for spreadsheets", file=sys.stderr)
        except (TraceError, OSError) as exc:
            where = f"; the whole trace is in {recorder.folder}" if saved else ""
            problems.append(f"could not write the trace: {exc}{where}")
    if args.chrome_trace is not None:
        try:
            write_chrome_trace(Path(args.chrome_trace), events, session=session)
        except (TraceError, OSError) as exc:
            fallback = ""
            if recorder is not None:
                with_name = recorder.folder / "trace.chrome.json"
                try:
                    write_chrome_trace(with_name, events, session=session)
                    fallback = f"; saved it to {with_name} instead"
                except (TraceError, OSError):
                    pass
            problems.append(f"could not write the chrome trace: {exc}{fallback}")
    return "; ".join(problems) or None


def _overhead_text(estimate: Any) -> str:
    cost = estimate.cost
    if cost is None:
        return "measurement overhead —"
    drill = f"; a paging drill's {cost.drill_ms:.0f} ms moving layers not counted" if cost.drill_ms else ""
    return (f"{cost.text()} (bookkeeping {cost.bookkeeping_ms:.0f} ms, baselines {cost.baseline_ms:.0f} ms, "
            f"exploration {cost.exploration_ms:.0f} ms of {cost.wall_ms / 1000.0:.1f} s{drill})")


def summary_text(args: argparse.Namespace, outcome: RunOutcome, summary: dict[str, Any],
                 flags: Sequence[tuple[int, str]]) -> str:
    """The run in words; every number is ``run_summary``'s or the measurement's estimate's."""
    from specscope.core.measure.busy import BUSY_PREFIX

    s, estimate = summary, outcome.estimate
    lines = ["── specscope run " + "─" * 50]
    mode = "plain decoding (target only)" if args.plain else f"speculative, drafter {outcome.drafter_kind}"
    lines.append(f"mode          {mode}; finish: {outcome.finish_reason}")
    lines.append(f"tokens        {s['tokens']} in {s['iterations']} iterations "
                 f"({_fmt(s['tokens_per_iteration'], '.2f')} per iteration); prefill "
                 f"{_fmt(s['prefill_ms'], '.1f', ' ms')}")
    if estimate is not None:
        lines.append(f"speed         {estimate.rates_text()}; {_overhead_text(estimate)}")
    if not args.plain and estimate is not None:
        lines.append(f"acceptance    {estimate.alpha_text()} ({s['accepted']} accepted of {s['judged']} judged, "
                     f"{s['drafted']} drafted); mean acceptance length {_fmt(s['mean_acceptance_length'], '.2f')}")
        draft = (f"draft step {_fmt(s['draft_step_ms'], '.2f', ' ms')}" if s["draft_step_ms"] is not None
                 else f"draft {_fmt(s['draft_iteration_ms'], '.2f', ' ms')} per iteration")
        lines.append(f"costs         {draft}, plain step {_fmt(s['plain_step_ms'], '.2f', ' ms')}, "
                     f"verify {_fmt(s['verify_ms_median'], '.2f', ' ms')}, "
                     f"rollback {_fmt(s['rollback_ms_median'], '.3f', ' ms')} (medians)")
        left_out = (f", {estimate.busy_left_out} machine-busy iterations left out" if estimate.busy_left_out
                    else "")
        measured = (f"measured {estimate.speedup_text()} ({estimate.plain_samples} plain steps{left_out})"
                    if estimate.measured else f"measured: {estimate.measured_reason}")
        # where the measured iterations ran at other proposal counts (adaptive k, a lookup match shorter than k),
        # the prediction over them is the one to hold against the measured figure
        span = estimate.predicted_span
        over = (f", ×{span:.2f} over the iterations measured" if span is not None
                and f"{span:.2f}" != _fmt(estimate.predicted_speedup, '.2f') else "")
        lines.append(f"vs plain      {measured}; predicted ×{_fmt(estimate.predicted_speedup, '.2f')} "
                     f"at k={estimate.k}{over}")
        if estimate.costs.stale:
            lines.append(f"              {estimate.costs.stale_text()}")
        lines.append(f"best k        {estimate.best_k_text()}")
        if estimate.controller_text():
            lines.append(f"              {estimate.controller_text()}")
        if estimate.verdict:
            lines.append(f"              {estimate.verdict}")
    if outcome.residency:
        from specscope.core.memory.residency import format_residency

        for name, r in outcome.residency.items():
            lines.append(f"residency     {format_residency(name, r)}")
            for w in r.warnings:
                lines.append(f"  warning     {w}")
    for event in outcome.drill_events:
        lines.append(f"drill         before iteration {event.iterations_done}: {event.label}")
    busy = [(it, f) for it, f in flags if f.startswith(BUSY_PREFIX)]
    paging = [(it, f) for it, f in flags if not f.startswith(BUSY_PREFIX)]
    for label, flagged in (("machine busy", busy), ("paging", paging)):
        if not flagged:
            continue
        lines.append(f"{label:<14}{len(flagged)} flagged iteration(s):")
        for it, sentence in flagged[:8]:
            lines.append(f"  iter {it:>4}   {sentence}")
        if len(flagged) > 8:
            lines.append(f"  … and {len(flagged) - 8} more (see the trace's flags column)")
    if not paging:
        lines.append("paging        no slow iterations flagged")
    return "\n".join(lines)
