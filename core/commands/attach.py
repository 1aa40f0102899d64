"""``specscope attach URL``: stream one completion from a serving engine and show its speculation.

Exit codes: 0 done, 1 the server failed (one sentence; the trace of what arrived is still written), 2 bad input,
130 (SIGINT) or 143 (SIGTERM) stopped by a signal: the first closes the stream at the next chunk, a second at
once; either way what arrived is summarised and written to ``--trace``.
"""

from __future__ import annotations

import argparse
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specscope.core.attach.options import (
    MAX_SCRAPE_INTERVAL_S,
    MAX_TIMEOUT_S,
    MIN_SCRAPE_INTERVAL_S,
    AttachError,
    AttachOptions,
    check_options,
)

if TYPE_CHECKING:  # the client (httpx) and the summary (numpy) are imported when a request runs, not for --help
    from specscope.core.attach.client import AttachResult
    from specscope.core.commands.cli_checks import Interrupted
    from specscope.core.records import IterationRecord

EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_PROMPT = "List the first twenty prime numbers, separated by commas:"


def add_arguments(p: argparse.ArgumentParser) -> None:
    from specscope.core.commands.cli_checks import (
        TEMPERATURE,
        add_max_new_tokens,
        file_path,
        finite_number,
        whole_number,
    )

    p.add_argument("url", help="the server's root URL, e.g. http://127.0.0.1:8080 or http://[::1]:8080 (a trailing "
                              "/v1 is fine); API key from $SPECSCOPE_API_KEY or $OPENAI_API_KEY")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text (sent as is to /v1/completions)")
    src.add_argument("--prompt-file", type=file_path, help="read the prompt from a text file")
    p.add_argument("--model", help="model name to request (default: the first the server lists)")
    add_max_new_tokens(p, 128, "tokens to request (the API's max_tokens; --max-tokens is the same)")
    p.add_argument("--temperature", type=TEMPERATURE, default=0.0)
    p.add_argument("--timeout", type=finite_number(0.0, MAX_TIMEOUT_S, lo_open=True), default=60.0,
                   help="seconds to wait for the server")
    p.add_argument("--scrape-interval", type=finite_number(MIN_SCRAPE_INTERVAL_S, MAX_SCRAPE_INTERVAL_S),
                   default=0.5, help="seconds between /metrics scrapes")
    plain = p.add_mutually_exclusive_group()
    plain.add_argument("--plain-url", help="the same model served without speculation: measure the speed-up")
    plain.add_argument("--plain-model", help="a model name on the same server that runs without speculation")
    p.add_argument("--rounds", type=whole_number(1, 1_000), default=5, help="interleaved rounds for the speed-up")
    p.add_argument("--trace", type=file_path, help="write the trace (CSV + tokens CSV + session JSON)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")


def _prompt(args: argparse.Namespace) -> str:
    from specscope.core.commands.cli_checks import checked_prompt, read_text_file

    if args.prompt_file is not None:
        return checked_prompt(read_text_file(args.prompt_file, "prompt file"), f"prompt file {args.prompt_file}")
    return checked_prompt(str(args.prompt), "--prompt") if args.prompt is not None else DEFAULT_PROMPT


def _fmt(value: Any, spec: str = ".3f") -> str:
    """A number as ``spec`` formats it; "n/a" for None, and the value as sent when a server sent no number."""
    if value is None:
        return "n/a"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return repr(value)[:40]
    return format(value, spec if isinstance(value, float) or not spec.endswith("d") else "d")


def _rates(values: Sequence[float | None] | None) -> str:
    return " ".join("n/a" if v is None else f"{v:.2f}" for v in values) if values else "n/a"


