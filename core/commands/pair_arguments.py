"""The command-line options shared by the subcommands that load a pair (run, serve, verify, bench).

Parsing options is the commands' job; the engine's loader takes the :class:`PairSpec` they build.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from specscope.core.commands.cli_checks import finite_number, whole_number
from specscope.core.drafter_catalogue import DEMO_DRAFTER, DRAFTER_KINDS, NO_DRAFT_NEEDED, default_drafter
from specscope.core.engine.drafters import suffix_defaults
from specscope.core.engine.model_files import model_path_problem
from specscope.core.engine.pair_spec import ONE_TOKEN_KERNELS
from specscope.core.model_config import config_problem, local_directory

if TYPE_CHECKING:
    from specscope.core.engine.pair_spec import PairSpec

LOOKUP_MAX_NGRAM = 64  # the lookup index keeps one table per n-gram size: each costs a pass over the context
LOOKUP_MAX_TOKENS = 1_024
MAX_LAYERS = 4_096  # the model's own depth bounds it further, when it is loaded


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model pair")
    g.add_argument("--target", help="target model: a directory or a hub id in the local HF cache")
    g.add_argument("--draft", help="draft model (--drafter model) or EAGLE-3 head directory (--drafter eagle)")
    g.add_argument("--demo", action="store_true", help="use the embedded demo (SmolLM2-135M-Instruct)")
    g.add_argument("--drafter", choices=DRAFTER_KINDS, default=None,
                   help=f"how proposals are made (default: model; {DEMO_DRAFTER} for --demo)")
    g.add_argument("--device", default="cpu", help="target device: cpu, cuda, cuda:N, mps")
    g.add_argument("--draft-device", default=None, help="draft device (default: the target's)")
    g.add_argument("--dtype", default="auto", help="target dtype: auto, float32, float16, bfloat16")
    g.add_argument("--draft-dtype", default="auto")
    g.add_argument("--trust-remote-code", action="store_true", help="run model code from its repository")
    g.add_argument("--allow-pickle", action="store_true", help="allow pickle (.bin) weights")
    g.add_argument("--online", action="store_true", help="download from the hub if not cached")
    g.add_argument("--lookup-max-ngram", type=whole_number(1, LOOKUP_MAX_NGRAM), default=3,
                   help=f"prompt lookup: the longest n-gram matched (1 to {LOOKUP_MAX_NGRAM})")
    g.add_argument("--lookup-num-tokens", type=whole_number(1, LOOKUP_MAX_TOKENS), default=10,
                   help=f"prompt lookup: the most tokens proposed at once (1 to {LOOKUP_MAX_TOKENS:,}; k bounds "
                        "it too)")
    add_suffix_arguments(g)
    g.add_argument("--early-exit-layers", type=whole_number(1, MAX_LAYERS), default=None,
                   help="early exit: the target's first N layers draft (default: a quarter of them)")
    g.add_argument("--no-prepack", dest="prepack_cpu", action="store_false",
                   help="on CPU, keep PyTorch's default kernels for every pass instead of oneDNN weights packed at "
                        "load (which cost a second copy of the weights in host memory)")
    g.add_argument("--one-token-kernel", choices=ONE_TOKEN_KERNELS, default="auto",
                   help="on CPU with packed weights, what one-token steps (plain decoding, draft steps) run on: "
                        "auto times both at the run's thread count and takes the faster (the speed-up is over "
                        "the fastest plain decoding); default is PyTorch's kernel, bit for bit what transformers "
                        "runs; packed is oneDNN's")
    p = parser.add_argument_group("placement (transformers/accelerate device maps)")
    p.add_argument("--device-map", "--target-device-map", dest="device_map", default=None,
                   help="target placement: auto (device, host memory, disk under --max-memory) or a device")
    p.add_argument("--draft-device-map", default=None, help="draft placement: auto or a device")
    p.add_argument("--max-memory", "--target-max-memory", dest="max_memory", default=None,
                   help="with --device-map auto: DEV=SIZE,... e.g. cpu=250MB or cuda:0=10GiB,cpu=30GiB")
    p.add_argument("--draft-max-memory", default=None, help="the draft's max memory (DEV=SIZE,...)")
    p.add_argument("--offload-folder", "--target-offload-folder", dest="offload_folder", default=None,
                   help="where accelerate may put the target's offloaded weights")
    p.add_argument("--draft-offload-folder", default=None)


def add_suffix_arguments(group: Any) -> None:
    """--suffix-* options (``specscope run``, ``verify`` and ``bench``), named after vLLM's parameters."""
    group.add_argument("--suffix-max-tree-depth", type=whole_number(2, 4096),
                       default=suffix_defaults.DEFAULT_MAX_TREE_DEPTH,
                       help="suffix decoding: longest match plus draft, in tokens (vLLM's max_tree_depth)")
    group.add_argument("--suffix-max-spec-factor", type=finite_number(0.0, math.inf, lo_open=True),
                       default=suffix_defaults.DEFAULT_MAX_SPEC_FACTOR,
                       help="suffix decoding: a draft is at most match length x this (max_spec_factor)")
    group.add_argument("--suffix-min-token-prob", type=finite_number(0.0, 1.0),
                       default=suffix_defaults.DEFAULT_MIN_TOKEN_PROB,
                       help="suffix decoding: stop drafting below this estimated probability (min_token_prob)")
    group.add_argument("--suffix-max-cached-requests", type=whole_number(0),
                       default=suffix_defaults.DEFAULT_MAX_CACHED_REQUESTS,
                       help="suffix decoding: earlier responses kept for matching, 0 = none (max_cached_requests)")
    group.add_argument("--suffix-no-backoff", dest="suffix_backoff", action="store_false",
                       help="suffix decoding: propose nothing when nothing matches (by default the run's most "
                            "frequent token, since a 2-token pass costs no more than a plain step here)")


