"""Workers for the remote tests: the tiny pair on disk, an in-process worker, and the fixture that fails a test
leaving a worker process or a worker thread alive."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.models import perturbed, save_model_dir, tiny_model, word_tokenizer

WORKER_THREAD_PREFIX = "specscope-worker"


def tiny_pair_dirs(root: Path) -> dict[str, Path]:
    """The CLI tests' tiny pair (tests/test_cli.py): a target and a draft that mostly agrees with it."""
    target = tiny_model(5, vocab_size=64, logit_scale=3.0)
    return {
        "target": save_model_dir(root / "target", target, word_tokenizer()),
        "draft": save_model_dir(root / "draft", perturbed(target, 0.03), word_tokenizer()),
    }


def pair_args(dirs: dict[str, Path]) -> list[str]:
    return ["--target", str(dirs["target"]), "--draft", str(dirs["draft"])]


def _children_of(pid: int) -> list[int]:
    """Live processes whose parent is ``pid`` (from /proc: no psutil needed)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="utf-8", errors="replace") as fh:
                stat = fh.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        if len(fields) > 1 and int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [part.decode("utf-8", "replace") for part in fh.read().split(b"\0") if part]
    except OSError:
        return []


def leftover_workers() -> list[int]:
    """This process's children that are ``specscope serve`` workers and still running."""
    return [pid for pid in _children_of(os.getpid())
            if "specscope" in _cmdline(pid) and "serve" in _cmdline(pid)]


def leftover_worker_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith(WORKER_THREAD_PREFIX) and t.is_alive()]


@pytest.fixture
def no_worker_left() -> Iterator[None]:
    """Fail the test that leaves a worker process (spawned, not stopped and reaped) or a worker thread running:
    a leftover worker holds a port and a loaded pair into every later test. The leftovers are ended here."""
    yield
    processes = leftover_workers()
    for pid in processes:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    threads = leftover_worker_threads()
    assert not processes, f"worker process(es) still running after the test: {processes}"
    assert not threads, f"worker thread(s) still running after the test: {threads}"
