"""Measured speed-up of an attached engine: speculative and plain requests of the same prompt, interleaved.

The plain side is a second endpoint (``--plain-url``: the same engine started without a draft) or another
model name on the same server (``--plain-model``: e.g. vLLM serving the target twice). Rounds alternate their
order (spec, plain, plain, spec, ...) so a drift in the machine's load falls on both sides alike; each round
gives one ratio, spec tokens/s over plain tokens/s, from the decode passes of each request
(``summary.summarize_attached``), and the ratios go to ``speedup_estimate``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from specscope.core.attach.client import AttachResult, attach
from specscope.core.attach.options import AttachOptions
from specscope.core.attach.summary import summarize_attached
from specscope.core.measure.statistics import MIN_BLOCKS, paired_ratio


@dataclass
class SpeedupEstimate:
    value: float | None
    lo: float | None
    hi: float | None
    n: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "lo": self.lo, "hi": self.hi, "n": self.n, "method": self.method}


def speedup_estimate(ratios: list[float]) -> SpeedupEstimate:
    """The measured speed-up with its interval from per-round ratios: ``statistics.paired_ratio``, as for the
    bench's rounds (Hodges-Lehmann centre of the log ratios with its distribution-free interval)."""
    interval = paired_ratio(ratios)
    if interval is None:
        return SpeedupEstimate(None, None, None, len(ratios), f"fewer than {MIN_BLOCKS} rounds: no interval")
    return SpeedupEstimate(interval.value, interval.lo, interval.hi, interval.n, "paired ratio (measurement)")


@dataclass
class BaselineRun:
    speculative: list[AttachResult] = field(default_factory=list)
    plain: list[AttachResult] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    estimate: SpeedupEstimate | None = None
    error: str | None = None


def interleaved_baseline(spec: AttachOptions, plain: AttachOptions, rounds: int,
                         cancel: threading.Event | None = None,
                         on_result: Callable[[str, AttachResult], None] | None = None) -> BaselineRun:
    """``rounds`` pairs of requests in alternating order; stops at the first failure, keeping what it has."""
    run = BaselineRun()
    for i in range(rounds):
        order = [("speculative", spec), ("plain", plain)]
        if i % 2:
            order.reverse()
        tps: dict[str, float | None] = {}
        for side, options in order:
            if cancel is not None and cancel.is_set():
                run.error = "cancelled"
                break
            result = attach(replace(options), cancel=cancel)
            (run.speculative if side == "speculative" else run.plain).append(result)
            if on_result is not None:
                on_result(side, result)
            if result.error and side == "plain" and result.no_speculation:
                result.error = None  # a plain endpoint is expected to draft nothing
            if result.error:
                run.error = f"{side} request {i + 1}: {result.error}"
                break
            tps[side] = summarize_attached(result.records)["tokens_per_s"]
        if run.error:
            break
        s, p = tps.get("speculative"), tps.get("plain")
        if s and p:
            run.ratios.append(s / p)
    run.estimate = speedup_estimate(run.ratios)
    return run
