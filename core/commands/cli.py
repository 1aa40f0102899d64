"""Headless command line: ``specscope run | bench | verify | attach``.

Every failure a user can cause (bad path, model without tokenizer, bad flag value, unwritable output path)
ends with one ``specscope: error: ...`` sentence and exit code 2 before any decoding; a fault during a run
(SIGINT, SIGTERM, a model failing, a full disk) keeps what was decoded: ``run`` records through the same
autosave recorder as the app, so even kill -9 loses at most about the last second. See ``cli_checks``.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from specscope.core.commands.cli_checks import (
    EXIT_FAILURE,
    EXIT_USAGE,
    SEED,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    CliError,
    Interrupted,
    Parser,
    SignalGuard,
    StdoutError,
    add_max_new_tokens,
    check_writable,
    checked_prompt,
    emit,
    file_path,
    print_error,
    read_text_file,
    silence_stdout,
    stdout_failed,
    whole_number,
)
from specscope.core.drafter_catalogue import (
    DEFAULT_K,
    DEFAULT_K_BY_DRAFTER,
    adaptive_k_default,
    default_drafter,
    default_k,
)

__all__ = ["EXIT_FAILURE", "EXIT_USAGE", "CliError", "build_parser", "main"]


def _positive_int(text: str) -> int:
    return whole_number(1)(text)


def add_decode_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("decoding")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text (the chat template is applied for instruct models)")
    src.add_argument("--prompt-file", type=file_path, help="read the prompt from a text file")
    g.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text")
    g.add_argument("--k", type=_positive_int, default=None,
                   help="proposals per iteration (1-16; default: " + ", ".join(
                       f"{k} for --drafter {d}" for d, k in DEFAULT_K_BY_DRAFTER.items()) + f", {DEFAULT_K} otherwise)")
    g.add_argument("--adaptive-k", action=argparse.BooleanOptionalAction, default=None,
                   help="choose k each iteration from the cost model (default: on for --drafter lookup, "
                        "off otherwise)")
    g.add_argument("--temperature", type=TEMPERATURE, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=TOP_K, default=0, help="0 = off")
    g.add_argument("--top-p", type=TOP_P, default=1.0, help="1 = off")
    add_max_new_tokens(g, 128, "stop after this many new tokens (the model's context window also stops the run; "
                              "--max-tokens is the same)")
    g.add_argument("--seed", type=SEED, default=None)
    g.add_argument("--plain", action="store_true", help="decode with the target alone (the baseline)")
    g.add_argument("--baseline-every", type=whole_number(0, 10_000), default=6,
                   help="a baseline (2 plain steps that commit their tokens) after every N speculative iterations "
                        "until the speed-up is known, then spaced to cost at most 3%% of the run: the blocks the "
                        "measured speed-up and its interval are paired over (0 = never: no measured speed-up)")
    g.add_argument("--explore-every", type=whole_number(0, 10_000), default=16,
                   help="at most one speculative iteration in N runs at a k whose verify pass was never timed, so "
                        "the curve over k is measured, not extrapolated (0 = never)")
    g.add_argument("--drill", default=None, metavar="START:END:MODEL[:LAYERS]",
                   help="paging drill: move LAYERS (default all) decoder layers of the draft or target off "
                        "its device (GPU: to host memory; CPU: to disk) from iteration START until END")


def build_parser() -> argparse.ArgumentParser:
    from specscope.core.engine.models import add_pair_arguments

    parser = Parser(
        prog="specscope", description="Profile speculative decoding: run, bench or verify a draft/target pair."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="decode one prompt headless and print what speculation did")
    add_pair_arguments(run)
    add_decode_arguments(run)
    out = run.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    out.add_argument("--trace", type=file_path, help="write the per-iteration trace CSV (+ tokens CSV, session JSON)")
    out.add_argument("--chrome-trace", type=file_path, help="write a Chrome/Perfetto trace JSON")
    out.add_argument("--quiet", action="store_true", help="no progress messages on stderr")

    from specscope.core.commands import bench, verify

    bench.add_arguments(sub.add_parser("bench", help="interleaved benchmark against plain and transformers"))
    verify.add_arguments(sub.add_parser("verify", help="check speculation keeps the target's output"))
    from specscope.core.attach import command as attach_command

    attach_command.add_arguments(sub.add_parser("attach", help="stream from a serving engine and read its speculation"))
    return parser


def _prompt_text(args: argparse.Namespace) -> str:
    if args.prompt_file is not None:
        return checked_prompt(read_text_file(args.prompt_file, "prompt file"), f"prompt file {args.prompt_file}")
    if args.prompt is not None:
        return checked_prompt(str(args.prompt), "--prompt")
    if args.demo:
        from specscope.core.prompts import load_prompt_sets

        sets = load_prompt_sets()
        for kind in ("structured", "code", "prose"):
            if sets.get(kind):
                return sets[kind][0].text
    raise CliError("give a prompt with --prompt TEXT or --prompt-file FILE")


def _controls(args: argparse.Namespace) -> Any:
    from specscope.core.controls import Controls, InvalidControl
    from specscope.core.records import ControlValues

    try:
        return Controls(ControlValues(k=args.k, temperature=args.temperature, top_k=args.top_k,
                                      top_p=args.top_p, adaptive_k=args.adaptive_k))
    except InvalidControl as exc:
        raise CliError(str(exc)) from None


def _drill(args: argparse.Namespace) -> Any:
    from specscope.core.memory.drill import DrillError, parse_drill

    if getattr(args, "drill", None) is None:
        return None
    try:
        spec = parse_drill(args.drill)
    except DrillError as exc:
        raise CliError(str(exc)) from None
    if spec.model == "draft" and (args.plain or args.drafter != "model"):
        raise CliError("a draft drill needs a draft model (--drafter model, not --plain): drill the target")
    return spec


def _progress(quiet: bool):
    def report(message: str, fraction: float) -> None:
        if not quiet:
            print(f"[{fraction * 100:5.1f}%] {message}", file=sys.stderr, flush=True)

    return report


def _fmt(value: float | None, spec: str = ".3f", unit: str = "") -> str:
    return "n/a" if value is None else f"{value:{spec}}{unit}"


def session_description(args: argparse.Namespace, pair: Any) -> dict[str, Any]:
    return {
        "command": "run",
        "target": pair.target.name,
        "target_source": pair.target.source,
        "target_device": str(pair.target.device),
        "target_dtype": str(pair.target.dtype).replace("torch.", ""),
        "draft": pair.draft.name if pair.draft is not None else None,
        "draft_device": str(pair.draft.device) if pair.draft is not None else None,
        "drafter": pair.drafter_kind,
        "plain": bool(args.plain),
        "k": args.k,
        "adaptive_k": bool(args.adaptive_k),
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
    }


def _quiet_libraries() -> None:
    """``--quiet`` / ``--json``: no progress bars or notices from transformers and the hub while loading."""
    import os

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def _start_recorder(description: dict[str, Any], quiet: bool) -> Any:
    """The app's autosave recorder, for the CLI too; a run goes on without it when it cannot start."""
    from specscope.core.trace.autosave import default_sessions_dir, start_recorder

    # A writer thread does the writing, as in the app: a signal is handled on this thread, so it can never land
    # in the middle of a line being written (and write it twice, or half).
    recorder, problem = start_recorder(default_sessions_dir(), description)
    if recorder is None:
        print(f"specscope: warning: {problem}", file=sys.stderr)
        return None
    if not quiet:
        print(f"autosave: {recorder.folder}", file=sys.stderr)
    return recorder


