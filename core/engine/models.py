"""Loading a target + drafter pair safely: resolve, check, estimate, then load.

Order matters: everything cheap (paths, configs, tokenizers, the tokenizer check, the memory estimate) runs
before any weights are read, so a pair that cannot be speculated is refused in about a second. Any failure
ends in one :class:`ModelLoadError` sentence, and nothing loaded so far stays referenced.

Vocabulary widths (padded embeddings). Many checkpoints pad the embedding and LM head to a round number of
rows (a multiple of 64 or 128), so the logits are wider than the tokenizer. Rows past the tokenizer are no
token at all, so the pair runs with ``ModelPair.vocab_size`` = the tokenizer's width (highest id + 1) and the
loop and the drafters cut every logits row to that width before any arg-max, softmax or sampling: a padded
row can never be chosen, and p and q live on the same support. Two models whose logit widths differ are
therefore fine as long as their tokenizers agree; a tokenizer wider than a model's logits is refused (that
model could never score its top ids).
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specscope.core.drafter_catalogue import DEMO_DRAFTER, DRAFTER_KINDS, default_drafter
from specscope.core.engine.drafters import suffix as suffix_defaults
from specscope.core.engine.drafters.base import Drafter
from specscope.core.engine.pair import LoadedModel, ModelPair
from specscope.core.memory.residency import compute_device

Progress = Callable[[str, float], None]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}
_PICKLE_WEIGHTS = ("pytorch_model.bin", "pytorch_model.bin.index.json", "model.pt", "model.bin")
GB = 1024**3


class ModelLoadError(Exception):
    """A pair could not be loaded; the message is one sentence meant for the user."""


class IncompatibleTokenizers(ModelLoadError):
    """The target and draft tokenizers do not give the same id for every token."""


@dataclass
class PairSpec:
    target: str  # a model directory, a hub id, or "demo"
    draft: str | None = None
    drafter: str = "model"  # one of kinds.DRAFTER_KINDS
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
    # Float32 linears on CPU get a oneDNN copy packed for passes of 2+ tokens (core/cpu_linear); False keeps
    # PyTorch's default kernels for every pass.
    prepack_cpu: bool = True


@dataclass
class MemoryEstimate:
    params: int
    weight_bytes: int
    kv_bytes_per_token: int

    def total_bytes(self, context_tokens: int) -> int:
        return self.weight_bytes + self.kv_bytes_per_token * context_tokens


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


# ---- small pieces ------------------------------------------------------------------------------------
def _report(progress: Progress | None, message: str, fraction: float) -> None:
    if progress is not None:
        progress(message, fraction)


def hf_hub_cache_dir() -> Path:
    """The Hugging Face hub cache, read from the environment at call time (HF_HUB_CACHE, then HF_HOME)."""
    explicit = os.environ.get("HF_HUB_CACHE") or os.environ.get("HUGGINGFACE_HUB_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    home = os.environ.get("HF_HOME")
    if home:
        return Path(home).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return Path(xdg).expanduser() / "huggingface" / "hub"


def parse_device(text: str) -> torch.device:
    """cpu, cuda, cuda:N or mps, checked against what this machine has."""
    try:
        device = torch.device(text)
    except (RuntimeError, ValueError):
        raise ModelLoadError(f"unknown device {text!r}: use cpu, cuda, cuda:N or mps") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ModelLoadError(f"device {text} was asked for but CUDA is not available on this machine")
        index = device.index if device.index is not None else 0
        if index >= torch.cuda.device_count():
            raise ModelLoadError(f"device {text} does not exist: this machine has "
                                 f"{torch.cuda.device_count()} CUDA device(s)")
        return torch.device("cuda", index)
    if device.type == "mps":
        if not torch.backends.mps.is_available():
            raise ModelLoadError(f"device {text} was asked for but MPS is not available on this machine")
        return device
    if device.type != "cpu":
        raise ModelLoadError(f"unsupported device {text!r}: use cpu, cuda, cuda:N or mps")
    return device


def resolve_dtype(text: str, device: torch.device, config: Any | None = None) -> torch.dtype:
    """A named dtype, or "auto": the checkpoint's own dtype on a GPU, float32 on the CPU.

    Half-precision matrix products are slow (or missing) on many CPUs, so "auto" does not pick them there;
    on MPS bfloat16 falls back to float16, which every Apple GPU supports.
    """
    name = text.strip().lower()
    if name != "auto":
        if name not in _DTYPES:
            raise ModelLoadError(f"unknown dtype {text!r}: use auto, float32, float16 or bfloat16")
        return _DTYPES[name]
    if device.type == "cpu":
        return torch.float32
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    if isinstance(stored, str):
        stored = _DTYPES.get(stored.lower())
    if not isinstance(stored, torch.dtype) or stored not in (torch.float16, torch.bfloat16, torch.float32):
        stored = torch.float16
    if device.type == "mps" and stored == torch.bfloat16:
        return torch.float16
    return stored


def resolve_model_dir(name: str, local_files_only: bool = True, allow_pickle: bool = False,
                      trust_remote_code: bool = False) -> Path:
    """A local model directory for ``name``: an existing path, or a hub id found in the local HF cache."""
    path = Path(name).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelLoadError(f"{name} is a file, not a model directory")
        return path.resolve()
    looks_like_path = name.startswith((".", "/", "~")) or os.sep + os.sep in name or name.count("/") > 1
    if looks_like_path or not _HUB_ID.match(name):
        raise ModelLoadError(f"no model directory at {name}")
    from huggingface_hub import snapshot_download

    cache = hf_hub_cache_dir()
    patterns = ["*.json", "*.safetensors", "*.model", "*.txt", "*.tiktoken"]
    if allow_pickle:
        patterns += ["*.bin", "*.pt"]
    if trust_remote_code:
        patterns += ["*.py"]
    try:
        found = snapshot_download(name, cache_dir=str(cache), local_files_only=local_files_only,
                                  allow_patterns=patterns)
    except Exception as exc:  # hub errors come in many classes; all mean "not available"
        kind = type(exc).__name__
        if local_files_only:
            message = (f"{name} is neither a local directory nor in the Hugging Face cache at {cache}; "
                       f"download it first (hf download {name}) or allow network access")
        else:
            message = f"could not get {name} from the Hugging Face hub ({kind}: {str(exc).splitlines()[0]})"
    else:
        return Path(found)
    raise ModelLoadError(message)


def _check_weights(directory: Path, allow_pickle: bool) -> None:
    names = {p.name for p in directory.iterdir()}
    if any(n.endswith(".safetensors") or n == "model.safetensors.index.json" for n in names):
        return
    pickled = sorted(n for n in names if n in _PICKLE_WEIGHTS or n.endswith((".bin", ".pt")))
    if pickled:
        if allow_pickle:
            return
        raise ModelLoadError(f"{directory} has only pickle weights ({pickled[0]}); pickle can run code while "
                             "loading, so pass --allow-pickle if you trust this model")
    raise ModelLoadError(f"no weights in {directory} (expected model.safetensors)")


def read_config(directory: Path, trust_remote_code: bool) -> Any:
    """The model's config, checked to be a causal LM transformers knows (or opted-in remote code)."""
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    if not (directory / "config.json").is_file():
        raise ModelLoadError(f"no config.json in {directory}: not a transformers model directory")
    message = ""
    try:
        config = AutoConfig.from_pretrained(str(directory), trust_remote_code=trust_remote_code,
                                            local_files_only=True)
    except Exception as exc:
        if "trust_remote_code" in str(exc):
            message = (f"{directory} needs custom code from the model's repository to load; pass "
                       "--trust-remote-code only if you trust it")
        elif "does not recognize this architecture" in str(exc) or "model type" in str(exc):
            message = (f"transformers does not know the architecture named in {directory / 'config.json'}; "
                       f"specscope needs a causal language model that transformers can load\n"
                       f"{library_detail(exc)}")
        else:
            message = f"the model config in {directory} cannot be read\n{library_detail(exc)}"
    if message:
        raise ModelLoadError(message)
    model_type = getattr(config, "model_type", "")
    remote = trust_remote_code and "AutoModelForCausalLM" in (getattr(config, "auto_map", None) or {})
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and not remote:
        raise ModelLoadError(f"unsupported architecture {model_type!r} in {directory}: specscope needs a "
                             "causal language model that transformers can load")
    return config


