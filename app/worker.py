"""The engine on a worker thread: loads a pair, runs sessions, buffers the event stream for the GUI.

The worker never touches a widget. The session hands each event with the measurement's snapshot after it to
its sinks on this thread: the autosave recorder (started here, so a stalled window never delays the
crash-safety net) and a :class:`RecordBuffer` the window drains on a timer (~30 Hz), so a fast loop costs the
GUI one batch per frame rather than one signal per iteration. Signals carry only state changes. Controls
travel through a shared :class:`Controls` object the loop reads at iteration boundaries. Engine modules
(torch, transformers) are imported here lazily, on the worker thread.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from PySide6.QtCore import QObject, QThread, Signal, Slot

from specscope.core.controls import DEFAULT_MAX_NEW_TOKENS, Controls
from specscope.core.events import Event
from specscope.core.gc_freeze import freeze_what_is_loaded, unfreeze
from specscope.core.measure.snapshot import Estimate
from specscope.core.progress import Progress
from specscope.core.records import ControlValues

if TYPE_CHECKING:  # the engine's types, for the checker only: importing them at run time loads torch
    from specscope.app.pair_choice import PairChoice
    from specscope.core.engine.pair import ModelPair
    from specscope.core.engine.pair_spec import PairSpec
    from specscope.core.measure.run import RunSink
    from specscope.core.trace.autosave import SessionRecorder

Observed = tuple[Event, Estimate | None]  # an event and the measurement's snapshot after it
PairFactory = Callable[[Progress], "ModelPair"]
LoadRequest = Union["PairChoice", "PairSpec", PairFactory]


class RecordBuffer:
    """Lock-protected hand-over from the worker thread to the GUI thread: events with their snapshots."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: list[Observed] = []

    def push(self, event: Event, snapshot: Estimate | None = None) -> None:
        """A session sink: called on the worker thread for every event, in order."""
        with self._lock:
            self._items.append((event, snapshot))

    def drain(self) -> list[Observed]:
        with self._lock:
            items, self._items = self._items, []
        return items


@dataclass
class RunRequest:
    prompt: str
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    seed: int | None = None
    plain: bool = False
    memory_period_s: float = 0.25
    extra: dict[str, Any] = field(default_factory=dict)  # further SessionOptions fields
    # autosave: where the recorder's session folder goes (None = no autosave), what its sidecar says, and
    # how many earlier session folders to keep (0 = all)
    sessions_dir: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    keep_sessions: int = 0


class LoadCancelled(Exception):
    """Raised from the progress callback when the window closes mid-load."""


def describe_error(exc: BaseException) -> str:
    """One line for the user; out-of-memory gets a hint because it is the common case."""
    name = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, ValueError) or "LoadError" in name or name == "IncompatibleTokenizers":
        return text or name  # the engine's own one-sentence messages
    if "out of memory" in text.lower() or name in ("OutOfMemoryError", "MemoryError"):
        return f"Out of memory: {text or name}. Try a smaller model, a lower dtype, or a smaller k."
    return f"{name}: {text}" if text else name


def _leave_a_core_for_the_gui(pair: ModelPair) -> None:
    """On CPU, torch would take every core and starve the event loop (p99 latency x5 here): keep one free."""
    device = getattr(getattr(pair, "target", None), "device", None)
    if getattr(device, "type", "cpu") != "cpu":
        return
    import os

    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 2) - 1))


def _warm_up(pair: ModelPair) -> None:
    """Do at load what the first Start would otherwise do on this thread while the window draws the first
    records: import the decode modules and measure each device's memory bandwidth (cached per device).
    Imports run Python for long stretches under the GIL, and PySide's import hook reads each new module's
    source; at Start they froze the window for 0.4-0.5 s (scripts/bench_gui.py)."""
    from specscope.core import session  # noqa: F401  (speculative, measurement, memory, drafters)
    from specscope.core.memory.bandwidth import device_bandwidth

    for model in (getattr(pair, "target", None), getattr(pair, "draft", None)):
        device = getattr(model, "device", None)
        if device is not None:
            device_bandwidth(str(device))


