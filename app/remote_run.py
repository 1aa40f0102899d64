"""A run decoded by a worker process, as a source of the window's event stream like a local decode.

The worker sends the run's events and nothing derived. A plain Python thread here reads them
(``WorkerClient.start``) and does on the window's side what a local session does on its own thread
(``core.measure.run.Run``): feeds each event to the run's measurement, the one owner of its numbers,
and hands the event with the snapshot after it to the sinks, the window's buffer (drained by the run
controller's tick, like a local run's and an attached run's) and the autosave recorder. The reader never
touches a widget; how the run ended arrives on the GUI thread through ``ended``.

The control panel's controls reach the worker as control messages (:class:`RemoteControls`, the same methods
as ``core.controls.Controls``), applied there between iterations. Events received are kept whatever happens:
a worker that dies mid-run leaves them on screen and in the autosave, and nothing is invented after them.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from specscope.app.worker import RecordBuffer, RunRequest
from specscope.core.controls import validate
from specscope.core.events import Event
from specscope.core.measure.run import Run
from specscope.core.measure.snapshot import Estimate
from specscope.core.records import ControlValues
from specscope.core.remote.client import WorkerClient, WorkerLost, WorkerRefused
from specscope.core.remote.options import OPTION_FIELDS
from specscope.core.trace.autosave import SessionRecorder, start_recorder

FINISHED, REFUSED, LOST = "finished", "refused", "lost"


class RemoteControls:
    """``Controls`` for a run on a worker: each change is checked here (the same sentence as a local run's
    controls give) and sent as a control message. A send to a worker that is gone does nothing: the reading
    thread reports the loss once, with what arrived."""

    def __init__(self, client: WorkerClient, values: ControlValues) -> None:
        self._client = client
        self._values = validate(values)
        self._paused = False

    @property
    def values(self) -> ControlValues:
        return self._values

    @property
    def paused(self) -> bool:
        return self._paused

    def update(self, **changes: Any) -> ControlValues:
        new = validate(replace(self._values, **changes))  # InvalidControl: one sentence, nothing sent
        sent = {name: getattr(new, name) for name in changes}
        if self._send(lambda: self._client.set_controls(**sent)):
            self._values = new
        return new

    def pause(self) -> None:
        self._paused = True
        self._action("pause")

    def resume(self) -> None:
        self._paused = False
        self._action("resume")

    def stop(self, reason: str = "stop") -> None:
        self._action("stop")

    def request_baseline(self) -> None:
        self._action("baseline")

    def start_drill(self, spec: Any) -> None:
        """A ``DrillSpec`` (core/drill_spec.py) as data: the worker runs the drill on its own pair."""
        self._action("drill", spec={"model": spec.model, "layers": spec.layers, "start": spec.start,
                                    "end": spec.end})

    def end_drill(self) -> None:
        self._action("end_drill")

    def _action(self, name: str, **data: Any) -> None:
        self._send(lambda: self._client.action(name, **data))

    @staticmethod
    def _send(send: Any) -> bool:
        try:
            send()
        except WorkerLost:
            return False
        return True


def worker_options(request: RunRequest) -> dict[str, Any]:
    """A start message's options: the request's session options a worker takes (the rest are the worker's)."""
    options: dict[str, Any] = {"max_new_tokens": request.max_new_tokens, "seed": request.seed,
                               "plain": request.plain, "memory_period_s": request.memory_period_s}
    options.update({name: value for name, value in request.extra.items() if name in OPTION_FIELDS})
    return options


class RemoteRun(QObject):
    """One run on a worker, read on its own thread; ``ended`` (how, and the finish reason or a sentence) arrives
    on the GUI thread: FINISHED with the reason, REFUSED (the run did not start) or LOST (the worker went away
    mid-run) with one sentence."""

    ended = Signal(str, str)
    notice = Signal(str)

    def __init__(self, client: WorkerClient, request: RunRequest, values: ControlValues, buffer: RecordBuffer,
                 sessions_dir: Path | None, keep_sessions: int = 0, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.client = client
        self.request = request
        self.controls = RemoteControls(client, values)
        self.buffer = buffer
        self.sessions_dir = sessions_dir
        self.keep_sessions = keep_sessions
        self.recorder: SessionRecorder | None = None
        self.received = Run(sinks=[self._hand_over], keep_snapshots=False)
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="specscope-worker-reader", daemon=True)
        self._thread.start()

    def _hand_over(self, event: Event, snapshot: Estimate | None) -> None:
        """The received run's sink: the buffer first (the window), then the autosave, opened on the first
        event (a start the worker refuses leaves no empty session folder)."""
        self.buffer.push(event, snapshot)
        if self.recorder is None and self.sessions_dir is not None:
            self.recorder, problem = start_recorder(self.sessions_dir, self.request.meta, self.keep_sessions)
            self.sessions_dir = None  # one try: a recorder that could not start says so once
            if problem:
                self.notice.emit(problem)
        if self.recorder is not None:
            self.recorder(event, snapshot)

    def _run(self) -> None:
        how, text = FINISHED, "stop"
        try:
            for event in self.client.start(self.request.prompt, self.controls.values, worker_options(self.request)):
                self.received.feed(event)
        except WorkerRefused as exc:
            how, text = REFUSED, str(exc)
        except WorkerLost as exc:
            how, text = LOST, str(exc)
        except Exception as exc:  # an event the client could not take: what arrived stays
            how, text = LOST, f"The worker's stream failed: {type(exc).__name__}: {exc}."
        finished = self.received.finished
        if how == FINISHED:
            if finished is None:  # the connection was closed on purpose (the window closing)
                how, text = LOST, "The connection to the worker was closed before the run ended."
            else:
                text = finished.reason
        if self.recorder is not None:  # as a local run closes it: ok unless the run failed or was cut off
            failed = how != FINISHED or text == "error"
            self.recorder.close(ok=not failed, reason=("worker lost" if how == LOST else "error") if failed else "")
        self.ended.emit(how, text)

    def stop(self, timeout_s: float = 10.0) -> None:
        """End the run and the reading thread (closing the window): stop, then wait for the worker to finish."""
        self.controls.resume()
        self.controls.stop()
        if self._thread is not None:
            self._thread.join(timeout_s)
            if self._thread.is_alive():  # the worker does not answer: close the connection under the reader
                self.client.close()
                self._thread.join(timeout_s)
