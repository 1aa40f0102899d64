"""A run is one ordered stream of typed events; everything else reads it.

The session emits it, the measurement is fed it (and only from it), the trace is it written down, replay is it
read back and fed through the same measurement, and a remote worker sends it over a socket. Events carry raw
observations only: nothing derived is ever written back onto them.

- :class:`RunStarted`: the pair, drafter, prompt, controls, options and machine, before the first iteration.
- ``IterationRecord`` (core.records): one iteration, speculative or plain (a plain iteration inside a
  speculative run is a baseline step: it commits its token like any other).
- ``BaselineRecord`` (core.records): only in traces written before baselines committed their tokens.
- :class:`ControlChange`: the user's controls changed; the next iteration runs with ``new``.
- ``DrillEvent`` (core.records): a paging drill started or ended.
- :class:`RunFinished`: why the run ended, and what the loop itself timed outside its iterations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from specscope.core.records import BaselineRecord, ControlValues, DrillEvent, IterationRecord

# Iterations in the recent window (the α window, the step costs' medians). A run records the one it used in
# RunStarted, so replay, export and a remote client derive the same numbers; a trace from before the field
# existed was measured with this one.
ALPHA_WINDOW = 32
MAX_ALPHA_WINDOW = 1_000_000  # what a worker accepts and a trace may say (core/remote/options.py)


@dataclass(frozen=True)
class RunStarted:
    """What the run is: enough for a replay to show the pair, prompt and controls the run had."""

    source: str  # "local", "attach" or "remote"
    target: str  # the target model's name or path
    draft: str  # the draft model's name ("" for model-free drafters)
    drafter: str  # the drafter kind: model, lookup, early-exit, eagle, suffix, none (plain)
    description: str  # the pair in words, as the window's title shows it
    prompt: str
    prompt_tokens: int
    controls: ControlValues
    max_new_tokens: int
    plain: bool = False
    seed: int | None = None
    options: dict[str, Any] = field(default_factory=dict)  # further session options (baseline spacing, ...)
    machine: dict[str, Any] = field(default_factory=dict)  # devices, dtypes, threads, specscope version
    t_s: float = 0.0  # time.monotonic() of the recording process
    alpha_window: int = ALPHA_WINDOW  # the recent window the run's measurement used (it changes numbers)


@dataclass(frozen=True)
class ControlChange:
    """The user changed the controls: ``new`` applies from ``iteration`` on (a new control segment)."""

    iteration: int
    old: ControlValues
    new: ControlValues
    t_s: float = 0.0

    @property
    def label(self) -> str:
        return describe_change(self.old, self.new)


@dataclass(frozen=True)
class RunFinished:
    """The run ended: ``reason`` is eos, max_new_tokens, context_window, stop, error, interrupted or terminated."""

    reason: str
    iterations: int
    tokens: int
    elapsed_s: float  # the loop's wall time, prefill included
    prefill_ms: float
    error: str = ""
    t_s: float = 0.0


Event = RunStarted | IterationRecord | BaselineRecord | ControlChange | DrillEvent | RunFinished


def regime(values: ControlValues) -> tuple[object, ...]:
    """The controls a user sets whose change starts a new segment (k only when it is not chosen adaptively)."""
    k = None if values.adaptive_k else values.k
    return (k, values.adaptive_k, values.temperature, values.top_k, values.top_p)


def describe_change(old: ControlValues, new: ControlValues) -> str:
    """A short label for a control change, e.g. 'k 4→8, T 0→0.7'."""
    parts: list[str] = []
    if old.k != new.k and not (old.adaptive_k and new.adaptive_k):
        parts.append(f"k {old.k}→{new.k}")
    if old.temperature != new.temperature:
        parts.append(f"T {old.temperature:g}→{new.temperature:g}")
    if old.top_k != new.top_k:
        parts.append(f"top-k {old.top_k}→{new.top_k}")
    if old.top_p != new.top_p:
        parts.append(f"top-p {old.top_p:g}→{new.top_p:g}")
    if old.adaptive_k != new.adaptive_k:
        parts.append("adaptive k on" if new.adaptive_k else "adaptive k off")
    return ", ".join(parts)


def control_changes(records: list[IterationRecord]) -> list[ControlChange]:
    """The control changes a record sequence implies (for traces written before the stream carried them)."""
    out: list[ControlChange] = []
    last: ControlValues | None = None
    for r in records:
        if last is not None and regime(r.controls) != regime(last):
            out.append(ControlChange(r.iteration, last, r.controls, r.t_start_s))
        last = r.controls
    return out
