"""MemorySampler on CPU with a fake NVML and a controllable clock: keys, nearest sample, rates, start/stop."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import DynamicCache

from specscope.core.memory.sampler import MemorySampler
from tests.fake_nvml import NVML_VALUE_TYPE_UNSIGNED_INT, FakeDevice, FakeNvml
from tests.models import tiny_model

GIB = 2**30


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def gpu(**kw: object) -> FakeNvml:
    return FakeNvml([FakeDevice("GPU-aaaa", total=80 * GIB, used=20 * GIB, processes=[(os.getpid(), 3 * GIB)],
                                **kw)])  # type: ignore[arg-type]


def sampler_with(fake: FakeNvml, clock: Clock, **kw: object) -> MemorySampler:
    return MemorySampler(period_s=0.25, nvml=fake, clock=clock, **kw)  # type: ignore[arg-type]


def test_sample_near_picks_the_nearest_and_flattens_with_units() -> None:
    clock, fake = Clock(), gpu()
    model = tiny_model(0)
    cache = DynamicCache(config=model.config)
    with torch.no_grad():
        model(torch.tensor([[1, 2, 3]]), cache=cache, use_cache=True)
    s = sampler_with(fake, clock, models={"target": model}, caches={"draft": lambda: cache})
    assert s.sample_near(0.0, 1.0) == {}  # nothing sampled yet
    for t in (100.0, 100.25, 100.5):
        clock.t = t
        fake.devices[0].used = int(t * 1000)  # tag each sample
        s.sample_once()
    near = s.sample_near(100.27, 100.30)
    assert near["gpu0_used_bytes"] == 100250  # the sample at 100.25 (0.02 s before the interval)
    assert near["sample_age_ms"] == pytest.approx(50.0)
    inside = s.sample_near(100.4, 100.6)
    assert inside["gpu0_used_bytes"] == 100500 and inside["sample_age_ms"] == pytest.approx(100.0)
    after = s.sample_near(100.4, 100.4999)  # the nearest sample came just after the step ended
    assert after["gpu0_used_bytes"] == 100500 and after["sample_age_ms"] == 0.0  # never a negative reading
    for key in ("gpu0_total_bytes", "gpu0_free_bytes", "gpu0_reserved_bytes", "proc_gpu0_bytes",
                "host_rss_bytes", "host_available_bytes", "swap_used_bytes", "host_major_faults",
                "target_weights_cpu_bytes", "target_offloaded_bytes", "draft_kv_bytes", "nvml_available"):
        assert key in near, key
    assert near["proc_gpu0_bytes"] == 3 * GIB
    assert near["nvml_available"] == 1.0
    assert near["draft_kv_bytes"] > 0
    assert near["target_weights_cpu_bytes"] == sum(p.numel() * 4 for p in model.parameters()) + sum(
        b.numel() * b.element_size() for b in model.buffers())


def test_pcie_rates_and_interval_bytes_from_counters() -> None:
    clock, fake = Clock(), gpu()
    s = sampler_with(fake, clock)
    dev = fake.devices[0]
    for t, rx in ((100.0, 0), (100.5, 5_000_000_000), (101.0, 6_000_000_000)):
        clock.t, dev.rx_counter, dev.tx_counter = t, rx, rx // 10
        s.sample_once()
    latest = s.latest()
    assert latest is not None
    assert latest.values["pcie0_rx_bytes_per_s"] == pytest.approx(2e9)  # 1 GB in 0.5 s
    near = s.sample_near(100.1, 100.2)  # inside the first window: 10 GB/s for 0.1 s
    assert near["pcie0_rx_bytes_per_s"] == pytest.approx(10e9)
    assert near["pcie0_rx_bytes"] == pytest.approx(1e9)
    assert near["pcie0_tx_bytes"] == pytest.approx(1e8)


def test_wrapping_32_bit_counters_give_the_right_rate() -> None:
    clock, fake = Clock(), gpu(counter_type=NVML_VALUE_TYPE_UNSIGNED_INT)
    s = sampler_with(fake, clock)
    fake.devices[0].rx_counter = 2**32 - 1000
    s.sample_once()
    clock.t += 1.0
    fake.devices[0].rx_counter = 2**32 + 3000  # reads back as 3000: wrapped
    s.sample_once()
    assert s.sample_near(clock.t, clock.t)["pcie0_rx_bytes_per_s"] == pytest.approx(4000)


def test_throughput_fallback_when_counters_unsupported() -> None:
    clock, fake = Clock(), gpu(unsupported={"fields"}, throughput_rx_kb=2000)
    s = sampler_with(fake, clock)
    s.sample_once()
    near = s.sample_near(clock.t, clock.t)
    assert near["pcie0_rx_bytes_per_s"] == 2000 * 1024
    assert "pcie0_rx_bytes" not in near


def test_unavailable_nvml_still_samples_host_memory() -> None:
    clock = Clock()
    s = sampler_with(FakeNvml([]), clock)
    s.sample_once()
    near = s.sample_near(clock.t, clock.t)
    assert near["nvml_available"] == 0.0
    assert not any(k.startswith(("gpu", "pcie", "proc_gpu")) for k in near)
    assert near["host_rss_bytes"] > 0
    assert s.nvml_reason == "no NVIDIA GPU found"


def test_lost_gpu_is_marked_and_sampling_goes_on() -> None:
    clock, fake = Clock(), gpu()
    s = sampler_with(fake, clock)
    s.sample_once()
    fake.devices[0].lost = True
    clock.t += 0.25
    s.sample_once()
    near = s.sample_near(clock.t, clock.t)
    assert near["gpu0_lost"] == 1.0 and "gpu0_free_bytes" not in near


def test_residency_is_recomputed_every_few_seconds_not_every_sample() -> None:
    clock, model = Clock(), tiny_model(0)
    s = sampler_with(gpu(), clock, models={"draft": model}, residency_period_s=5.0)
    s.sample_once()
    head = model.lm_head.weight.numel() * 4
    model.lm_head.to("meta")
    clock.t += 1.0
    assert "draft_weights_meta_bytes" not in s.sample_once().values  # cached residency
    clock.t += 5.0
    assert s.sample_once().values["draft_weights_meta_bytes"] == head
    assert "draft" in s.residencies()


def test_a_failing_cache_callable_skips_only_its_key() -> None:
    clock = Clock()

    def broken() -> object:
        raise RuntimeError("cache being replaced")

    s = sampler_with(gpu(), clock, caches={"draft": broken, "target": lambda: None})
    values = s.sample_once().values
    assert "draft_kv_bytes" not in values and values["target_kv_bytes"] == 0.0


def test_start_stop_restart() -> None:
    s = MemorySampler(period_s=60.0, nvml=gpu())  # long period: the thread only waits for stop
    s.start()
    assert s.running and s.latest() is not None  # first sample taken synchronously
    s.start()  # already running: no second thread
    s.stop()
    assert not s.running
    s.stop()  # idempotent
    n = len(s.samples())
    s.start()
    assert s.running and len(s.samples()) == n + 1
    s.stop()
    assert not s.running


def test_bad_period_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="period_s"):
        MemorySampler(period_s=0)


def test_what_rollback_holds_is_a_series_of_its_own() -> None:
    """A sliding-window cache records rows for rollback during a pass: the residency plot shows them."""
    from specscope.core.engine.rollback import CacheRollback
    from tests.families import FAMILIES, family_model

    model = family_model(FAMILIES["Mistral"], seed=2)
    cache = DynamicCache(config=model.config)
    rollback = CacheRollback(cache)
    with torch.inference_mode():
        model(torch.arange(3, 15)[None], cache=cache, use_cache=True)
        rollback.mark(12)
        model(torch.arange(15, 20)[None], cache=cache, use_cache=True)
    rollback.crop_to(14)
    s = sampler_with(gpu(), Clock(), caches={"target": lambda: cache}, rollbacks={"target": lambda: rollback,
                                                                                  "draft": lambda: None})
    values = s.sample_once().values
    assert values["target_rollback_bytes"] == rollback.held_bytes > 0
    assert "draft_rollback_bytes" not in values