class Worker(QObject):
    """Lives on its own QThread; slots run there."""

    progress = Signal(str, float)  # message, fraction 0..1 (or -1 when unknown)
    loaded = Signal(str)  # pair description
    load_failed = Signal(str)
    run_started = Signal()
    finished = Signal(str)  # finish reason
    error = Signal(str)  # a run failed mid-way; records so far are in the buffer
    notice = Signal(str)  # something the user should know that does not stop the run (autosave is off)

    def __init__(self, buffer: RecordBuffer) -> None:
        super().__init__()
        self.buffer = buffer
        self.pair: ModelPair | None = None
        self.recorder: SessionRecorder | None = None  # the autosave of the latest run
        self.cancel_load = threading.Event()

    def _progress(self, message: str, fraction: float = -1.0) -> None:
        if self.cancel_load.is_set():
            raise LoadCancelled("loading cancelled")
        self.progress.emit(str(message), float(fraction))

    @Slot(object)
    def load(self, what: LoadRequest) -> None:
        """``what`` is a PairChoice, a PairSpec, or a factory ``f(progress) -> ModelPair`` (tests)."""
        if self.pair is not None:
            self.pair.release()
            self.pair = None
        unfreeze()  # what the last load froze, the old pair among it
        try:
            if callable(what):
                pair = what(self._progress)
            else:
                from specscope.core.engine.models import load_pair

                spec = what.to_spec() if hasattr(what, "to_spec") else what
                pair = load_pair(spec, progress=self._progress)
        except LoadCancelled:
            return
        except Exception as exc:  # a load failure is reported, never fatal
            traceback.print_exc()
            self.load_failed.emit(describe_error(exc))
            return
        self.pair = pair
        _leave_a_core_for_the_gui(pair)
        self.progress.emit("Warming up: decode modules and a memory bandwidth probe", -1.0)
        try:
            _warm_up(pair)
        except Exception:  # a warm-up is an optimisation: the run does the same work when it starts
            traceback.print_exc()
        # No 0.5 s full collection in the middle of a run (core/gc_freeze.py); no collection here either,
        # on this thread: it would destroy the window's dropped Qt wrappers off the GUI thread.
        freeze_what_is_loaded(collect=False)
        self.loaded.emit(str(getattr(pair, "description", "") or "pair loaded"))

    @Slot(object, object)
    def run(self, request: RunRequest, controls: Controls) -> None:
        if self.pair is None:
            self.error.emit("No model is loaded yet.")
            return
        from specscope.core.measure.run import Run
        from specscope.core.session import Session, SessionOptions
        from specscope.core.trace.autosave import start_recorder

        self.run_started.emit()
        recorder = None
        if request.sessions_dir is not None:
            recorder, problem = start_recorder(Path(request.sessions_dir), request.meta, request.keep_sessions)
            self.recorder = recorder
            if problem:
                self.notice.emit(problem)
        sinks: list[RunSink] = [self.buffer.push]
        if recorder is not None:
            sinks.append(recorder)
        session = None
        try:
            prompt_ids = self.pair.encode_prompt(request.prompt)
            opts = SessionOptions(max_new_tokens=request.max_new_tokens, seed=request.seed, plain=request.plain,
                                  memory_period_s=request.memory_period_s, prompt_text=request.prompt,
                                  source="local", **request.extra)
            # the window's buffer keeps each snapshot: the run need not
            session = Session(self.pair, controls, opts, run=Run(sinks=sinks, keep_snapshots=False))
            for _event in session.stream(prompt_ids):
                pass
        except Exception as exc:  # OOM, a model raising mid-run: report it, keep the events so far
            traceback.print_exc()
            if recorder is not None:
                recorder.close(ok=False, reason="error")
            self.error.emit(describe_error(exc))
            return
        if recorder is not None:
            recorder.close(ok=True)
        finished = session.finished if session is not None else None
        self.finished.emit(finished.reason if finished is not None else "stop")


GUI_SWITCH_INTERVAL_S = 0.001


class WorkerHost(QObject):
    """GUI-side owner of the worker thread: starts jobs, holds the current run's Controls, shuts down."""

    _load_requested = Signal(object)
    _run_requested = Signal(object, object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.buffer = RecordBuffer()
        # The decode thread runs Python between torch calls; the GUI thread takes the GIL back on every
        # callback a paint makes. At the default 5 ms switch interval each take-back could wait 5 ms, and a
        # plot paint with a few dozen callbacks stalled the window for 120-170 ms (scripts/bench_gui.py).
        sys.setswitchinterval(min(sys.getswitchinterval(), GUI_SWITCH_INTERVAL_S))
        self.worker_thread = QThread()
        self.worker_thread.setObjectName("specscope-worker")
        self.worker = Worker(self.buffer)
        self.worker.moveToThread(self.worker_thread)
        self._load_requested.connect(self.worker.load)
        self._run_requested.connect(self.worker.run)
        self.controls = Controls()
        self.worker_thread.start()

    def load(self, what: LoadRequest) -> None:
        """Load a PairSpec or a pair factory on the worker (queued behind any run in progress)."""
        self.worker.cancel_load.clear()
        self._load_requested.emit(what)

    def start(self, request: RunRequest, values: ControlValues) -> Controls:
        """Start a run with fresh controls (a stopped Controls stays stopped); returns them."""
        self.controls = Controls(values)
        self._run_requested.emit(request, self.controls)
        return self.controls

    def stop(self) -> None:
        self.controls.stop()

    def shutdown(self, timeout_ms: int = 10_000) -> bool:
        """Stop any run, cancel a load at its next progress report, end the thread. True if it ended."""
        self.controls.stop()
        self.worker.cancel_load.set()
        self.worker_thread.quit()
        ended = self.worker_thread.wait(timeout_ms)
        if ended and self.worker.pair is not None:
            self.worker.pair.release()
            self.worker.pair = None
        return bool(ended)
