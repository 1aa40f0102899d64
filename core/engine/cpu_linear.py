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
two or more tokens (verify passes, prefill, catch-up) use the packed copy.

One-token steps (plain decoding, a draft model's steps) use whichever kernel is faster on this machine at the
run's thread count, timed once per model and thread count before a run (:func:`choose_one_row_kernel`). The
measured speed-up is over plain decoding, so plain decoding must run on the best kernel this PyTorch has: on
an AVX-512 EPYC the packed kernel took a one-token step in 0.60 of MKL's time at two threads, and against
MKL's every speed-up read 1.67x high. Where the packed kernel is not clearly faster (at one thread on the
AVX2 EPYC it was 24% slower) one-token steps keep PyTorch's default kernel, bit for bit what
``transformers`` runs; ``--no-prepack`` keeps it everywhere.

Cost. The packed copy is a second copy of every linear weight in host memory (about the model's size again).
:func:`prepack_linears` skips models that would not fit, with a sentence saying so, and the memory layer's
``residency.prepacked_bytes`` reports what the copies hold. Results differ from MKL's in the last bits
(different summation order), as MKL's own 1-row and n-row kernels already differ from each other.
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

from specscope.core.progress import Progress, report_progress
from specscope.core.units import MIB, format_bytes

if TYPE_CHECKING:
    from specscope.core.engine.pair import ModelPair

# The row count the layout is chosen for. Any value >= 2 gave the same blocked layout performance for 1-16
# rows; a layout packed for 1 row falls back to a slow path for 2 or more (measured, docs/bench-cpu-linear.md).
PACK_FOR_ROWS = 8
# One-token steps take the packed kernel only when it is clearly faster: under this share of the default's time
# (the two arms of one timing differ by a few percent on a quiet machine).
ONE_ROW_MIN_GAIN = 0.95
ONE_ROW_ROUNDS = 5
ONE_ROW_SAMPLE_BYTES = 256 * 1024 * 1024  # weights one timing round streams (the demo target: all 538 MB / 2)
# Host memory left free after packing, beyond the copies themselves.
_HEADROOM_BYTES = 512 * MIB
# Packed copies by the weight they were packed from, while that weight lives.
_packed_by_weight: WeakIdKeyDictionary = WeakIdKeyDictionary()


class PrepackedLinear(nn.Linear):
    """An ``nn.Linear`` whose passes of two or more rows use a oneDNN weight packed at load, and one-row passes
    too where :func:`choose_one_row_kernel` measured it faster at the current thread count."""

    packed_weight: torch.Tensor | None = None
    one_row_packed: dict[int, bool] | None = None  # thread count -> packed for one row; shared by a model's linears

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        packed = self.packed_weight
        rows = x.numel() // max(1, x.shape[-1])
        if rows < 2 and not (self.one_row_packed and self.one_row_packed.get(torch.get_num_threads(), False)):
            packed = None  # one row: PyTorch's default kernel unless the packed one was measured faster
        # The dense weight whenever the packed copy could be stale or bypass something: another dtype or
        # device, autograd, or an accelerate hook that pages this weight in (a paging drill).
        if packed is None or x.dtype != torch.float32 or x.device.type != "cpu" or (
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
                f"{format_bytes(need)} more host memory and {format_bytes(free_bytes)} is free")
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


@dataclass(frozen=True)
class OneRowTiming:
    """One-token products of a model's linears timed both ways at one thread count (ms for all its linears)."""

    threads: int
    default_ms: float
    packed_ms: float

    @property
    def packed_wins(self) -> bool:
        return self.packed_ms < ONE_ROW_MIN_GAIN * self.default_ms

    def sentence(self) -> str:
        chosen = "oneDNN's packed weights" if self.packed_wins else "PyTorch's default kernel"
        return (f"one-token steps on {chosen} ({self.packed_ms:.1f} ms packed against {self.default_ms:.1f} ms "
                f"default for the linears at {self.threads} thread{'s' if self.threads != 1 else ''})")


def _packed_linears(model: nn.Module) -> list[PrepackedLinear]:
    return [m for m in model.modules() if isinstance(m, PrepackedLinear) and m.packed_weight is not None]


def set_one_row_kernel(model: nn.Module, threads: int, packed: bool) -> None:
    """Let one-token steps of ``model`` at ``threads`` threads use the packed weights (or not)."""
    linears = _packed_linears(model)
    choice = next((m.one_row_packed for m in linears if m.one_row_packed is not None), None)
    if choice is None:
        choice = {}
    choice[threads] = packed
    for m in linears:
        m.one_row_packed = choice


def one_row_choice(model: nn.Module, threads: int) -> bool | None:
    """What one-token steps of ``model`` use at ``threads`` threads: True packed, False default, None unchosen."""
    for m in _packed_linears(model):
        return m.one_row_packed.get(threads) if m.one_row_packed is not None else None
    return None


def time_one_row(model: nn.Module, rounds: int = ONE_ROW_ROUNDS) -> OneRowTiming | None:
    """Time a one-row product through the packed linears of ``model``, default kernel against packed, at the
    current thread count; None when the model has none. A decode step streams every weight from memory, so the
    timing does too: linears spread through the model up to ONE_ROW_SAMPLE_BYTES of weights (far more than a
    CPU's caches), scaled to the whole model by bytes. The arms alternate which goes first; each is the median
    of its rounds."""
    linears = _packed_linears(model)
    if not linears:
        return None
    sizes = [m.weight.numel() * m.weight.element_size() for m in linears]
    total = sum(sizes)
    stride = max(1, -(-total // ONE_ROW_SAMPLE_BYTES))  # every stride-th linear: spread across the layers
    sample = linears[::stride]
    scale = total / sum(sizes[::stride])
    inputs = [torch.randn(1, m.in_features) for m in sample]

    def arm(packed: bool) -> float:
        t0 = time.perf_counter()
        for m, x in zip(sample, inputs, strict=True):
            if packed:
                assert m.packed_weight is not None
                _packed_product(x, m.packed_weight, m.bias)
            else:
                F.linear(x, m.weight, m.bias)
        return (time.perf_counter() - t0) * 1000.0 * scale

    with torch.inference_mode():
        arm(False), arm(True)  # first calls: oneDNN's primitive cache, page faults
        times: dict[bool, list[float]] = {False: [], True: []}
        for r in range(rounds):
            for packed in ((False, True) if r % 2 == 0 else (True, False)):
                times[packed].append(arm(packed))
    return OneRowTiming(torch.get_num_threads(), statistics.median(times[False]), statistics.median(times[True]))


def choose_one_row_kernel(model: nn.Module) -> OneRowTiming | None:
    """Time one-token products at the current thread count, once per model and count, and let one-token steps
    use the faster kernel; None when already chosen for this count, or the model has no packed linears."""
    threads = torch.get_num_threads()
    if one_row_choice(model, threads) is not None:
        return None
    timing = time_one_row(model)
    if timing is not None:
        set_one_row_kernel(model, threads, timing.packed_wins)
    return timing


def choose_one_token_kernels(pair: ModelPair, progress: Progress | None = None) -> None:
    """Time one-token steps on both CPU kernels for each packed model at the current thread count (once per
    count: a run's thread count may differ from the load's) and let them use the faster; the sentence saying
    which, and why, is kept on the model for the run's record."""
    threads = torch.get_num_threads()
    mode = getattr(pair, "one_token_kernel", "auto")
    for role, loaded in (("target", pair.target), ("draft", pair.draft)):
        if loaded is None or threads in loaded.one_token_kernels:
            continue
        if loaded.device.type != "cpu" or one_row_choice(loaded.model, threads) is not None:
            continue
        if not _packed_linears(loaded.model):
            continue
        if mode != "auto":  # the user's choice: no timing
            set_one_row_kernel(loaded.model, threads, mode == "packed")
            kernel = "oneDNN's packed weights" if mode == "packed" else "PyTorch's default kernel"
            loaded.one_token_kernels[threads] = f"one-token steps on {kernel} (--one-token-kernel {mode})"
            continue
        report_progress(progress, f"Timing the {role}'s one-token steps on both CPU kernels", 0.98)
        timing = choose_one_row_kernel(loaded.model)
        if timing is not None:
            loaded.one_token_kernels[threads] = timing.sentence()
            report_progress(progress, f"{role}: {timing.sentence()}", 0.98)


def unpack_linears(model: nn.Module) -> None:
    """Undo :func:`prepack_linears`: plain ``nn.Linear`` modules again, the packed copies freed."""
    for module in model.modules():
        if isinstance(module, PrepackedLinear):
            del module.packed_weight
            module.__dict__.pop("one_row_packed", None)
            _packed_by_weight.pop(module.weight, None)
            module.__class__ = nn.Linear  # type: ignore[assignment]


def _free_host_bytes() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().available)
