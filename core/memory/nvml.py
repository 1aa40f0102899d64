"""NVML probe: device memory, this process's memory and PCIe traffic, keyed by torch's CUDA index.

Everything here degrades instead of failing: no ``pynvml``, no driver or no GPU puts the probe in an
*unavailable* state with a one-line reason; an error on one call (NotSupported, FunctionNotFound, a lost
GPU) only blanks that field (``None``). The NVML module is injectable so tests can pass a fake one.

NVML is a process-wide library: the process holds one :class:`NvmlContext` (``process_context()``), started
on first use and shut down at interpreter exit, as nvitop does, however many sessions and probes come and go.
A probe only enumerates devices through it; "unavailable" is a state the context reaches once.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from specscope.core.units import KIB

T = TypeVar("T")


@dataclass
class NvmlDeviceReading:
    """One device at one moment. ``None`` means the driver could not say (unsupported, lost, error)."""

    torch_index: int
    uuid: str
    total_bytes: int | None = None
    used_bytes: int | None = None
    free_bytes: int | None = None
    reserved_bytes: int | None = None  # driver/firmware reserve (v2 memory struct only)
    process_bytes: int | None = None  # this process's memory on the device
    pcie_rx_counter: int | None = None  # cumulative bytes received by the GPU (host -> device)
    pcie_tx_counter: int | None = None
    pcie_counter_modulus: int = 2**64  # the counters wrap at this value
    pcie_rx_bytes_per_s: float | None = None  # throughput fallback when the counters are not supported
    pcie_tx_bytes_per_s: float | None = None
    lost: bool = False
    errors: list[str] = field(default_factory=list)


def counter_delta(previous: int, current: int, modulus: int = 2**64) -> int:
    """Bytes between two readings of a cumulative counter that wraps at ``modulus``."""
    if current >= previous:
        return current - previous
    return current + modulus - previous


def _strip_uuid(text: str) -> str:
    """Compare UUIDs without the ``GPU-``/``MIG-`` prefix or case (torch reports them bare)."""
    t = text.strip().lower()
    for prefix in ("gpu-", "mig-"):
        if t.startswith(prefix):
            return t[len(prefix) :]
    return t


def visible_device_uuids(cuda_visible_devices: str | None, nvml_uuids: list[str]) -> list[str]:
    """NVML device UUIDs in torch's CUDA index order, following ``CUDA_VISIBLE_DEVICES``.

    Entries are NVML indices, GPU UUIDs (or unique prefixes) or MIG UUIDs. Like CUDA, enumeration stops at
    the first entry that names no device. MIG UUIDs are returned as given (NVML resolves them by UUID).
    """
    if cuda_visible_devices is None:
        return list(nvml_uuids)
    result: list[str] = []
    for raw in cuda_visible_devices.split(","):
        entry = raw.strip()
        if not entry:
            break
        if entry.lstrip("-").isdigit():
            i = int(entry)
            if i < 0 or i >= len(nvml_uuids):
                break
            result.append(nvml_uuids[i])
        elif entry.upper().startswith("MIG-"):
            result.append(entry)
        else:
            wanted = _strip_uuid(entry)
            matches = [u for u in nvml_uuids if _strip_uuid(u).startswith(wanted)]
            if len(matches) != 1:
                break
            result.append(matches[0])
    return result


def _decode(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlContext:
    """One NVML session: ``nvmlInit`` on first use, ``nvmlShutdown`` at exit; thread-safe.

    ``module()`` is the started module, or None when NVML is unavailable (``reason`` says why, decided once).
    The shutdown is registered with ``register_exit`` (``atexit.register``) when NVML first starts; a use
    after ``shutdown`` starts it again, as nvitop's ``libnvml`` does.
    """

    def __init__(self, module: Any = None, register_exit: Callable[[Callable[[], None]], object] | None = None):
        """``module``: a pynvml-like module (default: import pynvml on first use); ``register_exit``: where the
        shutdown is registered (default ``atexit.register``; tests keep it to run it themselves)."""
        self._module = module
        self._register_exit = register_exit or atexit.register
        self._lock = threading.Lock()
        self._tried = False
        self._started = False
        self._exit_registered = False
        self._reason = ""

    def module(self) -> Any | None:
        """The started NVML module, or None when NVML is unavailable."""
        with self._lock:
            if not self._tried:
                self._tried = True
                try:
                    self._reason = self._start()
                except Exception as e:  # a broken binding must not take the profiler down
                    self._reason = f"NVML failed to start: {type(e).__name__}: {e}"
            return None if self._reason else self._module

    @property
    def reason(self) -> str:
        """Why NVML is unavailable ("" when it started)."""
        self.module()
        return self._reason

    def _start(self) -> str:
        if self._module is None:
            try:
                import pynvml  # type: ignore[import-untyped]
            except ImportError:
                return "nvidia-ml-py (pynvml) is not installed"
            self._module = pynvml
        m = self._module
        try:
            m.nvmlInit()
        except m.NVMLError as e:
            if isinstance(e, getattr(m, "NVMLError_LibraryNotFound", ())):
                return "NVML library not found (no NVIDIA driver installed)"
            if isinstance(e, getattr(m, "NVMLError_DriverNotLoaded", ())):
                return "NVIDIA driver is not loaded"
            return f"NVML could not start: {e}"
        self._started = True
        if not self._exit_registered:
            self._exit_registered = True
            self._register_exit(self.shutdown)
        return ""

    def shutdown(self) -> None:
        """``nvmlShutdown`` if NVML was started (idempotent); the next use starts it again."""
        with self._lock:
            if self._started:
                with contextlib.suppress(Exception):
                    self._module.nvmlShutdown()
            self._started = False
            self._tried = False
            self._reason = ""


_process_context: NvmlContext | None = None
_process_lock = threading.Lock()


def process_context() -> NvmlContext:
    """The process's NVML context over pynvml, made on first call (nothing is started until it is used)."""
    global _process_context
    with _process_lock:
        if _process_context is None:
            _process_context = NvmlContext()
        return _process_context


