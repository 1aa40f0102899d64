"""Headless command line: ``specscope run | bench | verify | attach | serve | report``.

Every failure a user can cause (bad path, model without tokenizer, bad flag value, unwritable output path)
ends with one ``specscope: error: ...`` sentence and exit code 2 before any decoding; a fault during a run
(SIGINT, SIGTERM, a model failing, a full disk) keeps what was decoded: ``run`` records through the same
autosave recorder as the app, so even kill -9 loses at most about the last second. See ``cli_checks``.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence

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
    StdoutError,
    add_max_new_tokens,
    file_path,
    hold_closed_standard_descriptors,
    print_error,
    quiet_signals_while_starting,
    silence_stdout,
    starting_done,
    stdout_failed,
    terminate_raises,
    whole_number,
)
from specscope.core.commands.run import CheckedRun, check_run_arguments, cmd_run
from specscope.core.drafter_catalogue import (
    DEFAULT_K,
    DEFAULT_K_BY_DRAFTER,
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
                       f"{k} for --drafter {d}" for d, k in DEFAULT_K_BY_DRAFTER.items()) + f", {DEFAULT_K} otherwise; "
                       "--drafter mtp: proposal i from MTP layer i, and past the last layer that layer drafts on, "
                       "fed its own output)")
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
                   help="a baseline (a plain step that commits its token) after the first N speculative "
                        "iterations, then at least N apart and, once a first speed-up is known, spaced to cost at "
                        "most 3%% of the run (4.5%% while that gives a measured speed-up before the run ends): the "
                        "plain steps the measured speed-up and its interval pair with speculation (0 = never: then "
                        "only iterations that proposed nothing, which are plain steps, give it)")
    g.add_argument("--explore-every", type=whole_number(0, 10_000), default=16,
                   help="at most one speculative iteration in N runs at a k whose verify pass was never timed, so "
                        "the curve over k is measured, not extrapolated (0 = never)")
    g.add_argument("--drill", default=None, metavar="START:END:MODEL[:LAYERS]",
                   help="paging drill: move LAYERS (default all) decoder layers of the draft or target off "
                        "its device (GPU: to host memory; CPU: to disk) from iteration START until END")


def build_parser() -> Parser:
    from specscope.core.commands.pair_arguments import add_pair_arguments

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
    run.add_argument("--remote", metavar="URL", default=None,
                     help="decode on a worker started with `specscope serve` (the specscope://HOST:PORT/?token=… "
                          "line it printed) instead of loading a pair here")

    # The argument modules, not the commands (torch): building the parser, and so every --help, imports no torch.
    from specscope.core.commands import bench_arguments, verify_arguments

    bench_arguments.add_arguments(sub.add_parser("bench", help="interleaved benchmark against plain and transformers"))
    verify_arguments.add_arguments(sub.add_parser("verify", help="check speculation keeps the target's output"))
    from specscope.core.commands import attach as attach_command

    attach_command.add_arguments(sub.add_parser("attach", help="stream from a serving engine and read its speculation"))
    from specscope.core.commands.serve import add_serve_arguments

    add_serve_arguments(sub.add_parser("serve", help="run the engine headless for `run --remote` and the app "
                                                     "(prints its URL; one client at a time)"))
    from specscope.core.commands import report

    report.add_arguments(sub.add_parser("report", help="print the summary `run` prints for a recorded trace "
                                                       "(no models needed)"))
    parser.commands = dict(sub.choices)
    return parser


def _parse(parser: Parser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parse_args``, with an unknown flag refused by its subcommand's parser, so that the one error line
    points at ``specscope run --help``, not at the top level's list of commands."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = parser.commands.get(getattr(args, "command", None) or "", parser)
        command.error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    hold_closed_standard_descriptors()
    quiet_signals_while_starting()  # the launcher installs them earlier still; a direct call starts here
    refusal: CliError | None = None
    checked: CheckedRun | None = None
    try:
        parser = build_parser()  # no torch: --help answers at once, attach and run --remote never load it
        args = _parse(parser, argv)
        args.session_folder = None  # a run's autosave folder, once it has one (commands.run.start_autosave)
        try:
            checked = _check_before_engine(args)
        except CliError as exc:  # said below, with every other refusal; the engine is not needed to say it
            refusal = exc
        else:
            _import_engine(args)
    finally:
        starting_done()
    where = ""
    try:
        with terminate_raises():
            if refusal is not None:
                raise refusal
            rc = _dispatch(args, checked)
        failed = stdout_failed()
        if failed is not None:  # buffered output that could not be written at exit
            raise StdoutError(failed)
    except CliError as exc:
        if isinstance(exc, StdoutError):  # e.g. --json > /dev/full, or a closed pipe
            silence_stdout()
            if args.session_folder is not None:
                where = f"; the run is saved in {args.session_folder}"
        print_error(f"{exc}{where}")
        rc = exc.exit_code
    except Interrupted as exc:  # SIGTERM outside a decode loop (terminate_raises): loading a model, connecting
        if args.command == "run" and args.session_folder is None:
            print_error(f"{exc.signal_name} received before decoding began; nothing was decoded")
        elif args.command == "run":
            print_error(f"{exc.signal_name} received; the run is saved in {args.session_folder}")
        else:
            print_error(f"{exc.signal_name} received; {args.command} stopped before it finished")
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


# What a command that decodes here needs (seconds of imports), loaded while a signal still ends the start in one
# line (a KeyboardInterrupt inside transformers' imports surfaced as a traceback): as before for these commands.
ENGINE_MODULES = ("specscope.core.engine.speculative", "transformers")


def _check_before_engine(args: argparse.Namespace) -> CheckedRun | None:
    """The refusals of ``run``, ``serve``, ``bench`` and ``verify`` that need no torch (the prompt, the controls,
    the output paths, the pair's options and config.json files, serve's --exit-with-parent stdin), made before
    the engine's imports: a typo costs a second, not the ~10 s (40 s on a loaded machine) of importing torch and
    transformers. The local run's checked options."""
    if args.command == "run" and args.remote is None:
        return check_run_arguments(args)
    if args.command == "serve":
        from specscope.core.commands.serve import check_serve_arguments

        check_serve_arguments(args)
    if args.command in ("bench", "verify"):
        check_pair_before_engine(args)
    return None


