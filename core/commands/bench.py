"""``specscope bench``: one pair, one prompt set, every method in interleaved rounds, one report.

Methods: plain decoding, specscope at fixed k, adaptive k (cost model) and transformers' heuristic
schedule, transformers' assisted generation (assistant configured through its ``generation_config``) and
transformers' prompt lookup. Each round runs every prompt through every method back to back, in an order
that rotates from round to round, and each run's speed is compared with the plain run of the same prompt in
the same round: the machine drifts, so only adjacent runs are compared.

Speeds include the prefill (transformers' ``generate`` is timed as a whole, so specscope is timed the same
way: prefill plus the loop's iterations; baseline measurements between iterations are not counted).
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from specscope.core.commands.bench_arguments import (  # noqa: F401 - the tests' and the CLI's names
    MAX_THREADS,
    _int_list,
    _thread_list,
    add_arguments,
)
from specscope.core.commands.bench_report import _save_elsewhere, markdown_report, report_paths, write_report_files
from specscope.core.commands.bench_runs import (
    BenchPrompt,
    Method,
    RunRow,
    default_methods,
    find_mismatches,
    run_bench,
)
from specscope.core.commands.cli_checks import (
    EXIT_FAILURE,
    CliError,
    Interrupted,
    SignalGuard,
    check_writable,
    emit,
    print_error,
    progress_line,
)
from specscope.core.drafter_catalogue import default_drafter
from specscope.core.engine.pair import ModelPair
from specscope.core.prompts import Prompt
from specscope.core.trace.errors import TraceError, TraceWriteError

# ---- running one method ---------------------------------------------------------------------------


# ---- the bench ------------------------------------------------------------------------------------


# ---- summaries and reports ------------------------------------------------------------------------


# ---- command line ---------------------------------------------------------------------------------
def choose_bench_prompts(spec: str, limit: int = 0) -> list[Prompt]:
    """The prompts ``--prompts`` names; ValueError naming the file (and the shape it needs) otherwise."""
    from specscope.core.prompts import load_prompt_file, load_prompt_sets

    sets = load_prompt_sets()
    items = list(sets) if spec == "all" else [k.strip() for k in spec.split(",") if k.strip()]
    chosen: list[Prompt] = []
    for item in items:  # a shipped kind (KIND:N: its first N), or a prompts file (JSON or text)
        kind, _, count = item.partition(":")
        if kind in sets and count.isdigit() and int(count) > 0:
            chosen += sets[kind][: int(count)]
        elif item in sets:
            chosen += sets[item][:limit] if limit else sets[item]
        elif item.endswith(".json") or Path(item).is_file():
            chosen += load_prompt_file(item)
        else:
            raise ValueError(f"unknown prompt kind or file {item!r}: choose from {', '.join(sets)} or give a "
                             "prompts file")
    return chosen


def command_line(args: argparse.Namespace) -> str:
    """The full command that reproduces this bench (every option spelled out, defaults included)."""
    parts = ["specscope", "bench", "--target", args.target]
    if args.draft:
        parts += ["--draft", args.draft]
    parts += ["--drafter", resolved_drafter(args), "--device", args.device, "--prompts", args.prompts]
    if args.limit:
        parts += ["--limit", str(args.limit)]
    parts += ["--k", ",".join(str(k) for k in args.k) or "none", "--rounds", str(args.rounds),
              "--max-new-tokens", str(args.max_new_tokens)]
    parts += ["--no-adaptive"] if args.no_adaptive else []
    parts += ["--no-heuristic"] if args.no_heuristic else []
    parts += ["--no-transformers"] if args.no_transformers else []
    parts += ["--lookup-tokens", str(args.lookup_tokens)]
    if args.lookup_variants:
        parts += ["--lookup-variants", ",".join(f"{v.match}:{v.max_ngram}:{v.min_ngram}"
                                                for v in args.lookup_variants)]
    parts += ["--threads", ",".join(str(t) for t in args.threads)] if any(args.threads) else []
    if resolved_drafter(args) == "suffix":
        parts += ["--suffix-max-tree-depth", str(args.suffix_max_tree_depth),
                  "--suffix-max-spec-factor", f"{args.suffix_max_spec_factor:g}",
                  "--suffix-min-token-prob", f"{args.suffix_min_token_prob:g}",
                  "--suffix-max-cached-requests", str(args.suffix_max_cached_requests)]
        parts += [] if args.suffix_backoff else ["--suffix-no-backoff"]
    parts += [] if getattr(args, "prepack_cpu", True) else ["--no-prepack"]
    parts += ["--goals", ",".join(f"{g:g}" for g in args.goals)]
    parts += ["--out", args.out]
    return " ".join(shlex.quote(p) for p in parts)


def _pair_line(pair: ModelPair) -> str:
    """The pair, and which CPU kernels its multi-token passes ran on (they change what a verify pass costs)."""
    from specscope.core.memory.residency import prepacked_bytes

    line = pair.description or pair.target.name
    if pair.target.device.type == "cpu":
        line += ("; multi-token passes on oneDNN weights prepacked at load" if prepacked_bytes(pair.target.model)
                 else "; PyTorch's default CPU kernels for every pass")
        kernels = getattr(pair.target, "one_token_kernels", {})
        if kernels:  # the plain step every speed-up is over: which kernel it ran on, at each thread count timed
            line += "; target " + "; ".join(f"{kernels[t]}" for t in sorted(kernels))
    return line


def resolved_drafter(args: argparse.Namespace) -> str:
    """--drafter as given, else the demo's default for the demo and the draft model for anything else."""
    if args.drafter:
        return str(args.drafter)
    return default_drafter(args.target)