def summary_text(result: AttachResult, summary: dict[str, Any]) -> str:
    """The figures every surface shows (``reconcile``: the engine's report, its counters or the stream, each
    line saying which), vLLM's definitions beside specscope's α, and the line on what is exact."""
    s = result.session
    totals = result.engine_totals
    rec = result.reconciliation
    fig = rec.figures if rec is not None else None
    engine_figures = fig is not None and fig.source != "the stream"
    lines = [
        f"engine        {s.get('engine')} {s.get('engine_version') or ''} at {s.get('url')}".rstrip(),
        f"model         {s.get('model')}  speculative config {json.dumps(s.get('speculative_config') or {})}"
        + (f", k = {s['draft_len']}" if s.get("draft_len") is not None else ""),
        f"passes        {summary['passes']} verify passes, {summary['tokens']} tokens"
        + (f" (prompt {s['prompt_tokens']} tokens)" if s.get("prompt_tokens") is not None else ""),
    ]
    if engine_figures and fig is not None:
        lines += [
            f"figures from  {fig.source}",
            f"drafted       {_fmt(fig.drafted, 'd')} over {_fmt(fig.drafts, 'd')} drafting passes "
            f"(the stream's records: {summary['drafted']}; engine counter: {_fmt(totals['draft_tokens'], 'd')})",
            f"accepted      {_fmt(fig.accepted, 'd')} (the stream's records: {summary['accepted']}; engine "
            f"counter: {_fmt(totals['accepted_tokens'], 'd')})",
        ]
    else:
        lines += [
            f"drafted       {summary['drafted']} (engine counter: {_fmt(totals['draft_tokens'], 'd')})",
            f"accepted      {summary['accepted']} (engine counter: {_fmt(totals['accepted_tokens'], 'd')})",
        ]
    # From the stream, α and accepted / drafted are the measurement's (their one owner); else the engine's counts.
    alpha = fig.alpha if engine_figures and fig is not None else summary["alpha"]
    rate = fig.draft_acceptance_rate if engine_figures and fig is not None else summary["acceptance_rate"]
    bound = " (a lower bound)" if fig is not None and fig.judged_is_bound else ""
    lines += [
        f"alpha         {_fmt(alpha)}  specscope's α: accepted / judged{bound}",
        f"draft acceptance rate   {_fmt(rate)}  vLLM's: accepted / drafted",
        f"mean acceptance length  {_fmt(fig.mean_acceptance_length if fig else None, '.2f')}  "
        "vLLM's: 1 + accepted / drafts",
    ]
    if fig is not None and (fig.per_position is not None or fig.per_position_vllm is not None):
        lines.append(f"per position  {_rates(fig.per_position)} (accepted / drafted at each position); vLLM's "
                     f"{_rates(fig.per_position_vllm)} (accepted / drafts)")
    lat = result.latency or {}
    lines += [
        f"tokens/pass   {_fmt(summary['tokens_per_iteration'], '.2f')}",
        f"tokens/s      {_fmt(summary['tokens_per_s'], '.1f')} (client side, decode passes)",
        f"latency       TTFT {_fmt(lat.get('ttft_ms'), '.1f')} ms, inter-token {_fmt(lat.get('itl_p50_ms'), '.1f')} ms "
        f"median / {_fmt(lat.get('itl_p95_ms'), '.1f')} ms p95 between chunks, TPOT {_fmt(lat.get('tpot_ms'), '.2f')} "
        "ms (as vLLM's benchmark counts them)",
    ]
    timings = result.final_timings or {}
    if isinstance(timings, dict) and timings.get("predicted_per_second") is not None:
        lines.append(f"engine tok/s  {_fmt(timings.get('predicted_per_second'), '.1f')} (the engine's own timings)")
    if rec is not None:
        lines.append(f"exactness     {rec.line}")
    for w in result.warnings:
        lines.append(f"note          {w}")
    return "\n".join(lines)


def _write_trace(path: Path, result: AttachResult, extra: dict[str, Any]) -> str | None:
    from specscope.core.commands.cli_checks import progress_line
    from specscope.core.trace.errors import TraceError
    from specscope.core.trace.files import write_trace

    session = dict(result.session)
    session.update(extra)
    repairs: list[str] = []
    try:
        write_trace(path, result.records, session=session, warnings=repairs)
    except (TraceError, OSError) as exc:
        return f"could not write the trace: {exc}"
    for repair in repairs:  # a field beyond what a trace holds, clamped: every pass is kept
        progress_line(f"specscope: warning: the trace holds {repair}")
    return None


def main(args: argparse.Namespace) -> int:
    """Exit 2 for bad input (before any request), 1 when the server or the baseline failed or the trace could
    not be written (what arrived is kept and printed), 0 otherwise. Raises CliError for bad input."""
    from specscope.core.commands.cli_checks import CliError, check_writable

    prompt = _prompt(args)
    options = AttachOptions(url=args.url, prompt=prompt, model=args.model, max_tokens=args.max_new_tokens,
                            temperature=args.temperature, timeout_s=args.timeout,
                            scrape_interval_s=args.scrape_interval)
    plain: AttachOptions | None = None
    if args.plain_url or args.plain_model:
        plain = AttachOptions(url=args.plain_url or args.url, prompt=prompt,
                              model=args.plain_model or (args.model if args.plain_url else None),
                              max_tokens=args.max_new_tokens, temperature=args.temperature, timeout_s=args.timeout,
                              scrape_interval_s=args.scrape_interval)
    try:
        check_options(options)
        if plain is not None:
            try:
                check_options(plain)
            except AttachError as exc:
                raise AttachError(f"--plain-url: {exc}") from None
    except AttachError as exc:
        raise CliError(str(exc)) from None
    if args.trace is not None:
        check_writable(args.trace, "--trace", trace=True)  # before the request, not after it

    from specscope.core.attach.baseline import interleaved_baseline
    from specscope.core.attach.client import attach
    from specscope.core.commands.cli_checks import Interrupted, SignalGuard

    cancel = _CancelOnSignal()
    arrived: list[IterationRecord] = []
    guard = SignalGuard(cancel, waits_for="the next chunk arrives")
    with guard.installed():
        stopped: Interrupted | None = None
        baseline_out: dict[str, Any] | None = None
        extra: dict[str, Any] = {}
        try:
            result = attach(options, on_record=arrived.append, cancel=cancel.event)
            if result.error is None and plain is not None and guard.pending is None:
                run = interleaved_baseline(options, plain, args.rounds, cancel=cancel.event)
                baseline_out = {"ratios": run.ratios, "speedup": run.estimate.to_dict() if run.estimate else None,
                                "error": run.error}
                extra["baseline"] = baseline_out
        except Interrupted as exc:  # a second signal: the request was cut where it stood
            stopped = exc
            result = _what_arrived(options, arrived, exc)
        finally:
            guard.raising = False  # from here a signal is only noted: what arrived is written first
        stopped = stopped or guard.pending
        if stopped is not None:
            _mark_stopped(result, stopped, baseline_out)
        return _report(args, result, baseline_out, extra, stopped, guard.late)


