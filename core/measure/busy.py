"""Machine-busy detection: a step that ran slowly because other processes took the CPU, not because of memory.

Signs, per iteration: the process got far less CPU than the threads it computes with would use in the step's
wall time, while the kernel preempted it (involuntary context switches). A step waiting for weights paged from
disk also gets little CPU, but it waits voluntarily (I/O), so the preemption count tells the two apart. The
sentence names the share of a core the process got, which is what a user can compare with their own
``top``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from specscope.core.records import IterationRecord

BUSY_PREFIX = "machine busy"


@dataclass
class BusyDetector:
    threads: int  # CPU threads the step computes with (torch's intra-op threads on a CPU device, else 1)
    share_below: float = 0.7  # flag when cores used < this * threads ...
    preempted_per_100ms: float = 2.0  # ... and the process was preempted at least this often
    min_step_ms: float = 2.0  # shorter steps are below the scheduler's resolution

    @classmethod
    def for_device(cls, device: object) -> BusyDetector:
        threads = 1
        if getattr(device, "type", str(device)) == "cpu":
            try:
                import torch

                threads = max(1, int(torch.get_num_threads()))
            except ImportError:  # pragma: no cover - the engine always has torch
                threads = os.cpu_count() or 1
        return cls(threads=threads)

    def observe(self, record: IterationRecord) -> list[str]:
        if record.cpu_ms is None or record.preempted is None or record.iteration_ms < self.min_step_ms:
            return []
        cores = record.cpu_ms / record.iteration_ms
        preempted_rate = record.preempted * 100.0 / record.iteration_ms
        if cores >= self.share_below * self.threads or preempted_rate < self.preempted_per_100ms:
            return []
        expected = "a core" if self.threads == 1 else f"{self.threads} cores"
        return [f"{BUSY_PREFIX}: the process got {100 * cores:.0f}% of a core during this step "
                f"(it computes with {expected}; preempted {record.preempted} times in "
                f"{record.iteration_ms:.0f} ms): other programs are using the CPU"]
