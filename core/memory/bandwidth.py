"""The compute device's memory bandwidth, measured once per device per process with a streaming read.

A decode step of a model that fits in memory is bound by reading its weights once, so bytes read / this
bandwidth is the fastest a step can be. A model whose steps run far below it while weights sit off the
device (offloaded to host memory or disk) is being fed from there: the first-iteration paging check.

Cached in the process only: a number measured minutes ago under other load is no better than a fresh
read of ~100 ms.
"""

from __future__ import annotations

import threading
import time

import torch

from specscope.core.memory.residency import device_key

_cache: dict[str, float] = {}
_lock = threading.Lock()
STREAM_BYTES = 64 * 2**20  # larger than the last-level cache of any CPU we run on: a real memory read
REPEATS = 5


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def measure_bandwidth(device: torch.device | str, nbytes: int = STREAM_BYTES, repeats: int = REPEATS) -> float:
    """Bytes per second a full-tensor sum reads on ``device`` (the best of ``repeats``), no caching."""
    dev = torch.device(device)
    n = max(1, nbytes // 4)
    with torch.inference_mode():
        x = torch.ones(n, dtype=torch.float32, device=dev)
        x.sum()  # first touch and kernel warm-up
        _sync(dev)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            x.sum()
            _sync(dev)
            best = min(best, time.perf_counter() - t0)
    del x
    return (n * 4) / max(best, 1e-9)


def device_bandwidth(device: torch.device | str) -> float:
    """The cached bandwidth of ``device`` in bytes/s, measured on first use."""
    key = device_key(device)
    with _lock:
        if key not in _cache:
            _cache[key] = measure_bandwidth(key)
        return _cache[key]


def forget_bandwidth() -> None:
    """Drop cached measurements (tests)."""
    with _lock:
        _cache.clear()
