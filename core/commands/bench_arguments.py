"""``specscope bench``'s arguments, apart from the bench (torch, the engine): ``specscope --help`` and every
command's ``--help`` build the parser without importing torch."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specscope.core.commands.cli_checks import add_max_new_tokens, whole_number
from specscope.core.controls import K_MAX
from specscope.core.drafter_catalogue import DEMO_DRAFTER, DRAFTER_KINDS

DEFAULT_GOALS = (1.25, 1.5)  # speed-ups the report says the needed α for, beside break-even


@dataclass(frozen=True)
class LookupVariant:
    """How prompt lookup matches: which occurrence, and the n-gram sizes tried (longest first)."""

    match: str = "recent"  # or "earliest" (transformers' choice)
    max_ngram: int = 3
    min_ngram: int = 1

    @property
    def label(self) -> str:
        return f"{self.match} n={self.max_ngram}..{self.min_ngram}"

    @classmethod
    def parse(cls, text: str) -> LookupVariant:
        """``MATCH:MAX:MIN``, e.g. ``earliest:2:1``."""
        parts = text.strip().split(":")
        try:
            match, hi, lo = parts[0], int(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            raise ValueError(f"a lookup variant is MATCH:MAX_N:MIN_N (e.g. earliest:2:1), got {text!r}") from None
        if match not in ("recent", "earliest") or not 1 <= lo <= hi <= 8:
            raise ValueError(f"a lookup variant needs recent or earliest and 1 <= MIN_N <= MAX_N <= 8, got {text!r}")
        return cls(match, hi, lo)



def _numbers(text: str, convert: Callable[[str], Any], what: str) -> list[Any]:
    """Comma-separated numbers, or one argparse sentence naming what was expected."""
    try:
        return [convert(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None


def _goal_list(text: str) -> list[float]:
    values = _numbers(text, float, "speed-ups such as 1.15,1.3")
    if not values or any(not 0.0 < v <= 100.0 for v in values):
        raise argparse.ArgumentTypeError(f"each speed-up goal must be above 0 and at most 100, got {text!r}")
    return list(dict.fromkeys(values))


def _int_list(text: str) -> list[int]:
    if text.strip() == "none":
        return []
    values = _numbers(text, int, "integers")
    if not values or any(not 1 <= v <= K_MAX for v in values):
        raise argparse.ArgumentTypeError(f"each k must be between 1 and {K_MAX}, got {text!r}")
    return values


MAX_THREADS = 1024  # more than any CPU here has cores; torch refuses absurd counts with a RuntimeError


def _thread_list(text: str) -> list[int]:
    values = _numbers(text, int, "thread counts")
    if not values or any(not 0 <= v <= MAX_THREADS for v in values):
        raise argparse.ArgumentTypeError(f"thread counts must be from 0 (torch's default) to {MAX_THREADS:,}, "
                                         f"got {text!r}")
    return list(dict.fromkeys(values))


def _out_stem(text: str) -> str:
    """``--out``: a path stem whose last part names the report (``DIR/report`` writes report.md and .csv)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("needs a path stem such as bench-out/report, got an empty one")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a file path cannot hold a NUL character")
    name = Path(text).name
    if text.endswith(("/", os.sep)) or name in ("", ".", ".."):
        raise argparse.ArgumentTypeError(f"{text!r} names a folder: give a path stem such as "
                                         f"{(Path(text) / 'report').as_posix()} (writes report.md and report.csv)")
    return text


def _variant_list(text: str) -> list[LookupVariant]:
    try:
        return [LookupVariant.parse(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="demo", help="target model directory or hub id, or 'demo'")
    parser.add_argument("--demo", dest="target", action="store_const", const="demo",
                        help="the embedded demo pair (the default; as `specscope run --demo`)")
    parser.add_argument("--draft", default=None,
                        help="draft model directory or hub id (drafter 'model'), EAGLE-3 head directory ('eagle')")
    parser.add_argument("--drafter", default=None, choices=DRAFTER_KINDS,
                        help=f"how proposals are made (default: {DEMO_DRAFTER} for the demo, else model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", default="all",
                        help="comma-separated prompt kinds (prose,code,structured,repeated-task; KIND:N for its "
                             "first N, beyond --limit) and/or prompts files, or 'all'")
    parser.add_argument("--limit", type=whole_number(0, 100_000), default=0,
                        help="at most this many prompts per kind (0 = all)")
    parser.add_argument("--k", type=_int_list, default=[1, 2, 4, 6],
                        help="fixed k values, e.g. 1,2,4,6 ('none': no fixed k rows)")
    parser.add_argument("--rounds", type=whole_number(1, 1_000), default=3)
    add_max_new_tokens(parser, 64)
    parser.add_argument("--no-adaptive", action="store_true", help="skip adaptive k and the heuristic")
    parser.add_argument("--no-heuristic", action="store_true", help="skip transformers' heuristic k schedule")
    parser.add_argument("--no-transformers", action="store_true", help="skip transformers' own methods")
    parser.add_argument("--lookup-tokens", type=whole_number(1, 1_024), default=10,
                        help="transformers' prompt_lookup_num_tokens")
    parser.add_argument("--threads", type=_thread_list, default=[0],
                        help="torch CPU threads, one bench per value, e.g. 1,2 (0 = torch's default)")
    parser.add_argument("--lookup-variants", type=_variant_list, default=[],
                        help="with --drafter lookup, extra adaptive rows with other matching: MATCH:MAX_N:MIN_N, "
                             "comma-separated, e.g. earliest:2:1,recent:4:2")
    from specscope.core.commands.pair_arguments import add_suffix_arguments

    add_suffix_arguments(parser)
    parser.add_argument("--no-prepack", dest="prepack_cpu", action="store_false",
                        help="on CPU, PyTorch's default kernels for multi-token passes (see specscope run --help)")
    parser.add_argument("--goals", type=_goal_list, default=list(DEFAULT_GOALS),
                        help="speed-ups (× plain) for which the report gives the α each k would need, e.g. "
                             "1.15,1.3 (break-even is always given)")
    parser.add_argument("--out", type=_out_stem, default="bench-report",
                        help="report path stem: writes STEM.md and STEM.csv")
