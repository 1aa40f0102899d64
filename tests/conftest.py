"""Suite-wide settings: Qt renders offscreen, caches and app data go to temp dirs, torch stays small."""

from __future__ import annotations

import contextlib
import gc
import os
import tempfile

import pytest
import torch

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# The CLI autosaves every run, as the app does: into a throwaway data folder, never the user's.
os.environ.setdefault("SPECSCOPE_DATA_DIR", tempfile.mkdtemp(prefix="specscope-test-data-"))
# Tiny models: one thread is ~4x faster than two on this CPU (no contention, no sync overhead).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _no_dangling_qt_threads_or_timers(request, monkeypatch):
    """Fail a Qt test that leaves a QThread running or a QTimer active once its widgets are closed (as
    napari's suite does): a leftover thread or timer fires into the next test or aborts the process at exit.

    Autouse, so it is set up before ``qtbot`` and torn down after pytest-qt has closed the test's widgets.
    Threads are caught where they start; timers are found as children of every top-level widget (patching
    QTimer.start as napari does crashes PySide6 6.11 in paint events here)."""
    if "qtbot" not in request.fixturenames:
        yield
        return
    import shiboken6
    from PySide6.QtCore import QCoreApplication, QEvent, QThread, QTimer
    from PySide6.QtWidgets import QApplication

    threads: list[QThread] = []
    thread_start = QThread.start

    def start_thread(self, *args):
        threads.append(self)
        return thread_start(self, *args)

    monkeypatch.setattr(QThread, "start", start_thread)
    yield
    QCoreApplication.processEvents()  # let the last queued signals run
    # Finish the deletions pytest-qt queued (deleteLater) before looking at widgets: walking the children of a
    # widget half way through its deletion crashes the process.
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    # Collect this test's Qt wrappers now, between tests: collected later, inside another test's paint or
    # resize event, their C++ destructors deadlock or crash PySide6 6.11. A loaded pair froze what was alive
    # (core/collector.py): give it back first, or its wrappers would be collected in a later test's load.
    gc.unfreeze()
    gc.collect()
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    running, active = [], []
    for t in threads:
        with contextlib.suppress(RuntimeError):  # the C++ object is gone: it ended
            if t.isRunning():
                running.append(t.objectName() or repr(t))
    for top in QApplication.topLevelWidgets():
        if not shiboken6.isValid(top):
            continue
        with contextlib.suppress(RuntimeError):
            for t in top.findChildren(QTimer):
                if t.isActive():
                    active.append(f"{t.objectName() or 'QTimer'} every {t.interval()} ms in {type(top).__name__}")
    assert not running, f"QThread(s) still running after the test: {running}"
    assert not active, f"QTimer(s) still active after the test: {active}"
