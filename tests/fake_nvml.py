"""A fake pynvml for tests (there is no GPU here): the calls specscope's NVML probe makes, scriptable.

``FakeNvml(devices=[FakeDevice(...)], init_error=...)`` behaves like the module: the same function and
error names, field-value structs with ``nvmlReturn``/``valueType``/``value``. Tests mutate a device between
reads (lose it, advance counters) and count calls through ``calls``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any


class NVMLError(Exception):
    pass


# Error names as pynvml spells them.
class NVMLError_LibraryNotFound(NVMLError):
    pass


class NVMLError_DriverNotLoaded(NVMLError):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


class NVMLError_FunctionNotFound(NVMLError):
    pass


class NVMLError_GpuIsLost(NVMLError):
    pass


class NVMLError_NotFound(NVMLError):
    pass


NVML_VALUE_TYPE_UNSIGNED_INT = 1
NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = 3
NVML_SUCCESS = 0
NVML_ERROR_NOT_SUPPORTED = 3


@dataclass
class FakeDevice:
    uuid: str
    total: int = 80 * 2**30
    used: int = 10 * 2**30
    reserved: int = 512 * 2**20
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # (pid, bytes)
    rx_counter: int = 0
    tx_counter: int = 0
    counter_type: int = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    throughput_rx_kb: int = 0
    throughput_tx_kb: int = 0
    unsupported: set[str] = field(default_factory=set)  # "memory_v2", "memory", "processes", "fields",
    # "field_rx" (per-field failure), "throughput"
    lost: bool = False
    mig: dict[str, FakeDevice] = field(default_factory=dict)  # MIG UUID -> its slice

    @property
    def free(self) -> int:
        return self.total - self.used - self.reserved


class FakeNvml:
    """Stands in for the ``pynvml`` module."""

    NVMLError = NVMLError
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_NotFound = NVMLError_NotFound
    NVML_FI_DEV_PCIE_COUNT_TX_BYTES = 197
    NVML_FI_DEV_PCIE_COUNT_RX_BYTES = 198
    NVML_PCIE_UTIL_TX_BYTES = 0
    NVML_PCIE_UTIL_RX_BYTES = 1
    NVML_VALUE_TYPE_UNSIGNED_INT = NVML_VALUE_TYPE_UNSIGNED_INT
    NVML_VALUE_TYPE_UNSIGNED_LONG_LONG = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    nvmlMemory_v2 = 0x02000028

    def __init__(self, devices: list[FakeDevice] | None = None, init_error: type[NVMLError] | None = None):
        self.devices = list(devices or [])
        self.init_error = init_error
        self.calls: Counter[str] = Counter()

    # ---- lifecycle -----------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls["init"] += 1
        if self.init_error is not None:
            raise self.init_error("fake: " + self.init_error.__name__)

    def nvmlShutdown(self) -> None:
        self.calls["shutdown"] += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeDevice:
        return self.devices[i]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeDevice:
        for d in self.devices:
            if d.uuid == uuid:
                return d
            if uuid in d.mig:
                return d.mig[uuid]
        raise NVMLError_NotFound("fake: no such UUID")

    def nvmlDeviceGetUUID(self, d: FakeDevice) -> bytes:
        return d.uuid.encode()  # older bindings return bytes: the probe must decode

    # ---- readings ------------------------------------------------------------------------------------
    def _check(self, d: FakeDevice, what: str) -> None:
        self.calls[what] += 1
        self.calls[d.uuid] += 1  # calls that reached this device
        if d.lost:
            raise NVMLError_GpuIsLost("fake: GPU is lost")
        if what in d.unsupported:
            raise NVMLError_NotSupported(f"fake: {what} not supported")

    def nvmlDeviceGetMemoryInfo(self, d: FakeDevice, version: int | None = None) -> Any:
        if version:
            self.calls["memory_v2"] += 1
            if "memory_v2" in d.unsupported and not d.lost:
                self.calls[d.uuid] += 1
                raise NVMLError_FunctionNotFound("fake: no v2")
            self._check(d, "memory_any")
            return SimpleNamespace(version=version, total=d.total, reserved=d.reserved, free=d.free,
                                   used=d.used)
        self._check(d, "memory")
        return SimpleNamespace(total=d.total, free=d.free + d.reserved, used=d.used)

    def nvmlDeviceGetComputeRunningProcesses(self, d: FakeDevice) -> list[Any]:
        self._check(d, "processes")
        return [SimpleNamespace(pid=pid, usedGpuMemory=b) for pid, b in d.processes]

    def nvmlDeviceGetFieldValues(self, d: FakeDevice, ids: list[int]) -> list[Any]:
        self._check(d, "fields")
        out = []
        for fid in ids:
            value = d.rx_counter if fid == self.NVML_FI_DEV_PCIE_COUNT_RX_BYTES else d.tx_counter
            failed = fid == self.NVML_FI_DEV_PCIE_COUNT_RX_BYTES and "field_rx" in d.unsupported
            if d.counter_type == NVML_VALUE_TYPE_UNSIGNED_INT:
                union = SimpleNamespace(uiVal=value % 2**32, ullVal=0)
            else:
                union = SimpleNamespace(uiVal=0, ullVal=value % 2**64)
            out.append(SimpleNamespace(fieldId=fid, nvmlReturn=NVML_ERROR_NOT_SUPPORTED if failed else 0,
                                       valueType=d.counter_type, value=union))
        return out

    def nvmlDeviceGetPcieThroughput(self, d: FakeDevice, counter: int) -> int:
        self._check(d, "throughput")
        return d.throughput_rx_kb if counter == self.NVML_PCIE_UTIL_RX_BYTES else d.throughput_tx_kb
