"""The run's one owner: its state, the worker, the records drained from it, autosave and the throttles.

``MainWindow`` lays out widgets and forwards the user's intents here (load, start, pause, stop, baseline,
control changes, open a trace); widgets render what this controller announces through its signals. No
widget sets run state and no flag lives in two places: the state enum below is the only answer to "what is
the run doing", and the buttons, the status panel and the window title all read it.

The tick (~30 Hz) drains the worker's buffer into ``RunData`` in chunks until a time budget is spent (the
rest waits for the next tick; nothing is dropped), hands each chunk's new records to the views, feeds the
autosave recorder, and says whether time is left this tick for a plot redraw.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from specscope.core.controls import InvalidControl
from specscope.core.records import BaselineRecord, ControlValues, DrillEvent, IterationRecord

from .run_data import ControlChange, RunData
from .sentences import finish_sentence
from .worker import LoadRequest, RunRequest, WorkerHost

if TYPE_CHECKING:
    from specscope.core.autosave import SessionRecorder
    from specscope.core.pair import ModelPair

log = logging.getLogger(__name__)

TICK_MS = 33  # ~30 Hz drain
INGEST_CHUNK = 32  # records per RunData.extend call
TICK_BUDGET_S = 0.012  # ingest time after which a tick takes no more records and asks for no redraw

Event = IterationRecord | BaselineRecord | DrillEvent


class RunState(str, Enum):
    """What the run is doing, in the words the window shows."""

    NO_MODEL = "no model"  # nothing loaded (started with --no-load, or the last load failed)
    LOADING = "loading"
    READY = "ready"  # a pair is loaded, no run yet
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"  # end of sequence or max tokens
    STOPPED = "stopped"  # the user stopped it
    FAILED = "failed"  # a load or a run failed (the error says which)

    @property
    def active(self) -> bool:
        """A run is in progress (running or paused)."""
        return self in (RunState.RUNNING, RunState.PAUSED)


def merge_events(records: list[IterationRecord], baselines: list[BaselineRecord]) -> list[Event]:
    """Records and baselines in the order the loop emitted them (a baseline precedes its iteration)."""
    out: list[Event] = []
    pending = sorted(baselines, key=lambda b: b.after_iteration)
    i = 0
    for r in records:
        while i < len(pending) and pending[i].after_iteration <= r.iteration:
            out.append(pending[i])
            i += 1
        out.append(r)
    out.extend(pending[i:])
    return out


class RunController(QObject):
    state_changed = Signal(object)  # RunState
    progress = Signal(str, float)  # loading message, fraction (-1 = unknown)
    pair_loaded = Signal(str)  # pair description
    load_failed = Signal(str)
    run_ended = Signal(str)  # "finished:<reason>" or "error:<message>"
    message = Signal(str, int)  # a transient message and how long to show it (ms)
    error = Signal(str)
    data_reset = Signal()  # a new RunData: views clear
    records_added = Signal(list)  # new IterationRecords (views append tokens)
    frame = Signal(bool)  # end of a tick; True = time is left for a plot redraw
    baseline_requested = Signal(int)  # the iteration after which the requested baseline will run
    drained = Signal(int)  # iterations ingested this tick
    drill_changed = Signal(list)  # DrillEvents (a paging drill started or ended)

    def __init__(self, sessions_dir: Callable[[], Path], keep_sessions: Callable[[], int] | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._sessions_dir = sessions_dir
        self._keep_sessions = keep_sessions or (lambda: 0)
        self.host = WorkerHost(self)
        self.data = RunData()
        self.state = RunState.NO_MODEL
        self.has_pair = False
        self.pair_description = ""
        self.finish_reason = ""
        self.recorder: SessionRecorder | None = None
        self.replay_path: str | None = None
        self.run_started_at: float | None = None
        self._baseline_wanted = False  # the user asked for one: mark where it lands
        self._pending: deque[Event] = deque()  # drained from the worker, not yet ingested
        self._closed = False
        w = self.host.worker
        # Slots belong to a QObject on the GUI thread, so Qt queues the worker's emissions.
        w.progress.connect(self.progress)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.finished.connect(self._on_finished)
        w.error.connect(self._on_error)
        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self.tick)
        self.timer.start()

    # ---- state -----------------------------------------------------------------------------------------
    def _set_state(self, state: RunState) -> None:
        self.state = state
        self.state_changed.emit(state)

    @property
    def can_start(self) -> bool:
        return self.has_pair and self.state not in (RunState.LOADING, RunState.RUNNING, RunState.PAUSED)

    @property
    def pair(self) -> ModelPair | None:
        return self.host.worker.pair

    # ---- loading ---------------------------------------------------------------------------------------
    def load(self, what: LoadRequest) -> bool:
        if self.state.active:
            self.error.emit("Stop the run before loading other models.")
            return False
        self.has_pair = False
        self._set_state(RunState.LOADING)
        self.host.load(what)
        return True

    def _on_loaded(self, description: str) -> None:
        self.has_pair = True
        self.pair_description = description
        self._set_state(RunState.READY)
        self.pair_loaded.emit(description)

    def _on_load_failed(self, message: str) -> None:
        self.has_pair = False
        self._set_state(RunState.FAILED)
        self.load_failed.emit(message)

    # ---- running ---------------------------------------------------------------------------------------
    def start(self, request: RunRequest, values: ControlValues, meta: dict[str, Any]) -> bool:
        if not self.can_start:
            return False
        self.reset_data()
        self.replay_path = None
        self.finish_reason = ""
        self._start_recorder(meta)
        self.run_started_at = time.monotonic()
        self.host.start(request, values)
        self._set_state(RunState.RUNNING)
        return True

    def set_paused(self, paused: bool) -> None:
        if paused:
            self.host.controls.pause()
            if self.state == RunState.RUNNING:
                self._set_state(RunState.PAUSED)
        else:
            self.host.controls.resume()
            if self.state == RunState.PAUSED:
                self._set_state(RunState.RUNNING)

    def stop(self) -> None:
        if self.state == RunState.PAUSED:
            self.host.controls.resume()  # a paused loop must wake up to see the stop
        self.host.stop()

    def request_baseline(self) -> None:
        if not self.state.active:
            return
        self.host.controls.request_baseline()
        self._baseline_wanted = True
        after = self.data.records[-1].iteration if self.data.records else 0
        self.baseline_requested.emit(after)

    def update_controls(self, values: ControlValues) -> None:
        """Forward a (coalesced) control change to the running loop; it applies at the next iteration."""
        if not self.state.active:
            return
        try:
            self.host.controls.update(k=values.k, temperature=values.temperature, top_k=values.top_k,
                                      top_p=values.top_p, adaptive_k=values.adaptive_k)
        except InvalidControl as exc:
            self.error.emit(str(exc))

    def _on_finished(self, reason: str) -> None:
        if self._closed:
            return  # queued before shutdown: the window is gone
        self.catch_up()
        self._close_recorder(ok=True)
        self.finish_reason = reason
        self._set_state(RunState.STOPPED if reason == "stop" else RunState.FINISHED)
        elapsed = time.monotonic() - self.run_started_at if self.run_started_at else 0.0
        self.message.emit(finish_sentence(reason, elapsed, len(self.data)), 8000)
        self.run_ended.emit(f"finished:{reason}")

    def _on_error(self, message: str) -> None:
        if self._closed:
            return
        self.catch_up()
        self._close_recorder(ok=False)
        self.finish_reason = "error"
        self._set_state(RunState.FAILED)
        self.error.emit(f"The run stopped with an error: {message}. The {len(self.data)} iterations so far "
                        "are kept and can be exported.")
        self.run_ended.emit(f"error:{message}")

    # ---- autosave --------------------------------------------------------------------------------------
    def _start_recorder(self, meta: dict[str, Any]) -> None:
        try:
            from specscope.core.autosave import SessionRecorder

            from .session_folders import prune_sessions

            keep = self._keep_sessions()  # 0 = keep every session
            if keep > 0:
                prune_sessions(self._sessions_dir(), keep=keep - 1)  # the new one makes it keep
            self.recorder = SessionRecorder(self._sessions_dir(), meta, writer_thread=True)
        except Exception as exc:  # autosave is a safety net; a failure must not stop the run
            log.warning("autosave disabled: %s", exc)
            self.recorder = None
            self.message.emit(f"Autosave disabled: {exc}", 8000)

    def _close_recorder(self, ok: bool) -> None:
        if self.recorder is not None:
            try:
                self.recorder.close(ok=ok)
            except Exception as exc:
                log.warning("autosave close failed: %s", exc)
            self.recorder = None

    # ---- ingest ----------------------------------------------------------------------------------------
    def tick(self) -> None:
        """Ingest what the worker handed over, within this tick's budget, then announce the frame."""
        self._pending.extend(self.host.buffer.drain())
        started = time.monotonic()
        n_records = 0
        while self._pending:  # at least one chunk per tick, so a backlog always shrinks
            chunk = [self._pending.popleft() for _ in range(min(INGEST_CHUNK, len(self._pending)))]
            n_records += self.ingest(chunk, record=True)
            if time.monotonic() - started >= TICK_BUDGET_S:
                break
        self.frame.emit(time.monotonic() - started < TICK_BUDGET_S)
        self.drained.emit(n_records)

    def drain_all(self) -> None:
        """Ingest everything the worker handed over, however long it takes (end of run, closing)."""
        self._pending.extend(self.host.buffer.drain())
        events = list(self._pending)
        self._pending.clear()
        n = self.ingest(events, record=True) if events else 0
        self.drained.emit(n)

    def catch_up(self) -> None:
        self.drain_all()

    def ingest(self, events: list[Event], record: bool = False) -> int:
        """Add events to the run's data; returns how many were iterations."""
        n_before = len(self.data.records)
        if self._baseline_wanted:
            self._mark_requested_baseline(events)
        self.data.extend(events)
        new_records = self.data.records[n_before:]
        if record and self.recorder is not None:
            for e in events:
                self.recorder.append(e)
        if new_records:
            self.records_added.emit(new_records)
        drills = [e for e in events if isinstance(e, DrillEvent)]
        if drills:
            self.drill_changed.emit(drills)
        return len(new_records)

    def _mark_requested_baseline(self, events: list[Event]) -> None:
        """The first baseline after the user's request gets a marker on the plots and a message."""
        for e in events:
            if isinstance(e, BaselineRecord):
                self._baseline_wanted = False
                label = f"baseline {e.median_step_ms:.1f} ms"
                self.data.control_changes.append(ControlChange(e.after_iteration, label))
                self.message.emit(f"Baseline measured after iteration {e.after_iteration}: plain step "
                                  f"{e.median_step_ms:.1f} ms (median of {len(e.step_ms)})", 8000)
                return

    def reset_data(self) -> None:
        self._pending.clear()
        self._baseline_wanted = False
        self.data = RunData()
        self.data_reset.emit()

    def replay(self, records: list[IterationRecord], baselines: list[BaselineRecord], path: str) -> None:
        """Show a saved trace: a new RunData from its events; the run state (and any pair) is untouched."""
        from specscope.core.measurement import replay

        self.reset_data()
        self.replay_path = path
        events = merge_events(records, baselines)
        replay(events)  # the measurement owner fills every record's numbers, as in a live run
        self.ingest(events)

    # ---- closing ---------------------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Stop the tick and any run, end the worker thread, flush autosave. True if the worker ended."""
        self.timer.stop()
        self._closed = True
        ended = self.host.shutdown()
        if ended:
            self.drain_all()
        self._close_recorder(ok=True)
        if not ended:
            log.warning("the worker did not stop in time (still inside a model call)")
        return ended