class NvmlProbe:
    """Thread-safe reader of the visible devices. ``available`` is False, with ``reason``, if unusable."""

    def __init__(self, module: Any = None, cuda_visible_devices: str | bool | None = True):
        """``module``: None for the process's NVML context, an :class:`NvmlContext`, or a pynvml-like module
        (tests pass a fake one; it gets a context of its own).

        ``cuda_visible_devices``: True reads the environment variable; a string or None overrides it.
        """
        if module is None:
            self._context = process_context()
        elif isinstance(module, NvmlContext):
            self._context = module
        else:
            self._context = NvmlContext(module)
        self._module: Any = None
        self._env = cuda_visible_devices
        self._lock = threading.Lock()
        self._enumerated = False
        self._reason = ""
        self._handles: list[tuple[str, Any]] = []  # (uuid, handle) in torch index order
        self._lost: set[int] = set()
        self._no_counters: set[int] = set()
        self._no_v2: set[int] = set()

    # ---- state -----------------------------------------------------------------------------------------
    @property
    def available(self) -> bool:
        self._ensure()
        return not self._reason

    @property
    def reason(self) -> str:
        """Why NVML is unavailable ("" when it is)."""
        self._ensure()
        return self._reason

    @property
    def device_count(self) -> int:
        self._ensure()
        return len(self._handles)

    def uuids(self) -> list[str]:
        self._ensure()
        return [u for u, _ in self._handles]

    def _ensure(self) -> None:
        with self._lock:
            if self._enumerated:
                return
            self._enumerated = True
            try:
                self._reason = self._find_devices()
            except Exception as e:  # a broken binding must not take the profiler down
                self._reason = f"NVML failed to start: {type(e).__name__}: {e}"

    def _find_devices(self) -> str:
        """Find this process's devices through the context; the reason NVML is unusable, or ""."""
        m = self._context.module()
        if m is None:
            return self._context.reason
        self._module = m
        try:
            count = int(m.nvmlDeviceGetCount())
        except m.NVMLError as e:
            return f"NVML could not count devices: {e}"
        if count == 0:
            return "no NVIDIA GPU found"
        by_uuid: dict[str, Any] = {}
        nvml_uuids: list[str] = []
        for i in range(count):
            try:
                handle = m.nvmlDeviceGetHandleByIndex(i)
                uuid = _decode(m.nvmlDeviceGetUUID(handle))
            except m.NVMLError:
                uuid, handle = f"unreadable-{i}", None
            nvml_uuids.append(uuid)
            by_uuid[uuid] = handle
        env = os.environ.get("CUDA_VISIBLE_DEVICES") if self._env is True else self._env
        order = _torch_uuid_order(nvml_uuids) or visible_device_uuids(env if isinstance(env, str) else None,
                                                                      nvml_uuids)
        for uuid in order:
            handle = by_uuid.get(uuid)
            if handle is None:
                try:
                    handle = m.nvmlDeviceGetHandleByUUID(uuid)
                except m.NVMLError:
                    continue
            self._handles.append((uuid, handle))
        if not self._handles:
            return "no NVIDIA GPU visible to this process (CUDA_VISIBLE_DEVICES)"
        return ""

    # ---- reading ---------------------------------------------------------------------------------------
    def read(self) -> list[NvmlDeviceReading]:
        """One reading per visible device (empty when unavailable). Never raises."""
        if not self.available:
            return []
        with self._lock:  # NVML is thread-safe, but our lost/counter bookkeeping is not
            return [self._read_device(i, uuid, handle) for i, (uuid, handle) in enumerate(self._handles)]

    def _call(self, reading: NvmlDeviceReading, what: str, fn: Callable[[], T]) -> T | None:
        m = self._module
        try:
            return fn()
        except m.NVMLError as e:
            if isinstance(e, getattr(m, "NVMLError_GpuIsLost", ())):
                reading.lost = True
                self._lost.add(reading.torch_index)
            reading.errors.append(f"{what}: {e}")
            return None

    def _read_device(self, index: int, uuid: str, handle: Any) -> NvmlDeviceReading:
        m = self._module
        r = NvmlDeviceReading(torch_index=index, uuid=uuid)
        if index in self._lost:
            r.lost = True
            return r
        mem: Any = None
        if hasattr(m, "nvmlMemory_v2") and index not in self._no_v2:
            v2 = m.nvmlMemory_v2
            mem = self._call(r, "memory_v2", lambda: m.nvmlDeviceGetMemoryInfo(handle, version=v2))
            if r.lost:
                return r
            if mem is None:
                self._no_v2.add(index)  # old driver or unsupported: use the v1 struct from now on
        if mem is None:
            mem = self._call(r, "memory", lambda: m.nvmlDeviceGetMemoryInfo(handle))
        if mem is not None:
            r.total_bytes, r.used_bytes, r.free_bytes = int(mem.total), int(mem.used), int(mem.free)
            reserved = getattr(mem, "reserved", None)
            r.reserved_bytes = int(reserved) if reserved is not None else None
        if r.lost:
            return r
        procs = self._call(r, "processes", lambda: m.nvmlDeviceGetComputeRunningProcesses(handle))
        if procs is not None:
            pid = os.getpid()
            mine = [p for p in procs if int(p.pid) == pid]
            used = [p.usedGpuMemory for p in mine if getattr(p, "usedGpuMemory", None) is not None]
            r.process_bytes = int(sum(used)) if used else (0 if not mine else None)
        if r.lost:
            return r
        self._read_pcie(r, handle)
        return r

    def _read_pcie(self, r: NvmlDeviceReading, handle: Any) -> None:
        m = self._module
        if r.torch_index not in self._no_counters:
            ids = [m.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, m.NVML_FI_DEV_PCIE_COUNT_TX_BYTES]
            values = self._call(r, "pcie counters", lambda: m.nvmlDeviceGetFieldValues(handle, ids))
            if r.lost:
                return
            parsed = [_field_value(m, v) for v in values] if values is not None else [None, None]
            if parsed[0] is not None and parsed[1] is not None:
                (r.pcie_rx_counter, mod), (r.pcie_tx_counter, _) = parsed[0], parsed[1]
                r.pcie_counter_modulus = mod
                return
            self._no_counters.add(r.torch_index)  # unsupported here: don't ask every sample
        throughput = m.nvmlDeviceGetPcieThroughput
        rx = self._call(r, "pcie rx", lambda: throughput(handle, m.NVML_PCIE_UTIL_RX_BYTES))
        tx = self._call(r, "pcie tx", lambda: throughput(handle, m.NVML_PCIE_UTIL_TX_BYTES))
        # nvmlDeviceGetPcieThroughput reports KB/s, and NVML's KB is 1024 bytes
        r.pcie_rx_bytes_per_s = float(rx) * KIB if rx is not None else None
        r.pcie_tx_bytes_per_s = float(tx) * KIB if tx is not None else None