class _Run:
    """What the error path needs to say where a run's work went."""

    session_folder: Path | None = None


def _check_context(pair: Any, n_prompt: int, max_new_tokens: int, quiet: bool) -> None:
    if n_prompt == 0:
        raise CliError("the prompt encodes to no tokens: give some text to continue")
    window = pair.context_window
    if window is None:
        return
    if n_prompt >= window:
        raise CliError(f"the prompt is {n_prompt:,} tokens but {pair.target.name} holds {window:,} positions; "
                       f"shorten it to fewer than {window:,} tokens")
    if n_prompt + max_new_tokens > window and not quiet:
        print(f"note: the context window ({window:,} positions) leaves room for {window - n_prompt:,} new "
              "tokens; the run stops there (finish_reason context_window)", file=sys.stderr)


def resolve_drafter_defaults(args: argparse.Namespace) -> None:
    """k and adaptive k the user left unset take the drafter's defaults (kinds.py)."""
    drafter = args.drafter or default_drafter("demo" if args.demo else args.target or "")
    if args.adaptive_k is None:
        args.adaptive_k = adaptive_k_default(drafter)
    if args.k is None:
        args.k = default_k(drafter)


def cmd_run(args: argparse.Namespace) -> int:
    resolve_drafter_defaults(args)
    controls = _controls(args)
    drill = _drill(args)
    text = _prompt_text(args)
    if args.trace is not None:
        check_writable(args.trace, "--trace", trace=True)
    if args.chrome_trace is not None:
        check_writable(args.chrome_trace, "--chrome-trace")
    quiet = bool(args.quiet or args.json)
    if quiet:
        _quiet_libraries()

    from specscope.core.engine.models import ModelLoadError, load_pair, spec_from_args
    from specscope.core.gc_freeze import loaded_objects_frozen
    from specscope.core.session import Session, SessionOptions

    if args.plain and not args.draft and args.drafter in (None, "model", "eagle"):
        args.drafter = "lookup"  # plain decoding never drafts: do not demand a draft model for it
    try:
        spec = spec_from_args(args)
        pair = load_pair(spec, progress=_progress(quiet))
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None
    prompt_ids = pair.encode_prompt(text, chat=False if args.no_chat_template else None)
    _check_context(pair, len(prompt_ids), args.max_new_tokens, quiet)
    description = session_description(args, pair)
    # what the app's crash recovery offers the run by (its prompt and pair, not only a date)
    description.update(prompt=text, pair_description=str(getattr(pair, "description", "") or ""))
    recorder = _start_recorder(description, quiet)
    _Run.session_folder = recorder.folder if recorder is not None else None
    # the recorder is a sink of the session: it records on this thread, in the stream's order
    session = Session(pair, controls, SessionOptions(
        max_new_tokens=args.max_new_tokens, seed=args.seed, plain=args.plain,
        baseline_every=args.baseline_every, explore_every=args.explore_every, drill=drill, prompt_text=text,
        source="local",
    ), sinks=[recorder] if recorder is not None else [])

    with SignalGuard(controls).installed() as guard, loaded_objects_frozen():  # no full collection in a step
        return _decode_and_report(args, pair, session, prompt_ids, description, recorder, guard)


