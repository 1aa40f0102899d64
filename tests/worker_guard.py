"""The fixture that fails a test leaving a worker process (``specscope serve``) or a worker thread running.

A worker outliving its test keeps a model in memory, holds a port, and would serve the next test's client; a
thread left behind (the app's link or reader, a spawned worker's pipe readers, an in-process server's
connection, run or sender threads: every thread named ``specscope-worker…``) would hand a later test's buffer
events or hold its socket. Every test gets the check (autouse, via tests/conftest.py): worker processes started
during the test that are still alive after it fail it, and are killed so the rest of the suite runs clean;
worker threads started during it fail it unless they end within a moment (a stopped one winding down).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import psutil
import pytest

WORKER_THREAD_PREFIX = "specscope-worker"  # app/worker_link.py, app/remote_run.py, core/remote/*.py
THREAD_END_WAIT_S = 2.0  # a thread already told to stop may take this long to end


def is_worker_command(cmdline: list[str]) -> bool:
    """``python -m specscope serve …`` (or the ``specscope serve`` launcher)."""
    return "serve" in cmdline and any(part == "specscope" or part.endswith("/specscope") for part in cmdline)


def live_workers(exclude: set[int] | frozenset[int] = frozenset()) -> list[psutil.Process]:
    """This process's descendants that are worker processes and still running (not zombies)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        if child.pid in exclude:
            continue
        try:
            if child.status() != psutil.STATUS_ZOMBIE and is_worker_command(child.cmdline()):
                found.append(child)
        except psutil.Error:  # it ended while we looked
            continue
    return found


def live_worker_pids() -> set[int]:
    return {p.pid for p in live_workers()}


def threads_left(before: set[threading.Thread], wait_s: float = THREAD_END_WAIT_S) -> list[str]:
    """Names of the worker threads not in ``before`` that are still running after up to ``wait_s``."""
    left = [t for t in threading.enumerate()
            if t not in before and t.is_alive() and t.name.startswith(WORKER_THREAD_PREFIX)]
    deadline = time.monotonic() + wait_s
    for t in left:
        t.join(max(0.0, deadline - time.monotonic()))
    return [t.name for t in left if t.is_alive()]


@pytest.fixture(autouse=True)
def _no_worker_left() -> Iterator[None]:
    before = {child.pid for child in psutil.Process().children(recursive=True)}
    threads_before = set(threading.enumerate())
    yield
    left = live_workers(before)
    for process in left:
        try:
            process.kill()
            process.wait(10)
        except psutil.Error:
            pass
    threads = threads_left(threads_before)
    assert not left, f"worker process(es) still running after the test: {[p.pid for p in left]} (killed now)"
    assert not threads, f"worker thread(s) still running after the test: {threads}"