def _field_value(m: Any, v: Any) -> tuple[int, int] | None:
    """(value, wrap modulus) of one nvmlFieldValue_t, or None when that field failed."""
    if int(getattr(v, "nvmlReturn", 0)) != 0:
        return None
    vt = int(v.valueType)
    width_by_type = {
        getattr(m, "NVML_VALUE_TYPE_UNSIGNED_INT", 1): ("uiVal", 32),
        getattr(m, "NVML_VALUE_TYPE_UNSIGNED_LONG", 2): ("ulVal", 64),
        getattr(m, "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", 3): ("ullVal", 64),
        getattr(m, "NVML_VALUE_TYPE_SIGNED_LONG_LONG", 4): ("sllVal", 63),
        getattr(m, "NVML_VALUE_TYPE_SIGNED_INT", 5): ("siVal", 31),
        getattr(m, "NVML_VALUE_TYPE_UNSIGNED_SHORT", 6): ("usVal", 16),
    }
    attr, bits = width_by_type.get(vt, ("ullVal", 64))
    return int(getattr(v.value, attr)), 2**bits


def _torch_uuid_order(nvml_uuids: list[str]) -> list[str]:
    """NVML UUIDs in torch index order, from torch itself when CUDA is already initialised (never init it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    try:
        if not torch.cuda.is_initialized():
            return []
        order: list[str] = []
        for i in range(torch.cuda.device_count()):
            bare = _strip_uuid(str(torch.cuda.get_device_properties(i).uuid))
            match = [u for u in nvml_uuids if _strip_uuid(u) == bare]
            if len(match) != 1:
                return []  # MIG or an unknown form: fall back to CUDA_VISIBLE_DEVICES
            order.append(match[0])
        return order
    except Exception:
        return []