def _decode_and_report(args: argparse.Namespace, pair: Any, session: Any, prompt_ids: list[int],
                       description: dict[str, Any], recorder: Any, guard: SignalGuard) -> int:
    import torch

    from specscope.core.measure.busy import BUSY_PREFIX
    from specscope.core.measure.measurement import run_summary
    from specscope.core.memory.residency import model_residency

    error: str | None = None
    stopped: Interrupted | None = None
    stream = session.stream(prompt_ids)
    warned = False
    try:
        for _event in stream:  # the session's sinks (autosave) see every event; the summary reads the snapshot
            if recorder is not None and recorder.error is not None and not warned:
                # said at once: the user should know the crash-safety net is off while the run goes on
                warned = True
                print(f"specscope: warning: {recorder.error}; the crash-safety net is off for the rest of this "
                      "run (the run goes on, and --trace still writes at the end)", file=sys.stderr)
    except Interrupted as exc:  # a second signal: the step under way was cut
        stopped = exc
    except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # a model failing mid-run: keep the trace
        error = f"the model failed mid-run: {exc}"
    finally:
        guard.raising = False  # from here a signal waits until the results are written
        stream.close()  # ends the loop (and the memory sampler) if the signal came between iterations
        if stopped is None and guard.pending is not None:
            if session.result is not None and session.result.finish_reason != "stop":
                guard.late = guard.late or guard.pending  # the run had ended by itself: its results are whole
            else:
                stopped = guard.pending  # the first signal stopped the loop at an iteration boundary
        if recorder is not None:
            recorder.close(ok=error is None and stopped is None,
                           reason=stopped.reason if stopped is not None else "error" if error else "")
    result = session.result
    if result is None:  # the signal came before the loop began
        assert stopped is not None
        raise CliError(f"{stopped.signal_name} received before decoding began; nothing was decoded",
                       exit_code=stopped.exit_code)
    records = session.records
    # how the run ended is the stream's RunFinished (a stop by signal says interrupted or terminated)
    result.finish_reason = session.finished.reason if session.finished is not None else result.finish_reason

    residency = {"target": model_residency(pair.target.model, pair.target.device, "target")}
    if pair.draft is not None:
        residency["draft"] = model_residency(pair.draft.model, pair.draft.device, "draft")
    flags = [(r.iteration, f) for r in records for f in r.flags]
    estimate = session.measurement.estimate()
    summary = run_summary(records, prefill_ms=session.decoder.prefill_ms, estimate=estimate)

    trace_error: str | None = None
    if args.trace is not None or args.chrome_trace is not None:
        trace_error = _write_traces(args, session.events, description, recorder)

    if args.json:
        out = {
            "token_ids": result.token_ids,
            "text": pair.tokenizer.decode(result.token_ids, skip_special_tokens=True),
            "finish_reason": result.finish_reason,
            "metrics": summary,
            "residency": {name: {"bytes_by_device": r.bytes_by_device, "warnings": r.warnings}
                          for name, r in residency.items()},
            "paging_flags": [{"iteration": i, "sentence": s} for i, s in flags if not s.startswith(BUSY_PREFIX)],
            "busy_flags": [{"iteration": i, "sentence": s} for i, s in flags if s.startswith(BUSY_PREFIX)],
            "session_folder": str(recorder.folder) if recorder is not None else None,
            "autosave_error": recorder.error if recorder is not None else None,
            "drill_events": [asdict(e) for e in session.drill_events],
            "error": error or trace_error or (stopped.reason if stopped is not None else None),
        }
        emit(json.dumps(out, indent=None, default=str))
    else:
        emit(pair.tokenizer.decode(result.token_ids, skip_special_tokens=True) + "\n\n"
             + _summary_text(args, pair, result, summary, estimate, residency, flags, session.drill_events))
    if stopped is None and guard.late is not None:
        print_error(f"{guard.late.signal_name} received after the run ended; its results above are complete")
        return guard.late.exit_code
    if stopped is not None:
        n_it, n_tok = len(records), len(result.token_ids)
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


