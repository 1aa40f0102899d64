"""The paging detector on constructed traces: slow patches with and without memory evidence, noise."""

from __future__ import annotations

import random

import pytest

from specscope.core.memory.detector import PagingDetector, flag_trace
from specscope.core.records import ControlValues, IterationRecord
from specscope.core.units import GIB, MIB

GPU_OK = {"gpu0_total_bytes": 80e9, "gpu0_free_bytes": 30e9, "gpu0_used_bytes": 50e9,
          "pcie0_rx_bytes_per_s": 2e6, "host_major_faults_per_s": 0.0,
          "draft_weights_cuda0_bytes": 1e9, "target_weights_cuda0_bytes": 6e9}


def record(i: int, draft_ms: float, verify_ms: float, k: int = 4, memory: dict[str, float] | None = None,
           mode: str = "speculative") -> IterationRecord:
    n_drafted = k if mode == "speculative" else 0
    return IterationRecord(
        iteration=i, mode=mode, drafter="model" if mode == "speculative" else "none",
        controls=ControlValues(k=k), tokens=[], n_drafted=n_drafted, n_accepted=0, n_emitted=1,
        draft_ms=draft_ms * n_drafted, verify_ms=verify_ms, rollback_ms=0.1,
        iteration_ms=draft_ms * n_drafted + verify_ms, context_len=100 + i, generated_len=i,
        t_start_s=float(i), t_end_s=float(i) + 0.01, memory=dict(GPU_OK if memory is None else memory),
    )


def normal_trace(n: int, rng: random.Random, start: int = 0) -> list[IterationRecord]:
    """±30% noise around 3.1 ms per draft step and a GPU-like verify (nearly flat in pass length)."""
    out = []
    for i in range(start, start + n):
        k = rng.randint(1, 8)
        out.append(record(i, 3.1 * rng.uniform(0.7, 1.3), (20 + 0.5 * k) * rng.uniform(0.7, 1.3), k=k))
    return out


def test_noise_is_never_flagged() -> None:
    rng = random.Random(0)
    det = PagingDetector()
    for r in normal_trace(500, rng):
        assert det.observe(r) == [], r.iteration


def test_cpu_like_linear_verify_over_changing_k_is_not_flagged() -> None:
    det = PagingDetector()
    ks = [1] * 20 + [8] * 10 + [1, 8] * 10  # long passes after a baseline of short ones
    for i, k in enumerate(ks):
        assert det.observe(record(i, 3.0, 5.0 * (k + 1), k=k)) == []


def test_slow_draft_patch_with_memory_evidence() -> None:
    rng = random.Random(1)
    det = PagingDetector()
    trace = normal_trace(30, rng)
    for r in trace:
        assert det.observe(r) == []
    paging = dict(GPU_OK, draft_weights_cpu_bytes=412 * MIB, draft_offloaded_bytes=412 * MIB,
                  pcie0_rx_bytes_per_s=11.3 * GIB)
    patch = [record(30 + j, 44.0, 21.0, memory=paging) for j in range(20)]  # longer than the window
    flags = [det.observe(r) for r in patch]
    assert all(len(f) == 1 for f in flags)  # flagged patch never became the baseline
    sentence = flags[-1][0]
    assert sentence.startswith("draft step ") and "x its recent median (" in sentence
    assert "→ 44 ms)" in sentence
    ratio = float(sentence.split()[2].rstrip("x"))
    assert 10 < ratio < 20
    assert "weights partly on cpu (412 MiB)" in sentence
    assert "PCIe RX 11.3 GiB/s during the step" in sentence
    assert sentence.endswith("— likely paging over PCIe.")
    for r in normal_trace(10, rng, start=50):
        assert det.observe(r) == []  # back to normal, nothing flagged


def test_slow_verify_without_evidence_says_memory_looks_fine() -> None:
    det = PagingDetector()
    for i in range(10):
        det.observe(record(i, 3.0, 20.0))
    (sentence,) = det.observe(record(10, 3.0, 82.0))
    assert sentence == ("target verify 4.1x its recent median (20 ms → 82 ms): slow, memory looks fine — "
                        "check clocks, other processes, or thermal throttling.")


def test_plain_mode_flags_the_target_step_and_missing_memory_is_said() -> None:
    det = PagingDetector()
    for i in range(6):
        assert det.observe(record(i, 0.0, 10.0, mode="plain", memory={})) == []
    (sentence,) = det.observe(record(6, 0.0, 50.0, mode="plain", memory={}))
    assert sentence.startswith("target step 5.0x its recent median (10 ms → 50 ms): slow, no memory sample")


FULL_GPU = {"gpu0_total_bytes": 80 * GIB, "gpu0_free_bytes": 0.0}
META = {"target_weights_cuda0_bytes": 5 * GIB, "target_weights_meta_bytes": 1.5 * GIB}


@pytest.mark.parametrize("memory, words", [
    (FULL_GPU, "GPU 0 free memory near zero (0 B of 80 GiB)"),
    (FULL_GPU, "likely device memory pressure"),
    ({"host_major_faults_per_s": 900.0}, "major page faults rising (900/s) — likely host memory paging."),
    (META, "weights partly on meta (1.5 GiB) — likely paging over PCIe."),
])
def test_each_kind_of_evidence_is_named(memory: dict[str, float], words: str) -> None:
    det = PagingDetector()
    for i in range(5):
        det.observe(record(i, 3.0, 20.0, memory=memory))
    (sentence,) = det.observe(record(5, 3.0, 100.0, memory=memory))
    assert words in sentence


def test_weights_on_cpu_in_a_cpu_run_are_not_evidence() -> None:
    memory = {"draft_weights_cpu_bytes": 1e6, "draft_offloaded_bytes": 0.0}
    det = PagingDetector()
    for i in range(5):
        det.observe(record(i, 3.0, 20.0, memory=memory))
    (sentence,) = det.observe(record(5, 30.0, 20.0, memory=memory))
    assert "memory looks fine" in sentence


def test_no_flags_before_the_baseline_exists() -> None:
    det = PagingDetector(min_baseline=4)
    flags = [det.observe(record(i, ms, 20.0)) for i, ms in enumerate([3.0, 3.0, 3.0, 90.0])]
    assert flags == [[], [], [], []]


def test_small_absolute_slowdowns_are_jitter() -> None:
    det = PagingDetector(min_excess_ms=1.0)
    for i in range(8):
        det.observe(record(i, 0.1, 0.5))
    assert det.observe(record(8, 0.5, 0.5)) == []  # 5x, but 0.4 ms: a scheduler hiccup on a tiny model


def test_flag_trace_offline_matches_live() -> None:
    rng = random.Random(2)
    trace = normal_trace(20, rng) + [record(20 + j, 40.0, 21.0) for j in range(3)] + normal_trace(5, rng, 23)
    live = PagingDetector()
    expected = {r.iteration: f for r in trace if (f := live.observe(r))}
    assert set(expected) == {20, 21, 22}
    assert flag_trace(trace) == expected
    assert PagingDetector().flag_trace(trace) == expected


def test_bad_settings_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="factor"):
        PagingDetector(factor=1.0)
    with pytest.raises(ValueError, match="min_baseline"):
        PagingDetector(baseline_window=2, min_baseline=4)