class _CancelOnSignal:
    """The first SIGINT or SIGTERM closes the stream at its next chunk (``attach``'s cancel)."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def stop_soon(self, reason: str) -> None:
        self.event.set()


def _what_arrived(options: AttachOptions, arrived: list[IterationRecord], stopped: Interrupted) -> AttachResult:
    """The result of a request a second signal cut: the records that had arrived, with no engine details."""
    from specscope.core.attach.client import AttachResult
    from specscope.core.attach.options import base_url, redact_url

    session: dict[str, Any] = {"engine": "unknown", "url": redact_url(base_url(options.url)),
                               "model": options.model, "error": stopped.reason}
    text = "".join(t.text for r in arrived for t in r.tokens)
    return AttachResult(records=list(arrived), text=text, session=session, scrapes=[], final_timings=None)


def _mark_stopped(result: AttachResult, stopped: Interrupted, baseline_out: dict[str, Any] | None) -> None:
    """What arrived ends as the signal ended it: the last pass says so, and the closed stream is no fault."""
    if result.records:
        result.records[-1].finished = False
        result.records[-1].finish_reason = stopped.reason
    result.warnings = [w for w in result.warnings if not w.startswith("cancelled:")]
    result.session["warnings"] = result.warnings
    result.session["stopped_by"] = stopped.signal_name
    if baseline_out is not None and baseline_out["error"] == "cancelled":
        baseline_out["error"] = f"stopped by {stopped.signal_name}"


def _report(args: argparse.Namespace, result: AttachResult, baseline_out: dict[str, Any] | None,
            extra: dict[str, Any], stopped: Interrupted | None, late: Interrupted | None) -> int:
    """Write the trace, print the summary and the one closing sentence; the exit code."""
    from specscope.core.attach.summary import summarize_attached
    from specscope.core.commands.cli_checks import emit, print_error

    summary = summarize_attached(result.records)
    extra.update({"summary": summary, "final_timings": result.final_timings})
    trace_problem = _write_trace(args.trace, result, extra) if args.trace is not None else None

    if args.json:
        error = result.error or (stopped.reason if stopped is not None else None)
        rec = result.reconciliation
        emit(json.dumps({"session": result.session, "summary": summary, "final_timings": result.final_timings,
                         "engine_totals": result.engine_totals, "baseline": baseline_out, "error": error,
                         "figures": rec.figures.to_dict() if rec is not None else None,
                         "exactness": rec.to_dict() if rec is not None else None, "latency": result.latency,
                         "text": result.text}, indent=2, default=str))
    else:
        lines = [summary_text(result, summary)]
        if baseline_out is not None:
            sp = baseline_out["speedup"] or {}
            if sp.get("value") is not None:
                lines.append(f"speed-up      {sp['value']:.2f}x [{sp['lo']:.2f}, {sp['hi']:.2f}] over {sp['n']} rounds")
            else:
                ratios = ", ".join(f"{r:.2f}" for r in baseline_out["ratios"])
                lines.append(f"speed-up      per-round ratios {ratios or 'none'} ({sp.get('method')})")
            if baseline_out["error"]:
                lines.append(f"baseline      stopped: {baseline_out['error']}")
        emit("\n".join(lines))
    if stopped is not None:
        n, tokens = summary["passes"], summary["tokens"]
        kept = f" in {args.trace}" if args.trace is not None and trace_problem is None else ""
        sentence = (f"stopped by {stopped.signal_name} after {n} verify pass{'es' * (n != 1)} ({tokens} token"
                    f"{'s' * (tokens != 1)}); what arrived is kept{kept}")
        print_error("; ".join([sentence, *([trace_problem] if trace_problem else [])]))
        return stopped.exit_code
    problems = [result.error] if result.error else []
    if baseline_out is not None and baseline_out["error"]:
        problems.append(f"the plain baseline failed ({baseline_out['error']}); the speculative results above "
                        "stand")
    if trace_problem:
        problems.append(trace_problem)
    if problems:
        print_error("; ".join(problems))
        return EXIT_FAILURE
    if late is not None:
        print_error(f"{late.signal_name} received after the request ended; its results above are complete")
        return late.exit_code
    return 0
