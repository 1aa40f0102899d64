"""``specscope verify``'s arguments, apart from the check itself (torch, the engine): every ``--help`` builds the
parser without importing torch."""

from __future__ import annotations

import argparse

from specscope.core.commands.cli_checks import (
    SEED,
    TEMPERATURE,
    TOP_K,
    TOP_P,
    add_max_new_tokens,
    file_path,
    finite_number,
    whole_number,
)
from specscope.core.prompts import PROMPT_KINDS

MAX_DRAWS = 10_000_000  # per context and rule; the draws are vectorised, so memory grows with them
MAX_OFFSETS = 64  # contexts per prompt


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from specscope.core.commands.pair_arguments import add_pair_arguments

    add_pair_arguments(parser)
    g = parser.add_argument_group("verification")
    g.add_argument("--prompts", default="all",
                   help=f"prompt sets ({', '.join(PROMPT_KINDS)}, comma-separated, or all) "
                   "or a .json/.txt file")
    g.add_argument("--limit", type=whole_number(0, 100_000), default=0,
                   help="use at most this many prompts per set (0 = all)")
    g.add_argument("--k", default="2,4", help="draft lengths for the greedy check, comma-separated")
    add_max_new_tokens(g, 48)
    g.add_argument("--draws", type=whole_number(0, MAX_DRAWS), default=200_000,
                   help="draws per context and rule (0 = skip the sampling test)")
    g.add_argument("--top-n", type=whole_number(1, 100_000), default=60,
                   help="chi-square bins: the most likely N tokens + rest")
    g.add_argument("--offsets", default="0,8", help="contexts: prompt + this many greedy tokens")
    g.add_argument("--temperature", type=TEMPERATURE, default=1.0, help="sampling settings for the sampling test")
    g.add_argument("--top-k", type=TOP_K, default=0)
    g.add_argument("--top-p", type=TOP_P, default=1.0)
    g.add_argument("--alpha", type=finite_number(0.0, 1.0, lo_open=True), default=1e-3,
                   help="significance level per context")
    g.add_argument("--no-greedy", action="store_true", help="skip the greedy equality check")
    g.add_argument("--seed", type=SEED, default=0)
    g.add_argument("--json", dest="json_path", type=file_path, help="also write the report as JSON to this file")
