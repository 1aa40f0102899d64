"""A memory sampler on its own daemon thread; the decode loop only looks samples up.

Each sample is flattened once, on the sampler thread, into a ``dict[str, float]`` whose keys carry their
unit (``gpu0_free_bytes``, ``pcie0_rx_bytes_per_s``, ``host_major_faults``...). ``sample_near`` is a
lock-protected search of a small ring buffer: cheap enough to call after every iteration. Model residency
changes rarely and costs a walk over every tensor, so it is recomputed every few seconds, not every sample.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from specscope.core.memory.host import host_memory
from specscope.core.memory.nvml import NvmlDeviceReading, NvmlProbe, counter_delta
from specscope.core.memory.residency import Residency, kv_cache_bytes, model_residency
from specscope.core.memory.torch_mem import torch_memory


@dataclass
class MemorySample:
    t_s: float  # time.monotonic() (or the sampler's clock) when taken
    values: dict[str, float]
    # per torch CUDA index: (rx counter, tx counter, wrap modulus), for PCIe bytes over an interval
    pcie_counters: dict[int, tuple[int, int, int]] = field(default_factory=dict)


def _dev_key(device: str) -> str:
    """"cuda:0" -> "cuda0" (key-friendly)."""
    return device.replace(":", "")


def flatten_nvml(readings: list[NvmlDeviceReading]) -> dict[str, float]:
    out: dict[str, float] = {}
    for r in readings:
        i = r.torch_index
        if r.lost:
            out[f"gpu{i}_lost"] = 1.0
        for key, value in (
            (f"gpu{i}_total_bytes", r.total_bytes),
            (f"gpu{i}_used_bytes", r.used_bytes),
            (f"gpu{i}_free_bytes", r.free_bytes),
            (f"gpu{i}_reserved_bytes", r.reserved_bytes),
            (f"proc_gpu{i}_bytes", r.process_bytes),
            (f"pcie{i}_rx_bytes_per_s", r.pcie_rx_bytes_per_s),
            (f"pcie{i}_tx_bytes_per_s", r.pcie_tx_bytes_per_s),
        ):
            if value is not None:
                out[key] = float(value)
    return out


def flatten_residency(name: str, r: Residency) -> dict[str, float]:
    out = {f"{name}_weights_{_dev_key(d)}_bytes": float(b) for d, b in r.bytes_by_device.items()}
    out[f"{name}_offloaded_bytes"] = float(r.offloaded_bytes)
    if r.layers_total:
        out[f"{name}_layers_count"] = float(r.layers_total)
        for place, n in r.layers_by_place.items():
            out[f"{name}_layers_{_dev_key(place)}_count"] = float(n)
    return out


class MemorySampler:
    """Samples device, torch and host memory every ``period_s`` on a daemon thread.

    ``models``: name -> nn.Module whose residency is reported (``{name}_weights_{device}_bytes``).
    ``caches``: name -> callable returning that model's current KV cache (``{name}_kv_bytes``).
    ``rollbacks``: name -> callable returning that cache's rollback keeper, whose ``held_bytes`` (state copies
    and recorded window rows it held at its last rollback) is ``{name}_rollback_bytes``.
    ``nvml``: an :class:`NvmlProbe`, a pynvml-like module (tests pass a fake), or None for pynvml.
    ``clock``: the time source (tests use a controllable one); must agree with the records' ``t_*_s``.
    """

    def __init__(
        self,
        period_s: float = 0.25,
        models: dict[str, Any] | None = None,
        caches: dict[str, Callable[[], object | None]] | None = None,
        rollbacks: dict[str, Callable[[], object | None]] | None = None,
        nvml: NvmlProbe | ModuleType | Any = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        capacity: int = 64,
        residency_period_s: float = 5.0,
        expected_devices: dict[str, str] | None = None,
    ):
        if period_s <= 0:
            raise ValueError(f"period_s must be positive, got {period_s}")
        self.period_s = period_s
        self.models = dict(models or {})
        self.caches = dict(caches or {})
        self.rollbacks = dict(rollbacks or {})
        self.nvml = nvml if isinstance(nvml, NvmlProbe) else NvmlProbe(nvml)
        self.clock = clock
        self.residency_period_s = residency_period_s
        self.expected_devices = dict(expected_devices or {})
        self._ring: deque[MemorySample] = deque(maxlen=max(2, capacity))
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._residency: dict[str, Residency] = {}
        self._residency_values: dict[str, float] = {}
        self._residency_t: float | None = None
        self.last_error = ""

    # ---- thread ------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        """Take a first sample now (so the first iteration has one), then sample on a daemon thread."""
        if self.running:
            return
        self._stop = threading.Event()
        self.sample_once()
        self._thread = threading.Thread(target=self._run, args=(self._stop,), name="specscope-memory",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (idempotent); samples stay available; ``start`` may be called again."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.period_s + 5.0)

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.period_s):
            self.sample_once()

    # ---- sampling ----------------------------------------------------------------------------------
    @property
    def nvml_reason(self) -> str:
        """Why device readings are missing ("" when NVML works)."""
        return self.nvml.reason

    def residencies(self) -> dict[str, Residency]:
        with self._lock:
            return dict(self._residency)

    def refresh_residency(self) -> None:
        """Recompute residency at the next sample (weights just moved: a drill started or ended)."""
        self._residency_t = None

    def _update_residency(self, now: float) -> dict[str, float]:
        if self._residency_t is not None and now - self._residency_t < self.residency_period_s:
            return self._residency_values
        found: dict[str, Residency] = {}
        values: dict[str, float] = {}
        for name, model in self.models.items():
            try:
                r = model_residency(model, self.expected_devices.get(name), name=name)
            except Exception as e:  # a model being swapped or released under us
                self.last_error = f"residency of {name}: {e}"
                continue
            found[name] = r
            values.update(flatten_residency(name, r))
        with self._lock:
            self._residency = found
        self._residency_values, self._residency_t = values, now
        return values

    def sample_once(self) -> MemorySample:
        """Take one sample now and append it to the ring (the thread's body; callable directly in tests)."""
        try:
            now = self.clock()
            values: dict[str, float] = {}
            readings = self.nvml.read()
            values["nvml_available"] = 1.0 if self.nvml.available else 0.0
            values.update(flatten_nvml(readings))
            values.update(torch_memory())
            values.update(host_memory())
            values.update(self._update_residency(now))
            for name, get_cache in self.caches.items():
                # the loop may be replacing the cache right now: then skip this one
                with contextlib.suppress(Exception):
                    values[f"{name}_kv_bytes"] = float(kv_cache_bytes(get_cache()))
            for name, get_rollback in self.rollbacks.items():
                held = getattr(get_rollback(), "held_bytes", None)
                if isinstance(held, int):
                    values[f"{name}_rollback_bytes"] = float(held)
            counters: dict[int, tuple[int, int, int]] = {}
            for r in readings:
                if r.pcie_rx_counter is not None and r.pcie_tx_counter is not None:
                    counters[r.torch_index] = (r.pcie_rx_counter, r.pcie_tx_counter, r.pcie_counter_modulus)
            sample = MemorySample(t_s=now, values=values, pcie_counters=counters)
        except Exception as e:  # never kill the thread: record why and keep the time line going
            self.last_error = f"{type(e).__name__}: {e}"
            sample = MemorySample(t_s=self.clock(), values={})
        with self._lock:
            previous = self._ring[-1] if self._ring else None
            if previous is not None:
                _add_rates(previous, sample)
            self._ring.append(sample)
        return sample

    # ---- lookup ------------------------------------------------------------------------------------
    def latest(self) -> MemorySample | None:
        with self._lock:
            return self._ring[-1] if self._ring else None

    def samples(self) -> list[MemorySample]:
        with self._lock:
            return list(self._ring)

    def sample_near(self, t0: float, t1: float) -> dict[str, float]:
        """The sample nearest to [t0, t1] (flat, unit-named), plus ``sample_age_ms`` (t1 - sample time, 0 for
        a sample after t1).

        With PCIe counters, ``pcie{i}_rx_bytes_per_s``/``_tx_`` are the rates over the counter window around
        the interval and ``pcie{i}_rx_bytes``/``_tx_bytes`` those rates times its length. Empty when
        nothing has been sampled yet."""
        with self._lock:
            ring = list(self._ring)
        if not ring:
            return {}
        nearest = min(reversed(ring), key=lambda s: _distance(s.t_s, t0, t1))
        out = dict(nearest.values)
        # A sample taken after the interval ended (the sampler ran between the step and this lookup) is 0 ms
        # old, not negative: every memory reading is from 0 up, and a worker's client refuses one below it
        # (a live run failed on "memory sample_age_ms = -0.133").
        out["sample_age_ms"] = max(0.0, (t1 - nearest.t_s) * 1000.0)
        out.update(_interval_bytes(ring, t0, t1))
        return out


def _distance(t: float, t0: float, t1: float) -> float:
    if t0 <= t <= t1:
        return 0.0
    return min(abs(t - t0), abs(t - t1))


def _add_rates(previous: MemorySample, current: MemorySample) -> None:
    """Rates between consecutive samples: PCIe bytes/s from counters, major faults per second."""
    dt = current.t_s - previous.t_s
    if dt <= 0:
        return
    for i, (rx, tx, mod) in current.pcie_counters.items():
        before = previous.pcie_counters.get(i)
        if before is None:
            continue
        current.values[f"pcie{i}_rx_bytes_per_s"] = counter_delta(before[0], rx, mod) / dt
        current.values[f"pcie{i}_tx_bytes_per_s"] = counter_delta(before[1], tx, mod) / dt
    f0, f1 = previous.values.get("host_major_faults"), current.values.get("host_major_faults")
    if f0 is not None and f1 is not None:
        current.values["host_major_faults_per_s"] = max(0.0, f1 - f0) / dt
    for key in ("host_read_bytes", "host_rchar_bytes"):
        b0, b1 = previous.values.get(key), current.values.get(key)
        if b0 is not None and b1 is not None:
            current.values[f"{key}_per_s"] = max(0.0, b1 - b0) / dt


def _interval_bytes(ring: list[MemorySample], t0: float, t1: float) -> dict[str, float]:
    """PCIe rate and bytes during [t0, t1] from the counter delta over the tightest pair of samples around
    the interval, pro-rated to its length (samples are ~250 ms apart, iterations often shorter)."""
    with_counters = [s for s in ring if s.pcie_counters]
    if len(with_counters) < 2 or t1 < t0:
        return {}
    before = [s for s in with_counters if s.t_s <= t0]
    after = [s for s in with_counters if s.t_s >= t1]
    a = before[-1] if before else with_counters[0]
    b = after[0] if after else with_counters[-1]
    if b is a:  # the interval lies beyond one end of the ring: use the window at that end
        i = with_counters.index(a)
        a, b = (with_counters[i], with_counters[i + 1]) if i + 1 < len(with_counters) else (
            with_counters[i - 1], with_counters[i])
    span = b.t_s - a.t_s
    if span <= 0:
        return {}
    out: dict[str, float] = {}
    for i, (rx, tx, mod) in b.pcie_counters.items():
        start = a.pcie_counters.get(i)
        if start is None:
            continue
        for direction, first, last in (("rx", start[0], rx), ("tx", start[1], tx)):
            rate = counter_delta(first, last, mod) / span
            out[f"pcie{i}_{direction}_bytes_per_s"] = rate
            out[f"pcie{i}_{direction}_bytes"] = rate * (t1 - t0)
    return out
