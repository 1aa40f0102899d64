"""The window as a client of a worker process: its own (spawned for the chosen pair) or one `specscope serve`
started; the same events, numbers and autosave as an in-process run, controls sent as messages, a refusal or a
dead worker said in one sentence with every event received kept, and a GUI process that never imports torch."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

pytest.importorskip("pytestqt")

from specscope.app.run_sources import RemoteWorker
from specscope.core.records import PLAIN_MODE, ControlValues, DrillEvent, TokenStatus
from specscope.core.remote.spawn import start_local_worker
from specscope.core.remote.url import WorkerAddress, parse_worker_url

from .app_helpers import make_window, qt_binding_broken
from .models import perturbed, save_model_dir, tiny_model, word_tokenizer

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "w5 w6 w7 w5 w6"
GREEDY = ControlValues(k=3, temperature=0.0, adaptive_k=False)
LONG = 100_000
COMMITTED = {TokenStatus.ACCEPTED, TokenStatus.CORRECTION, TokenStatus.BONUS, TokenStatus.TARGET,
             TokenStatus.PLAIN}


@pytest.fixture(scope="module")
def tiny_dirs(tmp_path_factory) -> dict[str, Path]:
    """A tiny target and a draft that partly agrees with it, saved as model folders a worker loads."""
    root = tmp_path_factory.mktemp("tiny-pair")
    target = tiny_model(0)
    return {"target": save_model_dir(root / "target", target, word_tokenizer()),
            "draft": save_model_dir(root / "draft", perturbed(target, 0.03), word_tokenizer())}


def model_args(dirs: dict[str, Path]) -> list[str]:
    return ["--target", str(dirs["target"]), "--draft", str(dirs["draft"]), "--drafter", "model"]


@pytest.fixture(scope="module")
def served(tiny_dirs):
    """`specscope serve` with the tiny pair, in a process of its own, for the module's tests."""
    worker = start_local_worker(model_args(tiny_dirs), timeout_s=300)
    yield worker
    worker.stop()


def tiny_choice(dirs: dict[str, Path]):
    from specscope.app.pair_choice import PairChoice

    return PairChoice(target=str(dirs["target"]), draft=str(dirs["draft"]), drafter="model")


def committed_ids(window) -> list[int]:
    return [t.token_id for r in window.data.records for t in r.tokens if t.status in COMMITTED]


def run_to_end(qtbot, window, max_new: int = 20) -> str:
    window.panel.set_prompt_text(PROMPT)
    window.panel.set_values(GREEDY)
    window.panel.max_new.setValue(max_new)
    with qtbot.waitSignal(window.run_ended, timeout=120_000) as blocker:
        assert window.start_run()
    return str(blocker.args[0])


def connect(qtbot, window, address: WorkerAddress) -> None:
    from specscope.app.connect_dialog import connect_worker

    with qtbot.waitSignal(window.pair_ready, timeout=60_000):
        assert connect_worker(window, address)


def test_a_connected_worker_decodes_the_greedy_tokens_an_in_process_run_decodes(qtbot, tmp_path, served,
                                                                               tiny_dirs, monkeypatch):
    window = make_window(qtbot, tmp_path)
    connect(qtbot, window, served.address)
    # the worker's pair is on screen, and where it runs
    assert "(worker at 127.0.0.1:" in window.windowTitle()
    assert window.controller.pair_drafter == "model" and window.controller.device == "cpu"
    assert run_to_end(qtbot, window) == "finished:max_new_tokens"
    remote_ids = committed_ids(window)
    remote = window.data
    assert len(remote_ids) == 20 and remote.started is not None and remote.started.source == "remote"
    # the window's numbers are its own measurement's, fed the received events
    assert remote.estimate is not None and remote.estimate.alpha is not None
    # autosaved like a local run: the stream on screen is the stream on disk, and the token is nowhere in it
    folder = window.recorder.folder
    from specscope.core.trace.files import read_trace

    saved = read_trace(folder)
    assert [type(e).__name__ for e in saved.events] == [type(e).__name__ for e in remote.events]
    assert served.address.token not in "".join(p.read_text() for p in folder.iterdir() if p.is_file())

    monkeypatch.setenv("SPECSCOPE_IN_PROCESS", "1")
    with qtbot.waitSignal(window.pair_ready, timeout=120_000):
        window.load_pair(tiny_choice(tiny_dirs))
    assert window.controller.pair is not None  # decoded in this process this time
    assert run_to_end(qtbot, window) == "finished:max_new_tokens"
    assert committed_ids(window) == remote_ids


