"""The window's link to a worker process: one the app spawned for the chosen pair, or one the user connected to.

A local run does not decode in the window's process: the app starts ``specscope serve`` for the pair (spawned,
never forked, by ``core.remote.spawn``) and talks to it through the worker protocol, exactly as File ▸ Connect
to worker… talks to a remote one. So the window's process never imports torch and never holds the GIL with a
model, and a worker that crashes (kill -9, a segfault, out of memory) leaves the window standing.

Starting a worker (the whole model load) and connecting both block: they run on a plain Python thread here and
report on the GUI thread through signals (``connected`` with the welcome's worker description, or ``failed``
with one sentence). The link never touches a widget.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
from typing import Any

from PySide6.QtCore import QObject, Signal

from specscope.core.remote.client import WorkerClient, WorkerError, WorkerRefused
from specscope.core.remote.spawn import LocalWorker, WorkerStartError
from specscope.core.remote.spawn import spawn_worker as spawn_local
from specscope.core.remote.url import WorkerAddress

_BAR_RE = re.compile(r"^(.*?):?\s*(\d+)%\|")
_PROGRESS_RE = re.compile(r"^\[\s*(\d+(?:\.\d+)?)%\]\s*(.*)$")


def spawn_worker(model_args: list[str], on_stderr: Any = None) -> LocalWorker:
    """``python -m specscope serve MODEL_ARGS --port 0 --exit-with-parent`` in a process of its own, returned at
    once (its address comes with ``wait_ready``); it ends with this process, even one killed with kill -9
    (``core.remote.spawn``). The engine may use every core but one: the window keeps one to draw on."""
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 2) - 1)))
    return spawn_local(model_args, env=env, on_stderr=on_stderr)


def progress_line(line: str) -> tuple[str, float] | None:
    """A worker's stderr line worth showing as loading progress (``[ 97.0%] Packing …``: the step and its
    fraction, -1 when it gives none), or None."""
    text = line.rsplit("\r", 1)[-1].strip()  # a progress bar redraws itself with carriage returns
    if not text or text.startswith(("specscope serve:", "specscope: error:", "Traceback", "File ")):
        return None
    bar = _BAR_RE.match(text)  # a library's progress bar: "Loading weights:  45%|####      | 122/272 […]"
    if bar is not None:
        return bar[1].strip()[:200], float(bar[2]) / 100.0
    m = _PROGRESS_RE.match(text)
    if m is None:
        return text.removeprefix("specscope: ")[:200], -1.0
    return m[2][:200], float(m[1]) / 100.0


class WorkerLink(QObject):
    """One worker at a time. ``connected``/``failed`` arrive on the GUI thread."""

    connected = Signal(object)  # the welcome's worker description (pair, device, pid, version)
    failed = Signal(str)  # one sentence (its full stop optional): the worker did not come up, or refused us
    progress = Signal(str, float)  # a loading step the worker reported, and its fraction (-1 = unknown)
    swap_refused = Signal(str)  # the worker kept its drafter (one sentence); the connection stays

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.client: WorkerClient | None = None
        self.local: LocalWorker | None = None
        self.address: WorkerAddress | None = None
        self.info: dict[str, Any] = {}
        self._thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self._lock = threading.Lock()

    # ---- what the window reads ---------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Connected and able to start a run."""
        return self.client is not None and not self.client.closed

    @property
    def busy(self) -> bool:
        """Starting a worker or connecting."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def pair_info(self) -> dict[str, Any]:
        pair = self.info.get("pair")
        return pair if isinstance(pair, dict) else {}

    def process_gone(self) -> str | None:
        """A sentence when this app's own worker process has ended (killed, crashed), else None."""
        local = self.local
        if local is None or self.busy:  # a remote worker, or this app's not started yet
            return None
        code = local.process.poll()
        if code is None:
            return None
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        return f"The worker process (pid {local.pid}) {how}"

    def lose(self, said: str) -> str:
        """The connection is gone: close the link (its address stays, for the way back: reconnect) and return the
        sentence to show, this app's worker's own end when it died, else what the connection said."""
        local = self.local
        if local is not None:  # this app's own worker
            with contextlib.suppress(subprocess.TimeoutExpired):
                local.process.wait(0.5)  # its end is what closed the connection: it is being reaped now
            said = self.process_gone() or said
        self.close()
        return said

    # ---- starting and connecting (the blocking part on a thread) ------------------------------------------
    def start_local(self, model_args: list[str]) -> None:
        """Spawn a worker for these model options and connect to it."""
        self.close()
        self._begin(lambda: self._spawn_and_connect(model_args))

    def connect_remote(self, address: WorkerAddress) -> None:
        """Connect to a worker someone started with ``specscope serve`` (this app's own worker is stopped)."""
        self.close()
        self.address = address
        self._begin(lambda: self._connect(address))

    def swap_drafter(self, kind: str) -> None:
        """Ask the connected worker (this app's or a remote one) to swap in drafter ``kind`` with its target
        still loaded; ``connected`` follows with the new pair, or ``swap_refused`` with the worker's sentence."""
        client = self.client
        if client is None:
            raise RuntimeError("no worker to swap the drafter on")

        def swap() -> None:
            try:
                pair = client.swap_drafter(kind)
            except WorkerRefused as exc:
                if not self._cancel.is_set():
                    self.swap_refused.emit(" ".join(str(exc).split()))
                return
            with self._lock:
                if self._cancel.is_set():
                    return
                self.info = {**self.info, "pair": pair}
            self.connected.emit(self.info)

        self._begin(swap)

    def _begin(self, work: Any) -> None:
        self._cancel.clear()
        self._thread = threading.Thread(target=self._guarded, args=(work,), name="specscope-worker-link",
                                        daemon=True)
        self._thread.start()

    def _guarded(self, work: Any) -> None:
        try:
            work()
        except (WorkerError, WorkerStartError) as exc:
            if not self._cancel.is_set():
                self.failed.emit(" ".join(str(exc).split()))
        except Exception as exc:  # a link failing in a way nobody foresaw is still one sentence, never a crash
            if not self._cancel.is_set():
                self.failed.emit(f"the worker link failed: {type(exc).__name__}: {exc}")

    def _spawn_and_connect(self, model_args: list[str]) -> None:
        def heard(line: str) -> None:
            step = progress_line(line)
            if step is not None and not self._cancel.is_set():
                self.progress.emit(*step)

        with self._lock:
            if self._cancel.is_set():
                return
            local = self.local = spawn_worker(model_args, heard)
        address = local.wait_ready()  # close() from the GUI thread stops the process, which ends this wait
        self._connect(address)

    def _connect(self, address: WorkerAddress) -> None:
        client = WorkerClient.connect(address)
        with self._lock:
            if self._cancel.is_set():
                client.close()
                return
            self.client = client
            self.address = address
            self.info = dict(client.worker_info)
        self.connected.emit(self.info)

    # ---- closing -----------------------------------------------------------------------------------------
    def close(self, timeout_s: float = 15.0) -> None:
        """Drop the connection and stop this app's own worker process (a remote one keeps serving)."""
        self._cancel.set()
        with self._lock:
            client, local = self.client, self.local
            self.client, self.local, self.info = None, None, {}
        if client is not None:
            client.close()
        if local is not None:
            local.stop()  # also ends a wait for its address: the pipe closes
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_s)
        self._thread = None

