"""A warm interpreter for the tests that run the CLI as a process of its own.

Starting ``python -m specscope.core.commands.cli`` costs ~10 s here (torch and transformers load), and a test that
sends real signals or hands the CLI a full disk needs a real process. So one interpreter imports every module
of ``specscope.core`` once per test session, and each run is a fork of it: a process of its own (its own pid,
signals, file descriptors, environment and exit code, Python's own exit path) that starts in milliseconds.

The same start-up answers tests/test_boundaries.py: a fresh interpreter that has imported every core module
reports which Qt modules it has loaded (none).

Server side: ``python -m tests.warm_python FD`` (FD one end of a SOCK_SEQPACKET socket pair). Client side:
``WarmPython`` (one per session, tests/conftest.py's ``warm_python`` fixture) and ``WarmRun``, which answers
like ``subprocess.Popen`` for what the tests use.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parents[1]
QT_MODULES = ("PySide6", "PyQt5", "PyQt6", "PySide2", "pyqtgraph", "qtpy")
MESSAGE_BYTES = 1 << 20


# ---- the server: the warm interpreter ------------------------------------------------------------------------


def _send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    if fds:
        socket.send_fds(sock, [data], fds)
    else:
        sock.send(data)


def _become_the_run(sock: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child: take the run's stdio, environment, folder and argv, then run the CLI module as
    ``python -m`` would. Never returns: the run ends with SystemExit through Python's normal exit."""
    import random
    import runpy
    import tempfile

    sock.close()
    for std, fd in zip((0, 1, 2), fds, strict=True):
        os.dup2(fd, std)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    random.seed()  # a fresh process seeds from the OS; a fork would share the server's state
    tempfile._name_sequence = None  # type: ignore[attr-defined]  # the same for temporary names
    sys.modules.pop(request["module"], None)  # run it as __main__, as -m does, without runpy's double-import note
    sys.argv = [request["module"], *request["argv"]]
    runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


def serve(fd: int) -> None:
    import importlib
    import pkgutil

    import specscope.core

    sock = socket.socket(fileno=fd)
    modules = [m.name for m in pkgutil.walk_packages(specscope.core.__path__, "specscope.core.")]
    for name in modules:
        importlib.import_module(name)
    qt = sorted(m for m in sys.modules if m.split(".")[0] in QT_MODULES)
    _send(sock, {"core_modules": modules, "qt_modules": qt})
    while True:
        data, fds, _flags, _addr = socket.recv_fds(sock, MESSAGE_BYTES, 3)
        if not data:
            return  # the client closed its end: the session is over
        request = json.loads(data)
        pid = os.fork()
        if pid == 0:
            _become_the_run(sock, request, fds)
        for fd in fds:
            os.close(fd)
        _send(sock, {"pid": pid})
        _, status = os.waitpid(pid, 0)
        _send(sock, {"pid": pid, "returncode": os.waitstatus_to_exitcode(status)})


# ---- the client ---------------------------------------------------------------------------------------------


class WarmPython:
    """The warm interpreter, started once; ``run`` forks one process from it per call (one at a time)."""

    def __init__(self, timeout: float = 300.0) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.sock = ours
        env = dict(os.environ, OMP_NUM_THREADS="1")  # as the tests' own CLI processes always ran
        self.server = subprocess.Popen([sys.executable, "-m", "tests.warm_python", str(theirs.fileno())],
                                       pass_fds=[theirs.fileno()], cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
        theirs.close()
        self.started = self._receive(timeout)
        self.busy = False

    @property
    def qt_modules(self) -> list[str]:
        return list(self.started["qt_modules"])

    def _receive(self, timeout: float | None) -> dict[str, Any]:
        ready, _, _ = select.select([self.sock], [], [], timeout)
        if not ready:
            raise TimeoutError("the warm interpreter did not answer")
        data = self.sock.recv(MESSAGE_BYTES)
        if not data:
            raise RuntimeError(f"the warm interpreter ended (exit code {self.server.wait()})")
        return dict(json.loads(data))

    def run(self, argv: list[str], *, module: str = "specscope.core.commands.cli", env: dict[str, str] | None = None,
            cwd: Path | str = ROOT, stdout: Any = None, stderr: Any = None, text: bool = False) -> WarmRun:
        """Like ``subprocess.Popen([python, "-m", module, *argv], ...)``; stdout/stderr: None (this process's),
        subprocess.PIPE, subprocess.DEVNULL or an open file."""
        assert not self.busy, "one run at a time"
        return WarmRun(self, argv, module, dict(os.environ if env is None else env), str(cwd), stdout, stderr, text)

    def close(self) -> None:
        self.sock.close()
        try:
            self.server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server.wait()


class WarmRun:
    """One forked run; answers like ``subprocess.Popen`` (pid, poll, wait, send_signal, kill, communicate)."""

    def __init__(self, warm: WarmPython, argv: list[str], module: str, env: dict[str, str], cwd: str,
                 stdout: Any, stderr: Any, text: bool) -> None:
        self.warm = warm
        self.text = text
        self.returncode: int | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        child_fds: list[int] = []
        to_close: list[int] = []
        devnull = os.open(os.devnull, os.O_RDWR)
        to_close.append(devnull)
        child_fds.append(devnull)  # stdin
        for name, spec, own in (("stdout", stdout, 1), ("stderr", stderr, 2)):
            if spec is subprocess.PIPE:
                read_end, write_end = os.pipe()
                setattr(self, name, open(read_end, "r" if text else "rb"))  # noqa: SIM115  # closed in communicate
                child_fds.append(write_end)
                to_close.append(write_end)
            elif spec is subprocess.DEVNULL:
                child_fds.append(devnull)
            elif spec is None:
                child_fds.append(own)
            else:
                child_fds.append(spec.fileno())
        request = {"argv": argv, "module": module, "env": env, "cwd": cwd}
        _send(warm.sock, request, child_fds)
        for fd in to_close:
            os.close(fd)  # the child holds its own copies now: EOF reaches us when it ends
        warm.busy = True
        self.pid = int(warm._receive(60)["pid"])

    def _finished(self, timeout: float | None) -> bool:
        if self.returncode is None:
            try:
                answer = self.warm._receive(timeout)
            except TimeoutError:
                return False
            assert answer["pid"] == self.pid
            self.returncode = int(answer["returncode"])
            self.warm.busy = False
        return True

    def poll(self) -> int | None:
        self._finished(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._finished(timeout):
            raise subprocess.TimeoutExpired([self.pid], timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def kill(self) -> None:
        import signal

        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[Any, Any]:
        """Read the piped streams to their end, then wait for the exit code."""
        deadline = None if timeout is None else time.monotonic() + timeout
        streams = [s for s in (self.stdout, self.stderr) if s is not None]
        chunks: dict[int, list[bytes]] = {s.fileno(): [] for s in streams}
        open_fds = list(chunks)
        while open_fds:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select(open_fds, [], [], left)
            if not ready:
                raise subprocess.TimeoutExpired([self.pid], timeout or 0)
            for fd in ready:
                data = os.read(fd, 1 << 16)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.remove(fd)
        results = []
        for stream in (self.stdout, self.stderr):
            if stream is None:
                results.append(None)
                continue
            data = b"".join(chunks[stream.fileno()])
            results.append(data.decode() if self.text else data)
            stream.close()
        self.wait(None if deadline is None else max(0.0, deadline - time.monotonic()))
        return results[0], results[1]


if __name__ == "__main__":
    serve(int(sys.argv[1]))