def test_controls_from_the_panel_reach_the_worker(qtbot, tmp_path, served):
    window = make_window(qtbot, tmp_path)
    connect(qtbot, window, served.address)
    window.panel.set_prompt_text(PROMPT)
    window.panel.set_values(GREEDY)
    window.panel.max_new.setValue(LONG)
    assert window.start_run()
    qtbot.waitUntil(lambda: len(window.data.records) >= 2, timeout=60_000)
    window.panel.k_spin.setValue(2)
    window.panel.flush()
    qtbot.waitUntil(lambda: any(r.controls.k == 2 for r in window.data.records), timeout=60_000)
    asked_at = len(window.data.records)
    window.request_baseline()
    qtbot.waitUntil(lambda: any(r.mode == PLAIN_MODE for r in window.data.records[asked_at:]), timeout=60_000)
    window.drill_control.layers.setValue(1)
    window.drill_control.model.setCurrentText("target")
    window.drill_control.start_drill()
    qtbot.waitUntil(lambda: any(isinstance(e, DrillEvent) and e.kind == "start" for e in window.data.events),
                    timeout=60_000)
    window.set_paused(True)
    assert window.state == "paused"
    window.set_paused(False)
    with qtbot.waitSignal(window.run_ended, timeout=60_000) as blocker:
        window.stop_run()
    assert blocker.args[0] == "finished:stop" and window.state == "stopped"


