"""The NVML probe on a fake NVML: unavailable states, per-field failures, a lost GPU, counters, mapping, and the
process's one NVML context (started once, shut down at exit)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable

import pytest

from specscope.core.memory import nvml
from specscope.core.memory.nvml import NvmlContext, NvmlProbe, counter_delta, visible_device_uuids
from tests.fake_nvml import (
    NVML_VALUE_TYPE_UNSIGNED_INT,
    FakeDevice,
    FakeNvml,
    NVMLError_DriverNotLoaded,
    NVMLError_LibraryNotFound,
)

GIB = 2**30
UUIDS = ["GPU-aaaa1111-0000-0000-0000-000000000000", "GPU-bbbb2222-0000-0000-0000-000000000000"]


def two_gpus() -> FakeNvml:
    me = os.getpid()
    return FakeNvml([
        FakeDevice(UUIDS[0], total=80 * GIB, used=30 * GIB, processes=[(me, 6 * GIB), (me + 1, 20 * GIB)],
                   rx_counter=1_000, tx_counter=500),
        FakeDevice(UUIDS[1], total=40 * GIB, used=1 * GIB, processes=[(me + 7, GIB)]),
    ])


@pytest.fixture(autouse=True)
def fresh_process_context(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test starts before the process's NVML context exists (it is made on first use)."""
    monkeypatch.setattr(nvml, "_process_context", None)


class ExitHooks:
    """Stands in for ``atexit.register``: keeps what would run at interpreter exit, runs it on ``exit()``."""

    def __init__(self) -> None:
        self.registered: list[Callable[[], None]] = []

    def __call__(self, fn: Callable[[], None]) -> None:
        self.registered.append(fn)

    def exit(self) -> None:
        for fn in reversed(self.registered):  # atexit runs last-registered first
            fn()


def fake_as_pynvml(monkeypatch: pytest.MonkeyPatch, fake: FakeNvml) -> ExitHooks:
    """The fake answers ``import pynvml``, and the process context's exit hook is kept for the test."""
    hooks = ExitHooks()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(nvml, "_process_context", NvmlContext(register_exit=hooks))
    return hooks


# ---- unavailable ---------------------------------------------------------------------------------------
def test_missing_binding_is_unavailable_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    probe = NvmlProbe()
    assert not probe.available
    assert "not installed" in probe.reason
    assert probe.read() == []


@pytest.mark.parametrize("error, words", [
    (NVMLError_LibraryNotFound, "library not found"),
    (NVMLError_DriverNotLoaded, "driver is not loaded"),
])
def test_init_errors_are_unavailable_with_a_reason(error: type, words: str) -> None:
    probe = NvmlProbe(FakeNvml([FakeDevice(UUIDS[0])], init_error=error))
    assert not probe.available
    assert words in probe.reason
    assert probe.read() == []


def test_zero_devices() -> None:
    probe = NvmlProbe(FakeNvml([]))
    assert not probe.available and probe.reason == "no NVIDIA GPU found"


def test_real_binding_here_reports_why_it_is_unavailable() -> None:
    probe = NvmlProbe()
    if probe.available:
        pytest.skip("a GPU is present on this machine")
    assert probe.reason and probe.read() == []