def main(args: argparse.Namespace) -> int:
    args.drafter = resolved_drafter(args)
    from specscope.core.commands.pair_arguments import suffix_fields
    from specscope.core.engine.models import load_pair
    from specscope.core.engine.pair_spec import ModelLoadError, PairSpec

    try:
        chosen = choose_bench_prompts(args.prompts, args.limit)
    except ValueError as e:
        raise CliError(str(e)) from None
    if not chosen:
        raise CliError(f"--prompts {args.prompts} holds no prompts: give a set or a file with at least one")
    stem = Path(args.out)
    md, csv_path = report_paths(stem)
    try:
        stem.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"--out {args.out}: cannot make the folder {stem.parent} ({e.strerror or e})") from None
    for path in (md, csv_path):  # before the bench, not after it
        check_writable(path, "--out")
    try:
        pair = load_pair(PairSpec(target=args.target, draft=args.draft, drafter=args.drafter,
                                  target_device=args.device, prepack_cpu=args.prepack_cpu,
                                  **suffix_fields(args)))
    except ModelLoadError as e:
        raise CliError(str(e)) from None
    prompts = [BenchPrompt(p.id, p.kind, pair.encode_prompt(p.text)) for p in chosen]
    methods = default_methods(args.k, pair, adaptive=not args.no_adaptive,
                              heuristic=not (args.no_adaptive or args.no_heuristic),
                              transformers=not args.no_transformers, lookup_tokens=args.lookup_tokens,
                              lookup_variants=args.lookup_variants)
    rows: list[RunRow] = []
    total = len(args.threads) * args.rounds * len(prompts) * len(methods)
    with SignalGuard().installed() as guard:  # the first SIGINT or SIGTERM stops the bench at once
        stopped: Interrupted | None = None
        try:
            _measure(args, pair, prompts, methods, rows)
        except Interrupted as exc:  # the run under way is left out: its timing was cut
            stopped = exc
        finally:
            guard.raising = False  # from here a signal is only noted: the runs that finished are written first
        if stopped is not None and not rows:
            raise CliError(f"stopped by {stopped.signal_name} before the first run was measured; nothing to report",
                           exit_code=stopped.exit_code)
        note = (f"Stopped by {stopped.signal_name} after {len(rows)} of {total} runs: the tables hold the runs "
                "that finished" if stopped is not None else "")
        _report(args, pair, prompts, rows, md, csv_path, stem, note)
        if stopped is not None:
            print_error(f"stopped by {stopped.signal_name} after {len(rows)} of {total} runs; the runs that "
                        f"finished are in {md} and {csv_path}")
            return stopped.exit_code
        if guard.late is not None:
            print_error(f"{guard.late.signal_name} received after the bench ended; its report is complete")
            return guard.late.exit_code
    return 0


def _measure(args: argparse.Namespace, pair: ModelPair, prompts: Sequence[BenchPrompt],
             methods: Sequence[Method], rows: list[RunRow]) -> None:
    """The bench at each thread count; every finished run's row lands in ``rows`` at once."""
    from specscope.core.engine.cpu_linear import choose_one_token_kernels
    from specscope.core.gc_freeze import loaded_objects_frozen

    default_threads = torch.get_num_threads()
    for threads in args.threads:
        torch.set_num_threads(threads or default_threads)
        label = f"[{threads or default_threads} threads]"
        # the plain runs are every ratio's reference: their one-token steps on the kernel fastest at this count
        choose_one_token_kernels(pair)

        def progress(message: str, label: str = label) -> None:
            progress_line(f"{label} {message}")

        part: list[RunRow] = []
        try:
            with loaded_objects_frozen():  # no full collection inside a timed step (core/gc_freeze.py)
                run_bench(pair, prompts, methods, args.rounds, args.max_new_tokens, progress=progress, rows=part)
        finally:
            for r in part:
                r.threads = threads or default_threads
            rows += part


def _report(args: argparse.Namespace, pair: ModelPair, prompts: Sequence[BenchPrompt], rows: list[RunRow],
            md: Path, csv_path: Path, stem: Path, note: str) -> None:
    """The report on stdout first, then its files (or, on a late write failure, a copy in the data folder)."""
    mismatches = find_mismatches(rows, pair, prompts)
    command = command_line(args)
    report = markdown_report(rows, mismatches, _pair_line(pair), command, args.rounds,
                             args.max_new_tokens, args.goals, note=note)
    emit(report)  # first: whatever happens to the files, the results are on stdout
    try:
        write_report_files(report, rows, md, csv_path)
    except (OSError, TraceError) as e:
        fallback = _save_elsewhere(report, rows, stem.name)
        where = (f"; saved them to {fallback} instead" if fallback
                 else "; the report above on standard output is the only copy")
        reason = e.reason if isinstance(e, TraceWriteError) else getattr(e, "strerror", None) or str(e)
        raise CliError(f"could not write {md} and {csv_path}: {reason}{where}", exit_code=EXIT_FAILURE) from None
    print(f"wrote {md} and {csv_path}", file=sys.stderr)


