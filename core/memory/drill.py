"""The paging drill: move N decoder layers of one model off its compute device, and back afterwards.

On an accelerator the layers go to host memory (accelerate's ``cpu_offload``: a host copy, streamed over
PCIe on every pass); on a CPU they go to disk (accelerate's ``disk_offload``: memory-mapped files in an
offload folder, read back on every pass). Ending the drill removes the hooks, and accelerate's
``AlignDevicesHook.detach_hook`` puts every weight back on its original device from the offloaded copy, so
the weights after a drill are bit-identical to before. Nothing here copies tensors by hand.

A drill is asked for with :class:`DrillSpec` (``START:END:MODEL[:LAYERS]`` on the command line, or the Run
panel) and applied by the session at an iteration boundary, like every other control.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specscope.core.memory.residency import decoder_layers, device_key

DRILL_MODELS = ("draft", "target")
_DRILL_RE = re.compile(r"^(\d+):(\d+):([a-z]+)(?::(\d+))?$")


class DrillError(ValueError):
    """A drill that cannot be run; the message is one sentence for the user."""


@dataclass(frozen=True)
class DrillSpec:
    """Layers of ``model`` off its device from iteration ``start`` until before ``end`` (None = all layers).

    ``start``/``end`` matter only for a scheduled drill (the CLI); a live drill starts and ends on request.
    """

    model: str
    layers: int | None = None
    start: int = 0
    end: int = 0


def parse_drill(text: str) -> DrillSpec:
    """``START:END:MODEL[:LAYERS]``, e.g. ``20:40:draft`` or ``10:30:target:18``; DrillError otherwise."""
    m = _DRILL_RE.match(text.strip().lower())
    if m is None:
        raise DrillError(f"bad drill {text!r}: write START:END:MODEL[:LAYERS], e.g. 20:40:draft or "
                         "10:30:target:18")
    start, end, model, layers = int(m[1]), int(m[2]), m[3], m[4]
    if model not in DRILL_MODELS:
        raise DrillError(f"bad drill {text!r}: the model is draft or target, not {model!r}")
    if end <= start:
        raise DrillError(f"bad drill {text!r}: it must end after it starts (END > START)")
    n = int(layers) if layers is not None else None
    if n is not None and n < 1:
        raise DrillError(f"bad drill {text!r}: move at least 1 layer")
    return DrillSpec(model=model, layers=n, start=start, end=end)


def offload_place(compute_device: torch.device | str) -> str:
    """Where a drill moves layers: host memory from an accelerator, disk from the CPU."""
    return "disk" if torch.device(compute_device).type == "cpu" else "cpu"


class PagingDrill:
    """One running drill on one model; ``start()`` moves the layers, ``end()`` brings them back."""

    def __init__(self, spec: DrillSpec, model: nn.Module, compute_device: torch.device | str,
                 offload_root: str | Path | None = None):
        layers = decoder_layers(model)
        if layers is None or len(layers) == 0:
            raise DrillError(f"the {spec.model} has no decoder layers specscope recognises: nothing to move")
        n = len(layers) if spec.layers is None else spec.layers
        if n > len(layers):
            raise DrillError(f"the {spec.model} has {len(layers)} layers; a drill cannot move {n}")
        self.spec = spec
        self.model = model
        self.device = torch.device(device_key(compute_device))
        self.place = offload_place(self.device)
        self.total_layers = len(layers)
        self.moved: list[nn.Module] = list(layers)[-n:]  # the last n: the first layers stay warm
        self._root = Path(offload_root) if offload_root is not None else None
        self._folder: Path | None = None
        self.active = False

    @property
    def n_layers(self) -> int:
        return len(self.moved)

    @property
    def moved_bytes(self) -> int:
        seen: set[int] = set()
        total = 0
        for layer in self.moved:
            for p in layer.parameters():
                if id(p) not in seen:
                    seen.add(id(p))
                    total += p.numel() * p.element_size()
        return total

    def describe(self) -> str:
        where = "disk" if self.place == "disk" else "host memory"
        return f"{self.spec.model}: {self.n_layers} of {self.total_layers} layers to {where}"

    def start(self) -> None:
        if self.active:
            return
        from accelerate import cpu_offload, disk_offload

        if self.place == "disk":
            base = self._root or Path(tempfile.gettempdir())
            base.mkdir(parents=True, exist_ok=True)
            self._folder = Path(tempfile.mkdtemp(prefix=f"specscope-drill-{self.spec.model}-", dir=base))
        for i, layer in enumerate(self.moved):
            if self.place == "disk":
                assert self._folder is not None
                disk_offload(layer, str(self._folder / f"layer{i}"), execution_device=self.device)
            else:
                cpu_offload(layer, execution_device=self.device)
        self.active = True

    def end(self) -> None:
        """Remove the hooks: accelerate restores each weight to its original device from the offloaded copy."""
        if not self.active:
            return
        from accelerate.hooks import remove_hook_from_module

        for layer in self.moved:
            remove_hook_from_module(layer, recurse=True)
        leftover = [n for layer in self.moved for n, p in layer.named_parameters() if p.device.type == "meta"]
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None
        self.active = False
        if leftover:
            raise DrillError(f"the drill could not bring back {len(leftover)} weight(s) of the "
                             f"{self.spec.model} (e.g. {leftover[0]})")


def drill_target(pair: Any, model: str) -> tuple[nn.Module, torch.device]:
    """The module and compute device a drill on ``model`` ("draft" or "target") acts on."""
    if model == "target":
        return pair.target.model, pair.target.device
    if pair.draft is None:
        raise DrillError(f"there is no draft model to drill (drafter {pair.drafter_kind}); drill the target")
    return pair.draft.model, pair.draft.device