def test_a_wrong_token_garbage_or_nobody_there_is_one_sentence(qtbot, tmp_path, served):
    from specscope.app.connect_dialog import ConnectDialog, connect_worker

    window = make_window(qtbot, tmp_path)
    errors: list[str] = []
    window.controller.error.connect(errors.append)

    def refused(address: WorkerAddress) -> str:
        with qtbot.waitSignal(window.controller.error, timeout=30_000):
            connect_worker(window, address)
        assert window.state == "no model" and not window.menus.start_action.isEnabled()
        assert window.banner.isVisible() and window.last_error == errors[-1]
        return errors[-1]

    wrong = WorkerAddress(served.address.host, served.address.port, "not-the-token")
    assert refused(wrong) == "The worker refused the connection: wrong token."

    garbage = socket.create_server(("127.0.0.1", 0))
    answer = threading.Thread(target=lambda: _answer_with_garbage(garbage), daemon=True)
    answer.start()
    said = refused(WorkerAddress("127.0.0.1", garbage.getsockname()[1], "x"))
    answer.join(10)
    garbage.close()
    assert "not a specscope worker" in said and said.count(". ") == 0

    free = socket.create_server(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    assert refused(WorkerAddress("127.0.0.1", port, "x")).startswith("Could not connect to a worker at 127.0.0.1:")

    dialog = ConnectDialog(window, "http://127.0.0.1:8080")
    qtbot.addWidget(dialog)
    dialog._check_and_accept()
    assert dialog.result() == 0 and dialog.error_label.text().startswith("A worker URL starts with specscope://")


def test_a_wrong_token_keeps_the_worker_in_use_and_the_run_on_screen(qtbot, tmp_path, served):
    """File ▸ Connect with a wrong token, after a good connection and a finished run: one sentence, no busy bar
    left spinning, and the worker, its pair and the run on screen are still there (Start decodes on it)."""
    from specscope.app.connect_dialog import connect_worker

    window = make_window(qtbot, tmp_path)
    connect(qtbot, window, served.address)
    assert run_to_end(qtbot, window, max_new=6) == "finished:max_new_tokens"
    shown = list(window.data.events)
    title = window.windowTitle()
    with qtbot.waitSignal(window.controller.error, timeout=30_000) as said:
        assert connect_worker(window, WorkerAddress(served.address.host, served.address.port, "not-the-token"))
        assert not window.menus.start_action.isEnabled()  # Start waits while the connection is tried
    assert said.args[0] == "The worker refused the connection: wrong token."
    assert window.status.progress.isHidden() and "Connecting" not in window.status.message.text()
    assert window.banner.isVisible() and window.last_error == said.args[0]
    assert window.data.events == shown and window.state == "finished" and window.windowTitle() == title
    assert window.controller.link.ready and window.menus.start_action.isEnabled()
    assert run_to_end(qtbot, window, max_new=6) == "finished:max_new_tokens"  # still decoding on the worker


# Full tier (13 s: a worker process of its own, loaded, then swapped): the swap on a worker is checked in-process
# (test_remote.py), the window's refusal for a remote worker without the real process (test_app_sources.py) and
# a swap through a real worker by this app's own worker test below.
@pytest.mark.slow
def test_a_drafter_change_acts_on_the_remote_worker_and_never_moves_decoding_here(qtbot, tmp_path, tiny_dirs):
    from specscope.app.connect_dialog import connect_worker

    worker = start_local_worker(model_args(tiny_dirs), timeout_s=300)  # its own: the swap changes its pair
    try:
        window = make_window(qtbot, tmp_path)
        with qtbot.waitSignal(window.pair_ready, timeout=60_000):
            assert connect_worker(window, worker.address)
        link = window.controller.link
        with qtbot.waitSignal(window.pair_ready, timeout=60_000):
            window.change_drafter("lookup")  # no weights of its own: swapped in on that worker, target kept
        assert isinstance(window.controller.source, RemoteWorker)
        assert link.ready and link.local is None and link.address == worker.address
        assert link.pair_info["drafter"] == "lookup" and window.panel.drafter.currentData() == "lookup"
        assert run_to_end(qtbot, window, max_new=8) == "finished:max_new_tokens"
        assert {r.drafter for r in window.data.records if r.mode == "speculative"} == {"lookup"}
        window.change_drafter("model")  # needs a draft model: one sentence naming the worker, nothing moves
        assert window.banner.isVisible() and "specscope serve --drafter model" in window.last_error
        assert isinstance(window.controller.source, RemoteWorker)
        assert link.ready and window.state in ("ready", "finished")
        assert window.panel.drafter.currentData() == "lookup"  # the worker's drafter, what Start runs
    finally:
        worker.stop()


def test_this_apps_worker_swaps_a_drafter_without_loading_the_target_again(qtbot, tmp_path, tiny_dirs):
    window = make_window(qtbot, tmp_path)
    with qtbot.waitSignal(window.pair_ready, timeout=300_000):
        window.load_pair(tiny_choice(tiny_dirs))
    link = window.controller.link
    assert link.local is not None
    pid = link.local.pid
    with qtbot.waitSignal(window.pair_ready, timeout=60_000):
        window.change_drafter("suffix")
    assert link.local is not None and link.local.pid == pid  # the same worker process: no reload
    assert link.pair_info["drafter"] == "suffix" and window.pair_choice.drafter == "suffix"
    assert run_to_end(qtbot, window, max_new=8) == "finished:max_new_tokens"
    assert {r.drafter for r in window.data.records if r.mode == "speculative"} == {"suffix"}
    # a target without MTP layers: the worker refuses in one sentence and keeps suffix, and so does the window
    with qtbot.waitSignal(window.pair_ready, timeout=60_000):
        window.switch_drafter("mtp")
    assert "mtp drafter cannot run on this target" in (window.last_error or "")
    assert link.local is not None and link.local.pid == pid and link.pair_info["drafter"] == "suffix"
    assert window.pair_choice.drafter == "suffix" and window.panel.drafter.currentData() == "suffix"
    assert window.state == "ready"


def _answer_with_garbage(server: socket.socket) -> None:
    conn, _ = server.accept()
    with conn:
        conn.recv(4096)
        conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")


# Full tier: two worker processes started and killed (18 s of CPU at load 10, the second-dearest fast test).
@pytest.mark.slow
def test_a_killed_worker_is_said_its_events_are_kept_and_a_restart_decodes_again(qtbot, tmp_path, tiny_dirs):
    from specscope.core.trace.files import read_trace

    window = make_window(qtbot, tmp_path)
    with qtbot.waitSignal(window.pair_ready, timeout=300_000):
        window.load_pair(tiny_choice(tiny_dirs))  # the default path: this app's own worker process
    local = window.controller.link.local
    assert local is not None and local.alive()
    window.panel.set_prompt_text(PROMPT)
    window.panel.set_values(GREEDY)
    window.panel.max_new.setValue(LONG)
    assert window.start_run()
    qtbot.waitUntil(lambda: len(window.data.records) >= 3, timeout=60_000)
    folder = window.recorder.folder
    with qtbot.waitSignal(window.run_ended, timeout=60_000) as blocker:
        os.kill(local.pid, signal.SIGKILL)
    assert blocker.args[0].startswith("error:")
    n = len(window.data.records)
    assert window.state == "failed" and n >= 3
    assert window.last_error == f"The worker process (pid {local.pid}) was killed by signal 9. The {n} iterations " \
                                "received are kept."
    assert window.banner.isVisible() and window.banner.action.text() == "Restart the worker"
    assert not window.menus.start_action.isEnabled() and window.menus.restart_worker_action.isEnabled()
    # every event received is on screen and in the autosave (closed as failed), and none was invented
    saved = read_trace(folder)
    assert len(saved.records) == n and len(saved.events) == len(window.data.events)
    assert window.data.finished is None
    recording = json.loads((folder / "trace.session.json").read_text())["recording"]
    assert recording["ok"] is False and recording["reason"] == "worker lost"

    with qtbot.waitSignal(window.pair_ready, timeout=300_000):
        window.banner.action.click()
    assert len(window.data.records) == n  # what the lost worker sent stays on screen until the next Start
    restarted = window.controller.link.local
    assert restarted is not None and restarted.pid != local.pid
    assert run_to_end(qtbot, window, max_new=8) == "finished:max_new_tokens"
    assert len(committed_ids(window)) == 8

    # between runs too: the window notices its worker's end by itself and offers the restart
    with qtbot.waitSignal(window.controller.worker_lost, timeout=30_000):
        os.kill(restarted.pid, signal.SIGKILL)
    assert window.last_error == f"The worker process (pid {restarted.pid}) was killed by signal 9."
    assert window.state == "finished" and len(committed_ids(window)) == 8  # the last run stays as it was
    assert not window.menus.start_action.isEnabled() and window.banner.action.text() == "Restart the worker"


GUI_SCRIPT = textwrap.dedent("""
    import json, os, sys, tempfile, time
    from pathlib import Path
    from PySide6.QtWidgets import QApplication
    app = QApplication([])
    from specscope.app.pair_choice import PairChoice
    from specscope.app.settings import AppSettings, make_qsettings
    from specscope.app.window import MainWindow
    target, draft = sys.argv[1], sys.argv[2]
    home = Path(tempfile.mkdtemp())
    w = MainWindow(settings=AppSettings(make_qsettings(str(home / "s.ini"))), data_dir=home,
                   check_interrupted=False)
    w.show()
    seen = {}
    w.pair_ready.connect(lambda: seen.setdefault("ready", True))
    w.pair_failed.connect(lambda m: seen.setdefault("failed", m))
    w.run_ended.connect(lambda how: seen.setdefault("ended", how))
    w.load_pair(PairChoice(target=target, draft=draft, drafter="model"))
    def wait(what, limit=300):
        t0 = time.monotonic()
        while not what() and time.monotonic() - t0 < limit:
            app.processEvents()
            time.sleep(0.005)
    wait(lambda: "ready" in seen or "failed" in seen)
    w.panel.set_prompt_text("w5 w6 w7")
    w.panel.max_new.setValue(40)
    w.start_run()
    wait(lambda: len(w.data.records) >= 3 or "ended" in seen)
    during = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    wait(lambda: "ended" in seen)
    after = sorted(m for m in ("torch", "transformers") if m in sys.modules)
    print(json.dumps({"seen": seen, "records": len(w.data.records), "during": during, "after": after,
                      "worker_pid": w.controller.link.local.pid if w.controller.link.local else None}))
    w.close()
""")


# Full tier: a GUI process and its worker (12 s of CPU at load 10); the fast tier keeps the static check
# (test_app_units: no app module imports torch) and the import contract.
@pytest.mark.slow
def test_the_gui_process_imports_no_torch_while_a_local_run_decodes(tiny_dirs, tmp_path):
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECSCOPE_SETTINGS_FILE": str(tmp_path / "s.ini")}
    env.pop("SPECSCOPE_IN_PROCESS", None)
    done = subprocess.run([sys.executable, "-c", GUI_SCRIPT, str(tiny_dirs["target"]), str(tiny_dirs["draft"])],
                          capture_output=True, text=True, env=env, timeout=600, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["seen"] == {"ready": True, "ended": "finished:max_new_tokens"}, report
    assert report["records"] >= 3 and report["worker_pid"] not in (None, os.getpid())
    assert report["during"] == [] and report["after"] == []


def test_a_worker_url_is_checked_before_connecting() -> None:
    address = parse_worker_url("specscope://127.0.0.1:7777/?token=abc")
    assert (address.host, address.port, address.token) == ("127.0.0.1", 7777, "abc")
    assert "abc" not in address.redacted()


def test_sigterm_closes_the_window_and_stops_its_worker(tiny_dirs, tmp_path):
    """Stopped by a signal, the app stops the worker it started (one left behind would serve on, orphaned)."""
    import psutil

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "SPECSCOPE_SETTINGS_FILE": str(tmp_path / "s.ini"),
           "SPECSCOPE_DATA_DIR": str(tmp_path / "data")}
    env.pop("SPECSCOPE_IN_PROCESS", None)
    app = subprocess.Popen([sys.executable, "-m", "specscope.app.main", "--target", str(tiny_dirs["target"]),
                            "--draft", str(tiny_dirs["draft"]), "--drafter", "model"], env=env, cwd=ROOT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        workers: list[psutil.Process] = []
        while not workers and app.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                app.wait(0.05)  # look again in a moment (no busy loop beside the app on a small machine)
            with contextlib.suppress(psutil.Error):
                workers = [c for c in psutil.Process(app.pid).children() if "serve" in c.cmdline()]
        assert workers, "the app started no worker process"
        app.send_signal(signal.SIGTERM)
        assert app.wait(60) == 0
        _gone, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()


def test_the_workers_loading_lines_become_the_status_bars_progress() -> None:
    from specscope.app.worker_link import progress_line

    assert progress_line("[ 97.0%] Packing the target's weights") == ("Packing the target's weights", 0.97)
    bar = "Loading weights:   0%|          | 0/272 [00:00<?, ?it/s]\rLoading weights:  45%|####   | 122/272 [00:01]"
    assert progress_line(bar) == ("Loading weights", 0.45)
    assert progress_line("Demo model found") == ("Demo model found", -1.0)
    # the worker's own log and its failure sentence are not progress (the failure comes as the load's error)
    assert progress_line("specscope serve: serving the demo on 127.0.0.1:7777") is None
    assert progress_line("specscope: error: no model at /x") is None


def test_the_guard_finds_a_worker_process_left_running() -> None:
    """What tests/worker_guard.py's autouse fixture fails a test for: a `specscope serve` started and not
    stopped (a stand-in with a worker's command line, so no model loads)."""
    import psutil

    from .worker_guard import live_workers

    before = {c.pid for c in psutil.Process().children(recursive=True)}
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m", "specscope", "serve"])
    try:
        assert [p.pid for p in live_workers(before)] == [stand_in.pid]
    finally:
        stand_in.kill()
        stand_in.wait()
    assert live_workers(before) == []


def test_the_guard_finds_a_worker_thread_left_running() -> None:
    """The guard's other half: a thread named like the worker's that outlives the test, and one that ends."""
    import threading

    from .worker_guard import threads_left

    before = set(threading.enumerate())
    release = threading.Event()
    stuck = threading.Thread(target=release.wait, name="specscope-worker-reader", daemon=True)
    unrelated = threading.Thread(target=release.wait, name="some-other-thread", daemon=True)
    stuck.start()
    unrelated.start()
    try:
        assert threads_left(before, wait_s=0.05) == ["specscope-worker-reader"]
    finally:
        release.set()
        stuck.join()
        unrelated.join()
    ending = threading.Thread(target=lambda: None, name="specscope-worker-link")
    ending.start()  # ends by itself: the guard waits for it rather than failing the test
    assert threads_left(before) == []