def suffix_fields(args: argparse.Namespace) -> dict[str, Any]:
    """PairSpec's suffix fields from the --suffix-* options."""
    return {"suffix_max_tree_depth": args.suffix_max_tree_depth,
            "suffix_max_spec_factor": args.suffix_max_spec_factor,
            "suffix_min_token_prob": args.suffix_min_token_prob,
            "suffix_max_cached_requests": args.suffix_max_cached_requests,
            "suffix_backoff": args.suffix_backoff}


def check_pair_choice(args: argparse.Namespace) -> str:
    """The drafter the options choose, once they name a pair and its local config.json files are sound;
    ModelLoadError (one sentence) otherwise. Needs no torch: the CLI and the worker run it before the engine's
    imports (seconds), so a wrong option is answered at once."""
    from specscope.core.engine.pair_spec import ModelLoadError, PairSpec, validate_spec

    if not args.demo and not args.target:
        raise ModelLoadError("choose a target model (--target DIR_OR_HUB_ID) or --demo")
    drafter = args.drafter or default_drafter("demo" if args.demo else args.target)
    # The target first: a missing target is the first thing to fix, whatever the drafter needs.
    if not args.demo:
        check_model_files(args.target, opened_as_model=True)
    if not args.demo and drafter == "model" and not args.draft:
        raise ModelLoadError(f"the model drafter needs --draft (or choose --drafter {NO_DRAFT_NEEDED})")
    if args.draft:
        check_model_files(args.draft, opened_as_model=drafter == "model" and not args.demo)
    # What the loader's validate_spec refuses that needs no file (mtp on the demo, a --draft the drafter or the
    # demo does not use, an EAGLE head folder missing, suffix settings out of range), said now in its words; the
    # placement options are checked when the engine parses them.
    validate_spec(PairSpec(target="demo" if args.demo else args.target, draft=args.draft, drafter=drafter,
                           **{name: value for name, value in vars(args).items() if name in CHECKED_EARLY}))
    return drafter


# PairSpec's fields that check_pair_choice hands validate_spec when the options carry them (bench has no
# --lookup-* options, for instance).
CHECKED_EARLY = frozenset({"lookup_max_ngram", "lookup_num_tokens", "early_exit_layers", "suffix_max_tree_depth",
                           "suffix_max_spec_factor", "suffix_min_token_prob", "suffix_max_cached_requests"})


def check_model_files(name: str, opened_as_model: bool) -> None:
    """ModelLoadError when a named model has nothing there or an unreadable config.json, in the loader's words
    (an EAGLE head's folder is checked in its own words, so only its config is read here)."""
    from specscope.core.engine.pair_spec import ModelLoadError

    problem = model_path_problem(name) if opened_as_model else None
    directory = local_directory(name)
    if problem is None and directory is not None:  # the loader checks a hub snapshot the same way
        problem = config_problem(directory)
    if problem is not None:
        raise ModelLoadError(problem)


def spec_from_args(args: argparse.Namespace) -> PairSpec:
    """The pair the options name; ModelLoadError (one sentence) when they name none."""
    from specscope.core.engine.pair_spec import PairSpec
    from specscope.core.engine.placement import parse_device_map, parse_max_memory

    drafter = check_pair_choice(args)
    return PairSpec(
        target="demo" if args.demo else args.target, draft=args.draft, drafter=drafter,
        target_device=args.device, draft_device=args.draft_device, target_dtype=args.dtype,
        draft_dtype=args.draft_dtype, trust_remote_code=args.trust_remote_code,
        allow_pickle=args.allow_pickle,
        local_files_only=not args.online, lookup_max_ngram=args.lookup_max_ngram,
        lookup_num_tokens=args.lookup_num_tokens, early_exit_layers=args.early_exit_layers,
        **suffix_fields(args),
        target_device_map=parse_device_map(getattr(args, "device_map", None), "target"),
        draft_device_map=parse_device_map(getattr(args, "draft_device_map", None), "draft"),
        target_max_memory=parse_max_memory(getattr(args, "max_memory", None), "target"),
        draft_max_memory=parse_max_memory(getattr(args, "draft_max_memory", None), "draft"),
        target_offload_folder=getattr(args, "offload_folder", None),
        draft_offload_folder=getattr(args, "draft_offload_folder", None),
        prepack_cpu=getattr(args, "prepack_cpu", True),
        one_token_kernel=getattr(args, "one_token_kernel", "auto"),
    )
