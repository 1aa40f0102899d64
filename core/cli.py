"""Headless command line: ``specscope run | bench | verify``.

Every failure a user can cause (bad path, model without tokenizer, bad flag value, unwritable trace path)
ends with one ``specscope: error: ...`` line and a non-zero exit; the trace so far is never lost silently.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

EXIT_USAGE = 2
EXIT_FAILURE = 1


class CliError(Exception):
    """A user-facing error: printed as one line."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None


def add_decode_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("decoding")
    src = g.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text (the chat template is applied for instruct models)")
    src.add_argument("--prompt-file", type=Path, help="read the prompt from a text file")
    g.add_argument("--no-chat-template", action="store_true", help="feed the prompt as raw text")
    g.add_argument("--k", type=_positive_int, default=4, help="proposals per iteration (1-16)")
    g.add_argument("--adaptive-k", action="store_true", help="choose k each iteration from the cost model")
    g.add_argument("--temperature", type=_float, default=0.0, help="0 = greedy")
    g.add_argument("--top-k", type=int, default=0, help="0 = off")
    g.add_argument("--top-p", type=_float, default=1.0, help="1 = off")
    g.add_argument("--max-new-tokens", type=_positive_int, default=128)
    g.add_argument("--seed", type=int, default=None)
    g.add_argument("--plain", action="store_true", help="decode with the target alone (the baseline)")
    g.add_argument("--baseline-every", type=int, default=6,
                   help="time 3 plain target steps on the live context every N iterations: the blocks the measured "
                        "speed-up and its interval are paired over (0 = never: no measured speed-up)")


def build_parser() -> argparse.ArgumentParser:
    from .models import add_pair_arguments

    parser = argparse.ArgumentParser(
        prog="specscope", description="Profile speculative decoding: run, bench or verify a draft/target pair."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="decode one prompt headless and print what speculation did")
    add_pair_arguments(run)
    add_decode_arguments(run)
    out = run.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")
    out.add_argument("--trace", type=Path, help="write the per-iteration trace CSV (+ tokens CSV, session JSON)")
    out.add_argument("--chrome-trace", type=Path, help="write a Chrome/Perfetto trace JSON")
    out.add_argument("--quiet", action="store_true", help="no progress messages on stderr")

    from . import bench, verify

    bench.add_arguments(sub.add_parser("bench", help="interleaved benchmark against plain and transformers"))
    verify.add_arguments(sub.add_parser("verify", help="check speculation keeps the target's output"))
    return parser


