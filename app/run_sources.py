"""Where the window's runs come from, one object per kind, so that the run controller never asks which it has.

Two roles, each a small Protocol:

- a :class:`PairSource` is where Start decodes: the pair loaded in the window's own process
  (:class:`InProcessPair`, tests and ``SPECSCOPE_IN_PROCESS=1``), the worker process this app spawned for the
  chosen pair (:class:`LocalWorker`) or a worker someone started with ``specscope serve`` (:class:`RemoteWorker`).
  It says what the user may do with it (restart it and in which words, switch its drafter, read its device) and
  starts a run on it.
- a :class:`LiveRun` is the run whose events are arriving: one decoding on a thread of this process
  (:class:`InProcessRun`), on a worker (:class:`WorkerRun`) or an attached server's request (:class:`AttachRun`).
  It takes the control panel's intents (pause, stop, baseline, new controls) and holds the run's autosave.

A replay is neither: its events are fed at once (``RunController.replay``) and nothing runs.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from specscope.app.remote_run import RemoteRun
from specscope.core.controls import Controls
from specscope.core.drafter_catalogue import IN_PLACE_DRAFTERS

if TYPE_CHECKING:
    from PySide6.QtCore import QObject

    from specscope.app.attach_source import AttachRunner
    from specscope.app.pair_choice import PairChoice
    from specscope.app.worker import RecordBuffer, RunRequest, WorkerHost
    from specscope.app.worker_link import WorkerLink
    from specscope.core.engine.pair import ModelPair
    from specscope.core.records import ControlValues

__all__ = ["AttachRun", "InProcessPair", "InProcessRun", "LiveRun", "LocalWorker", "PairSource", "RemoteWorker",
           "WorkerRun"]


class PairSource(Protocol):
    """Where Start decodes, and what the window may do with it."""

    @property
    def on_worker(self) -> bool:
        """Runs decode in a worker process (this app's own or a remote one), which can be lost and restarted."""

    @property
    def failure_is_connection(self) -> bool:
        """A failure to come up is a refused connection (the pair in use was someone else's), not a failed load."""

    @property
    def restart_label(self) -> str:
        """The banner's way back once the worker is gone."""

    @property
    def pair(self) -> ModelPair | None:
        """The pair loaded in this process (only on the in-process path; a worker holds its own)."""

    @property
    def description(self) -> str:
        """The pair in the words the window shows once it is ready."""

    @property
    def pair_drafter(self) -> str:
        """The drafter kind of the loaded pair ("" when nothing says)."""

    @property
    def device(self) -> str:
        """The target's device ("" before a load)."""

    def drafter_started(self, chosen: str) -> str:
        """The drafter Start runs, given the one ``chosen`` in the window."""

    def drafter_switch_refusal(self, kind: str, in_use: str) -> str | None:
        """Why the drafter cannot be switched to ``kind`` here (one sentence), or None when a reload or a swap
        does it."""

    def own_drafter_in_use(self) -> str:
        """The drafter this app's own pair now runs, when a swap changed it ("" where the pair is not the app's)."""

    def add_run_meta(self, meta: dict[str, Any]) -> None:
        """Add what the session's sidecar should say of where the run decodes."""

    def restart(self, choice: PairChoice) -> str | None:
        """Start the lost worker again (or reconnect); the progress sentence, or None when there is no way back."""

    def process_gone(self) -> str | None:
        """A sentence when this app's own worker process has ended between runs, else None."""

    def start_run(self, request: RunRequest, values: ControlValues, buffer: RecordBuffer, parent: QObject | None,
                  ended: Callable[[str, str], None], notice: Callable[[str], None]) -> LiveRun | None:
        """Start a run on this pair, its events pushed to ``buffer``; None when the pair is gone. A worker's run
        ends through ``ended`` (how, and the reason or a sentence: ``remote_run``) and says what the user should
        know through ``notice``; the in-process run ends through the host's own signals."""


class InProcessPair:
    """The pair loaded on the window's worker thread (``WorkerHost``): nothing to lose or reconnect."""

    on_worker = False
    failure_is_connection = False
    restart_label = ""

    def __init__(self, host: WorkerHost) -> None:
        self._host = host

    @property
    def pair(self) -> ModelPair | None:
        return self._host.worker.pair

    @property
    def description(self) -> str:
        return ""  # the worker thread's ``loaded`` signal carries it

    @property
    def pair_drafter(self) -> str:
        return str(getattr(getattr(self.pair, "drafter", None), "name", "") or "")

    @property
    def device(self) -> str:
        device = getattr(getattr(self.pair, "target", None), "device", None)
        return str(device) if device is not None else ""

    def drafter_started(self, chosen: str) -> str:
        return chosen

    def drafter_switch_refusal(self, kind: str, in_use: str) -> str | None:
        return None

    def own_drafter_in_use(self) -> str:
        return ""  # the in-process path reloads the pair on a drafter change: the choice is what runs

    def add_run_meta(self, meta: dict[str, Any]) -> None:
        pass

    def restart(self, choice: PairChoice) -> str | None:
        return None

    def process_gone(self) -> str | None:
        return None

    def start_run(self, request: RunRequest, values: ControlValues, buffer: RecordBuffer, parent: QObject | None,
                  ended: Callable[[str, str], None], notice: Callable[[str], None]) -> LiveRun | None:
        self._host.start(request, values)
        return InProcessRun(self._host)


class _WorkerPair:
    """What this app's worker and a remote one share: the pair the worker's welcome described."""

    on_worker = True
    pair = None

    def __init__(self, link: WorkerLink) -> None:
        self.link = link

    @property
    def description(self) -> str:
        pair = self.link.pair_info
        return str(pair.get("description") or pair.get("target") or "a worker's pair")

    @property
    def pair_drafter(self) -> str:
        return str(self.link.pair_info.get("drafter") or "")

    @property
    def device(self) -> str:
        return str(self.link.info.get("device") or "")

    def start_run(self, request: RunRequest, values: ControlValues, buffer: RecordBuffer, parent: QObject | None,
                  ended: Callable[[str, str], None], notice: Callable[[str], None]) -> LiveRun | None:
        client = self.link.client
        if client is None:
            return None
        sessions = Path(request.sessions_dir) if request.sessions_dir is not None else None
        run = RemoteRun(client, request, values, buffer, sessions, request.keep_sessions, parent)
        run.ended.connect(ended)
        run.notice.connect(notice)
        run.start()
        return WorkerRun(run)


class LocalWorker(_WorkerPair):
    """The worker process this app spawned for the chosen pair: the window's drafter choice is what it loads,
    and a lost one is started again with the same pair."""

    failure_is_connection = False
    restart_label = "Restart the worker"

    def drafter_started(self, chosen: str) -> str:
        return chosen

    def drafter_switch_refusal(self, kind: str, in_use: str) -> str | None:
        return None

    def own_drafter_in_use(self) -> str:
        return self.pair_drafter  # a swap in this app's worker changes what the window's choice runs

    def add_run_meta(self, meta: dict[str, Any]) -> None:
        pass

    def restart(self, choice: PairChoice) -> str | None:
        self.link.start_local(choice.worker_args())
        return f"Restarting the worker: loading {choice.describe()}…"

    def process_gone(self) -> str | None:
        return self.link.process_gone()


class RemoteWorker(_WorkerPair):
    """A worker someone started with ``specscope serve``: its pair and drafter are its own (decoding must not
    move from the GPU server to this machine unasked), and a lost one is reconnected."""

    failure_is_connection = True
    restart_label = "Reconnect"

    @property
    def description(self) -> str:
        address = self.link.address
        where = f" (worker at {address.netloc})" if address is not None else ""
        return super().description + where

    def drafter_started(self, chosen: str) -> str:
        return self.pair_drafter or chosen

    def drafter_switch_refusal(self, kind: str, in_use: str) -> str | None:
        if kind in IN_PLACE_DRAFTERS:
            return None  # swapped on that worker, which keeps its target loaded
        where = self.link.address.netloc if self.link.address is not None else "the remote worker"
        return (f"The worker at {where} decodes its own pair with {in_use or 'its drafter'}: start it with "
                f"`specscope serve --drafter {kind}` to use {kind} there, or load a pair on this machine with "
                "Models ▸ Choose models… (Ctrl+M)")

    def own_drafter_in_use(self) -> str:
        return ""  # the pair is the worker's own, not the window's choice

    def add_run_meta(self, meta: dict[str, Any]) -> None:
        if self.link.address is not None:
            meta.update(pair=self.link.pair_info, worker=self.link.address.redacted())  # never the token

    def restart(self, choice: PairChoice) -> str | None:
        if self.link.address is None:
            return None
        self.link.connect_remote(self.link.address)
        return "Reconnecting to the worker…"

    def process_gone(self) -> str | None:
        return None  # not this app's process: its loss shows as the connection's


class LiveRun(Protocol):
    """The run whose events are arriving: the control panel's intents go to it, and it holds the autosave."""

    open: bool  # its end has not been handled yet

    @property
    def controls(self) -> Any:
        """``core.controls.Controls`` or the same methods (pause, resume, stop, request_baseline, update, drills)."""

    @property
    def recorder(self) -> Any:
        """The run's autosave recorder, if it has one."""

    @property
    def reads_worker(self) -> bool:
        """The run is reading a worker's connection: while it is open, the worker's loss is its to report."""

    def pause(self, paused: bool) -> bool:
        """Pause or resume; False when this run cannot be paused from here."""

    def stop(self, paused: bool) -> None:
        """End the run at its next step (``paused``: a paused loop must wake up to see the stop)."""

    def shutdown(self) -> None:
        """The window is closing: end the run and whatever thread reads it."""

    def failure(self) -> str:
        """What went wrong, as the run's own end said it ("" when it does not say)."""


class _SteeredRun:
    """A run decoded by specscope's own loop, steered through its controls."""

    open: bool

    @property
    def controls(self) -> Any:
        raise NotImplementedError

    def pause(self, paused: bool) -> bool:
        if paused:
            self.controls.pause()
        else:
            self.controls.resume()
        return True

    def stop(self, paused: bool) -> None:
        if paused:
            self.controls.resume()
        self.controls.stop()

    def failure(self) -> str:
        return ""


class InProcessRun(_SteeredRun):
    """A run on the window's worker thread; before any run, the host's idle controls and recorder."""

    def __init__(self, host: WorkerHost) -> None:
        self._host = host
        self.open = False

    @property
    def controls(self) -> Any:
        return self._host.controls

    @property
    def recorder(self) -> Any:
        return self._host.worker.recorder

    @property
    def reads_worker(self) -> bool:
        return False

    def shutdown(self) -> None:
        pass  # the host's own shutdown stops it


class WorkerRun(_SteeredRun):
    """A run on a worker process, read by ``RemoteRun``'s thread; its controls go as control messages."""

    def __init__(self, run: RemoteRun) -> None:
        self.run = run
        self.open = False

    @property
    def controls(self) -> Any:
        return self.run.controls

    @property
    def recorder(self) -> Any:
        return self.run.recorder

    @property
    def reads_worker(self) -> bool:
        return self.open

    def shutdown(self) -> None:
        self.run.stop()  # the worker ends the run at its next iteration; its last events arrive

    def failure(self) -> str:
        finished = self.run.received.finished
        return finished.error if finished is not None else ""


class AttachRun:
    """An attached server's request: it cannot be paused or steered from here, only cancelled (its controls
    are idle ones: a baseline or a control change asked for meanwhile goes nowhere)."""

    def __init__(self, runner: AttachRunner) -> None:
        self.runner = runner
        self.open = False
        self._idle_controls = Controls()

    @property
    def controls(self) -> Any:
        return self._idle_controls

    @property
    def recorder(self) -> Any:
        return self.runner.recorder

    @property
    def reads_worker(self) -> bool:
        return False

    def pause(self, paused: bool) -> bool:
        return False

    def stop(self, paused: bool) -> None:
        self.runner.cancel.set()

    def shutdown(self) -> None:
        self.runner.stop()

    def failure(self) -> str:
        return (self.runner.result.error or "") if self.runner.result is not None else ""
