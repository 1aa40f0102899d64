"""The run's one owner: its state, every source of events (a decode on a worker process, a replayed trace, an
attached server, a decode on a thread of this process), the events drained from it, and the throttles.

``MainWindow`` lays out widgets and forwards the user's intents here (load, start, pause, stop, baseline,
control changes, open a trace, attach); widgets render what this controller announces through its signals.
No widget sets run state and no flag lives in two places: ``RunState`` (``run_state``) is the only answer to
"what is the run doing", and the buttons, the status panel and the window title all read it.

Every source hands over the same thing: events of one stream, each with the measurement's snapshot after it. The
controller holds one pair source (where Start decodes) and one live run (whose events arrive), objects of
``run_sources``, and calls their methods: it never asks which kind it holds. A chosen pair decodes in a worker
process (``worker_link``: this app's own, spawned for the pair, or one File ▸ Connect to worker… reached); its
events arrive on a reading thread that feeds them through this window's measurement and the autosave recorder
(``remote_run``), as an attached run's thread does and as a session does on the in-process path
(``SPECSCOPE_IN_PROCESS=1``, and pair factories in tests), so a stalled window never delays the crash-safety net; a
replay feeds the trace's events through a new measurement here. The tick (~30 Hz) drains the buffer into
``RunData`` in chunks until a time budget is spent (the rest waits for the next tick; nothing is dropped), hands
each chunk's new records to the views, and says whether time is left this tick for a plot redraw.
"""

from __future__ import annotations

import logging
import os
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QObject, QTimer, Signal

from specscope.app.pair_choice import PairChoice
from specscope.app.remote_run import FINISHED, REFUSED
from specscope.app.run_data import Marker, Observed, RunData
from specscope.app.run_sources import (
    AttachRun,
    InProcessPair,
    InProcessRun,
    LiveRun,
    LocalWorker,
    PairSource,
    RemoteWorker,
)
from specscope.app.run_state import RunState
from specscope.app.sentences import NO_END_REASON, finish_sentence, full_stop
from specscope.app.worker import LoadRequest, RunRequest, WorkerHost
from specscope.app.worker_link import WorkerLink
from specscope.core.controls import InvalidControl
from specscope.core.drafter_catalogue import IN_PLACE_DRAFTERS
from specscope.core.events import Event, RunFinished, RunStarted
from specscope.core.gc_freeze import PeriodicFreeze
from specscope.core.records import PLAIN_MODE, ControlValues, DrillEvent, IterationRecord

if TYPE_CHECKING:
    from specscope.app.attach_source import AttachRunner
    from specscope.core.attach.options import AttachOptions
    from specscope.core.engine.pair import ModelPair
    from specscope.core.remote.url import WorkerAddress
    from specscope.core.trace.layout import LoadedTrace

log = logging.getLogger(__name__)

TICK_MS = 33  # ~30 Hz drain
INGEST_CHUNK = 32  # records per RunData.extend call
TICK_BUDGET_S = 0.012  # ingest time after which a tick takes no more records and asks for no redraw
WORKER_CHECK_TICKS = 30  # between runs, is this app's worker process still there? (about once a second)
# Freeze what is alive at the first tick and after this many iterations (core/gc_freeze.py): a full collection
# on the GUI thread took 320 ms for the imports and widgets alone, and a run adds ~5 ms per 1000 iterations.
FREEZE_EVERY_ITERATIONS = 1000
IN_PROCESS_VARIABLE = "SPECSCOPE_IN_PROCESS"  # "1": decode a chosen pair on a thread of the window's process


