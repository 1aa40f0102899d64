"""Where a model's weights live: bytes of parameters and buffers per device, offloading, KV-cache size.

A weight on the meta device under an accelerate offload hook is not missing: it lives in the hook's
weights map (host memory, or disk) and is copied to the execution device on every forward pass. That is
the slow case the paging detector looks for, so it is reported as ``cpu``/``disk`` bytes *and* as
offloaded bytes, with a warning, whatever ``next(model.parameters()).device`` says.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from specscope.core.units import format_bytes


@dataclass
class Residency:
    bytes_by_device: dict[str, int] = field(default_factory=dict)  # "cuda:0", "cpu", "disk", "meta", "mps"
    param_bytes: int = 0
    buffer_bytes: int = 0
    offloaded_bytes: int = 0  # served through offload hooks (copied to the execution device each pass)
    execution_devices: list[str] = field(default_factory=list)  # where offload hooks run the weights
    device_map: dict[str, str] = field(default_factory=dict)  # hf_device_map, values as strings
    warnings: list[str] = field(default_factory=list)
    layers_total: int = 0  # decoder layers (the model's block list), 0 when it has none we recognise
    layers_by_place: dict[str, int] = field(default_factory=dict)  # place -> layers wholly or mostly there
    step_read_bytes: int = 0  # weight bytes one forward pass reads (an untied input embedding reads one row)
    prepacked_bytes: int = 0  # copies of CPU linear weights packed for multi-token passes (engine/cpu_linear.py)

    @property
    def total_bytes(self) -> int:
        return self.param_bytes + self.buffer_bytes + self.prepacked_bytes

    @property
    def offloaded(self) -> bool:
        """Weights served from host or disk to an accelerator: offload hooks, or a mixed device map."""
        places = set(self.device_map.values())
        return self.offloaded_bytes > 0 or (len(places) > 1 and bool({"cpu", "disk"} & places))


def device_key(device: torch.device | str | int) -> str:
    """Canonical device name: "cuda" -> "cuda:0", 0 -> "cuda:0", "cpu" stays."""
    if isinstance(device, int):
        return f"cuda:{device}"
    d = torch.device(device) if not isinstance(device, torch.device) else device
    if d.type in ("cuda", "xpu", "npu") and d.index is None:
        return f"{d.type}:0"
    return str(d)


def _hooks(module: nn.Module) -> Iterator[Any]:
    hook = getattr(module, "_hf_hook", None)
    if hook is None:
        return
    yield from getattr(hook, "hooks", (hook,))  # SequentialHook holds several


def offload_hook(module: nn.Module) -> Any:
    for h in _hooks(module):
        if getattr(h, "offload", False) and getattr(h, "weights_map", None) is not None:
            return h
    return None


def _offload_location(weights_map: Any, name: str) -> str:
    """"disk" when accelerate keeps this weight in a file index rather than an in-memory state dict."""
    prefix = ""
    while hasattr(weights_map, "dataset") and hasattr(weights_map, "prefix"):  # PrefixedDataset
        prefix = weights_map.prefix + prefix
        weights_map = weights_map.dataset
    key = prefix + name
    index = getattr(weights_map, "index", None)
    state = getattr(weights_map, "state_dict", None)
    if isinstance(index, dict) and key in index and not (isinstance(state, dict) and key in state):
        return "disk"
    return "cpu"


def prepacked_bytes(model: nn.Module) -> int:
    """Bytes of the second, packed weight copies that modules keep for multi-token CPU passes (0 when none).

    Read by duck type: a module that holds such a copy exposes it as ``packed_weight``
    (core/engine/cpu_linear.py's ``PrepackedLinear``); the memory layer does not import the engine."""
    total = 0
    for module in model.modules():
        packed = getattr(module, "packed_weight", None)
        if isinstance(packed, torch.Tensor):
            total += packed.numel() * packed.element_size()
    return total


def model_residency(model: nn.Module, expected_device: torch.device | str | None = None,
                    name: str = "model") -> Residency:
    """Bytes of parameters and buffers per device, offloading and warnings (one sentence each)."""
    r = Residency()
    seen: set[int] = set()
    exec_devices: set[str] = set()
    for module in model.modules():
        hook = offload_hook(module)
        if hook is not None and getattr(hook, "execution_device", None) is not None:
            exec_devices.add(device_key(hook.execution_device))
        tensors: list[tuple[str, torch.Tensor, bool]] = [
            (n, p, True) for n, p in module.named_parameters(recurse=False)]
        tensors += [(n, b, False) for n, b in module.named_buffers(recurse=False)]
        for tname, t, is_param in tensors:
            if t is None or id(t) in seen:
                continue
            seen.add(id(t))
            nbytes = t.numel() * t.element_size()
            where = device_key(t.device)
            if t.device.type == "meta" and hook is not None:
                where = _offload_location(hook.weights_map, tname)
                r.offloaded_bytes += nbytes
            r.bytes_by_device[where] = r.bytes_by_device.get(where, 0) + nbytes
            if is_param:
                r.param_bytes += nbytes
            else:
                r.buffer_bytes += nbytes
    r.prepacked_bytes = prepacked_bytes(model)
    if r.prepacked_bytes:  # a second copy in host memory: counted where it lives
        r.bytes_by_device["cpu"] = r.bytes_by_device.get("cpu", 0) + r.prepacked_bytes
    r.execution_devices = sorted(exec_devices)
    r.layers_total, r.layers_by_place = _layer_places(model)
    r.step_read_bytes = r.param_bytes - _untied_input_embedding_bytes(model)
    dmap = getattr(model, "hf_device_map", None)
    if isinstance(dmap, dict):
        r.device_map = {str(k): device_key(v) if isinstance(v, int) else str(v) for k, v in dmap.items()}
    r.warnings = _warnings(name, r, expected_device)
    return r


def compute_device(model: nn.Module, fallback: torch.device) -> torch.device:
    """Where the model's forward runs: its input embedding's execution device (offload hooks) or weight device."""
    get_input = getattr(model, "get_input_embeddings", None)
    try:
        emb = get_input() if callable(get_input) else None
    except (AttributeError, NotImplementedError):
        emb = None
    hook = getattr(emb, "_hf_hook", None)
    for h in getattr(hook, "hooks", (hook,)) if hook is not None else ():
        device = getattr(h, "execution_device", None)
        if device is not None:
            return torch.device(device if not isinstance(device, int) else f"cuda:{device}")
    weight = getattr(emb, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.device.type != "meta":
        return weight.device
    return fallback


def decoder_layers(model: nn.Module) -> nn.ModuleList | None:
    """The model's list of decoder blocks (``model.layers``, GPT-2's ``transformer.h``...): the longest
    ModuleList in the model, or None."""
    best: nn.ModuleList | None = None
    for module in model.modules():
        if isinstance(module, nn.ModuleList) and len(module) > (len(best) if best is not None else 0):
            best = module
    return best


def _tensor_place(module: nn.Module, hook: Any, name: str, t: torch.Tensor) -> str:
    if t.device.type == "meta" and hook is not None:
        return _offload_location(hook.weights_map, name)
    return device_key(t.device)


def _layer_places(model: nn.Module) -> tuple[int, dict[str, int]]:
    """How many decoder layers keep most of their weight bytes in each place (cpu, cuda:0, disk...)."""
    layers = decoder_layers(model)
    if layers is None:
        return 0, {}
    counts: dict[str, int] = {}
    for layer in layers:
        by_place: dict[str, int] = {}
        for module in layer.modules():
            hook = offload_hook(module)
            for tname, t in module.named_parameters(recurse=False):
                where = _tensor_place(module, hook, tname, t)
                by_place[where] = by_place.get(where, 0) + t.numel() * t.element_size()
        if by_place:
            place = max(by_place.items(), key=lambda kv: kv[1])[0]
            counts[place] = counts.get(place, 0) + 1
    return len(layers), counts


def _untied_input_embedding_bytes(model: nn.Module) -> int:
    """Bytes of an input embedding that is not also the output head: a step reads only a row of it."""
    get_in = getattr(model, "get_input_embeddings", None)
    get_out = getattr(model, "get_output_embeddings", None)
    try:
        emb = get_in() if callable(get_in) else None
        head = get_out() if callable(get_out) else None
    except (AttributeError, NotImplementedError):
        return 0
    weight = getattr(emb, "weight", None)
    if not isinstance(weight, torch.Tensor):
        return 0
    if head is not None and getattr(head, "weight", None) is weight:
        return 0
    if getattr(getattr(model, "config", None), "tie_word_embeddings", False):
        return 0  # tied, though offloading may have split the two into separate meta tensors
    return weight.numel() * weight.element_size()


def _warnings(name: str, r: Residency, expected: torch.device | str | None) -> list[str]:
    out: list[str] = []
    total = r.total_bytes
    if r.offloaded_bytes:
        to = ", ".join(r.execution_devices) or "the execution device"
        out.append(f"{name}: accelerate offload hooks copy {format_bytes(r.offloaded_bytes)} of weights "
                   f"to {to} on every forward pass (expect each step to be slow).")
    map_off = sorted({k for k, v in r.device_map.items() if v in ("cpu", "disk")})
    if map_off and len(set(r.device_map.values())) > 1 and not r.offloaded_bytes:
        out.append(f"{name}: its device map places {len(map_off)} module(s) on cpu/disk "
                   f"(e.g. {map_off[0]}), so those weights are not on the accelerator.")
    meta = r.bytes_by_device.get("meta", 0)
    if meta:
        out.append(f"{name}: {format_bytes(meta)} of weights are on the meta device (never loaded).")
    if expected is not None:
        want = device_key(expected)
        elsewhere = {d: b for d, b in r.bytes_by_device.items() if d != want and b}
        if elsewhere:
            parts = ", ".join(f"{format_bytes(b)} on {d}" for d, b in sorted(elsewhere.items()))
            out.append(f"{name}: {parts} of {format_bytes(total)}, not on {want} as asked.")
    return out


def kv_cache_bytes(cache: object | None) -> int:
    """Bytes held by a transformers cache: ``layers[i].keys/values`` (sliding-window rows recorded for rollback
    included), the conv and recurrent states of linear-attention and Mamba layers; legacy
    ``key_cache/value_cache``."""
    if cache is None:
        return 0
    total = 0
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for layer in list(layers):
            tensors = [getattr(layer, "keys", None), getattr(layer, "values", None)]
            for attr in ("conv_states", "recurrent_states"):  # dicts: state index -> tensor
                states = getattr(layer, attr, None)
                if isinstance(states, dict):
                    tensors.extend(list(states.values()))
            for t in tensors:
                if isinstance(t, torch.Tensor):
                    total += t.numel() * t.element_size()
        return total
    for attr in ("key_cache", "value_cache"):  # older transformers
        for t in list(getattr(cache, attr, None) or []):
            if isinstance(t, torch.Tensor):
                total += t.numel() * t.element_size()
    return total


def format_residency(name: str, residency: Residency) -> str:
    """One line for the CLI summary: total, then bytes per device, offloading noted."""
    parts = ", ".join(f"{d} {format_bytes(b)}" for d, b in sorted(residency.bytes_by_device.items(),
                                                                     key=lambda kv: -kv[1]) if b)
    line = f"{name}: {format_bytes(residency.total_bytes)} weights ({parts or 'none'})"
    if residency.offloaded_bytes:
        to = ", ".join(residency.execution_devices) or "the execution device"
        line += f"; {format_bytes(residency.offloaded_bytes)} offloaded, copied to {to} each pass"
    if residency.prepacked_bytes:
        line += f"; {format_bytes(residency.prepacked_bytes)} of it prepacked copies for multi-token passes"
    if residency.warnings:
        line += " [!]"
    return line
