"""The GUI thread's stretches of work, one per event it dispatches: how much CPU each took, and what it was.

A late probe on a loaded machine is either the window waiting for a core (the machine) or the window computing
(its own work). Only the second is ours to cut, and its longest single stretch is the figure that holds
whatever else runs beside it: wall latency on a shared machine is noise, the GUI thread's CPU time is not.

``StretchApplication`` is a ``QApplication`` whose ``notify`` times every event the GUI thread dispatches from
its event loop (``time.thread_time``: this thread's CPU, not the wall clock) and labels it by receiver and
event type; paints nested inside one (the window's repaint paints each dirty widget) are summed by widget
class, so a long repaint says which widgets it painted. ``--profile`` also runs cProfile over each stretch and
keeps the profiles of those over a threshold. Used by ``scripts/bench_gui.py --stretches``.
"""

from __future__ import annotations

import cProfile
import gc
import io
import pstats
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QApplication

from specscope.core.measure.metrics import percentile


@dataclass
class Stretch:
    cpu_ms: float
    label: str
    at_s: float  # when it began, seconds after recording began
    paints: dict[str, float] = field(default_factory=dict)  # widget class -> CPU ms of its nested paints
    profile: cProfile.Profile | None = None
    resized: list[str] = field(default_factory=list)  # widgets resized inside it (a layout change repaints them)
    end_s: float = 0.0


def _label(receiver: QObject, event: QEvent) -> str:
    kind = event.type().name if hasattr(event.type(), "name") else str(int(event.type()))
    owner = receiver
    if type(receiver).__name__ == "QTimer" and receiver.parent() is not None:
        owner = receiver.parent()  # a timer's work belongs to the object that owns it
    name = receiver.objectName() or type(owner).__name__
    return f"{name}:{kind}"


def _widget_name(widget: QObject) -> str:
    """A painted widget's class; a scroll area's viewport (a plot's, the token view's) by its owner's."""
    parent = widget.parent()
    if type(widget).__name__ == "QWidget" and parent is not None:
        return f"{type(parent).__name__}.viewport"
    return type(widget).__name__


class StretchApplication(QApplication):
    """A QApplication that records the CPU time of every top-level event dispatch on the GUI thread."""

    def __init__(self, argv: list[str]) -> None:
        super().__init__(argv)
        self.recording = False
        self.profile_over_ms: float | None = None  # keep cProfile stats of stretches longer than this
        self.stretches: list[Stretch] = []
        self._depth = 0
        self._painting = 0  # paints under way (a paint inside a paint is counted in the outer one)
        self._paints: dict[str, float] = {}
        self._resized: list[str] = []
        self._t0 = time.monotonic()

    def start(self, profile_over_ms: float | None = None) -> None:
        self.stretches.clear()
        self.collections: list[tuple[int, float, int]] = []  # (generation, CPU ms, objects freed) on this thread
        self.profile_over_ms = profile_over_ms
        self._t0 = time.monotonic()
        self._gc_cpu = 0.0
        gc.callbacks.append(self._on_gc)
        self.recording = True

    def stop(self) -> None:
        self.recording = False
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)

    def _on_gc(self, phase: str, info: dict[str, int]) -> None:
        """The garbage collector's passes on the GUI thread: a full one walks every tracked object."""
        if threading.current_thread() is not threading.main_thread():
            return
        if phase == "start":
            self._gc_cpu = time.thread_time()
        else:
            self.collections.append((info["generation"], 1000 * (time.thread_time() - self._gc_cpu),
                                     info["collected"]))

    def notify(self, receiver: QObject, event: QEvent) -> bool:
        if not self.recording:
            return super().notify(receiver, event)
        top = self._depth == 0
        is_paint = event.type() == QEvent.Type.Paint
        if not top and event.type() == QEvent.Type.Resize and receiver.isWidgetType():
            self._resized.append(_widget_name(receiver))
        if not top and not is_paint:
            self._depth += 1
            try:
                return super().notify(receiver, event)
            finally:
                self._depth -= 1
        label = _label(receiver, event) if top else _widget_name(receiver)
        outer_paint = is_paint and not top and self._painting == 0
        profile = cProfile.Profile() if top and self.profile_over_ms is not None else None
        if top:
            self._paints = {}
            self._resized = []
        cpu0 = time.thread_time()
        wall0 = time.monotonic() - self._t0
        if profile is not None:
            profile.enable()
        self._depth += 1
        self._painting += is_paint
        try:
            return super().notify(receiver, event)
        finally:
            self._depth -= 1
            self._painting -= is_paint
            if profile is not None:
                profile.disable()
            spent = 1000 * (time.thread_time() - cpu0)
            if top:
                keep = profile if (profile is not None and self.profile_over_ms is not None
                                   and spent > self.profile_over_ms) else None
                self.stretches.append(Stretch(spent, label, wall0, self._paints, keep, self._resized,
                                              time.monotonic() - self._t0))
            elif outer_paint:
                self._paints[label] = self._paints.get(label, 0.0) + spent



BURST_GAP_MS = 1.0


