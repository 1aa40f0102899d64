"""Where a model goes and whether it fits, decided before any weights are read.

The device and dtype a model gets, accelerate's placement (``device_map``, ``max_memory``,
``offload_folder``) parsed from the user's words, and the memory estimate from the config's dimensions
that warns when a pair is unlikely to fit on its device.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from specscope.core.engine.pair_spec import ModelLoadError
from specscope.core.units import format_bytes

_DTYPES = {
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
}


@dataclass
class MemoryEstimate:
    params: int
    weight_bytes: int
    kv_bytes_per_token: int

    def total_bytes(self, context_tokens: int) -> int:
        return self.weight_bytes + self.kv_bytes_per_token * context_tokens


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
        parts = " + ".join(f"{role} {format_bytes(est.weight_bytes)}" for role, est in items)
        out.append(f"the pair needs about {format_bytes(total)} on {device} ({parts} of weights, plus KV "
                   f"cache for {context_tokens:,} tokens) but only {format_bytes(free)} is free: loading may "
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