def _write_traces(args: argparse.Namespace, events: list[Any], session: dict[str, Any],
                  recorder: Any) -> str | None:
    """Write ``--trace`` and ``--chrome-trace``; when one fails this late (disk full), say where the run is:
    the autosaved session folder holds the whole trace, and a chrome trace is saved there instead."""
    from specscope.core.trace.chrome_trace import write_chrome_trace
    from specscope.core.trace.files import TraceError, write_trace

    saved = recorder is not None and recorder.error is None
    problems: list[str] = []
    if args.trace is not None:
        try:
            paths = write_trace(Path(args.trace), events, session=session)
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
    return (f"{cost.text()} (bookkeeping {cost.bookkeeping_ms:.0f} ms, baselines {cost.baseline_ms:.0f} ms, "
            f"exploration {cost.exploration_ms:.0f} ms of {cost.wall_ms / 1000.0:.1f} s)")


def _summary_text(args: argparse.Namespace, pair: Any, result: Any, summary: dict[str, Any], estimate: Any,
                  residency: dict[str, Any], flags: list[tuple[int, str]], drills: Sequence[Any] = ()) -> str:
    """The run in words; every number is ``run_summary``'s or the measurement's estimate's."""
    from specscope.core.measure.busy import BUSY_PREFIX
    from specscope.core.memory.residency import format_residency

    s = summary
    lines = ["── specscope run " + "─" * 50]
    mode = "plain decoding (target only)" if args.plain else f"speculative, drafter {pair.drafter_kind}"
    lines.append(f"mode          {mode}; finish: {result.finish_reason}")
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
        left_out = f" ({estimate.blocks_busy} machine-busy blocks left out)" if estimate.blocks_busy else ""
        measured = (f"measured {estimate.speedup_text()} over {estimate.blocks} interleaved plain/speculative "
                    f"blocks{left_out}" if estimate.measured else f"measured: {estimate.measured_reason}")
        lines.append(f"vs plain      {measured}; predicted ×{_fmt(estimate.predicted_speedup, '.2f')} "
                     f"at k={estimate.k}")
        lines.append(f"best k        {estimate.best_k_text()}")
        if estimate.controller_text():
            lines.append(f"              {estimate.controller_text()}")
        if estimate.verdict:
            lines.append(f"              {estimate.verdict}")
    for name, r in residency.items():
        lines.append(f"residency     {format_residency(name, r)}")
        for w in r.warnings:
            lines.append(f"  warning     {w}")
    for event in drills:
        lines.append(f"drill         before iteration {event.before_iteration}: {event.label}")
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    _Run.session_folder = None
    where = ""
    try:
        rc = _dispatch(args)
        failed = stdout_failed()
        if failed is not None:  # buffered output that could not be written at exit
            raise StdoutError(failed)
    except CliError as exc:
        if isinstance(exc, StdoutError):  # e.g. --json > /dev/full, or a closed pipe
            silence_stdout()
            if _Run.session_folder is not None:
                where = f"; the run is saved in {_Run.session_folder}"
        print_error(f"{exc}{where}")
        rc = exc.exit_code
    except KeyboardInterrupt:
        # Ctrl-C outside a decode loop (loading a model, connecting): decoding installs its own handler, so
        # nothing decoded is lost here; one line instead of a traceback through the library that was running.
        if args.command == "run":
            print_error("interrupted by Ctrl-C before decoding began; nothing was decoded")
        else:
            print_error(f"interrupted by Ctrl-C; {args.command} stopped before it finished")
        rc = 128 + signal.SIGINT
    return rc


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        return cmd_run(args)
    if args.command == "bench":
        from specscope.core.commands import bench

        return int(bench.main(args))
    if args.command == "verify":
        from specscope.core.commands import verify

        return int(verify.main(args))
    if args.command == "attach":
        from specscope.core.attach import command as attach_command

        return attach_command.main(args)
    raise CliError(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
