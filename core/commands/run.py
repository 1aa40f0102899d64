"""``specscope run``: load the pair, decode with a session, report through ``run_report``.

The helpers that turn the run options into controls, a drill, a prompt and the autosave recorder are shared
with ``run --remote`` (``core.commands.serve``), which decodes on a worker and reports the same way.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from specscope.core.commands.cli_checks import (
    CliError,
    Interrupted,
    SignalGuard,
    check_writable,
    checked_prompt,
    progress_line,
    read_text_file,
)
from specscope.core.drafter_catalogue import (
    adaptive_k_default,
    default_drafter,
    default_k,
)


def prompt_text_from_args(args: argparse.Namespace) -> str:
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


def controls_from_args(args: argparse.Namespace) -> Any:
    from specscope.core.controls import Controls, InvalidControl
    from specscope.core.records import ControlValues

    try:
        return Controls(ControlValues(k=args.k, temperature=args.temperature, top_k=args.top_k,
                                      top_p=args.top_p, adaptive_k=args.adaptive_k))
    except InvalidControl as exc:
        raise CliError(str(exc)) from None


def drill_from_args(args: argparse.Namespace) -> Any:
    if getattr(args, "drill", None) is None:
        return None
    from specscope.core.memory.drill import DrillError, parse_drill  # imports torch: only for a drill

    try:
        spec = parse_drill(args.drill)
    except DrillError as exc:
        raise CliError(str(exc)) from None
    if spec.model == "draft" and (args.plain or args.drafter != "model"):
        raise CliError("a draft drill needs a draft model (--drafter model, not --plain): drill the target")
    return spec


def load_progress(quiet: bool):
    def report(message: str, fraction: float) -> None:
        if not quiet:
            progress_line(f"[{fraction * 100:5.1f}%] {message}")

    return report


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


def quiet_libraries() -> None:
    """``--quiet`` / ``--json``: no progress bars or notices from transformers and the hub while loading."""
    import os

    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def start_autosave(args: argparse.Namespace, description: dict[str, Any], quiet: bool) -> Any:
    """The app's autosave recorder, for the CLI too; a run goes on without it when it cannot start. Its folder
    is kept on ``args.session_folder``: what the error path says when the run ends badly (None: no autosave)."""
    from specscope.core.trace.autosave import default_sessions_dir, start_recorder

    # A writer thread does the writing, as in the app: a signal is handled on this thread, so it can never land
    # in the middle of a line being written (and write it twice, or half).
    recorder, problem = start_recorder(default_sessions_dir(), description)
    args.session_folder = recorder.folder if recorder is not None else None
    if recorder is None:
        print(f"specscope: warning: {problem}", file=sys.stderr)
        return None
    if not quiet:
        print(f"autosave: {recorder.folder}", file=sys.stderr)
    return recorder


def _check_context(pair: Any, n_prompt: int, max_new_tokens: int, quiet: bool) -> None:
    from specscope.core.prompts import context_note, context_problem

    problem = context_problem(n_prompt, pair.context_window, pair.target.name)
    if problem is not None:
        raise CliError(problem)
    note = context_note(n_prompt, max_new_tokens, pair.context_window)
    if note is not None and not quiet:
        print(f"note: {note}", file=sys.stderr)


def resolve_drafter_defaults(args: argparse.Namespace) -> None:
    """k and adaptive k the user left unset take the drafter's defaults (kinds.py)."""
    drafter = args.drafter or default_drafter("demo" if args.demo else args.target or "")
    if args.adaptive_k is None:
        args.adaptive_k = adaptive_k_default(drafter)
    if args.k is None:
        args.k = default_k(drafter)


def check_output_paths(args: argparse.Namespace) -> None:
    """Refuse unwritable ``--trace``/``--chrome-trace`` paths before anything runs."""
    if args.trace is not None:
        check_writable(args.trace, "--trace", trace=True)
    if args.chrome_trace is not None:
        check_writable(args.chrome_trace, "--chrome-trace")


def quiet_from_args(args: argparse.Namespace) -> bool:
    """True (and the libraries' progress bars silenced) when the run reports quietly (``--quiet`` or ``--json``)."""
    quiet = bool(args.quiet or args.json)
    if quiet:
        quiet_libraries()
    return quiet


def check_outputs_and_quiet(args: argparse.Namespace) -> bool:
    """``check_output_paths``, then ``quiet_from_args``."""
    check_output_paths(args)
    return quiet_from_args(args)


@dataclass(frozen=True)
class CheckedRun:
    """What ``specscope run`` took from its options once they passed every check that needs no model."""

    controls: Any
    drill: Any
    text: str