def decode_in_process() -> bool:
    """The pair decodes in the window's own process (tests, debugging) instead of a worker process."""
    return os.environ.get(IN_PROCESS_VARIABLE, "") == "1"


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
    shown_run = Signal(object, bool)  # the RunStarted now on screen (None: unknown), and whether it is a replay
    frame = Signal(bool)  # end of a tick; True = time is left for a plot redraw
    baseline_requested = Signal(int)  # the iteration after which the requested baseline will run
    drained = Signal(int)  # iterations ingested this tick
    drill_changed = Signal(list)  # DrillEvents (a paging drill started or ended)
    worker_lost = Signal(str)  # the worker process or connection went away: one sentence, the events kept
    connect_failed = Signal(str)  # a connection tried (File ▸ Connect, Reconnect) did not come up: one sentence

    def __init__(self, sessions_dir: Callable[[], Path], keep_sessions: Callable[[], int] | None = None,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._sessions_dir = sessions_dir
        self._keep_sessions = keep_sessions or (lambda: 0)
        self.host = WorkerHost(self)
        self.data = RunData()
        self._measurement: Any = None  # a Run for events fed without snapshots (see feed); made in reset_data
        self.state = RunState.NO_MODEL
        self.has_pair = False
        self.pair_description = ""
        self.finish_reason = ""
        self.replay_path: str | None = None
        # Where Start decodes (the pair in this process, this app's worker or a remote one) and the run whose
        # events arrive (run_sources): the controller calls their methods and never asks which kind it holds.
        self.source: PairSource = InProcessPair(self.host)
        self.run: LiveRun = InProcessRun(self.host)
        # A worker's connection: this app's own worker for a chosen pair, or one File ▸ Connect reached.
        self.link = WorkerLink(self)
        self.link.connected.connect(self._on_worker_connected)
        self.link.failed.connect(self._on_worker_failed)
        self.link.swap_refused.connect(self._on_swap_refused)
        self.link.progress.connect(self.progress)
        self._trial: WorkerLink | None = None  # a File ▸ Connect being tried, beside the link in use
        self._ticks_to_worker_check = WORKER_CHECK_TICKS
        self.run_started_at: float | None = None
        self._baseline_wanted = False  # the user asked for one: mark where it lands
        self._pending: deque[Observed] = deque()  # drained from the buffer, not yet ingested
        self._freezer = PeriodicFreeze(FREEZE_EVERY_ITERATIONS)  # at the first tick, then every so many
        self._closed = False
        w = self.host.worker
        # Slots belong to a QObject on the GUI thread, so Qt queues the worker's emissions.
        w.progress.connect(self.progress)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.finished.connect(self._on_finished)
        w.error.connect(self._on_error)
        w.notice.connect(lambda text: self.message.emit(text[:1].upper() + text[1:] + ".", 10000))
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
        return (self.has_pair and self._trial is None
                and self.state not in (RunState.LOADING, RunState.RUNNING, RunState.PAUSED))

    @property
    def recorder(self) -> Any:
        """The autosave recorder of the latest run (the worker's, the in-process one's or the attached run's)."""
        return self.run.recorder

    @property
    def controls(self) -> Any:
        """The run's controls: a worker's run takes them as control messages, an in-process run directly."""
        return self.run.controls

    @property
    def pair(self) -> ModelPair | None:
        """The pair loaded in this process (only on the in-process path; a worker holds its own)."""
        return self.source.pair

    @property
    def on_worker(self) -> bool:
        """Runs go to a worker process (this app's own or a remote one)."""
        return self.source.on_worker

    @property
    def pair_drafter(self) -> str:
        """The drafter kind of the loaded pair ("" when nothing says)."""
        return self.source.pair_drafter

    def pair_drafter_shown(self, chosen: str) -> str:
        """The drafter Start runs: a connected worker's own, else the one ``chosen`` in the window."""
        return self.source.drafter_started(chosen)

    @property
    def device(self) -> str:
        """The target's device, as the worker (or the in-process pair) reports it ("" before a load)."""
        return self.source.device

    def _use_source(self, source: PairSource) -> None:
        """Start decodes on ``source`` from now on; until its first run, the idle in-process controls answer."""
        self.source = source
        self.run = InProcessRun(self.host)

    # ---- loading ---------------------------------------------------------------------------------------
    def _begin_loading(self, refusal: str) -> bool:
        """Clear the screen for another pair (what was on it belonged to the old pair or a replay: nothing of it
        may stay under the new one); False, with ``refusal`` said, while a run is active."""
        if self.state.active:
            self.error.emit(refusal)
            return False
        self._cancel_trial()
        self.has_pair = False
        self.reset_data()
        self.replay_path = None
        self.finish_reason = ""
        self._set_state(RunState.LOADING)
        return True

    def load(self, what: LoadRequest) -> bool:
        if not self._begin_loading("Stop the run before loading other models."):
            return False
        if isinstance(what, PairChoice) and not decode_in_process():
            self.link.start_local(what.worker_args())  # a worker process loads it; the window imports no torch
            self._use_source(LocalWorker(self.link))
        else:
            self.link.close()
            self._use_source(InProcessPair(self.host))
            self.host.load(what)
        return True

    def swap_drafter(self, kind: str) -> bool:
        """Swap drafter ``kind`` into the connected worker's pair, its target staying loaded (this app's worker
        or a remote one: the swap acts where decoding runs). False, with nothing done, when it cannot: no
        worker pair, or a drafter that needs weights of its own (then the pair is loaded again)."""
        if kind not in IN_PLACE_DRAFTERS or not self.link.ready or not self.has_pair:
            return False
        if not self._begin_loading("Stop the run before changing the drafter."):
            return False
        self.progress.emit(f"Swapping in {kind} (the target stays loaded)…", -1.0)
        self.link.swap_drafter(kind)
        return True

    def _on_swap_refused(self, sentence: str) -> None:
        if self._closed:
            return
        self._on_loaded(self.source.description)  # the worker kept its pair and drafter: ready with them
        self.error.emit(full_stop(sentence[:1].upper() + sentence[1:]))

    def connect_worker(self, address: WorkerAddress) -> bool:
        """Decode on a worker someone started with ``specscope serve``. The connection is tried on a link of its
        own first: until the worker has welcomed us, the worker in use (this app's own or another remote one)
        and the run on screen stay as they are, so a wrong token or a typo in the port costs nothing but a
        sentence. Once it has, the old worker is let go and the screen is cleared for the new pair."""
        if self.state.active:
            self.error.emit("Stop the run before connecting to another worker.")
            return False
        if self.state == RunState.LOADING or self._trial is not None:
            self.error.emit("Wait for the pair being loaded (or the connection being tried) before connecting.")
            return False
        trial = WorkerLink(self)
        trial.connected.connect(lambda _info: self._on_trial_connected(trial))
        trial.failed.connect(lambda sentence: self._on_trial_failed(trial, sentence))
        self._trial = trial
        self._set_state(self.state)  # Start waits while the connection is tried
        self.progress.emit(f"Connecting to the worker at {address.netloc}…", -1.0)
        trial.connect_remote(address)
        return True

    def _on_trial_connected(self, trial: WorkerLink) -> None:
        if self._closed or trial is not self._trial:
            return
        self._trial = None
        if self.state.active:  # cannot happen (Start waits), but a run is never cut from under the user
            trial.close()
            return
        old, self.link = self.link, trial
        for signal in (trial.connected, trial.failed):
            signal.disconnect()
        trial.connected.connect(self._on_worker_connected)
        trial.failed.connect(self._on_worker_failed)
        trial.progress.connect(self.progress)
        old.close()  # this app's own worker stops; a remote one keeps serving others
        old.deleteLater()
        self._use_source(RemoteWorker(trial))
        self.has_pair = False
        self.reset_data()  # the old pair's run: nothing of it may stay under the new one
        self.replay_path = None
        self.finish_reason = ""
        self._on_worker_connected(trial.info)

    def _on_trial_failed(self, trial: WorkerLink, sentence: str) -> None:
        if self._closed or trial is not self._trial:
            return
        self._trial = None
        trial.close()
        trial.deleteLater()
        self._set_state(self.state)  # Start is back for the pair in use
        self.connect_failed.emit(full_stop(sentence[:1].upper() + sentence[1:]))
        self.error.emit(full_stop(sentence[:1].upper() + sentence[1:]))

    def _cancel_trial(self) -> None:
        trial, self._trial = self._trial, None
        if trial is not None:
            trial.close()

    def restart_worker(self, choice: PairChoice) -> str | None:
        """Start this app's worker again with ``choice`` (or reconnect to the remote one); the progress sentence
        to show, or None when there is nothing to restart. What is on screen (the events the lost worker sent)
        stays until the next Start."""
        if self.state.active or self.state == RunState.LOADING or not self.source.on_worker:
            return None
        self.has_pair = False
        self._set_state(RunState.LOADING)
        return self.source.restart(choice)

    def _on_worker_connected(self, info: dict[str, Any]) -> None:
        if self._closed:
            return
        self._on_loaded(self.source.description)

    def _on_worker_failed(self, sentence: str) -> None:
        if self._closed:
            return
        if self.source.failure_is_connection:  # the pair in use was another's: nothing of ours failed to load
            self.has_pair = False
            self._set_state(RunState.NO_MODEL)
            self.connect_failed.emit(full_stop(sentence[:1].upper() + sentence[1:]))
            self.error.emit(full_stop(sentence[:1].upper() + sentence[1:]))
        else:
            self._on_load_failed(sentence.rstrip("."))

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
        request.sessions_dir = str(self._sessions_dir())
        request.meta = meta
        request.keep_sessions = self._keep_sessions()
        self.run_started_at = time.monotonic()
        self.source.add_run_meta(meta)
        run = self.source.start_run(
            request, values, self.host.buffer, self, self._on_remote_ended,
            lambda text: self.message.emit(full_stop(text[:1].upper() + text[1:]), 10000))
        if run is None:
            return False
        run.open = True
        self.run = run
        self._set_state(RunState.RUNNING)
        return True

    def _on_remote_ended(self, how: str, text: str) -> None:
        if self._closed or not self.run.reads_worker:
            return  # the window is gone, or the worker's loss was already said (found between ticks)
        self.run.open = False
        if how == FINISHED and text == "error":  # the model failed on the worker; the worker lives on
            self._on_error(self.run.failure() or "the worker's run failed")
        elif how == FINISHED:
            self._on_finished(text)
        elif how == REFUSED:  # the worker is there and said why the run cannot start
            self.catch_up()
            self._set_state(RunState.READY)
            self.error.emit(text)
        else:
            self._lose_worker(text)

    def _lose_worker(self, sentence: str, during_run: bool = True) -> None:
        """The worker went away (killed, crashed, the connection cut): say so once, keep what arrived, and
        leave the way back to the window (restart or reconnect). Between runs, what is on screen stays as it
        was (a finished run, a replay); only Start waits for the worker."""
        self.catch_up()
        self.run.open = False
        sentence = full_stop(self.link.lose(sentence))
        self.has_pair = False
        if not during_run:
            self._set_state(self.state)  # Start goes grey
            self.worker_lost.emit(sentence)
            return
        self.finish_reason = "error"
        self._set_state(RunState.FAILED)
        n = len(self.data)
        kept = f" The {n} iteration{'s' * (n != 1)} received {'are' if n != 1 else 'is'} kept." if n else ""
        self.worker_lost.emit(sentence + kept)
        self.run_ended.emit(f"error:{sentence}")

    def _check_worker(self) -> None:
        """Between runs, this app's worker process can die too (out of memory, killed): say so when it does."""
        self._ticks_to_worker_check -= 1
        if self._ticks_to_worker_check > 0:
            return
        self._ticks_to_worker_check = WORKER_CHECK_TICKS
        if self.has_pair and not self.run.reads_worker:
            gone = self.source.process_gone()
            if gone:
                self._lose_worker(gone, during_run=False)

    def start_attach(self, options: AttachOptions) -> AttachRunner | None:
        """Stream a request from a serving engine: the same state machine, buffer and autosave as a local run.
        The runner (its ``result`` holds the engine's answer once it finished), or None when refused."""
        if self.state.active or self.state == RunState.LOADING:
            self.error.emit("Stop the current run before attaching to a server.")
            return None
        from specscope.app.attach_source import AttachRunner

        self.reset_data()
        self.replay_path = None
        self.finish_reason = ""
        runner = AttachRunner(options, self.host.buffer, self._sessions_dir(), self._keep_sessions())
        runner.finished.connect(self._on_attach_finished)
        runner.notice.connect(lambda text: self.message.emit(text[:1].upper() + text[1:] + ".", 10000))
        self.run = AttachRun(runner)
        self.run.open = True
        self.run_started_at = time.monotonic()
        runner.start()
        self._set_state(RunState.RUNNING)
        return runner

    def _on_attach_finished(self, error: str) -> None:
        if self._closed:
            return
        self.catch_up()
        if error:
            self._on_error(error)
        else:
            self._on_finished(self.data.finished.reason if self.data.finished is not None else "stop")

    def set_paused(self, paused: bool) -> None:
        if not self.run.pause(paused):
            return  # a server's request cannot be paused from here
        if paused and self.state == RunState.RUNNING:
            self._set_state(RunState.PAUSED)
        elif not paused and self.state == RunState.PAUSED:
            self._set_state(RunState.RUNNING)

    def stop(self) -> None:
        self.run.stop(paused=self.state == RunState.PAUSED)

    def request_baseline(self) -> None:
        if not self.state.active:
            return
        self.controls.request_baseline()
        self._baseline_wanted = True
        after = self.data.records[-1].iteration if self.data.records else 0
        self.baseline_requested.emit(after)

    def update_controls(self, values: ControlValues) -> None:
        """Forward a (coalesced) control change to the running loop; it applies at the next iteration."""
        if not self.state.active:
            return
        try:
            self.controls.update(k=values.k, temperature=values.temperature, top_k=values.top_k,
                                      top_p=values.top_p, adaptive_k=values.adaptive_k)
        except InvalidControl as exc:
            self.error.emit(str(exc))

    def _autosave_problem(self) -> None:
        """A recorder that stopped mid-run (a full disk, an event the format cannot hold) says so once the run
        ends: the run went on, but its safety net did not."""
        problem = getattr(self.recorder, "error", None)
        if problem:
            self.error.emit(f"{problem[:1].upper()}{problem[1:]}. The iterations on screen are complete: export "
                            "them with File ▸ Export trace.")

    def _on_finished(self, reason: str) -> None:
        if self._closed:
            return  # queued before shutdown: the window is gone
        self.catch_up()
        self._autosave_problem()
        self.run.open = False
        self.finish_reason = reason
        self._set_state(RunState.STOPPED if reason == "stop" else RunState.FINISHED)
        elapsed = time.monotonic() - self.run_started_at if self.run_started_at else 0.0
        self.message.emit(finish_sentence(reason, elapsed, len(self.data)), 8000)
        self.run_ended.emit(f"finished:{reason}")

    def _on_error(self, message: str) -> None:
        if self._closed:
            return
        self.catch_up()
        self._autosave_problem()
        self.run.open = False
        self.finish_reason = "error"
        self._set_state(RunState.FAILED)
        self.error.emit(f"The run stopped with an error: {message}. The {len(self.data)} iterations so far "
                        "are kept and can be exported.")
        self.run_ended.emit(f"error:{message}")

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
        self._check_worker()
        self._freezer.count(n_records)

    def drain_all(self) -> None:
        """Ingest everything the worker handed over, however long it takes (end of run, closing)."""
        self._pending.extend(self.host.buffer.drain())
        events = list(self._pending)
        self._pending.clear()
        n = self.ingest(events, record=True) if events else 0
        self.drained.emit(n)

    def catch_up(self) -> None:
        self.drain_all()

    def ingest(self, observed: list[Observed], record: bool = False) -> int:
        """Add events (each with the snapshot after it) to the run's data; returns how many were iterations."""
        n_before = len(self.data.records)
        had_started = self.data.started
        self.data.extend(observed)
        if self._baseline_wanted:
            self._mark_requested_baseline(self.data.records[n_before:])
        new_records = self.data.records[n_before:]
        if new_records:
            self.records_added.emit(new_records)
        drills = [e for e, _ in observed if isinstance(e, DrillEvent)]
        if drills:
            self.drill_changed.emit(drills)
        if self.data.started is not had_started:
            self.shown_run.emit(self.data.started, self.replay_path is not None)
        return len(new_records)

    def _mark_requested_baseline(self, records: list[IterationRecord]) -> None:
        """The first plain step after the user's request gets a marker on the plots and a message."""
        for r in records:
            if r.mode == PLAIN_MODE:
                self._baseline_wanted = False
                self.data.markers.append(Marker(r.iteration, f"baseline {r.verify_ms:.1f} ms"))
                self.message.emit(f"Baseline measured at iteration {r.iteration}: plain step "
                                  f"{r.verify_ms:.1f} ms (its token is kept)", 8000)
                return

    def feed(self, events: list[Event]) -> int:
        """Ingest events that come without snapshots (a benchmark's or a test's stream): they are fed through
        this run's own measurement first, as a session would."""
        if self._measurement is None:
            from specscope.core.measure.run import Run

            self._measurement = Run(keep_snapshots=False)
        return self.ingest([(e, self._measurement.feed(e)) for e in events])

    def reset_data(self) -> None:
        from specscope.core.measure.run import Run

        self._pending.clear()
        self._baseline_wanted = False
        self._measurement = Run(keep_snapshots=False)
        self.data = RunData()
        self.data_reset.emit()

    def replay(self, trace: LoadedTrace, path: str) -> None:
        """Show a saved run: its events fed through a new measurement, exactly as the live run fed them; the
        window shows the trace's pair, prompt, controls and end. A loaded pair stays loaded."""
        from specscope.core.measure.run import feed_all

        self.reset_data()
        self.replay_path = path
        observed = list(feed_all(trace.events))
        self.ingest(observed)
        finished: RunFinished | None = self.data.finished
        # a trace without an end: its process was killed or crashed (an autosaved session recovered)
        self.finish_reason = finished.reason if finished is not None else (NO_END_REASON if self.data.records
                                                                           else "")
        if self.data.started is None:
            self.shown_run.emit(None, True)
        self._set_state(RunState.REPLAY)

    @property
    def shown(self) -> RunStarted | None:
        """What run the data on screen is (None before any, or a trace that does not say)."""
        return self.data.started

    # ---- closing ---------------------------------------------------------------------------------------
    def shutdown(self) -> bool:
        """Stop the tick and any run, end the worker thread, flush autosave. True if the worker ended."""
        self.timer.stop()
        self._closed = True
        if self.run.open:
            self.run.shutdown()
        self._cancel_trial()
        self.link.close()
        ended = self.host.shutdown()
        if ended:
            self.drain_all()
        if not ended:
            log.warning("the worker did not stop in time (still inside a model call)")
        return ended
