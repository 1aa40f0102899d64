"""Suite-wide settings: Qt renders offscreen, caches and app data go to temp dirs, torch stays small; the demo is
converted once per session; the tiers say what they left out."""

from __future__ import annotations

import contextlib
import gc
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.worker_guard import _no_worker_left  # noqa: F401  (autouse: no test leaves a worker running)

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# The CLI autosaves every run, as the app does: into a throwaway data folder, never the user's.
os.environ.setdefault("SPECSCOPE_DATA_DIR", tempfile.mkdtemp(prefix="specscope-test-data-"))
# Every window a test starts (in-process or as a `specscope` process) keeps its settings in a throwaway file,
# never the user's ~/.config/specscope/specscope.ini: a saved geometry or split leaked from one run into the next.
os.environ.setdefault("SPECSCOPE_SETTINGS_FILE",
                      str(Path(tempfile.mkdtemp(prefix="specscope-test-settings-")) / "settings.ini"))
# The converted demo (and the unpacked demo draft) go to one cache per test session, never the user's: every
# demo test shares it, and the conversion itself is tested once (the ``demo_target`` fixture).
os.environ.setdefault("SPECSCOPE_CACHE_DIR", tempfile.mkdtemp(prefix="specscope-test-cache-"))

# Under pytest-xdist (`-n 2`) each worker is a process started by the controller, which imported this file
# first: the workers inherit its folders. The demo cache stays shared (the conversion holds a lock in it, so it
# runs once for all workers); the data folder and the settings file become the worker's own, since tests count
# the autosaved runs and read back the settings they wrote.
XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER")  # "gw0", "gw1", ...; None outside xdist and in its controller
if XDIST_WORKER:
    # Two workers on two cores pay only if each computes on one: torch, OpenMP and BLAS would each start a
    # thread per core (torch and numpy are imported later than this, so the variables still count).
    for threads_variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(threads_variable, "1")
    os.environ["SPECSCOPE_DATA_DIR"] = str(Path(os.environ["SPECSCOPE_DATA_DIR"]) / XDIST_WORKER)
    shared_settings = Path(os.environ["SPECSCOPE_SETTINGS_FILE"])
    os.environ["SPECSCOPE_SETTINGS_FILE"] = str(shared_settings.parent / XDIST_WORKER / shared_settings.name)
    for folder in (Path(os.environ["SPECSCOPE_DATA_DIR"]), shared_settings.parent / XDIST_WORKER):
        folder.mkdir(parents=True, exist_ok=True)

TIER_MARKERS = ("server", "wheel", "slow")
_left_out: Counter[str] = Counter()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Tiny models: one thread is ~4x faster than two on this CPU (no contention, no sync overhead). Set before
    each test's fixtures, once torch is loaded: importing torch here would cost every pure test file ~4 s."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.get_num_threads() != 1:
        torch.set_num_threads(1)


def pytest_deselected(items: list[pytest.Item]) -> None:
    """Runs where the tests are collected: in this process, or under xdist in each worker (the controller
    collects nothing), whose counts reach the controller through ``pytest_testnodedown``."""
    for item in items:
        marker = next((m for m in TIER_MARKERS if item.get_closest_marker(m)), None)
        if marker is not None:
            _left_out[marker] += 1


_xdist_workers: set[str] = set()


def pytest_sessionfinish(session: pytest.Session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)  # set only in an xdist worker
    if workeroutput is not None:
        workeroutput["tier_left_out"] = dict(_left_out)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodeready(node: Any) -> None:
    _xdist_workers.add(node.gateway.id)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """The controller takes what the tier left out from the first worker that reports it: every worker
    collects the whole suite and deselects the same tests."""
    left_out = getattr(node, "workeroutput", {}).get("tier_left_out")
    if left_out and not _left_out:
        _left_out.update(left_out)


FAST_TIER_BUDGET_S = 300  # the fast tier's goal on 2 quiet cores (docs/setup-and-tests.md): said, never asserted
DEAREST_SHOWN = 10


