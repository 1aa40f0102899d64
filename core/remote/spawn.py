"""A worker on this machine: ``python -m specscope serve … --port 0 --exit-with-parent`` in a process of its own.

Spawned with ``subprocess`` (a fresh interpreter, never a fork of the caller: a forked GUI would carry Qt's
threads and locks into the child). The worker prints one URL line on stdout once its pair is loaded; its
stderr (loading progress, then one sentence when it fails) is read by a thread here, so the pipe never fills,
and kept (the last lines) for the sentence a failed start gives. Its stdin is a pipe this process holds and
never writes to: when this process ends, however it ends (kill -9 included), the pipe closes and the worker
stops by itself (``core.remote.parent``), so no worker outlives its spawner with a model in memory.
"""

from __future__ import annotations

import collections
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence

from specscope.core.remote.parent import EXIT_WITH_PARENT_OPTION
from specscope.core.remote.url import BadWorkerUrl, WorkerAddress, parse_worker_url

START_TIMEOUT_S = 600.0  # loading a large pair from a cold disk takes minutes
STOP_TIMEOUT_S = 10.0
_STDERR_LINES_KEPT = 50


class WorkerStartError(RuntimeError):
    """The worker process did not come up; ``str(e)`` is one sentence (the worker's own, when it said one)."""


class LocalWorker:
    """A spawned worker process and the address (token included) it printed."""

    def __init__(self, process: subprocess.Popen[bytes], on_stderr: Callable[[str], None] | None = None):
        self.process = process
        self.address: WorkerAddress | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES_KEPT)
        self._on_stderr = on_stderr
        self._stderr_thread = threading.Thread(target=self._read_stderr, name="specscope-worker-stderr",
                                               daemon=True)
        self._stderr_thread.start()

    @property
    def pid(self) -> int:
        return self.process.pid

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for raw in self.process.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self._stderr.append(line)
            if self._on_stderr is not None:
                with contextlib.suppress(Exception):  # a callback's failure must not stop the draining
                    self._on_stderr(line)

    def stderr_tail(self) -> list[str]:
        return list(self._stderr)

    def alive(self) -> bool:
        return self.process.poll() is None

    def wait_ready(self, timeout_s: float = START_TIMEOUT_S) -> WorkerAddress:
        """The address the worker prints once its pair is loaded (kept in ``address``); WorkerStartError with
        its own sentence if it does not come up, the process then stopped."""
        self.address = self._wait_url(timeout_s)
        return self.address

    def _wait_url(self, timeout_s: float) -> WorkerAddress:
        assert self.process.stdout is not None
        result: list[bytes] = []
        reader = threading.Thread(target=lambda: result.append(self.process.stdout.readline()),  # type: ignore[union-attr]
                                  name="specscope-worker-url", daemon=True)
        reader.start()
        reader.join(timeout_s)
        if not result:
            self.stop()
            raise WorkerStartError(f"the worker printed no address within {timeout_s:g} s")
        line = result[0].decode("utf-8", "replace").strip()
        if not line:
            code = self.process.wait()
            self._stderr_thread.join(timeout=5.0)
            said = next((ln.removeprefix("specscope: error: ") for ln in reversed(self._stderr)
                         if ln.startswith("specscope: error: ")), None)
            raise WorkerStartError(said or f"the worker exited with code {code} before it was ready")
        try:
            return parse_worker_url(line)
        except BadWorkerUrl:
            self.stop()
            raise WorkerStartError("the worker printed something other than its address") from None

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> int:
        """Terminate (SIGTERM: the run under way ends at its next iteration), kill after ``timeout_s``,
        reap; the exit code. Safe to call more than once."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.terminate()
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdin, self.process.stdout, self.process.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        self._stderr_thread.join(timeout=5.0)
        return int(self.process.returncode)

    def __enter__(self) -> LocalWorker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_worker(model_args: Sequence[str], *, python: str | None = None, host: str = "127.0.0.1",
                 env: dict[str, str] | None = None, on_stderr: Callable[[str], None] | None = None) -> LocalWorker:
    """Spawn a worker for ``model_args`` and return at once (``wait_ready`` or ``start_local_worker`` wait for
    its address). Its stdin is the pipe that ends it with this process (``--exit-with-parent``)."""
    command = [python or sys.executable, "-m", "specscope", "serve", *model_args, "--host", host, "--port", "0",
               EXIT_WITH_PARENT_OPTION]
    child_env = dict(os.environ if env is None else env)
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    try:
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, env=child_env, close_fds=True)
    except OSError as exc:
        raise WorkerStartError(f"could not start the worker process: {exc.strerror or exc}") from None
    return LocalWorker(process, on_stderr)


def start_local_worker(model_args: Sequence[str], *, python: str | None = None, host: str = "127.0.0.1",
                       timeout_s: float = START_TIMEOUT_S, env: dict[str, str] | None = None,
                       on_stderr: Callable[[str], None] | None = None) -> LocalWorker:
    """Spawn a worker for ``model_args`` (``["--demo"]``, ``["--target", DIR, "--draft", DIR]``, …) and wait
    until it prints its address; WorkerStartError with one sentence when it does not come up."""
    started = time.monotonic()
    worker = spawn_worker(model_args, python=python, host=host, env=env, on_stderr=on_stderr)
    try:
        worker.wait_ready(max(1.0, timeout_s - (time.monotonic() - started)))
    except BaseException:
        worker.stop()
        raise
    return worker
