"""An attached server as a source of the run's event stream, like a local decode.

``core.attach.client.attach`` is blocking I/O (no torch); it runs on a plain Python thread here. That thread is the
attached run's session: it emits ``RunStarted``, every verify pass the engine reports, and ``RunFinished``;
feeds each event to the run's measurement (the one owner of its numbers); and hands the event with the snapshot
after it to the sinks — the window's buffer, drained by the run controller's tick like a local run's, and the
autosave recorder. The API key comes from the environment only and is never recorded.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QObject, Signal

from specscope.app.worker import RecordBuffer
from specscope.core.attach.client import AttachResult, attach
from specscope.core.attach.options import AttachError, AttachOptions, redact_url
from specscope.core.events import Event, RunFinished, RunStarted
from specscope.core.measure.run import Run
from specscope.core.records import ControlValues, IterationRecord
from specscope.core.trace.autosave import SessionRecorder, start_recorder


class AttachRunner(QObject):
    """One attached request off the GUI thread; ``finished`` (the error, or "") arrives on the GUI thread."""

    finished = Signal(str)
    notice = Signal(str)

    def __init__(self, options: AttachOptions, buffer: RecordBuffer, sessions_dir: Path, keep_sessions: int = 0,
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.options = options
        self.buffer = buffer
        self.sessions_dir = Path(sessions_dir)
        self.keep_sessions = keep_sessions
        self.cancel = threading.Event()
        # the attach client only yields records: this run measures them (the window keeps the snapshots)
        self.run = Run(sinks=[buffer.push], keep_snapshots=False)
        self.recorder: SessionRecorder | None = None
        self.result: AttachResult | None = None
        self.shown_url = redact_url(options.url)
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> None:
        self.cancel.clear()
        self._thread = threading.Thread(target=self._run, name="specscope-attach", daemon=True)
        self._thread.start()

    def _emit(self, event: Event) -> None:
        self.run.feed(event)
        if self.recorder is not None:
            self.recorder.append(event)

    def _run(self) -> None:
        o = self.options
        meta: dict[str, Any] = {"attach": self.shown_url, "prompt": o.prompt, "max_tokens": o.max_tokens,
                                "pair_description": f"attached to {self.shown_url}", "app": "specscope desktop"}
        self.recorder, problem = start_recorder(self.sessions_dir, meta, self.keep_sessions)
        if problem:
            self.notice.emit(problem)
        started = time.monotonic()
        self._emit(RunStarted(source="attach", target=o.model or self.shown_url, draft="", drafter="engine",
                              description=f"attached to {self.shown_url}", prompt=o.prompt, prompt_tokens=0,
                              controls=ControlValues(k=0, temperature=o.temperature), max_new_tokens=o.max_tokens,
                              t_s=started))
        try:
            result = attach(o, on_record=self._emit, cancel=self.cancel)
        except AttachError as exc:
            result = AttachResult(records=[], text="", session={}, scrapes=[], final_timings=None, error=str(exc))
        except Exception as exc:  # the server said something the client did not expect: keep what arrived
            result = AttachResult(records=[], text="", session={}, scrapes=[], final_timings=None,
                                  error=f"{type(exc).__name__}: {exc}")
        self.result = result
        rec = result.reconciliation
        if rec is not None and (rec.records_are_estimates or result.records_rebuilt or not rec.all_exact):
            # The window drew the passes as they streamed; where those were estimates, or the engine's report
            # rebuilt them afterwards, it says which figures hold and why, in one line.
            shown = ("the passes shown are as streamed; " if result.records_rebuilt or rec.records_are_estimates
                     else "")
            self.notice.emit(f"{shown}{rec.figures_line()}; {rec.line}")
        records: list[IterationRecord] = result.records
        last = records[-1].finish_reason if records else ""
        reason = "error" if result.error else "stop" if self.cancel.is_set() else last or "stop"
        self._emit(RunFinished(reason=reason, iterations=len(records), tokens=sum(r.n_emitted for r in records),
                               elapsed_s=time.monotonic() - started, prefill_ms=result.ttft_ms or 0.0,
                               error=result.error or "", t_s=time.monotonic()))
        if self.recorder is not None:
            self.recorder.close(ok=not result.error, reason=reason)
        self.finished.emit(result.error or "")

    def stop(self, timeout_s: float = 5.0) -> None:
        self.cancel.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)
