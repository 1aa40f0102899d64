"""The event stream as a Chrome trace (Trace Event Format JSON) that Perfetto and chrome://tracing open.

Tracks (one "thread" each): iteration, draft, verify, rollback, baseline, paging flags. Counters: alpha,
tokens per iteration, k, speed-ups and every memory key. See docs/trace-format.md.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specscope import __version__
from specscope.core.events import Event
from specscope.core.records import BaselineRecord, IterationRecord
from specscope.core.trace.cells import compact_json
from specscope.core.trace.files import atomic_text_files

if TYPE_CHECKING:
    from specscope.core.measure.run import Run

CHROME_FORMAT_NAME = "specscope-chrome-trace"
_PID = 1
_TRACKS = {"iteration": 1, "draft": 2, "verify": 3, "rollback": 4, "baseline": 5, "paging flags": 6}


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def chrome_trace(
    source: Run | Iterable[Event],
    session: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A run's event stream as a Trace Event Format object (``{"traceEvents": [...]}``).

    Each phase is a complete ("X") event on its own track; the phases of an iteration are laid end to end
    from its t_start_s (the loop times them back to back). Timestamps are µs since the first event.
    Counters ("C"): alpha, tokens per iteration, k, speed-ups and every memory key, from the snapshots a
    ``Run`` holds (a bare stream is replayed for them). Paging flags are instant ("i") events carrying their
    sentence.
    """
    from specscope.core.measure.run import Run, observed_stream  # the counters: the one owner's snapshots

    snapshots: dict[int, Any] = {}
    records: list[IterationRecord] = []
    baselines: list[BaselineRecord] = []
    for e, snapshot in observed_stream(source if isinstance(source, Run) else list(source)):
        if isinstance(e, IterationRecord):
            records.append(e)
            snapshots[id(e)] = snapshot
        elif isinstance(e, BaselineRecord):
            baselines.append(e)
    starts = [r.t_start_s for r in records]
    starts += [b.t_s - (sum(b.step_ms) + sum(b.verify_ms_by_len.values())) / 1000.0 for b in baselines]
    t0 = min(starts) if starts else 0.0
    events: list[dict[str, Any]] = []

    def complete(track: str, name: str, t_s: float, dur_ms: float, args: dict[str, Any]) -> None:
        events.append({"name": name, "cat": track, "ph": "X", "ts": _us(t_s - t0),
                       "dur": round(max(dur_ms, 0.0) * 1000.0, 3), "pid": _PID, "tid": _TRACKS[track],
                       "args": args})

    def counter(name: str, t_s: float, value: float | None) -> None:
        if value is not None and math.isfinite(value):
            events.append({"name": name, "ph": "C", "ts": _us(t_s - t0), "pid": _PID,
                           "args": {"value": value}})

    for r in records:
        label = f"iteration {r.iteration}"
        text = "".join(t.text for t in r.committed_tokens)
        complete("iteration", label, r.t_start_s, r.iteration_ms, {
            "k": r.k, "n_drafted": r.n_drafted, "n_accepted": r.n_accepted, "n_emitted": r.n_emitted,
            "context_len": r.context_len, "text": text, "finish_reason": r.finish_reason,
        })
        t = r.t_start_s
        for phase, ms in (("draft", r.draft_ms), ("verify", r.verify_ms), ("rollback", r.rollback_ms)):
            if ms > 0 or phase == "verify":
                complete(phase, phase, t, ms, {"iteration": r.iteration})
            t += ms / 1000.0
        end = r.t_end_s if r.t_end_s >= r.t_start_s else r.t_start_s + r.iteration_ms / 1000.0
        snap = snapshots.get(id(r))
        counter("alpha_run", end, snap.alpha if snap else None)
        counter("alpha_window", end, snap.alpha_window if snap else None)
        counter("tokens_per_iteration", end, r.n_emitted)
        counter("k", end, r.k)
        counter("measured_speedup", end, snap.measured.value if snap and snap.measured else None)
        counter("predicted_speedup", end, snap.predicted_speedup if snap else None)
        for key in sorted(r.memory):
            counter(key, end, r.memory[key])
        for sentence in r.flags:
            events.append({"name": sentence if len(sentence) <= 80 else sentence[:77] + "...", "ph": "i",
                           "s": "t", "ts": _us(r.t_start_s - t0), "pid": _PID,
                           "tid": _TRACKS["paging flags"],
                           "args": {"sentence": sentence, "iteration": r.iteration}})
    for b in baselines:
        dur_ms = sum(b.step_ms) + sum(b.verify_ms_by_len.values())
        complete("baseline", "plain baseline", b.t_s - dur_ms / 1000.0, dur_ms, {
            "iterations_done": b.iterations_done, "context_len": b.context_len, "step_ms": b.step_ms,
            "verify_ms_by_len": {str(n): ms for n, ms in sorted(b.verify_ms_by_len.items())},
        })
    events.sort(key=lambda e: e["ts"])  # stable: per-track order within one timestamp is kept
    metadata: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": _PID, "args": {"name": "specscope"}},
    ]
    for name, tid in _TRACKS.items():
        metadata.append({"name": "thread_name", "ph": "M", "pid": _PID, "tid": tid, "args": {"name": name}})
        metadata.append({"name": "thread_sort_index", "ph": "M", "pid": _PID, "tid": tid,
                         "args": {"sort_index": tid}})
    return {
        "traceEvents": metadata + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "format": CHROME_FORMAT_NAME,
            "specscope_version": __version__,
            "session": compact_json(session or {}),
        },
    }


def _finite(obj: Any) -> Any:
    """NaN/inf are not JSON; the viewers reject them, so they become null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj


def write_chrome_trace(
    path: Path,
    source: Run | Iterable[Event],
    session: dict[str, Any] | None = None,
) -> Path:
    """Write the Chrome/Perfetto trace JSON atomically; raises TraceWriteError."""
    path = Path(path)
    obj = chrome_trace(source, session)
    try:
        text = json.dumps(obj, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:  # a NaN somewhere: the slow path that nulls them
        text = json.dumps(_finite(obj), ensure_ascii=False, default=str, allow_nan=False)
    with atomic_text_files([path]) as (f,):
        f.write(text)
    return path
