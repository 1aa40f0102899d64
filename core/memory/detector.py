"""Paging detector: flag iterations where a model is several times slower than its own recent self.

Two series per run: the draft's time per step (``draft_step_ms``) and the target's time per pass
(``verify_ms``, or the plain step). Each is compared with the median of its own recent unflagged values,
so noise and slow drift never flag and a flagged patch never becomes the new normal. A verify pass of L
tokens is compared like with like: a baseline pass of m tokens predicts at most ``t_m * max(1, L/m)`` (a
pass never costs more than linear in its length, and never less for more tokens), a conservative bound.
The sentence names the model, the factor and the memory evidence from the record's joined sample.

Offloaded weights leave direct evidence, and then the detector does not wait for a normal past. The session
joins to each record the bytes accelerate's offload hooks streamed during the draft and the verify phase
(``{model}_offload_read_bytes``), each model's weight bytes one pass reads (``{model}_step_read_bytes``) and
its compute device's measured bandwidth (``{model}_bandwidth_bytes_per_s``). A step that streamed a real
share of its weights and ran well below the measured bandwidth (or well above its recent median) is flagged
from the first iteration, with the cause: "target: 18 of 30 layers on disk, 243 MiB read during the step —
runs at 861 MiB/s effective against 9.13 GiB/s measured: weights are being streamed from disk". Slowdowns
without that trail (the OS swapping, a driver evicting) are left to the relative rule above.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass

from specscope.core.records import PLAIN_MODE, SPECULATIVE_MODE, IterationRecord
from specscope.core.units import format_bytes, format_rate

# Evidence thresholds. Decode-time PCIe traffic is normally a few MB/s (token ids, launches); weights
# streamed from host memory move hundreds of MB to GB per second.
PCIE_RX_HIGH_BYTES_PER_S = 0.5e9
FREE_NEAR_ZERO_FRACTION = 0.01
FREE_NEAR_ZERO_BYTES = 512 * 2**20
MAJOR_FAULTS_HIGH_PER_S = 100.0
# Streaming rule: a step that pulled at least this share of its weights through offload hooks, and ran
# below measured bandwidth / STREAM_BANDWIDTH_FACTOR or above STREAM_MEDIAN_FACTOR x its recent median.
STREAM_SHARE = 0.02
STREAM_BANDWIDTH_FACTOR = 1.5
STREAM_MEDIAN_FACTOR = 1.2
ACCELERATOR_PREFIXES = ("cuda", "mps", "xpu", "npu")


@dataclass
class _Series:
    window: deque[tuple[float, int]]  # (ms, pass length) of recent unflagged observations


class PagingDetector:
    """``observe(record)`` returns the record's flag sentences (usually none); state is per run.

    ``factor``: how many times its recent median a time must reach to be flagged.
    ``baseline_window``: how many recent unflagged observations form the median.
    ``min_baseline``: observations needed before anything can be flagged.
    ``min_excess_ms``: ignore slowdowns smaller than this in absolute terms (scheduler jitter on tiny models).
    """

    def __init__(self, factor: float = 3.0, baseline_window: int = 16, min_baseline: int = 4,
                 min_excess_ms: float = 1.0):
        if factor <= 1.0:
            raise ValueError(f"factor must be above 1, got {factor}")
        if min_baseline < 1 or baseline_window < min_baseline:
            raise ValueError("need 1 <= min_baseline <= baseline_window")
        self.factor = factor
        self.baseline_window = baseline_window
        self.min_baseline = min_baseline
        self.min_excess_ms = min_excess_ms
        self._series: dict[str, _Series] = {}

    def reset(self) -> None:
        self._series.clear()

    def observe(self, record: IterationRecord) -> list[str]:
        flags: list[str] = []
        draft = record.draft_step_ms
        if draft is not None and record.mode == SPECULATIVE_MODE:
            flags += self._check("draft", "draft step", draft, 1, record, passes=record.n_drafted)
        if record.mode == PLAIN_MODE:
            flags += self._check("target", "target step", record.verify_ms, 1, record)
        elif record.n_drafted or record.verify_ms > 0:
            flags += self._check("target", "target verify", record.verify_ms, record.n_drafted + 1, record)
        return flags

    def flag_trace(self, records: Iterable[IterationRecord]) -> dict[int, list[str]]:
        """Offline: run a fresh detector with these settings over a list of records."""
        fresh = PagingDetector(self.factor, self.baseline_window, self.min_baseline, self.min_excess_ms)
        out: dict[int, list[str]] = {}
        for r in records:
            flags = fresh.observe(r)
            if flags:
                out[r.iteration] = flags
        return out

    def _check(self, model: str, label: str, ms: float, length: int, record: IterationRecord,
               passes: int = 1) -> list[str]:
        series = self._series.setdefault(model, _Series(deque(maxlen=self.baseline_window)))
        expected: float | None = None
        if len(series.window) >= self.min_baseline:
            expected = statistics.median(t * max(1.0, length / m) for t, m in series.window)
        streaming = streaming_sentence(model, ms, max(1, passes), expected, record.memory)
        if streaming:
            return [streaming]
        if expected is not None and ms >= self.factor * expected and ms - expected >= self.min_excess_ms:
            return [_sentence(model, label, ms, expected, record.memory)]
        series.window.append((ms, length))
        return []


def flag_trace(records: Iterable[IterationRecord], factor: float = 3.0, baseline_window: int = 16,
               min_baseline: int = 4) -> dict[int, list[str]]:
    """Flags for a recorded run: iteration -> sentences (only flagged iterations)."""
    return PagingDetector(factor, baseline_window, min_baseline).flag_trace(records)


def _fmt_ms(ms: float) -> str:
    return f"{ms:.1f} ms" if ms < 10 else f"{ms:.0f} ms"


def memory_evidence(model: str, memory: dict[str, float]) -> tuple[list[str], str]:
    """(evidence phrases, likely cause) from a joined memory sample; ([], "") when memory looks fine."""
    evidence: list[str] = []
    causes: list[str] = []
    prefix = f"{model}_weights_"
    placed = {k[len(prefix) : -len("_bytes")]: v for k, v in memory.items()
              if k.startswith(prefix) and k.endswith("_bytes") and v > 0}
    on_accel = any(d.startswith(ACCELERATOR_PREFIXES) for d in placed)
    offloaded = memory.get(f"{model}_offloaded_bytes", 0.0)
    off_device = {d: b for d, b in placed.items() if d in ("cpu", "disk", "meta")}
    if off_device and (on_accel or offloaded > 0):
        where = "/".join(sorted(off_device))
        off = sum(off_device.values())
        partly = "partly " if off < sum(placed.values()) else ""
        evidence.append(f"weights {partly}on {where} ({format_bytes(off)})")
        causes.append("pcie")
    elif offloaded > 0:
        evidence.append(f"{format_bytes(offloaded)} of weights behind offload hooks")
        causes.append("pcie")
    for key, value in sorted(memory.items()):
        if key.startswith("pcie") and key.endswith("_rx_bytes_per_s") and value >= PCIE_RX_HIGH_BYTES_PER_S:
            evidence.append(f"PCIe RX {format_rate(value)} during the step")
            causes.append("pcie")
            break
    for key, free in sorted(memory.items()):
        if key.startswith("gpu") and key.endswith("_free_bytes"):
            total = memory.get(key.replace("_free_bytes", "_total_bytes"), 0.0)
            if free <= FREE_NEAR_ZERO_BYTES or (total > 0 and free <= FREE_NEAR_ZERO_FRACTION * total):
                gpu = key[len("gpu") : -len("_free_bytes")]
                of = f" of {format_bytes(total)}" if total else ""
                evidence.append(f"GPU {gpu} free memory near zero ({format_bytes(free)}{of})")
                causes.append("device")
                break
    faults = memory.get("host_major_faults_per_s", 0.0)
    if faults >= MAJOR_FAULTS_HIGH_PER_S:
        evidence.append(f"host major page faults rising ({faults:.0f}/s)")
        causes.append("host")
    if not evidence:
        return [], ""
    if "pcie" in causes:
        cause = "likely paging over PCIe"
    elif "device" in causes:
        cause = "likely device memory pressure (weights or cache evicted, or the allocator thrashing)"
    else:
        cause = "likely host memory paging"
    return evidence, cause


def _place_phrase(model: str, memory: dict[str, float]) -> tuple[str, str]:
    """("18 of 30 layers on disk" or "312 MB of 538 MB on disk", "disk" / "host memory") from residency."""
    disk = memory.get(f"{model}_weights_disk_bytes", 0.0)
    place = "disk" if disk > 0 else "cpu"
    total_layers = memory.get(f"{model}_layers_count", 0.0)
    off_layers = memory.get(f"{model}_layers_{place}_count", 0.0)
    on_accel = any(k.startswith(f"{model}_weights_") and k.endswith("_bytes") and v > 0
                   and k[len(f"{model}_weights_"):].startswith(ACCELERATOR_PREFIXES) for k, v in memory.items())
    where = "disk" if place == "disk" else "host memory"
    if total_layers and off_layers and (place == "disk" or on_accel):
        return f"{off_layers:.0f} of {total_layers:.0f} layers on {place}", where
    off = memory.get(f"{model}_weights_{place}_bytes", 0.0)
    total = sum(v for k, v in memory.items() if k.startswith(f"{model}_weights_") and k.endswith("_bytes"))
    if off and total:
        return f"{format_bytes(off)} of {format_bytes(total)} of weights on {place}", where
    return "weights behind offload hooks", where


STREAMING_WORDS = "weights are being streamed"


def is_streaming_flag(sentence: str) -> bool:
    """True for a flag backed by measured offload-hook traffic (not inferred from step times)."""
    return STREAMING_WORDS in sentence


def streaming_sentence(model: str, ms: float, passes: int, expected_ms: float | None,
                       memory: dict[str, float]) -> str:
    """The flag for a step that streamed its weights through offload hooks, or "" when it did not (or did
    so without slowing down)."""
    streamed = memory.get(f"{model}_offload_read_bytes")
    step_bytes = memory.get(f"{model}_step_read_bytes", 0.0)
    if not streamed or ms <= 0:
        return ""
    per_step = streamed / passes
    if step_bytes > 0 and per_step < STREAM_SHARE * step_bytes:
        return ""
    bandwidth = memory.get(f"{model}_bandwidth_bytes_per_s", 0.0)
    effective = step_bytes / (ms / 1000.0) if step_bytes > 0 else 0.0
    below_bandwidth = bandwidth > 0 and effective > 0 and effective * STREAM_BANDWIDTH_FACTOR <= bandwidth
    above_median = expected_ms is not None and ms >= STREAM_MEDIAN_FACTOR * expected_ms
    if not (below_bandwidth or above_median):
        return ""
    placed, where = _place_phrase(model, memory)
    head = f"{model}: {placed}, {format_bytes(per_step)} read during the step"
    if expected_ms is not None:
        head += f" ({ms / expected_ms:.1f}x its recent median, {_fmt_ms(expected_ms)} → {_fmt_ms(ms)})"
    if below_bandwidth:
        source = "from disk" if where == "disk" else "from host memory"
        tail = (f"{model} runs at {format_rate(effective)} effective against {format_rate(bandwidth)} measured: "
                f"weights are being streamed {source}")
    else:
        tail = "weights are being streamed " + ("from disk" if where == "disk" else "from host memory")
    extra = []
    if memory.get("io_read_bytes", 0.0) > 0:
        extra.append(f"{format_bytes(memory['io_read_bytes'])} from storage")
    if memory.get("io_major_faults_count", 0.0) > 0:
        extra.append(f"{memory['io_major_faults_count']:.0f} major faults")
    rx = max((v for k, v in memory.items() if k.startswith("pcie") and k.endswith("_rx_bytes_per_s")), default=0.0)
    if rx >= PCIE_RX_HIGH_BYTES_PER_S:
        extra.append(f"PCIe RX {format_rate(rx)}")
    return f"{head} — {tail}" + (f" ({', '.join(extra)})." if extra else ".")


def _sentence(model: str, label: str, ms: float, expected: float, memory: dict[str, float]) -> str:
    head = f"{label} {ms / expected:.1f}x its recent median ({_fmt_ms(expected)} → {_fmt_ms(ms)})"
    advice = "check clocks, other processes, or thermal throttling."
    if not memory:
        return f"{head}: slow, no memory sample to explain it — {advice}"
    evidence, cause = memory_evidence(model, memory)
    if not evidence:
        return f"{head}: slow, memory looks fine — {advice}"
    return f"{head}: {' and '.join(evidence)} — {cause}."


READ_RATE_SUFFIX = "_read_bytes_per_s"


def step_read_rates(record: IterationRecord) -> dict[str, float]:
    """What each step read, as a rate over the phase it was read in: ``{model}_read_bytes_per_s`` for the bytes
    a model's offload hooks streamed (the draft's over the draft phase, the target's over the rest of the
    iteration) and ``io_read_bytes_per_s`` for what the process made the kernel fetch from storage. A bytes
    count per step says nothing beside a step time; a rate is what a memory plot can set against a bandwidth."""
    memory = record.memory
    whole_s = record.iteration_ms / 1000.0
    draft_s = min(record.draft_ms / 1000.0, whole_s) if record.mode == SPECULATIVE_MODE else 0.0
    phases = {"draft": draft_s, "target": whole_s - draft_s, "io": whole_s}
    keys = {"draft": "draft_offload_read_bytes", "target": "target_offload_read_bytes", "io": "io_read_bytes"}
    rates: dict[str, float] = {}
    for name, key in keys.items():
        read = memory.get(key)
        seconds = phases[name]
        if read is not None and seconds > 0:
            rates[name + READ_RATE_SUFFIX] = read / seconds
    return rates
