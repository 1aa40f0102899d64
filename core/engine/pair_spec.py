"""The pair a user asks for (:class:`PairSpec`), checked before anything is read from disk.

:func:`validate_spec` refuses a spec that cannot name a runnable pair (an unknown drafter, a drafter without
the draft it needs, placement options that only apply with ``device_map="auto"``, out-of-range drafter
parameters) with one :class:`ModelLoadError` sentence, the error every step of loading raises.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from specscope.core.drafter_catalogue import DRAFTER_KINDS, NO_DRAFT_NEEDED
from specscope.core.engine.drafters import suffix_defaults


class ModelLoadError(Exception):
    """A pair could not be loaded; the message is one sentence meant for the user."""


@dataclass
class PairSpec:
    target: str  # a model directory, a hub id, or "demo"
    draft: str | None = None
    drafter: str = "model"  # one of drafter_catalogue.DRAFTER_KINDS
    target_device: str = "cpu"
    draft_device: str | None = None  # None = the target's device
    target_dtype: str = "auto"
    draft_dtype: str = "auto"
    trust_remote_code: bool = False
    allow_pickle: bool = False
    local_files_only: bool = True
    lookup_max_ngram: int = 3
    lookup_num_tokens: int = 10
    # Suffix decoding, named as vLLM names them (``suffix_decoding_*``); see core/engine/drafters/suffix.py.
    suffix_max_tree_depth: int = suffix_defaults.DEFAULT_MAX_TREE_DEPTH
    suffix_max_spec_factor: float = suffix_defaults.DEFAULT_MAX_SPEC_FACTOR
    suffix_min_token_prob: float = suffix_defaults.DEFAULT_MIN_TOKEN_PROB
    suffix_max_cached_requests: int = suffix_defaults.DEFAULT_MAX_CACHED_REQUESTS
    suffix_backoff: bool = suffix_defaults.DEFAULT_BACKOFF  # the run's commonest token when nothing matches
    early_exit_layers: int | None = None  # None = a quarter of the target's layers
    # Placement through transformers/accelerate (``from_pretrained(device_map=..., max_memory=...,
    # offload_folder=...)``): None keeps the whole model on its device; "auto" lets accelerate place modules
    # on the device, host memory and disk under ``max_memory``; a device name puts the model there.
    target_device_map: str | None = None
    draft_device_map: str | None = None
    target_max_memory: dict[int | str, int] | None = None  # accelerate's form: {0: bytes, "cpu": bytes}
    draft_max_memory: dict[int | str, int] | None = None
    target_offload_folder: str | None = None
    draft_offload_folder: str | None = None
    # Float32 linears on CPU get a oneDNN copy packed for passes of 2+ tokens (core/engine/cpu_linear.py); False keeps
    # PyTorch's default kernels for every pass.
    prepack_cpu: bool = True
    # What one-token steps (plain decoding, a draft model's steps) run on where the weights are packed: "auto"
    # times both kernels at each thread count and takes the faster; "default" is PyTorch's, bit for bit what
    # transformers runs; "packed" is oneDNN's.
    one_token_kernel: str = "auto"


ONE_TOKEN_KERNELS = ("auto", "default", "packed")


def validate_spec(spec: PairSpec) -> None:
    """Refuse a spec that names no runnable pair, before any file is read (one ModelLoadError sentence)."""
    if spec.one_token_kernel not in ONE_TOKEN_KERNELS:
        raise ModelLoadError(f"unknown one-token kernel {spec.one_token_kernel!r}: choose one of "
                             f"{', '.join(ONE_TOKEN_KERNELS)}")
    if spec.one_token_kernel == "packed" and not spec.prepack_cpu:
        raise ModelLoadError("--one-token-kernel packed needs the packed weights that --no-prepack turns off")
    if spec.drafter not in DRAFTER_KINDS:
        raise ModelLoadError(f"unknown drafter {spec.drafter!r}: choose one of {', '.join(DRAFTER_KINDS)}")
    if spec.drafter == "model" and not spec.draft and spec.target != "demo":
        raise ModelLoadError("the model drafter needs a draft model (give --draft, or choose --drafter "
                             f"{NO_DRAFT_NEEDED})")
    if spec.drafter == "eagle" and not spec.draft and spec.target != "demo":
        raise ModelLoadError("the eagle drafter needs an EAGLE-3 head directory (give --draft DIR with its "
                             "config.json and safetensors)")
    if spec.drafter == "mtp" and spec.target == "demo":
        raise ModelLoadError("the demo (SmolLM2-135M-Instruct) has no multi-token-prediction layers for --drafter "
                             "mtp: choose another drafter, or a target whose config declares num_mtp_layers")
    if spec.drafter == "mtp" and spec.draft:
        raise ModelLoadError(f"--draft {spec.draft} does not apply to --drafter mtp, which drafts with the "
                             "target's own MTP layers: drop --draft")
    if spec.target == "demo" and spec.draft:
        raise ModelLoadError(f"--draft {spec.draft} does not apply to the demo, which brings its own draft for "
                             "each drafter: drop --draft, or give the target with --target to pair it with "
                             "your own draft")
    if spec.drafter == "eagle" and spec.draft and not Path(spec.draft).expanduser().is_dir():
        raise ModelLoadError(f"the EAGLE-3 head directory {spec.draft} does not exist or is not a folder "
                             "(--draft names a folder with config.json and safetensors)")
    if spec.lookup_max_ngram < 1 or spec.lookup_num_tokens < 1:
        raise ModelLoadError("prompt lookup needs a max n-gram and a proposal length of at least 1")
    if spec.early_exit_layers is not None and spec.early_exit_layers < 1:
        raise ModelLoadError("early exit needs at least 1 layer")
    if spec.drafter == "suffix":
        try:
            suffix_defaults.check_suffix_parameters(spec.suffix_max_tree_depth, spec.suffix_max_spec_factor,
                                    spec.suffix_min_token_prob, spec.suffix_max_cached_requests)
        except ValueError as e:
            raise ModelLoadError(f"suffix decoding: {e}") from None
    check_placement(spec.target_device_map, spec.target_max_memory, spec.target_offload_folder, "target")
    check_placement(spec.draft_device_map, spec.draft_max_memory, spec.draft_offload_folder, "draft")
    if spec.target == "demo" and (spec.draft_device_map or spec.draft_max_memory or spec.draft_offload_folder):
        raise ModelLoadError("the demo draft is built from the target's own modules, so draft placement does not "
                             "apply to it: place the target, or drill the draft (--drill START:END:draft)")


def check_placement(device_map: str | None, max_memory: dict[int | str, int] | None,
                    offload_folder: str | None, role: str) -> None:
    """Max memory and an offload folder only mean something to accelerate's ``device_map="auto"``."""
    if max_memory is not None and device_map != "auto":
        raise ModelLoadError(f"the {role}'s max memory only applies with device map auto "
                             f"(add --{'draft-' if role == 'draft' else ''}device-map auto)")
    if offload_folder is not None:
        folder = Path(offload_folder).expanduser()
        if folder.exists() and not folder.is_dir():
            raise ModelLoadError(f"the {role}'s offload folder {offload_folder} is a file, not a folder")
        if device_map != "auto":
            raise ModelLoadError(f"the {role}'s offload folder only applies with device map auto")
