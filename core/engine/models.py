"""Loading a target + drafter pair safely: resolve, check, estimate, then load.

Order matters: everything cheap (paths, configs, tokenizers, the tokenizer check, the memory estimate) runs
before any weights are read, so a pair that cannot be speculated is refused in about a second. Any failure
ends in one :class:`ModelLoadError` sentence, and nothing loaded so far stays referenced.

The pieces live apart: the spec and its checks in ``pair_spec``, what a model folder holds (config,
tokenizer, weights' format, the pairing checks) in ``model_files``, device, dtype, memory estimate and
accelerate's placement in ``placement``; this module puts them in order and loads the weights.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from specscope.core.drafter_catalogue import IN_PLACE_DRAFTERS
from specscope.core.engine.drafters.base import Drafter
from specscope.core.engine.model_files import (
    check_tokenizers,
    check_vocab_width,
    check_weights,
    library_detail,
    logit_width,
    read_config,
    read_tokenizer,
    resolve_model_dir,
    tokenizer_width,
)
from specscope.core.engine.pair import LoadedModel, ModelPair
from specscope.core.engine.pair_spec import ModelLoadError, PairSpec, validate_spec
from specscope.core.engine.placement import (
    MemoryEstimate,
    estimate_memory,
    memory_warnings,
    parse_device,
    placement_kwargs,
    residency_warnings,
    resolve_dtype,
)
from specscope.core.engine.rollback import rollback_problem
from specscope.core.memory.residency import compute_device
from specscope.core.progress import Progress, report_progress
from specscope.core.units import format_bytes


@dataclass
class _Source:
    """A model resolved on disk, with what can be read without loading weights."""

    name: str
    directory: Path
    config: Any
    tokenizer: Any
    device: torch.device
    dtype: torch.dtype
    warnings: list[str] = field(default_factory=list)



def _free() -> None:
    """Collect what was dropped and hand cached device memory back."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    if torch.backends.mps.is_available():
        torch.mps.empty_cache()


def _open_source(name: str, device_text: str, dtype_text: str, spec: PairSpec, role: str) -> _Source:
    device_map = spec.draft_device_map if role == "draft" else spec.target_device_map
    device = parse_device(device_map if device_map not in (None, "auto") else device_text)
    directory = resolve_model_dir(name, spec.local_files_only, spec.allow_pickle, spec.trust_remote_code)
    config = read_config(directory, spec.trust_remote_code)
    check_weights(directory, spec.allow_pickle)
    tokenizer = read_tokenizer(directory, spec.trust_remote_code, role)
    dtype = resolve_dtype(dtype_text, device, config)
    problem = rollback_problem(config)
    if problem is not None:  # every drafter's tokens are verified, and a rejection rolls both caches back
        raise ModelLoadError(f"the {role} {name} cannot be used for speculative decoding: {problem}")
    return _Source(name=name, directory=directory, config=config, tokenizer=tokenizer, device=device,
                   dtype=dtype)


def _load_weights(src: _Source, spec: PairSpec, est: MemoryEstimate, role: str) -> LoadedModel:
    """The model on its device, or ModelLoadError; a failed load leaves nothing referenced."""
    from transformers import AutoModelForCausalLM

    message = ""
    model: Any = None
    draft = role == "draft"
    placement = placement_kwargs(spec.draft_device_map if draft else spec.target_device_map,
                                 spec.draft_max_memory if draft else spec.target_max_memory,
                                 spec.draft_offload_folder if draft else spec.target_offload_folder, src.device)
    try:
        model = AutoModelForCausalLM.from_pretrained(
            str(src.directory), dtype=src.dtype, **placement,
            trust_remote_code=spec.trust_remote_code, use_safetensors=not spec.allow_pickle or None,
            local_files_only=True,
        )
        model.eval()
    except (torch.OutOfMemoryError, MemoryError) as exc:
        message = _oom_message(role, src, est, exc)
    except Exception as exc:
        if "out of memory" in str(exc).lower():
            message = _oom_message(role, src, est, exc)
        elif _is_pickle_refusal(exc):
            message = (f"refused to load the {role} from {src.directory}: its pickle weights hold more than "
                       "tensors, and loading them could run code; specscope loads pickle weights only in "
                       "PyTorch's safe mode, even with --allow-pickle\n" + _pickle_detail(exc))
        else:
            message = f"could not load the {role} from {src.directory}\n{library_detail(exc)}"
    if message:
        model = None
        _free()
        raise ModelLoadError(message)
    n_params = sum(p.numel() for p in model.parameters())
    device = compute_device(model, src.device)
    warnings = list(src.warnings) + residency_warnings(model, device, role)
    return LoadedModel(model=model, name=src.name, device=device, dtype=src.dtype,
                       source=str(src.directory), n_params=n_params, warnings=warnings)