def _bursts(stretches: list[Stretch]) -> list[tuple[float, list[Stretch]]]:
    """Runs of stretches with less than BURST_GAP_MS of idle between them, and their CPU summed."""
    out: list[tuple[float, list[Stretch]]] = []
    current: list[Stretch] = []
    for s in stretches:
        if current and 1000 * (s.at_s - current[-1].end_s) >= BURST_GAP_MS:
            out.append((sum(m.cpu_ms for m in current), current))
            current = []
        current.append(s)
    if current:
        out.append((sum(m.cpu_ms for m in current), current))
    return out


def report_collections(collections: list[tuple[int, float, int]]) -> str:
    """The GUI thread's garbage collections while recording, the longest first."""
    full = [c for c in collections if c[0] == 2]
    longest = sorted(collections, key=lambda c: -c[1])[:3]
    return (f"garbage collections on the GUI thread: {len(collections)} ({len(full)} full); the longest: "
            + ", ".join(f"generation {g} {ms:.1f} ms ({n:,} freed)" for g, ms, n in longest))


def report(stretches: list[Stretch], top: int = 12, profile_lines: int = 40) -> str:
    """The longest stretches, what they were, and the totals by label."""
    cpu = [s.cpu_ms for s in stretches]
    p50, p99, p999 = (percentile(cpu, q) or 0.0 for q in (50, 99, 99.9))
    out = [f"the GUI thread's stretches (one per event dispatched): {len(cpu)}, p50 {p50:.2f} ms, "
           f"p99 {p99:.1f} ms, p99.9 {p999:.1f} ms, max {max(cpu, default=0):.1f} "
           f"ms of CPU, {sum(cpu) / 1000:.2f} s in all"]
    by_label: dict[str, list[float]] = {}
    for s in stretches:
        by_label.setdefault(s.label, []).append(s.cpu_ms)
    out.append("by event (count, total, p99, max ms):")
    for label, xs in sorted(by_label.items(), key=lambda kv: -sum(kv[1]))[:10]:
        out.append(f"  {label:<48} {len(xs):>6} {sum(xs):>9.0f} {percentile(xs, 99):>7.1f} {max(xs):>7.1f}")
    painted: dict[str, list[float]] = {}
    for s in stretches:
        for widget, ms in s.paints.items():
            painted.setdefault(widget, []).append(ms)
    out.append("paints by widget (count, median, p99, max ms of CPU):")
    for widget, xs in sorted(painted.items(), key=lambda kv: -sum(kv[1]))[:8]:
        out.append(f"  {widget:<48} {len(xs):>6} {percentile(xs, 50):>7.1f} {percentile(xs, 99):>7.1f} "
                   f"{max(xs):>7.1f}")
    out.append(f"the {top} longest:")
    for s in sorted(stretches, key=lambda s: -s.cpu_ms)[:top]:
        paints = ", ".join(f"{k} {v:.0f}" for k, v in sorted(s.paints.items(), key=lambda kv: -kv[1])[:5])
        resized = ", ".join(sorted(set(s.resized)))
        out.append(f"  {s.cpu_ms:6.1f} ms at {s.at_s:6.2f} s  {s.label}" + (f"  (paints: {paints})" if paints else "")
                   + (f"  (resized: {resized})" if resized else ""))
    bursts = _bursts(stretches)
    out.append(f"bursts (stretches back to back, under {BURST_GAP_MS:g} ms apart: what delays a timer): "
               f"p99 {percentile([b[0] for b in bursts], 99) or 0.0:.1f} ms, "
               f"max {max((b[0] for b in bursts), default=0):.1f} "
               "ms of CPU; the longest:")
    for cpu_ms, members in sorted(bursts, key=lambda b: -b[0])[:5]:
        span_ms = 1000 * (members[-1].end_s - members[0].at_s)
        out.append(f"  {cpu_ms:6.1f} ms at {members[0].at_s:6.2f} s over {span_ms:.0f}"
                   " ms: " + ", ".join(f"{m.label} {m.cpu_ms:.0f}" for m in members if m.cpu_ms >= 0.5))
    relayouts = [s for s in stretches if any(name.endswith("Plot") for name in s.resized)]
    if relayouts:
        out.append("stretches that resized plots (a plot resized repaints from scratch, its axes included):")
        for s in relayouts[:top]:
            out.append(f"  {s.cpu_ms:6.1f} ms at {s.at_s:6.2f} s  {s.label}  (resized: "
                       + ", ".join(sorted(set(s.resized))) + ")")
    profiled = [s for s in sorted(stretches, key=lambda s: -s.cpu_ms) if s.profile is not None][:3]
    for s in profiled:
        buf = io.StringIO()
        assert s.profile is not None
        stats: Any = pstats.Stats(s.profile, stream=buf)
        stats.sort_stats("cumulative").print_stats(profile_lines)
        out.append(f"--- profile of the {s.cpu_ms:.1f} ms stretch at {s.at_s:.2f} s ({s.label}) ---")
        out.append("\n".join(line for line in buf.getvalue().splitlines() if line.strip())[-6000:])
    return "\n".join(out)