def read_tokenizer(directory: Path, trust_remote_code: bool, role: str) -> Any:
    from transformers import AutoTokenizer

    files = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
    if not any((directory / f).is_file() for f in files):
        raise ModelLoadError(f"no tokenizer for the {role} in {directory} (expected tokenizer.json)")
    message = ""
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), trust_remote_code=trust_remote_code,
                                                  local_files_only=True)
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        message = f"could not load the {role}'s tokenizer from {directory} ({first[:160]})"
    if message:
        raise ModelLoadError(message)
    return tokenizer


# ---- tokenizers -------------------------------------------------------------------------------------
def tokenizer_width(tokenizer: Any) -> int:
    """Highest token id + 1 (added and special tokens included): the width logits are cut to."""
    vocab = tokenizer.get_vocab()
    return max(max(vocab.values()) + 1, len(tokenizer)) if vocab else len(tokenizer)


def check_tokenizers(target_tok: Any, draft_tok: Any) -> None:
    """Refuse a pair whose tokenizers do not map every token to the same id (added/special tokens too).

    Only the id mapping matters: the target's tokenizer encodes, and the draft reads the same ids, so
    normalisation or pre-tokenisation settings may differ. Raises :class:`IncompatibleTokenizers` naming the
    first differing id and how many more differ.
    """
    by_id_t = {i: t for t, i in target_tok.get_vocab().items()}
    by_id_d = {i: t for t, i in draft_tok.get_vocab().items()}
    if by_id_t == by_id_d:
        return
    differing = sorted(i for i in by_id_t.keys() | by_id_d.keys() if by_id_t.get(i) != by_id_d.get(i))
    first = differing[0]

    def show(tok: str | None, where: str) -> str:
        return f"missing from the {where}" if tok is None else f"{tok!r} in the {where}"

    more = f" (and {len(differing) - 1:,} more)" if len(differing) > 1 else ""
    raise IncompatibleTokenizers(
        f"tokenizers differ: id {first} is {show(by_id_t.get(first), 'target')} but "
        f"{show(by_id_d.get(first), 'draft')}{more}"
    )


