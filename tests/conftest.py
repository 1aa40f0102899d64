"""Suite-wide settings: Qt renders offscreen, caches and app data go to temp dirs, torch stays small."""

from __future__ import annotations

import contextlib
import os

import pytest
import torch

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# Tiny models: one thread is ~4x faster than two on this CPU (no contention, no sync overhead).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_dangling_qt_threads_or_timers(request, monkeypatch):
    """Fail a Qt test that leaves a QThread running or a QTimer active once its widgets are closed (as
    napari's suite does): a leftover thread or timer fires into the next test or aborts the process at exit.

    Autouse, so it is set up before ``qtbot`` and torn down after pytest-qt has closed the test's widgets."""
    if "qtbot" not in request.fixturenames:
        yield
        return
    from PySide6.QtCore import QCoreApplication, QThread, QTimer

    threads: list[QThread] = []
    timers: list[QTimer] = []
    thread_start, timer_start = QThread.start, QTimer.start

    def start_thread(self, *args):
        threads.append(self)
        return thread_start(self, *args)

    def start_timer(self, *args):
        timers.append(self)
        return timer_start(self, *args)

    monkeypatch.setattr(QThread, "start", start_thread)
    monkeypatch.setattr(QTimer, "start", start_timer)
    yield
    QCoreApplication.processEvents()  # let the last queued signals run
    running, active = [], []
    for t in threads:
        with contextlib.suppress(RuntimeError):  # the C++ object is gone: it ended
            if t.isRunning():
                running.append(t.objectName() or repr(t))
    for t in timers:
        with contextlib.suppress(RuntimeError):
            if t.isActive():
                active.append(t.objectName() or f"{t!r} every {t.interval()} ms")
    assert not running, f"QThread(s) still running after the test: {running}"
    assert not active, f"QTimer(s) still active after the test: {active}"
