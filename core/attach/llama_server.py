"""Start and stop a local llama.cpp ``llama-server`` (the one ``scripts/build_llama_server.sh`` builds).

Used by the attach tests and the attach benchmark to have a real engine on 127.0.0.1: a free port, the
process's output in a log file, a bounded wait on ``/health`` (and on the process, so a server that dies
while loading is reported at once, with the end of its log).
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "scripts" / "build_llama_server.sh"


class LlamaServerUnavailable(RuntimeError):
    """No llama-server binary, and building one failed (the message says why)."""


def llama_server_binary(build: bool = True) -> Path:
    """The cached binary; built by the build script when absent and ``build`` (it takes a while, once)."""
    override = os.environ.get("SPECSCOPE_LLAMA_SERVER")
    if override:
        path = Path(override)
        if not path.is_file():
            raise LlamaServerUnavailable(f"SPECSCOPE_LLAMA_SERVER points at {path}, which does not exist")
        return path
    if not BUILD_SCRIPT.is_file():
        raise LlamaServerUnavailable(f"{BUILD_SCRIPT} is missing (not a source checkout)")
    where = subprocess.run(["bash", str(BUILD_SCRIPT), "--path"], capture_output=True, text=True, check=True)
    path = Path(where.stdout.strip())
    if path.is_file() or not build:
        if not path.is_file():
            raise LlamaServerUnavailable(f"llama-server is not built yet ({path})")
        return path
    done = subprocess.run(["bash", str(BUILD_SCRIPT)], capture_output=True, text=True)
    if done.returncode != 0 or not path.is_file():
        tail = " ".join(done.stderr.strip().splitlines()[-3:])
        raise LlamaServerUnavailable(f"building llama-server failed: {tail}")
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LlamaServer:
    """``with LlamaServer(binary, model, draft=...) as server: server.url``."""

    binary: Path
    model: Path
    draft: Path | None = None
    draft_max: int = 4
    metrics: bool = True
    threads: int = 2
    ctx_size: int = 2048
    log_path: Path | None = None
    start_timeout_s: float = 180.0
    extra_args: list[str] = field(default_factory=list)
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        cmd = [str(self.binary), "-m", str(self.model), "--host", "127.0.0.1", "--port", str(self.port),
               "-c", str(self.ctx_size), "-t", str(self.threads), "-np", "1"]
        if self.metrics:
            cmd.append("--metrics")
        if self.draft is not None:
            cmd += ["-md", str(self.draft), "--spec-type", "draft-simple", "--spec-draft-n-max", str(self.draft_max)]
        return cmd + self.extra_args

    def start(self) -> LlamaServer:
        self.port = self.port or free_port()
        self._log = open(self.log_path, "wb") if self.log_path else None  # noqa: SIM115 - closed in stop()
        out = self._log if self._log is not None else subprocess.DEVNULL
        self.process = subprocess.Popen(self.command(), stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + self.start_timeout_s
        with httpx.Client(timeout=2.0) as client:
            while True:
                try:
                    if client.get(self.url + "/health").status_code == 200:
                        return self
                except httpx.HTTPError:
                    pass
                try:  # doubles as the poll interval: returns at once if the server exited
                    code = self.process.wait(timeout=0.25)
                except subprocess.TimeoutExpired:
                    code = None
                if code is not None:
                    tail = self._log_tail()
                    self.stop()
                    raise LlamaServerUnavailable(f"llama-server exited with code {code} while loading{tail}")
                if time.monotonic() > deadline:
                    self.stop()
                    raise LlamaServerUnavailable(f"llama-server did not become healthy in {self.start_timeout_s:.0f} s")

    def _log_tail(self) -> str:
        if self.log_path is None or not self.log_path.is_file():
            return ""
        lines = self.log_path.read_text(errors="replace").strip().splitlines()
        return ": " + " | ".join(lines[-3:]) if lines else ""

    def kill(self) -> None:
        """Kill the process now (SIGKILL), as a crash would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()

    def stop(self) -> None:
        if self.process is not None:
            if self.process.poll() is None:
                self.process.terminate()
                try:
                    self.process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=10)
            self.process = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> LlamaServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