def check_pair_before_engine(args: argparse.Namespace) -> None:
    """bench's and verify's pair options (a missing target, the model drafter without --draft, a broken
    config.json), refused in the loader's words before the engine's imports. bench names the demo as
    ``--target demo``; verify has run's ``--demo``."""
    from specscope.core.commands.pair_arguments import check_pair_choice
    from specscope.core.engine.pair_spec import ModelLoadError

    demo = bool(getattr(args, "demo", False)) or args.target == "demo"
    choice = argparse.Namespace(**{**vars(args), "demo": demo, "target": None if demo else args.target})
    try:
        check_pair_choice(choice)
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None


def _import_engine(args: argparse.Namespace) -> None:
    if args.command in ("run", "serve", "bench", "verify") and getattr(args, "remote", None) is None:
        for name in ENGINE_MODULES:
            importlib.import_module(name)


def _dispatch(args: argparse.Namespace, checked: CheckedRun | None = None) -> int:
    if args.command == "run":
        if args.remote is not None:
            from specscope.core.commands.serve import cmd_run_remote

            return cmd_run_remote(args)
        return cmd_run(args, checked)
    if args.command == "serve":
        from specscope.core.commands.serve import cmd_serve

        return cmd_serve(args)
    if args.command == "bench":
        from specscope.core.commands import bench

        return int(bench.main(args))
    if args.command == "verify":
        from specscope.core.commands import verify

        return int(verify.main(args))
    if args.command == "attach":
        from specscope.core.commands import attach as attach_command

        return attach_command.main(args)
    if args.command == "report":
        from specscope.core.commands import report

        return report.main(args)
    raise CliError(f"unknown command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
