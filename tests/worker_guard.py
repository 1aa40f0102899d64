"""A fixture that fails a test leaving a worker process (``specscope serve``) or a worker link's thread running.

A worker outliving its test keeps a model in memory, holds a port, and would serve the next test's client; a
reading thread left behind would hand a later test's buffer events. Every test gets the check (autouse, via
tests/conftest.py): worker processes started during the test that are still alive after it fail it, and are
killed so the rest of the suite runs clean.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psutil
import pytest

# Threads the app's worker link and run reader start (app/worker_link.py, app/remote_run.py).
WORKER_THREAD_PREFIXES = ("specscope-worker-link", "specscope-worker-reader")


def is_worker_command(cmdline: list[str]) -> bool:
    """``python -m specscope serve …`` (or the ``specscope serve`` launcher)."""
    return "serve" in cmdline and any(part == "specscope" or part.endswith("/specscope") for part in cmdline)


def live_workers(exclude: set[int]) -> list[psutil.Process]:
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


@pytest.fixture(autouse=True)
def _no_worker_process_left() -> Iterator[None]:
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
    threads = [t.name for t in threading.enumerate()
               if t not in threads_before and t.is_alive() and t.name.startswith(WORKER_THREAD_PREFIXES)]
    assert not left, f"worker process(es) still running after the test: {[p.pid for p in left]} (killed now)"
    assert not threads, f"worker thread(s) still running after the test: {threads}"
