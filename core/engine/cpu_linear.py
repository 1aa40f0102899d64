"""Multi-token passes on CPU: the linears' weights prepacked for oneDNN once, at load.

Why. A verify pass scores k+1 tokens at once, and speculation pays only when that pass costs little more than a
one-token step. On CPU, PyTorch sends ``F.linear`` to MKL. For one token MKL runs a matrix-vector product at
memory speed, but for 2 to ~16 rows it runs its general product, which re-packs the weight on every call: on
the 2-core AMD EPYC this project is measured on, a 2-token pass of the demo target cost 1.6-1.7 one-token
steps and a 9-token pass about 2 (docs/bench-cpu-linear.md). oneDNN's product on a weight reordered once into
its blocked layout does not re-pack, and uses both cores where MKL's small products did not: a 2-token pass
cost 1.36-1.49 steps at one thread and 1.09-1.16 at two. This is the weight pre-packing that PyTorch's own CPU
inference paths (inductor's freezing, IPEX) do; the op used here, ``torch.ops.mkldnn._linear_pointwise``, is
the one inductor emits.

What changes. Each plain ``nn.Linear`` of a float32 model on CPU becomes a :class:`PrepackedLinear` in place
(the same object, the same ``weight`` parameter, so tied embeddings and every reference stay valid). Passes of
two or more tokens (verify passes, prefill, catch-up) use the packed copy. One-token steps keep PyTorch's
default kernel, so plain decoding is exactly what it was, bit for bit, and what ``transformers`` runs; at one
thread the packed kernel is also slower there (docs/bench-cpu-linear.md).

Cost. The packed copy is a second copy of every linear weight in host memory (about the model's size again).
:func:`prepack_linears` skips models that would not fit, with a sentence saying so, and
:func:`prepacked_bytes` reports what the copies hold. Results differ from MKL's in the last bits (different
summation order), as MKL's own 1-row and n-row kernels already differ from each other.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

# The row count the layout is chosen for. Any value >= 2 gave the same blocked layout performance for 1-16
# rows; a layout packed for 1 row falls back to a slow path for 2 or more (measured, docs/bench-cpu-linear.md).
PACK_FOR_ROWS = 8
# Host memory left free after packing, beyond the copies themselves.
_HEADROOM_BYTES = 512 * 1024**2
# Packed copies by the weight they were packed from, while that weight lives.
_packed_by_weight: WeakIdKeyDictionary = WeakIdKeyDictionary()


class PrepackedLinear(nn.Linear):
    """An ``nn.Linear`` whose passes of two or more rows use a oneDNN weight packed at load."""

    packed_weight: torch.Tensor | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self.packed_weight
        rows = x.numel() // max(1, x.shape[-1])
        # The dense weight whenever the packed copy could be stale or bypass something: one row, another
        # dtype or device, autograd, or an accelerate hook that pages this weight in (a paging drill).
        if packed is None or rows < 2 or x.dtype != torch.float32 or x.device.type != "cpu" or (
                torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad)) or (
                getattr(self, "_hf_hook", None) is not None):
            return F.linear(x, self.weight, self.bias)
        flat = x.reshape(rows, x.shape[-1])
        if not flat.is_contiguous():
            flat = flat.contiguous()
        out = _packed_product(flat, packed, self.bias)
        return out.reshape(*x.shape[:-1], out.shape[-1])

    def __deepcopy__(self, memo: dict[int, Any]) -> PrepackedLinear:
        # oneDNN's opaque tensors cannot be copied; the copy packs its own copied weight instead.
        clone = type(self).__new__(type(self))
        memo[id(self)] = clone
        for key, value in self.__dict__.items():
            if key != "packed_weight":
                clone.__dict__[key] = copy.deepcopy(value, memo)
        if self.packed_weight is not None:
            clone.packed_weight = _pack(clone.weight)
        return clone


def _packed_product(x: torch.Tensor, packed: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, "none", [], "")


def _pack(weight: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return torch.ops.mkldnn._reorder_linear_weight(weight.detach(), PACK_FOR_ROWS)


def available() -> bool:
    """Whether this PyTorch has oneDNN (mkldnn) with the packed-linear ops."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        torch.ops.mkldnn._reorder_linear_weight  # noqa: B018 - resolving the op is the check
        torch.ops.mkldnn._linear_pointwise  # noqa: B018
    except (AttributeError, RuntimeError):
        return False
    return True


def _eligible(model: nn.Module) -> list[nn.Linear]:
    """Plain float32 linears on CPU, not under an accelerate hook (those weights move between passes)."""
    return [m for m in model.modules()
            if type(m) is nn.Linear and m.weight.device.type == "cpu" and m.weight.dtype == torch.float32
            and getattr(m, "_hf_hook", None) is None]


def packable_bytes(model: nn.Module) -> int:
    """Bytes the packed copies of ``model``'s eligible linears would take (about their weights' size)."""
    return sum(m.weight.numel() * m.weight.element_size() for m in _eligible(model))


def prepack_linears(model: nn.Module, free_bytes: int | None = None) -> str | None:
    """Pack every eligible linear of ``model`` in place; None when done or nothing applied, else one sentence
    saying why the model keeps PyTorch's default kernels (no oneDNN, or not enough free host memory)."""
    need = packable_bytes(model)
    if need == 0:
        return None
    if not available():
        return "this PyTorch has no oneDNN, so multi-token passes on CPU use PyTorch's default kernels"
    if free_bytes is None:
        free_bytes = _free_host_bytes()
    if free_bytes is not None and free_bytes < need + _HEADROOM_BYTES:
        return (f"multi-token passes on CPU use PyTorch's default kernels: packing the weights for them needs "
                f"{need / 1024**3:.1f} GiB more host memory and {free_bytes / 1024**3:.1f} GiB is free")
    try:
        for linear in _eligible(model):
            # A weight shared with a model packed earlier shares its copy.
            packed = _packed_by_weight.get(linear.weight)
            if packed is None:
                packed = _packed_by_weight[linear.weight] = _pack(linear.weight)
            linear.__class__ = PrepackedLinear  # in place: every reference to the module stays valid
            linear.packed_weight = packed  # type: ignore[attr-defined]
    except (RuntimeError, MemoryError) as exc:  # oneDNN refused a shape, or memory ran out mid-way
        unpack_linears(model)
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"multi-token passes on CPU use PyTorch's default kernels: packing the weights failed ({reason})"
    return None


def unpack_linears(model: nn.Module) -> None:
    """Undo :func:`prepack_linears`: plain ``nn.Linear`` modules again, the packed copies freed."""
    for module in model.modules():
        if isinstance(module, PrepackedLinear):
            del module.packed_weight
            _packed_by_weight.pop(module.weight, None)
            module.__class__ = nn.Linear  # type: ignore[assignment]


def prepacked_bytes(model: nn.Module) -> int:
    """Bytes held by the packed copies in ``model`` (0 when it has none)."""
    total = 0
    for module in model.modules():
        packed = getattr(module, "packed_weight", None) if isinstance(module, PrepackedLinear) else None
        if packed is not None:
            total += packed.numel() * packed.element_size()
    return total


def _free_host_bytes() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)
