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

import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specscope.core.drill_spec import DRILL_MODELS, DrillError, DrillSpec, parse_drill
from specscope.core.memory.residency import decoder_layers, device_key

# The spec and its parser are plain data (core/drill_spec.py, no torch); re-exported for the engine's callers.
__all__ = ["DRILL_MODELS", "DrillError", "DrillSpec", "PagingDrill", "drill_target", "offload_place",
           "parse_drill"]


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