def _prompt_text(args: argparse.Namespace) -> str:
    if args.prompt_file is not None:
        try:
            return Path(args.prompt_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise CliError(f"cannot read prompt file {args.prompt_file}: {exc.strerror or exc}") from None
    if args.prompt is not None:
        return str(args.prompt)
    if args.demo:
        from .prompts import load_prompt_sets

        sets = load_prompt_sets()
        for kind in ("structured", "code", "prose"):
            if sets.get(kind):
                return sets[kind][0].text
    raise CliError("give a prompt with --prompt TEXT or --prompt-file FILE")


def _controls(args: argparse.Namespace) -> Any:
    from .controls import Controls, InvalidControl
    from .records import ControlValues

    try:
        return Controls(ControlValues(k=args.k, temperature=args.temperature, top_k=args.top_k,
                                      top_p=args.top_p, adaptive_k=args.adaptive_k))
    except InvalidControl as exc:
        raise CliError(str(exc)) from None


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


def cmd_run(args: argparse.Namespace) -> int:
    import torch

    from .busy import BUSY_PREFIX
    from .measurement import run_summary
    from .memory.residency import model_residency
    from .models import ModelLoadError, load_pair, spec_from_args
    from .session import Session, SessionOptions

    controls = _controls(args)
    text = _prompt_text(args)
    if args.plain and not args.draft and args.drafter == "model":
        args.drafter = "lookup"  # plain decoding never drafts: do not demand a draft model for it
    try:
        spec = spec_from_args(args)
        pair = load_pair(spec, progress=_progress(args.quiet or args.json))
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None
    prompt_ids = pair.encode_prompt(text, chat=False if args.no_chat_template else None)
    session = Session(pair, controls, SessionOptions(
        max_new_tokens=args.max_new_tokens, seed=args.seed, plain=args.plain,
        baseline_every=max(0, args.baseline_every),
    ))
    error: str | None = None
    try:
        session.run(prompt_ids)
    except KeyboardInterrupt:
        error = "interrupted"
    except (RuntimeError, torch.cuda.OutOfMemoryError) as exc:  # a model failing mid-run: keep the trace
        error = f"the model failed mid-run: {exc}"
    result = session.result
    assert result is not None
    records = session.records

    residency = {"target": model_residency(pair.target.model, pair.target.device, "target")}
    if pair.draft is not None:
        residency["draft"] = model_residency(pair.draft.model, pair.draft.device, "draft")
    flags = [(r.iteration, f) for r in records for f in r.flags]
    estimate = session.measurement.estimate()
    summary = run_summary(records, prefill_ms=session.decoder.prefill_ms, estimate=estimate)

    trace_error: str | None = None
    if args.trace is not None or args.chrome_trace is not None:
        trace_error = _write_traces(args, records, session.baselines, session_description(args, pair))

    if args.json:
        out = {
            "token_ids": result.token_ids,
            "text": pair.tokenizer.decode(result.token_ids, skip_special_tokens=True),
            "finish_reason": result.finish_reason if error is None else "error",
            "metrics": summary,
            "residency": {name: {"bytes_by_device": r.bytes_by_device, "warnings": r.warnings}
                          for name, r in residency.items()},
            "paging_flags": [{"iteration": i, "sentence": s} for i, s in flags if not s.startswith(BUSY_PREFIX)],
            "busy_flags": [{"iteration": i, "sentence": s} for i, s in flags if s.startswith(BUSY_PREFIX)],
            "error": error or trace_error,
        }
        print(json.dumps(out, indent=None, default=str))
    else:
        print(pair.tokenizer.decode(result.token_ids, skip_special_tokens=True))
        print()
        print(_summary_text(args, pair, result, summary, estimate, residency, flags))
    if error is not None:
        print(f"specscope: error: {error}", file=sys.stderr)
        return EXIT_FAILURE
    if trace_error is not None:
        print(f"specscope: error: {trace_error}", file=sys.stderr)
        return EXIT_FAILURE
    return 0


def _write_traces(args: argparse.Namespace, records: list[Any], baselines: list[Any],
                  session: dict[str, Any]) -> str | None:
    from .chrome_trace import write_chrome_trace
    from .trace import TraceError, write_trace

    try:
        if args.trace is not None:
            paths = write_trace(Path(args.trace), records, baselines, session=session)
            if not args.json and not args.quiet:
                print(f"trace written: {paths}", file=sys.stderr)
        if args.chrome_trace is not None:
            write_chrome_trace(Path(args.chrome_trace), records, baselines, session=session)
    except (TraceError, OSError) as exc:
        return f"could not write the trace: {exc}"
    return None


def _summary_text(args: argparse.Namespace, pair: Any, result: Any, summary: dict[str, Any], estimate: Any,
                  residency: dict[str, Any], flags: list[tuple[int, str]]) -> str:
    """The run in words; every number is ``run_summary``'s or the measurement's estimate's."""
    from .busy import BUSY_PREFIX
    from .memory.residency import format_residency

    s = summary
    lines = ["── specscope run " + "─" * 50]
    mode = "plain decoding (target only)" if args.plain else f"speculative, drafter {pair.drafter_kind}"
    lines.append(f"mode          {mode}; finish: {result.finish_reason}")
    lines.append(f"tokens        {s['tokens']} in {s['iterations']} iterations "
                 f"({_fmt(s['tokens_per_iteration'], '.2f')} per iteration); prefill "
                 f"{_fmt(s['prefill_ms'], '.1f', ' ms')}")
    lines.append(f"speed         {_fmt(s['tokens_per_s'], '.1f', ' tok/s')} over the decode loop")
    if not args.plain:
        lines.append(f"acceptance    α = {_fmt(s['alpha'])} ({s['accepted']} accepted of {s['judged']} judged, "
                     f"{s['drafted']} drafted); mean acceptance length {_fmt(s['mean_acceptance_length'], '.2f')}")
        draft = (f"draft step {_fmt(s['draft_step_ms'], '.2f', ' ms')}" if s["draft_step_ms"] is not None
                 else f"draft {_fmt(s['draft_iteration_ms'], '.2f', ' ms')} per iteration")
        lines.append(f"costs         {draft}, plain step {_fmt(s['plain_step_ms'], '.2f', ' ms')}, "
                     f"verify {_fmt(s['verify_ms_median'], '.2f', ' ms')}, "
                     f"rollback {_fmt(s['rollback_ms_median'], '.3f', ' ms')} (medians)")
        if estimate is not None:
            measured = (f"measured {estimate.measured.text()} over {estimate.blocks} interleaved plain/speculative "
                        f"blocks" if estimate.measured else f"measured: {estimate.measured_reason}")
            lines.append(f"vs plain      {measured}; predicted ×{_fmt(estimate.predicted_speedup, '.2f')} "
                         f"at k={estimate.k}")
            if estimate.best_k is not None and estimate.best_speedup is not None:
                best = ("do not speculate (plain decoding is predicted fastest)" if estimate.best_k == 0
                        else f"k={estimate.best_k} (predicted ×{estimate.best_speedup:.2f})")
                lines.append(f"best k        {best}")
            verdict = estimate.verdict()
            if verdict:
                lines.append(f"              {verdict}")
    for name, r in residency.items():
        lines.append(f"residency     {format_residency(name, r)}")
        for w in r.warnings:
            lines.append(f"  warning     {w}")
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
    try:
        if args.command == "run":
            return cmd_run(args)
        if args.command == "bench":
            from . import bench

            return int(bench.main(args))
        if args.command == "verify":
            from . import verify

            return int(verify.main(args))
    except CliError as exc:
        print(f"specscope: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    parser.error(f"unknown command {args.command}")
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