def _pickle_detail(exc: BaseException) -> str:
    """What the unpickler refused (e.g. ``Unsupported global: GLOBAL posix.system``), without PyTorch's
    advice on how to load the file unsafely."""
    for line in str(exc).splitlines():
        if "unsupported global" in line.lower() or "WeightsUnpickler error" in line:
            return f"detail: {line.strip()}"
    return "detail: PyTorch's safe loader (weights_only) refused the file"


def _is_pickle_refusal(exc: BaseException) -> bool:
    import pickle

    chain: BaseException | None = exc
    while chain is not None:
        if isinstance(chain, pickle.UnpicklingError) or "Weights only load failed" in str(chain):
            return True
        chain = chain.__cause__ or chain.__context__
    return False


def _oom_message(role: str, src: _Source, est: MemoryEstimate, exc: BaseException) -> str:
    del exc
    return (f"out of memory loading the {role} on {src.device} (about {format_bytes(est.weight_bytes)} of "
            "weights): try a smaller dtype, another device or a smaller model")


def _eos_ids(model: Any, tokenizer: Any) -> frozenset[int]:
    ids: set[int] = set()
    for value in (getattr(getattr(model, "generation_config", None), "eos_token_id", None),
                  getattr(tokenizer, "eos_token_id", None)):
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)


def check_mtp_target(name: str, config: Any, directory: Path) -> None:
    """--drafter mtp needs MTP layers the config declares and the checkpoint ships; refused from the config
    and the checkpoint's tensor names, before any weights load."""
    from specscope.core.engine.drafters.mtp import declared_mtp_layers, missing_mtp_weights

    family = getattr(config, "model_type", "") or type(config).__name__
    n_mtp = declared_mtp_layers(config)
    if not n_mtp:
        raise ModelLoadError(f"{name} ({family}) has no multi-token-prediction layers (its config declares no "
                             "num_mtp_layers), so --drafter mtp cannot draft with it: choose another drafter")
    if missing_mtp_weights(directory, config):
        raise ModelLoadError(f"{name} ({family}) declares {n_mtp} multi-token-prediction layer"
                             f"{'s' if n_mtp != 1 else ''} but its checkpoint holds none of their weights "
                             "(re-saved and distilled checkpoints often drop them), so --drafter mtp cannot "
                             "draft with it: choose another drafter")


