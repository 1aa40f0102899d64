"""``specscope attach URL``: stream one completion from a serving engine and show its speculation.

Exit codes: 0 done, 1 the server failed (one sentence; the trace of what arrived is still written), 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .baseline import interleaved_baseline
from .client import AttachError, AttachOptions, AttachResult, attach, base_url
from .summary import summarize_attached

EXIT_FAILURE = 1
EXIT_USAGE = 2
DEFAULT_PROMPT = "List the first twenty prime numbers, separated by commas:"


class AttachUsageError(Exception):
    """Bad command-line input: printed as one sentence, exit 2."""


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {value}")
    return value


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("url", help="the server's root URL, e.g. http://127.0.0.1:8080 (a trailing /v1 is fine); "
                              "API key from $SPECSCOPE_API_KEY or $OPENAI_API_KEY")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--prompt", help="prompt text (sent as is to /v1/completions)")
    src.add_argument("--prompt-file", type=Path, help="read the prompt from a text file")
    p.add_argument("--model", help="model name to request (default: the first the server lists)")
    p.add_argument("--max-tokens", type=_positive_int, default=128)
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--timeout", type=_positive_float, default=60.0, help="seconds to wait for the server")
    p.add_argument("--scrape-interval", type=_positive_float, default=0.5, help="seconds between /metrics scrapes")
    plain = p.add_mutually_exclusive_group()
    plain.add_argument("--plain-url", help="the same model served without speculation: measure the speed-up")
    plain.add_argument("--plain-model", help="a model name on the same server that runs without speculation")
    p.add_argument("--rounds", type=_positive_int, default=5, help="interleaved rounds for the speed-up")
    p.add_argument("--trace", type=Path, help="write the trace (CSV + tokens CSV + session JSON)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the summary")


def _prompt(args: argparse.Namespace) -> str:
    if args.prompt_file is not None:
        try:
            return Path(args.prompt_file).read_text(encoding="utf-8")
        except OSError as exc:
            raise AttachUsageError(f"cannot read prompt file {args.prompt_file}: {exc.strerror or exc}") from None
    return str(args.prompt) if args.prompt is not None else DEFAULT_PROMPT


def _fmt(value: Any, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def summary_text(result: AttachResult, summary: dict[str, Any]) -> str:
    s = result.session
    totals = result.engine_totals
    lines = [
        f"engine        {s.get('engine')} {s.get('engine_version') or ''} at {s.get('url')}".rstrip(),
        f"model         {s.get('model')}  speculative config {json.dumps(s.get('speculative_config') or {})}",
        f"passes        {summary['passes']} verify passes, {summary['tokens']} tokens",
        f"drafted       {summary['drafted']} (engine counter: {_fmt(totals['draft_tokens'], 'd')})",
        f"accepted      {summary['accepted']} (engine counter: {_fmt(totals['accepted_tokens'], 'd')})",
        f"alpha         {_fmt(summary['alpha'])}  (accepted / judged)",
        f"accepted/drafted {_fmt(summary['acceptance_rate'])}",
        f"tokens/pass   {_fmt(summary['tokens_per_iteration'], '.2f')}",
        f"tokens/s      {_fmt(summary['tokens_per_s'], '.1f')} (client side, decode passes)",
    ]
    timings = result.final_timings or {}
    if timings.get("predicted_per_second") is not None:
        lines.append(f"engine tok/s  {_fmt(timings.get('predicted_per_second'), '.1f')} (the engine's own timings)")
    for w in result.warnings:
        lines.append(f"note          {w}")
    return "\n".join(lines)


def _write_trace(path: Path, result: AttachResult, extra: dict[str, Any]) -> str | None:
    from ..trace import TraceError, write_trace

    session = dict(result.session)
    session.update(extra)
    try:
        write_trace(path, result.records, session=session)
    except (TraceError, OSError) as exc:
        return f"could not write the trace: {exc}"
    return None


def main(args: argparse.Namespace) -> int:
    try:
        prompt = _prompt(args)
        base_url(args.url)  # validates the URL: one sentence before any I/O
        options = AttachOptions(url=args.url, prompt=prompt, model=args.model, max_tokens=args.max_tokens,
                                temperature=args.temperature, timeout_s=args.timeout,
                                scrape_interval_s=args.scrape_interval)
        if args.temperature < 0:
            raise AttachUsageError("the temperature must be 0 or more")
    except (AttachError, AttachUsageError) as exc:
        print(f"specscope: error: {exc}", file=sys.stderr)
        return EXIT_USAGE

    result = attach(options)
    summary = summarize_attached(result.records)
    extra: dict[str, Any] = {"summary": summary, "final_timings": result.final_timings}
    baseline_out: dict[str, Any] | None = None
    if result.error is None and (args.plain_url or args.plain_model):
        plain = AttachOptions(url=args.plain_url or args.url, prompt=prompt,
                              model=args.plain_model or (args.model if args.plain_url else None),
                              max_tokens=args.max_tokens, temperature=args.temperature, timeout_s=args.timeout,
                              scrape_interval_s=args.scrape_interval)
        run = interleaved_baseline(options, plain, args.rounds)
        baseline_out = {"ratios": run.ratios, "speedup": run.estimate.to_dict() if run.estimate else None,
                        "error": run.error}
        extra["baseline"] = baseline_out
    trace_problem = _write_trace(args.trace, result, extra) if args.trace is not None else None

    if args.json:
        print(json.dumps({"session": result.session, "summary": summary, "final_timings": result.final_timings,
                          "engine_totals": result.engine_totals, "baseline": baseline_out, "error": result.error,
                          "text": result.text}, indent=2, default=str))
    else:
        print(summary_text(result, summary))
        if baseline_out is not None:
            sp = baseline_out["speedup"] or {}
            if sp.get("value") is not None:
                print(f"speed-up      {sp['value']:.2f}x [{sp['lo']:.2f}, {sp['hi']:.2f}] over {sp['n']} rounds")
            else:
                ratios = ", ".join(f"{r:.2f}" for r in baseline_out["ratios"])
                print(f"speed-up      per-round ratios {ratios or 'none'} ({sp.get('method')})")
            if baseline_out["error"]:
                print(f"baseline      stopped: {baseline_out['error']}")
    if result.error:
        print(f"specscope: error: {result.error}", file=sys.stderr)
    if trace_problem:
        print(f"specscope: error: {trace_problem}", file=sys.stderr)
    return EXIT_FAILURE if (result.error or trace_problem) else 0