def _logit_width(config: Any) -> int:
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return int(getattr(text, "vocab_size", 0) or 0)


def check_vocab_width(width: int, logit_width: int, role: str) -> None:
    if logit_width and width > logit_width:
        raise ModelLoadError(f"the tokenizer has {width:,} token ids but the {role}'s logits have only "
                             f"{logit_width:,} columns: they do not belong together")


# ---- memory -----------------------------------------------------------------------------------------
def estimate_memory(config: Any, dtype: torch.dtype) -> MemoryEstimate:
    """Parameters from the config's dimensions (dense or mixture-of-experts decoder) × bytes per element."""
    c = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = int(getattr(c, "hidden_size", 0) or getattr(c, "n_embd", 0) or 0)
    layers = int(getattr(c, "num_hidden_layers", 0) or getattr(c, "n_layer", 0) or 0)
    vocab = int(getattr(c, "vocab_size", 0) or 0)
    heads = int(getattr(c, "num_attention_heads", 0) or getattr(c, "n_head", 0) or 1)
    kv_heads = int(getattr(c, "num_key_value_heads", 0) or heads)
    head_dim = int(getattr(c, "head_dim", 0) or hidden // heads)
    inter = int(getattr(c, "intermediate_size", 0) or getattr(c, "n_inner", 0) or 4 * hidden)
    experts = int(getattr(c, "num_local_experts", 0) or getattr(c, "num_experts", 0) or 0)
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2
    if experts:
        expert_inter = int(getattr(c, "moe_intermediate_size", 0) or inter)
        mlp = experts * 3 * hidden * expert_inter + hidden * experts
    else:
        mlp = 3 * hidden * inter
    embeddings = vocab * hidden * (1 if getattr(c, "tie_word_embeddings", False) else 2)
    params = embeddings + layers * (attention + mlp + 2 * hidden) + hidden
    size = torch.tensor([], dtype=dtype).element_size()
    return MemoryEstimate(params=params, weight_bytes=params * size,
                          kv_bytes_per_token=2 * layers * kv_heads * head_dim * size)


def available_bytes(device: torch.device) -> int | None:
    """Free memory on ``device`` now (host RAM for cpu, unified memory for mps); None if unknown."""
    try:
        if device.type == "cuda":
            return int(torch.cuda.mem_get_info(device)[0])
        if device.type == "mps" and hasattr(torch.mps, "recommended_max_memory"):
            return int(torch.mps.recommended_max_memory() - torch.mps.current_allocated_memory())
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:
        return None


def memory_warnings(needs: list[tuple[str, torch.device, MemoryEstimate]],
                    context_tokens: int = 4096) -> list[str]:
    """One sentence per device the pair is unlikely to fit on (weights + KV for ``context_tokens``)."""
    per_device: dict[torch.device, list[tuple[str, MemoryEstimate]]] = {}
    for role, device, est in needs:
        per_device.setdefault(device, []).append((role, est))
    out: list[str] = []
    for device, items in per_device.items():
        total = sum(est.total_bytes(context_tokens) for _, est in items)
        free = available_bytes(device)
        if free is None or total <= free:
            continue
        parts = " + ".join(f"{role} {est.weight_bytes / GB:.1f} GB" for role, est in items)
        out.append(f"the pair needs about {total / GB:.1f} GB on {device} ({parts} of weights, plus KV "
                   f"cache for {context_tokens:,} tokens) but only {free / GB:.1f} GB is free: loading may "
                   "fail or page")
    return out


# ---- placement -------------------------------------------------------------------------------------
def parse_device_map(text: str | None, role: str) -> str | None:
    """None, "auto", or a device name checked against this machine."""
    if text is None or not text.strip():
        return None
    value = text.strip()
    if value.lower() == "auto":
        return "auto"
    try:
        return str(parse_device(value))
    except ModelLoadError as exc:
        raise ModelLoadError(f"bad {role} device map {text!r}: use auto or a device ({exc})") from None


MAX_MEMORY_BYTES = 1024**6  # 1 EiB: beyond it a size is a typo (or "inf")


def parse_max_memory(text: str | None, role: str) -> dict[int | str, int] | None:
    """``DEV=SIZE,...`` (``cpu=250MB,cuda:0=10GiB,disk=2GB``) as accelerate's ``max_memory`` dict."""
    if text is None or not text.strip():
        return None
    from accelerate.utils import convert_file_size_to_int

    out: dict[int | str, int] = {}
    for part in text.split(","):
        device, sep, size = part.partition("=")
        device, size = device.strip().lower(), size.strip()
        if not sep or not device or not size:
            raise ModelLoadError(f"bad {role} max memory {text!r}: write DEV=SIZE,... e.g. cpu=250MB,cuda:0=10GiB")
        key: int | str
        if device in ("cpu", "disk", "mps"):
            key = device
        elif re.fullmatch(r"(cuda:)?\d+", device):
            key = int(device.removeprefix("cuda:"))
        elif device == "cuda":
            key = 0
        else:
            raise ModelLoadError(f"bad {role} max memory {text!r}: {device!r} is not cpu, disk, mps or cuda:N")
        try:
            nbytes = convert_file_size_to_int(size)
        except (ValueError, TypeError, OverflowError):  # OverflowError: "infGB" (int of an infinite float)
            nbytes = -1
        if not isinstance(nbytes, int) or nbytes <= 0:
            raise ModelLoadError(f"bad {role} max memory {text!r}: {size!r} is not a size like 250MB or 10GiB")
        if nbytes > MAX_MEMORY_BYTES:
            raise ModelLoadError(f"bad {role} max memory {text!r}: {size!r} is more than the "
                                 f"{MAX_MEMORY_BYTES // 1024**5:,} PiB any machine has")
        out[key] = nbytes
    return out


def _check_placement(device_map: str | None, max_memory: dict[int | str, int] | None,
                     offload_folder: str | None, role: str) -> None:
    if max_memory is not None and device_map != "auto":
        raise ModelLoadError(f"the {role}'s max memory only applies with device map auto "
                             f"(add --{'draft-' if role == 'draft' else ''}device-map auto)")
    if offload_folder is not None:
        folder = Path(offload_folder).expanduser()
        if folder.exists() and not folder.is_dir():
            raise ModelLoadError(f"the {role}'s offload folder {offload_folder} is a file, not a folder")
        if device_map != "auto":
            raise ModelLoadError(f"the {role}'s offload folder only applies with device map auto")


def placement_kwargs(device_map: str | None, max_memory: dict[int | str, int] | None,
                     offload_folder: str | None, device: torch.device) -> dict[str, Any]:
    """``from_pretrained`` placement arguments: the whole model on ``device`` unless the map is auto."""
    if device_map != "auto":
        return {"device_map": {"": str(device)}}
    kwargs: dict[str, Any] = {"device_map": "auto"}
    if max_memory is not None:
        kwargs["max_memory"] = max_memory
    if offload_folder is not None:
        Path(offload_folder).expanduser().mkdir(parents=True, exist_ok=True)
        kwargs["offload_folder"] = str(Path(offload_folder).expanduser())
    return kwargs


def residency_warnings(model: Any, device: torch.device, role: str) -> list[str]:
    """One sentence per way the loaded model is not wholly on its compute device (offload, disk, meta)."""
    from specscope.core.memory.residency import model_residency

    return model_residency(model, device, role).warnings


# ---- loading ----------------------------------------------------------------------------------------
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
    _check_weights(directory, spec.allow_pickle)
    tokenizer = read_tokenizer(directory, spec.trust_remote_code, role)
    dtype = resolve_dtype(dtype_text, device, config)
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


def library_detail(exc: BaseException) -> str:
    """The library's own words, whole, for a second line under our sentence (its first line; no advice
    to disable safety checks is ours)."""
    text = str(exc).strip()
    first = text.splitlines()[0].strip() if text else ""
    return f"detail ({type(exc).__name__}): {first or 'no message'}"


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
    return (f"out of memory loading the {role} on {src.device} (about {est.weight_bytes / GB:.1f} GB of "
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
        return suffix_drafter(spec)
    if spec.drafter == "eagle":
        from specscope.core.engine.drafters.eagle import EagleDrafter, load_head

        assert spec.draft is not None
        device = parse_device(spec.draft_device) if spec.draft_device else target.device
        head = load_head(Path(spec.draft).expanduser(), target.model, width, device,
                         _eagle_dtype(spec.draft_dtype, target.dtype, device))
        return EagleDrafter(head, target.model.config, width, device)
    from specscope.core.engine.drafters.early_exit import EarlyExitDrafter

    total = int(target.model.config.get_text_config().num_hidden_layers)
    n = spec.early_exit_layers if spec.early_exit_layers is not None else default_early_exit_layers(total)
    return EarlyExitDrafter(target.model, n, vocab_size=width, device=target.device)


def suffix_drafter(spec: PairSpec) -> Drafter:
    from specscope.core.engine.drafters.suffix import SuffixDrafter

    return SuffixDrafter(max_tree_depth=spec.suffix_max_tree_depth, max_spec_factor=spec.suffix_max_spec_factor,
                         min_token_prob=spec.suffix_min_token_prob,
                         max_cached_requests=spec.suffix_max_cached_requests)


def _eagle_dtype(text: str, target_dtype: torch.dtype, device: torch.device) -> torch.dtype:
    """The head runs in the target's dtype unless --draft-dtype names another."""
    return target_dtype if text == "auto" else resolve_dtype(text, device)


def _validate(spec: PairSpec) -> None:
    if spec.drafter not in DRAFTER_KINDS:
        raise ModelLoadError(f"unknown drafter {spec.drafter!r}: choose one of {', '.join(DRAFTER_KINDS)}")
    if spec.drafter == "model" and not spec.draft and spec.target != "demo":
        raise ModelLoadError("the model drafter needs a draft model (give --draft, or choose --drafter "
                             "lookup or early-exit)")
    if spec.drafter == "eagle" and not spec.draft and spec.target != "demo":
        raise ModelLoadError("the eagle drafter needs an EAGLE-3 head directory (give --draft DIR with its "
                             "config.json and safetensors)")
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
        from specscope.core.engine.drafters.suffix import check_suffix_parameters

        try:
            check_suffix_parameters(spec.suffix_max_tree_depth, spec.suffix_max_spec_factor,
                                    spec.suffix_min_token_prob, spec.suffix_max_cached_requests)
        except ValueError as e:
            raise ModelLoadError(f"suffix decoding: {e}") from None
    _check_placement(spec.target_device_map, spec.target_max_memory, spec.target_offload_folder, "target")
    _check_placement(spec.draft_device_map, spec.draft_max_memory, spec.draft_offload_folder, "draft")
    if spec.target == "demo" and (spec.draft_device_map or spec.draft_max_memory or spec.draft_offload_folder):
        raise ModelLoadError("the demo draft is built from the target's own modules, so draft placement does not "
                             "apply to it: place the target, or drill the draft (--drill START:END:draft)")


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
    _validate(spec)
    pair = _load_demo(spec, progress) if spec.target == "demo" else _load_files(spec, progress, context_tokens)
    if spec.prepack_cpu:
        _prepack(pair, progress)
    _report(progress, "Ready", 1.0)
    return pair


def _prepack(pair: ModelPair, progress: Progress | None) -> None:
    """Pack the CPU float32 linears of the target and the draft for multi-token passes (core/cpu_linear)."""
    from specscope.core.engine import cpu_linear

    for role, loaded in (("target", pair.target), ("draft", pair.draft)):
        if loaded is None or not cpu_linear.packable_bytes(loaded.model):
            continue
        _report(progress, f"Packing the {role}'s weights for multi-token passes", 0.97)
        why_not = cpu_linear.prepack_linears(loaded.model)
        if why_not is not None:
            loaded.warnings.append(f"{role}: {why_not}")
            _report(progress, f"Warning: {role}: {why_not}", 0.98)


def _load_files(spec: PairSpec, progress: Progress | None, context_tokens: int) -> ModelPair:
    _report(progress, f"Reading {spec.target}", 0.0)
    tsrc = _open_source(spec.target, spec.target_device, spec.target_dtype, spec, "target")
    width = tokenizer_width(tsrc.tokenizer)
    check_vocab_width(width, _logit_width(tsrc.config), "target")
    dsrc: _Source | None = None
    if spec.drafter == "model":
        assert spec.draft is not None
        _report(progress, f"Reading {spec.draft}", 0.05)
        draft_device = spec.draft_device or spec.target_device
        dsrc = _open_source(spec.draft, draft_device, spec.draft_dtype, spec, "draft")
        check_tokenizers(tsrc.tokenizer, dsrc.tokenizer)
        check_vocab_width(width, _logit_width(dsrc.config), "draft")
    target_est = estimate_memory(tsrc.config, tsrc.dtype)
    needs = [("target", tsrc.device, target_est)]
    if dsrc is not None:
        needs.append(("draft", dsrc.device, estimate_memory(dsrc.config, dsrc.dtype)))
    for warning in memory_warnings(needs, context_tokens):
        tsrc.warnings.append(warning)
        _report(progress, f"Warning: {warning}", 0.1)

    millions = target_est.params / 1e6
    _report(progress, f"Loading {spec.target} ({millions:,.0f}M parameters) on {tsrc.device}", 0.1)
    target = _load_weights(tsrc, spec, target_est, "target")
    draft: LoadedModel | None = None
    message = ""
    try:
        if dsrc is not None:
            _report(progress, f"Loading {spec.draft} on {dsrc.device}", 0.6)
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
                _report(progress, f"Warning: {warning}", 0.95)
    description = f"{spec.target} with " + (f"draft {spec.draft}" if draft is not None else spec.drafter)
    return ModelPair(target=target, tokenizer=tsrc.tokenizer, drafter=drafter, drafter_kind=spec.drafter,
                     draft=draft, vocab_size=width, eos_token_ids=_eos_ids(target.model, tsrc.tokenizer),
                     use_chat_template=bool(getattr(tsrc.tokenizer, "chat_template", None)),
                     description=description)


# ---- command-line options shared by the subcommands that load a pair ---------------------------------
LOOKUP_MAX_NGRAM = 64  # the lookup index keeps one table per n-gram size: each costs a pass over the context
LOOKUP_MAX_TOKENS = 1_024
MAX_LAYERS = 4_096  # the model's own depth bounds it further, when it is loaded


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    from specscope.core.commands.cli_checks import whole_number

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
                   help="on CPU, keep PyTorch's default kernels for multi-token passes instead of oneDNN weights "
                        "packed at load (which cost a second copy of the weights in host memory)")
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
    from specscope.core.commands.cli_checks import finite_number, whole_number

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


def suffix_fields(args: argparse.Namespace) -> dict[str, Any]:
    """PairSpec's suffix fields from the --suffix-* options."""
    return {"suffix_max_tree_depth": args.suffix_max_tree_depth,
            "suffix_max_spec_factor": args.suffix_max_spec_factor,
            "suffix_min_token_prob": args.suffix_min_token_prob,
            "suffix_max_cached_requests": args.suffix_max_cached_requests}


def spec_from_args(args: argparse.Namespace) -> PairSpec:
    if not args.demo and not args.target:
        raise ModelLoadError("choose a target model (--target DIR_OR_HUB_ID) or --demo")
    drafter = args.drafter or default_drafter("demo" if args.demo else args.target)
    if not args.demo and drafter == "model" and not args.draft:
        raise ModelLoadError("the model drafter needs --draft (or choose --drafter lookup or early-exit)")
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
    )