def test_seconds(stats: dict[str, list[Any]]) -> dict[str, float]:
    """Each test's seconds, set-up and teardown included (a module fixture's cost lands on its first test),
    from the reports pytest keeps for the summary."""
    seconds: dict[str, float] = {}
    for reports in stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                seconds[report.nodeid] = seconds.get(report.nodeid, 0.0) + report.duration
    return seconds


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    """For the fast tier: what it left out and how to run it, then its seconds against the budget and the tests
    that cost most. A timed assertion would fail on a loaded machine; this keeps the budget in sight instead,
    so a new dear test is seen (and sped up, or marked ``slow``) in the run that adds it."""
    if not _left_out:
        return
    what = {"server": "llama-server attach", "wheel": "wheel check", "slow": "long statistical/model"}
    parts = ", ".join(f"{_left_out[m]} {what[m]}" for m in TIER_MARKERS if _left_out[m])
    terminalreporter.write_line(f"fast tier: left out {parts} tests (no native build, no long sampling); "
                                "./dev.sh test --all runs them")
    seconds = test_seconds(terminalreporter.stats)
    if not seconds:
        return
    total = sum(seconds.values())
    if len(_xdist_workers) > 1:  # the workers' test times add up; the goal is the tier's wall time
        workers = len(_xdist_workers)
        spent = f"{total:,.0f} s of test time on {workers} workers, {total / workers:,.0f} s each"
    else:
        spent = f"{total:,.0f} s of test time"
    terminalreporter.write_line(f"fast tier: {len(seconds):,} tests took {spent} (the goal is under "
                                f"{FAST_TIER_BUDGET_S} s on 2 quiet cores); the dearest:")
    for nodeid, spent in sorted(seconds.items(), key=lambda item: -item[1])[:DEAREST_SHOWN]:
        terminalreporter.write_line(f"  {spent:6.1f} s  {nodeid}")


@pytest.fixture(scope="session")
def warm_python():
    """One interpreter with every core module imported, forked for each CLI process a test runs
    (tests/warm_python.py): ~10 s of imports paid once per session instead of once per process."""
    from tests.warm_python import WarmPython

    warm = WarmPython()
    yield warm
    warm.close()


@pytest.fixture(scope="session")
def demo_target() -> tuple[Path, list[tuple[str, float]]]:
    """The demo converted once for the whole session into the session's cache, with its progress reports.

    Every test that loads the demo asks for this first, so the conversion is the one reported here. Under
    xdist the workers share the cache and take this fixture one at a time: the worker that converts leaves its
    reports beside the cache for the others (which find the cache made), and unpacks the demo draft too, so no
    worker writes a temporary file into the cache while another's test looks at it."""
    from specscope.core.engine import demo
    from specscope.core.leftovers import exclusive_lock

    session_cache = Path(os.environ["SPECSCOPE_CACHE_DIR"])
    shared_reports = session_cache / "demo-conversion-reports.json"
    reports: list[tuple[str, float]] = []
    session_cache.mkdir(parents=True, exist_ok=True)  # a SPECSCOPE_CACHE_DIR of the caller's may not exist yet
    try:
        with exclusive_lock(session_cache / "demo-target.lock"):
            converts_here = not demo._cache_is_valid(demo.demo_target_dir(), demo.demo_gguf_path())
            target_dir = demo.ensure_demo_target(lambda msg, frac: reports.append((msg, frac)))
            packed_draft = demo.demo_draft_dir() / demo.DRAFT_WEIGHTS_XZ
            if packed_draft.is_file():
                demo._unpacked_in_cache(packed_draft)
            if converts_here:
                shared_reports.write_text(json.dumps(reports))
            elif XDIST_WORKER and shared_reports.is_file():  # another worker converted
                reports = [(msg, frac) for msg, frac in json.loads(shared_reports.read_text())]
    except demo.DemoUnavailable as exc:
        pytest.skip(str(exc))
    return target_dir, reports


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real_gc_freeze: a window test that checks the window's own gc freezes")


_REAL_GC_FREEZE = gc.freeze
_REAL_GC_UNFREEZE = gc.unfreeze


def _no_gc_freeze() -> None:
    """gc.freeze and gc.unfreeze inside a window test (see ``_no_dangling_qt_threads_or_timers``)."""


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
    # What is alive before the test (the imports, the QApplication, earlier tests' survivors) is frozen, so the
    # collection after the test walks only what the test made: a full walk of the ~420,000 objects torch, Qt
    # and pyqtgraph leave cost 0.4 s quiet (2 s loaded) per window test, a quarter of the fast tier. The
    # collection first keeps garbage out of the frozen set; it is short unless something unfroze everything
    # since (an in-process CLI run does). The window's own freezes (core/gc_freeze.py) would freeze the
    # test's objects too; they are no-ops here, except in a test that checks them (``real_gc_freeze``).
    gc.collect()
    _REAL_GC_FREEZE()
    real_freezes = request.node.get_closest_marker("real_gc_freeze") is not None
    if not real_freezes:
        monkeypatch.setattr(gc, "freeze", _no_gc_freeze)
        monkeypatch.setattr(gc, "unfreeze", _no_gc_freeze)
    yield
    QCoreApplication.processEvents()  # let the last queued signals run
    # Finish the deletions pytest-qt queued (deleteLater) before looking at widgets: walking the children of a
    # widget half way through its deletion crashes the process.
    QCoreApplication.sendPostedEvents(None, QEvent.Type.DeferredDelete)
    # Collect this test's Qt wrappers now, between tests: collected later, inside another test's paint or
    # resize event, their C++ destructors deadlock or crash PySide6 6.11. A test whose window froze what was
    # alive gives it back first, or its wrappers would be collected in a later test's load.
    if real_freezes:
        _REAL_GC_UNFREEZE()
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