def test_initialises_once_under_concurrent_first_use() -> None:
    fake = two_gpus()
    probe = NvmlProbe(fake, cuda_visible_devices=None)
    barrier = threading.Barrier(8)

    def use() -> None:
        barrier.wait()
        assert probe.available

    threads = [threading.Thread(target=use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert fake.calls["init"] == 1


# ---- readings ------------------------------------------------------------------------------------------
def test_normal_readings_per_device() -> None:
    probe = NvmlProbe(two_gpus(), cuda_visible_devices=None)
    r0, r1 = probe.read()
    assert (r0.torch_index, r0.uuid) == (0, UUIDS[0])  # bytes UUIDs are decoded
    assert r0.total_bytes == 80 * GIB and r0.used_bytes == 30 * GIB
    assert r0.reserved_bytes == 512 * 2**20
    assert r0.free_bytes == 80 * GIB - 30 * GIB - 512 * 2**20
    assert r0.process_bytes == 6 * GIB  # only this process, not the other one on the GPU
    assert r1.process_bytes == 0  # nothing of ours on device 1
    assert (r0.pcie_rx_counter, r0.pcie_tx_counter, r0.pcie_counter_modulus) == (1_000, 500, 2**64)
    assert r0.pcie_rx_bytes_per_s is None  # counters preferred over the throughput sample
    assert not r0.lost and r0.errors == []


def test_not_supported_fields_are_none_and_the_rest_still_read() -> None:
    fake = FakeNvml([FakeDevice(UUIDS[0], processes=[(os.getpid(), GIB)])])
    d = fake.devices[0]
    d.unsupported = {"memory_v2", "processes", "fields"}
    d.throughput_rx_kb, d.throughput_tx_kb = 3_000_000, 1_000
    probe = NvmlProbe(fake, cuda_visible_devices=None)
    r0 = probe.read()[0]
    assert r0.total_bytes == 80 * GIB  # v1 struct after the v2 call was not found
    assert r0.reserved_bytes is None
    assert r0.process_bytes is None
    assert r0.pcie_rx_counter is None
    assert r0.pcie_rx_bytes_per_s == 3_000_000 * 1024  # throughput fallback, KB/s -> B/s
    assert r0.pcie_tx_bytes_per_s == 1_000 * 1024
    assert len(r0.errors) == 3
    probe.read()
    assert fake.calls["fields"] == 1  # unsupported counters and v2 struct are not asked for again
    assert fake.calls["memory_v2"] == 1


def test_one_failed_counter_field_falls_back_to_throughput() -> None:
    fake = two_gpus()
    fake.devices[0].unsupported = {"field_rx"}
    fake.devices[0].throughput_rx_kb = 10
    r0 = NvmlProbe(fake, cuda_visible_devices=None).read()[0]
    assert r0.pcie_rx_counter is None and r0.pcie_rx_bytes_per_s == 10 * 1024


def test_everything_unsupported_gives_an_empty_reading_not_an_error() -> None:
    fake = FakeNvml([FakeDevice(UUIDS[0], unsupported={"memory_v2", "memory_any", "memory", "processes",
                                                       "fields", "throughput"})])
    r0 = NvmlProbe(fake, cuda_visible_devices=None).read()[0]
    assert r0.total_bytes is None and r0.free_bytes is None and r0.process_bytes is None
    assert r0.pcie_rx_bytes_per_s is None and not r0.lost


def test_gpu_lost_mid_run() -> None:
    fake = two_gpus()
    probe = NvmlProbe(fake, cuda_visible_devices=None)
    assert probe.read()[0].total_bytes is not None
    fake.devices[0].lost = True
    r0, r1 = probe.read()
    assert r0.lost and r0.total_bytes is None and r0.process_bytes is None
    assert not r1.lost and r1.total_bytes == 40 * GIB  # the other GPU still reads
    calls_to_lost = fake.calls[UUIDS[0]]
    r0_again, r1_again = probe.read()
    assert r0_again.lost and not r1_again.lost
    assert fake.calls[UUIDS[0]] == calls_to_lost  # a lost GPU is not asked again


# ---- counters ------------------------------------------------------------------------------------------
def test_counter_delta_wraps() -> None:
    assert counter_delta(100, 350) == 250
    assert counter_delta(2**32 - 100, 50, 2**32) == 150
    assert counter_delta(2**64 - 1, 0) == 1


def test_32_bit_counters_report_their_modulus() -> None:
    fake = FakeNvml([FakeDevice(UUIDS[0], rx_counter=2**32 + 7, counter_type=NVML_VALUE_TYPE_UNSIGNED_INT)])
    r0 = NvmlProbe(fake, cuda_visible_devices=None).read()[0]
    assert r0.pcie_rx_counter == 7 and r0.pcie_counter_modulus == 2**32


# ---- torch index -> NVML device ------------------------------------------------------------------------
def test_visible_devices_mapping() -> None:
    assert visible_device_uuids(None, UUIDS) == UUIDS
    assert visible_device_uuids("1,0", UUIDS) == [UUIDS[1], UUIDS[0]]
    assert visible_device_uuids("GPU-bbbb", UUIDS) == [UUIDS[1]]  # a unique prefix
    assert visible_device_uuids("0,7,1", UUIDS) == [UUIDS[0]]  # CUDA stops at the first invalid entry
    assert visible_device_uuids("", UUIDS) == []
    assert visible_device_uuids("-1", UUIDS) == []
    mig = "MIG-11111111-2222-3333-4444-555555555555"
    assert visible_device_uuids(mig, UUIDS) == [mig]


def test_probe_follows_cuda_visible_devices() -> None:
    fake = two_gpus()
    readings = NvmlProbe(fake, cuda_visible_devices="1").read()
    assert [(r.torch_index, r.uuid, r.total_bytes) for r in readings] == [(0, UUIDS[1], 40 * GIB)]


def test_probe_reads_environment_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert NvmlProbe(two_gpus()).uuids() == [UUIDS[1], UUIDS[0]]


def test_mig_device_resolved_by_uuid() -> None:
    mig_uuid = "MIG-11111111-2222-3333-4444-555555555555"
    slice_ = FakeDevice(mig_uuid, total=10 * GIB, used=GIB)
    fake = FakeNvml([FakeDevice(UUIDS[0], mig={mig_uuid: slice_})])
    (r,) = NvmlProbe(fake, cuda_visible_devices=mig_uuid).read()
    assert r.uuid == mig_uuid and r.total_bytes == 10 * GIB


def test_nothing_visible_is_unavailable() -> None:
    probe = NvmlProbe(two_gpus(), cuda_visible_devices="")
    assert not probe.available and "CUDA_VISIBLE_DEVICES" in probe.reason


# ---- one NVML context per process ---------------------------------------------------------------------
def test_many_probes_share_one_init_and_one_shutdown_at_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = two_gpus()
    hooks = fake_as_pynvml(monkeypatch, fake)
    probes = [NvmlProbe(cuda_visible_devices=None) for _ in range(5)]
    assert all(len(p.read()) == 2 for p in probes)
    assert fake.calls["init"] == 1 and fake.calls["shutdown"] == 0  # nothing shut down while the process runs
    assert len(hooks.registered) == 1
    hooks.exit()
    assert fake.calls["shutdown"] == 1
    hooks.exit()  # a second shutdown (e.g. called by hand first) does nothing
    assert fake.calls["shutdown"] == 1


def test_many_sessions_start_nvml_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each session's memory sampler reads NVML; the process starts it once and shuts it down at exit."""
    import torch

    from specscope.core.controls import Controls
    from specscope.core.engine.drafters.lookup import PromptLookupDrafter
    from specscope.core.engine.pair import LoadedModel, ModelPair
    from specscope.core.records import ControlValues
    from specscope.core.session import Session, SessionOptions
    from tests.models import tiny_model, word_tokenizer

    fake = two_gpus()
    hooks = fake_as_pynvml(monkeypatch, fake)
    model = tiny_model(3)
    cpu = torch.device("cpu")
    for _ in range(3):
        pair = ModelPair(target=LoadedModel(model, "tiny", cpu, torch.float32), tokenizer=word_tokenizer(),
                         drafter=PromptLookupDrafter(), drafter_kind="lookup", vocab_size=64)
        session = Session(pair, Controls(ControlValues(k=2)), SessionOptions(max_new_tokens=4, baseline_every=0))
        session.run([3, 4, 5, 3, 4])
        assert session.sampler is not None and session.sampler.nvml.available
    assert fake.calls["init"] == 1 and fake.calls["shutdown"] == 0
    hooks.exit()
    assert fake.calls["shutdown"] == 1


def test_unavailable_is_a_state_decided_once(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([FakeDevice(UUIDS[0])], init_error=NVMLError_DriverNotLoaded)
    hooks = fake_as_pynvml(monkeypatch, fake)
    probes = [NvmlProbe() for _ in range(4)]
    assert all(not p.available and "driver is not loaded" in p.reason and p.read() == [] for p in probes)
    assert fake.calls["init"] == 1
    assert hooks.registered == []  # never started: nothing to shut down
    hooks.exit()
    assert fake.calls["shutdown"] == 0


def test_a_use_after_shutdown_starts_nvml_again() -> None:
    fake = two_gpus()
    hooks = ExitHooks()
    context = NvmlContext(fake, register_exit=hooks)
    assert len(NvmlProbe(context, cuda_visible_devices=None).read()) == 2
    context.shutdown()
    assert fake.calls["shutdown"] == 1
    assert len(NvmlProbe(context, cuda_visible_devices=None).read()) == 2
    assert fake.calls["init"] == 2 and len(hooks.registered) == 1  # the exit hook is registered once
    hooks.exit()
    assert fake.calls["shutdown"] == 2


def test_the_shutdown_is_registered_with_atexit(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = two_gpus()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    registered: list[Callable[[], None]] = []
    monkeypatch.setattr(nvml.atexit, "register", registered.append)
    assert NvmlProbe(cuda_visible_devices=None).available
    assert registered == [nvml.process_context().shutdown]