def check_run_arguments(args: argparse.Namespace) -> CheckedRun:
    """Every refusal of a local run's options that needs neither torch nor a model (the prompt, the controls,
    the output paths, the pair's options and its config.json files): the CLI runs these before it imports the
    engine, so a typo is answered in a second, not after ~10 s of imports (or 30 s on a loaded machine)."""
    from specscope.core.commands.pair_arguments import check_pair_choice
    from specscope.core.engine.pair_spec import ModelLoadError

    resolve_drafter_defaults(args)
    controls = controls_from_args(args)
    drill = drill_from_args(args)
    text = prompt_text_from_args(args)
    check_output_paths(args)
    if args.plain and not args.draft and args.drafter in (None, "model", "eagle"):
        args.drafter = "lookup"  # plain decoding never drafts: do not demand a draft model for it
    try:
        check_pair_choice(args)
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None
    return CheckedRun(controls=controls, drill=drill, text=text)


def cmd_run(args: argparse.Namespace, checked: CheckedRun | None = None) -> int:
    """``checked``: the options as ``check_run_arguments`` already checked them (the CLI checks before it
    imports the engine); checked here when not given."""
    if checked is None:
        checked = check_run_arguments(args)
    controls, drill, text = checked.controls, checked.drill, checked.text
    quiet = quiet_from_args(args)

    from specscope.core.commands.pair_arguments import spec_from_args
    from specscope.core.engine.models import load_pair
    from specscope.core.engine.pair_spec import ModelLoadError
    from specscope.core.gc_freeze import loaded_objects_frozen
    from specscope.core.measure.run import Run
    from specscope.core.session import Session, SessionOptions

    try:
        spec = spec_from_args(args)
        pair = load_pair(spec, progress=load_progress(quiet))
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None
    prompt_ids = pair.encode_prompt(text, chat=False if args.no_chat_template else None)
    _check_context(pair, len(prompt_ids), args.max_new_tokens, quiet)
    description = session_description(args, pair)
    # what the app's crash recovery offers the run by (its prompt and pair, not only a date)
    description.update(prompt=text, pair_description=str(getattr(pair, "description", "") or ""))
    recorder = start_autosave(args, description, quiet)
    # the recorder is a sink of the run the session feeds: it records on this thread, in the stream's order
    exported = args.trace is not None or args.chrome_trace is not None  # else the latest snapshot is enough
    run = Run(sinks=[recorder] if recorder is not None else [], keep_snapshots=exported)
    session = Session(pair, controls, SessionOptions(
        max_new_tokens=args.max_new_tokens, seed=args.seed, plain=args.plain,
        baseline_every=args.baseline_every, explore_every=args.explore_every, drill=drill, prompt_text=text,
        source="local",
    ), run=run)

    with SignalGuard(controls).installed() as guard, loaded_objects_frozen():  # no full collection in a step
        return _decode_and_report(args, pair, session, prompt_ids, description, recorder, guard)


def _decode_and_report(args: argparse.Namespace, pair: Any, session: Any, prompt_ids: list[int],
                       description: dict[str, Any], recorder: Any, guard: SignalGuard) -> int:
    import torch

    from specscope.core.commands.run_report import RunOutcome, nothing_decoded, report_run
    from specscope.core.memory.residency import model_residency

    error: str | None = None
    stopped: Interrupted | None = None
    stream = session.stream(prompt_ids)
    warned = False
    try:
        for _event in stream:  # the run's sinks (autosave) see every event; the summary reads its snapshot
            if recorder is not None and recorder.error is not None and not warned:
                # said at once: the user should know the crash-safety net is off while the run goes on
                warned = True
                warn_autosave_off(recorder)
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
        raise nothing_decoded(stopped)
    residency = {"target": model_residency(pair.target.model, pair.target.device, "target")}
    if pair.draft is not None:
        residency["draft"] = model_residency(pair.draft.model, pair.draft.device, "draft")
    outcome = RunOutcome(
        token_ids=result.token_ids, text=pair.tokenizer.decode(result.token_ids, skip_special_tokens=True),
        # how the run ended is the stream's RunFinished (a stop by signal says interrupted or terminated)
        finish_reason=session.finished.reason if session.finished is not None else result.finish_reason,
        records=session.records, events=session.measured.events, drill_events=session.drill_events,
        prefill_ms=session.decoder.prefill_ms, estimate=session.measured.estimate(), run=session.measured,
        drafter_kind=pair.drafter_kind, residency=residency)
    return report_run(args, outcome, description, recorder, error=error, stopped=stopped, late=guard.late)


def warn_autosave_off(recorder: Any) -> None:
    print(f"specscope: warning: {recorder.error}; the crash-safety net is off for the rest of this "
          "run (the run goes on, and --trace still writes at the end)", file=sys.stderr)


