"""Bytes streamed through accelerate's offload hooks, counted as each offloaded module runs.

A module under an offload hook keeps its weights on the meta device and has them copied in (from host
memory, or from files on disk) at the start of every forward. A forward pre-hook on each such module adds
that module's offloaded bytes, with the time, to one event list; the session sums the events inside each
iteration's draft and verify phases. Counting happens where the copy is triggered, so it is the traffic the
step really caused, whatever the OS page cache later served from memory.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from specscope.core.memory.residency import _offload_hook


def offloaded_bytes_of(module: nn.Module) -> int:
    """Bytes of this module's own tensors (not its children's) that its offload hook copies in each pass."""
    hook = _offload_hook(module)
    if hook is None:
        return 0
    total = 0
    tensors: list[tuple[str, torch.Tensor]] = [*module.named_parameters(recurse=False)]
    if getattr(hook, "offload_buffers", False):
        tensors += [*module.named_buffers(recurse=False)]
    for _, t in tensors:
        if t is not None and t.device.type == "meta":
            total += t.numel() * t.element_size()
    return total


class OffloadMeter:
    """Watches models' offloaded modules; ``bytes_between(t0, t1)`` is what they streamed in that window.

    ``watch`` is called again whenever weights move (load, drill start or end); modules shared by two
    models (the demo draft shares the target's embeddings and head) are watched once.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic, capacity: int = 200_000):
        self.clock = clock
        self._events: deque[tuple[float, int]] = deque(maxlen=capacity)
        self._lock = threading.Lock()
        self._handles: list[Any] = []
        self.watched_modules = 0

    def watch(self, models: Iterable[nn.Module]) -> None:
        self.unwatch()
        seen: set[int] = set()
        for model in models:
            for module in model.modules():
                if id(module) in seen:
                    continue
                seen.add(id(module))
                nbytes = offloaded_bytes_of(module)
                if nbytes:
                    self._handles.append(module.register_forward_pre_hook(self._counter(nbytes)))
        self.watched_modules = len(self._handles)

    def unwatch(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self.watched_modules = 0

    def _counter(self, nbytes: int) -> Callable[..., None]:
        def count(*_: Any) -> None:
            with self._lock:
                self._events.append((self.clock(), nbytes))

        return count

    def bytes_between(self, t0: float, t1: float) -> int:
        with self._lock:
            return sum(b for t, b in self._events if t0 <= t <= t1)

    def forget_before(self, t: float) -> None:
        """Drop events older than ``t`` (they have been attributed)."""
        with self._lock:
            while self._events and self._events[0][0] < t:
                self._events.popleft()