def default_early_exit_layers(n_layers: int) -> int:
    return max(1, n_layers // 4)


def _build_drafter(spec: PairSpec, target: LoadedModel, draft: LoadedModel | None, width: int) -> Drafter:
    if spec.drafter == "model":
        from specscope.core.engine.drafters.model import ModelDrafter

        assert draft is not None
        return ModelDrafter(draft.model, width, draft.device)
    if spec.drafter == "lookup":
        from specscope.core.engine.drafters.lookup import PromptLookupDrafter

        return PromptLookupDrafter(max_ngram=spec.lookup_max_ngram, num_tokens=spec.lookup_num_tokens)
    if spec.drafter == "suffix":
        from specscope.core.engine.drafters.suffix import SuffixDrafter

        return SuffixDrafter.from_spec(spec)
    if spec.drafter == "mtp":
        from specscope.core.engine.drafters.mtp import MtpDrafter, load_mtp_layers

        layers = load_mtp_layers(target.model)
        return MtpDrafter(layers, width, next(layers.parameters()).device)
    if spec.drafter == "eagle":
        from specscope.core.engine.drafters.eagle import EagleDrafter
        from specscope.core.engine.drafters.eagle_files import load_head

        assert spec.draft is not None
        device = parse_device(spec.draft_device) if spec.draft_device else target.device
        head = load_head(Path(spec.draft).expanduser(), target.model, width, device,
                         _eagle_dtype(spec.draft_dtype, target.dtype, device))
        return EagleDrafter(head, target.model.config, width, device)
    from specscope.core.engine.drafters.early_exit import EarlyExitDrafter

    total = int(target.model.config.get_text_config().num_hidden_layers)
    n = spec.early_exit_layers if spec.early_exit_layers is not None else default_early_exit_layers(total)
    return EarlyExitDrafter(target.model, n, vocab_size=width, device=target.device)


_SWAPPED_DESCRIPTIONS = {"lookup": "prompt lookup", "suffix": "suffix decoding",
                         "early-exit": "an early-exit self-draft", "mtp": "its MTP layers"}


def swap_drafter(pair: ModelPair, spec: PairSpec) -> ModelPair:
    """``pair`` with ``spec.drafter`` (one of IN_PLACE_DRAFTERS) in place of its drafter: the target stays
    loaded, a draft model or head is released. ModelLoadError when the drafter cannot run on this target
    (MTP layers the checkpoint lacks); the old drafter is then kept."""
    if spec.drafter not in IN_PLACE_DRAFTERS:
        raise ModelLoadError(f"the {spec.drafter} drafter needs weights of its own: load the pair again")
    validate_spec(replace(spec, draft=None))  # the drafter's own options (and no MTP on the demo)
    message = ""
    try:
        drafter = _build_drafter(spec, pair.target, None, pair.vocab_size)
    except (ModelLoadError, ValueError, KeyError, AttributeError) as exc:  # mtp on a target without MTP layers
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if message:
        raise ModelLoadError(f"the {spec.drafter} drafter cannot run on this target: {message}")
    pair.drafter.release()
    if pair.draft is not None:
        pair.draft = None
        _free()
    base = pair.description.split(" with ", 1)[0] or spec.target
    return replace(pair, drafter=drafter, drafter_kind=spec.drafter, draft=None,
                   description=f"{base} with {_SWAPPED_DESCRIPTIONS[spec.drafter]}")


def _eagle_dtype(text: str, target_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The head runs in the target's dtype unless --draft-dtype names another."""
    return target_dtype if text == "auto" else resolve_dtype(text, device)


def _load_demo(spec: PairSpec, progress: Progress | None) -> ModelPair:
    from specscope.core.engine import demo

    device_map = spec.target_device_map
    device = parse_device(device_map if device_map not in (None, "auto") else spec.target_device)
    dtype = resolve_dtype(spec.target_dtype, device)
    message = ""
    try:
        return demo.load_demo_pair(drafter=spec.drafter, progress=progress, device=str(device),
                                   dtype=str(dtype).removeprefix("torch."),
                                   early_exit_layers=spec.early_exit_layers,
                                   lookup_max_ngram=spec.lookup_max_ngram,
                                   lookup_num_tokens=spec.lookup_num_tokens,
                                   suffix=spec if spec.drafter == "suffix" else None,
                                   placement=placement_kwargs(device_map, spec.target_max_memory,
                                                              spec.target_offload_folder, device))
    except ModelLoadError:
        raise
    except Exception as exc:
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    _free()
    raise ModelLoadError(f"the demo could not be loaded: {message}")


def load_pair(spec: PairSpec, progress: Progress | None = None, context_tokens: int = 4096) -> ModelPair:
    """Resolve, check and load a pair; every failure is one ModelLoadError and leaves nothing loaded."""
    validate_spec(spec)
    pair = _load_demo(spec, progress) if spec.target == "demo" else _load_files(spec, progress, context_tokens)
    if spec.prepack_cpu:
        pair.one_token_kernel = spec.one_token_kernel  # without packed weights one-token steps have one kernel
        _prepack(pair, progress)
    report_progress(progress, "Ready", 1.0)
    return pair


def _prepack(pair: ModelPair, progress: Progress | None) -> None:
    """Pack the CPU float32 linears of the target and the draft for multi-token passes (engine/cpu_linear.py)."""
    from specscope.core.engine import cpu_linear

    for role, loaded in (("target", pair.target), ("draft", pair.draft)):
        if loaded is None or not cpu_linear.packable_bytes(loaded.model):
            continue
        report_progress(progress, f"Packing the {role}'s weights for multi-token passes", 0.97)
        why_not = cpu_linear.prepack_linears(loaded.model)
        if why_not is not None:
            loaded.warnings.append(f"{role}: {why_not}")
            report_progress(progress, f"Warning: {role}: {why_not}", 0.98)
    cpu_linear.choose_one_token_kernels(pair, progress)


def _load_files(spec: PairSpec, progress: Progress | None, context_tokens: int) -> ModelPair:
    report_progress(progress, f"Reading {spec.target}", 0.0)
    tsrc = _open_source(spec.target, spec.target_device, spec.target_dtype, spec, "target")
    width = tokenizer_width(tsrc.tokenizer)
    check_vocab_width(width, logit_width(tsrc.config), "target")
    if spec.drafter == "mtp":
        check_mtp_target(spec.target, tsrc.config, tsrc.directory)
    dsrc: _Source | None = None
    if spec.drafter == "model":
        assert spec.draft is not None
        report_progress(progress, f"Reading {spec.draft}", 0.05)
        draft_device = spec.draft_device or spec.target_device
        dsrc = _open_source(spec.draft, draft_device, spec.draft_dtype, spec, "draft")
        check_tokenizers(tsrc.tokenizer, dsrc.tokenizer)
        check_vocab_width(width, logit_width(dsrc.config), "draft")
    target_est = estimate_memory(tsrc.config, tsrc.dtype)
    needs = [("target", tsrc.device, target_est)]
    if dsrc is not None:
        needs.append(("draft", dsrc.device, estimate_memory(dsrc.config, dsrc.dtype)))
    for warning in memory_warnings(needs, context_tokens):
        tsrc.warnings.append(warning)
        report_progress(progress, f"Warning: {warning}", 0.1)

    millions = target_est.params / 1e6
    report_progress(progress, f"Loading {spec.target} ({millions:,.0f}M parameters) on {tsrc.device}", 0.1)
    target = _load_weights(tsrc, spec, target_est, "target")
    draft: LoadedModel | None = None
    message = ""
    try:
        if dsrc is not None:
            report_progress(progress, f"Loading {spec.draft} on {dsrc.device}", 0.6)
            draft = _load_weights(dsrc, spec, needs[1][2], "draft")
        for role, loaded in (("target", target), ("draft", draft)):
            if loaded is not None:
                check_vocab_width(width, int(loaded.model.get_output_embeddings().weight.shape[0]), role)
        drafter = _build_drafter(spec, target, draft, width)
    except (ModelLoadError, ValueError) as exc:
        message = str(exc)
    if message:
        del target, draft
        _free()
        raise ModelLoadError(message)
    for loaded, src in ((target, tsrc), (draft, dsrc)):
        if loaded is not None and src is not None:
            for warning in loaded.warnings[len(src.warnings):]:  # placement: not wholly on its device
                report_progress(progress, f"Warning: {warning}", 0.95)
    description = f"{spec.target} with " + (f"draft {spec.draft}" if draft is not None else spec.drafter)
    if spec.drafter == "mtp":
        n_mtp = getattr(drafter, "n_layers", 0)
        # what each draft position is, for the per-position acceptance beside it (docs/drafter-mtp.md)
        description = (f"{spec.target} with its {n_mtp} MTP layer{'s' if n_mtp != 1 else ''} (draft positions "
                       f"past {n_mtp} chain the last layer)")
    return ModelPair(target=target, tokenizer=tsrc.tokenizer, drafter=drafter, drafter_kind=spec.drafter,
                     draft=draft, vocab_size=width, eos_token_ids=_eos_ids(target.model, tsrc.tokenizer),
                     use_chat_template=bool(getattr(tsrc.tokenizer, "chat_template", None)),
                     description=description)
