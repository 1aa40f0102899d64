"""The real `specscope serve` in a process of its own (core.remote.spawn): killed mid-run, stopped by a signal,
interrupted from the client, failing to start, and ending with the process that spawned it (kill -9 of that
process included) while a worker started without --exit-with-parent never reads its stdin."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from specscope.core.events import RunFinished
from specscope.core.measure.run import Run
from specscope.core.records import IterationRecord
from specscope.core.remote.spawn import WorkerStartError, start_local_worker
from tests.cli_helpers import cli, one_sentence, sessions
from tests.remote_helpers import pair_args, tiny_pair_dirs
from tests.worker_guard import live_worker_pids

PROMPT = ["--prompt", "w5 w6 w7", "--no-chat-template"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    return tiny_pair_dirs(tmp_path_factory.mktemp("remote-process"))


def _feed_then(monkeypatch, after_iterations: int, action) -> None:
    """Do ``action`` once the client has received ``after_iterations`` iterations (mid-run, deterministically)."""
    feed = Run.feed
    count = {"n": 0}

    def feed_and_act(self, event):
        snapshot = feed(self, event)
        if isinstance(event, IterationRecord):
            count["n"] += 1
            if count["n"] == after_iterations:
                action()
        return snapshot

    monkeypatch.setattr(Run, "feed", feed_and_act)


def test_the_worker_killed_mid_run_keeps_what_arrived(dirs, tmp_path, capsys, monkeypatch) -> None:
    worker = start_local_worker(pair_args(dirs))
    assert worker.pid in live_worker_pids()  # what the fixture would catch, had the test not stopped it
    try:
        _feed_then(monkeypatch, 5, lambda: os.kill(worker.pid, signal.SIGKILL))
        before = sessions()
        trace = tmp_path / "cut.csv"
        assert worker.address is not None
        rc, out, err = cli(capsys, "run", "--remote", worker.address.url(), *PROMPT, "--max-new-tokens", "400",
                           "--k", "2", "--json", "--trace", str(trace))
    finally:
        code = worker.stop()
    assert code == -signal.SIGKILL and worker.pid not in live_worker_pids()
    assert rc == 1
    sentence = one_sentence(err)
    assert "The worker closed the connection mid-run" in sentence and "what arrived is kept" in sentence
    result = json.loads(out)
    assert result["finish_reason"] == "error" and result["metrics"]["iterations"] >= 5
    assert len(result["token_ids"]) == result["metrics"]["tokens"] > 0  # the tokens that arrived
    lines = (tmp_path / "cut.events.jsonl").read_text(encoding="utf-8").splitlines()
    kept = [json.loads(line) for line in lines[1:]]
    assert kept[0]["type"] == "run_started" and sum(e["type"] == "iteration" for e in kept) >= 5
    (folder,) = sessions() - before
    autosaved = next(iter(folder.glob("*.events.jsonl"))).read_text(encoding="utf-8").splitlines()
    assert len(autosaved) == len(lines)  # the autosave holds the same stream


# Full tier (13 s: a worker loaded in a process of its own): stopping a remote run is checked in-process
# (test_remote.py) and a worker process ending mid-run by the tests kept in this module.
@pytest.mark.slow
def test_ctrl_c_stops_the_remote_run_and_sigterm_the_worker(dirs, capsys, monkeypatch) -> None:
    worker = start_local_worker(pair_args(dirs))
    try:
        _feed_then(monkeypatch, 3, lambda: os.kill(os.getpid(), signal.SIGINT))
        assert worker.address is not None
        rc, out, err = cli(capsys, "run", "--remote", worker.address.url(), *PROMPT, "--max-new-tokens", "400",
                           "--k", "2", "--json")
        assert rc == 128 + signal.SIGINT
        assert "stopped by SIGINT after" in one_sentence(err) and "what was decoded is kept" in err
        result = json.loads(out)
        assert result["finish_reason"] == "interrupted" and result["metrics"]["iterations"] >= 3
        assert result["metrics"]["tokens"] < 400
        monkeypatch.undo()
        # the worker is still there for the next run: the stop ended the run, not the connection's worker
        rc, out, _err = cli(capsys, "run", "--remote", worker.address.url(), *PROMPT, "--max-new-tokens", "6",
                            "--json")
        assert rc == 0 and len(json.loads(out)["token_ids"]) == 6
    finally:
        code = worker.stop()  # SIGTERM: the worker shuts down cleanly
    assert code == 0
    tail = "\n".join(worker.stderr_tail())
    assert worker.address.token not in tail  # the worker's log never holds the token
    assert "client connected from 127.0.0.1" in tail


def test_a_worker_that_cannot_load_says_why(tmp_path) -> None:
    """The worker's own ``specscope: error:`` sentence becomes the start error."""
    with pytest.raises(WorkerStartError) as caught:
        start_local_worker(["--target", str(tmp_path / "missing")])
    assert str(caught.value) == f"no model directory at {tmp_path / 'missing'}"


def test_received_run_ends_with_run_finished_when_the_worker_stops_it(dirs) -> None:
    """SIGTERM to the worker mid-run: the run stops at an iteration, RunFinished says terminated, then a bye."""
    from specscope.core.records import ControlValues
    from specscope.core.remote.client import WorkerClient, WorkerLost

    worker = start_local_worker(pair_args(dirs))
    events = []
    try:
        assert worker.address is not None
        with WorkerClient.connect(worker.address) as client:
            for event in client.start("w5 w6 w7", ControlValues(k=2), {"max_new_tokens": 400}, chat=False):
                events.append(event)
                if isinstance(event, IterationRecord) and event.iteration == 2:
                    worker.process.terminate()
            assert client.result is not None  # the run ended whole: its result came before the goodbye
            with pytest.raises(WorkerLost, match="The worker is shutting down"):
                for _ in range(10_000):  # a ping that crossed the goodbye is still answered
                    client.ping()
        code = worker.process.wait(timeout=120)  # the one SIGTERM ends the worker by itself
    finally:
        worker.stop()
    assert code == 0
    assert isinstance(events[-1], RunFinished) and events[-1].reason == "terminated"


# A parent that spawns its worker through core.remote.spawn, starts a run on it, says the worker's pid once the
# first iteration arrived, and goes on reading the run until it is killed.
PARENT = """
import sys
from specscope.core.records import ControlValues, IterationRecord
from specscope.core.remote.client import WorkerClient
from specscope.core.remote.spawn import start_local_worker

worker = start_local_worker(sys.argv[1:])
client = WorkerClient.connect(worker.address)
said = False
for event in client.start("w5 w6 w7", ControlValues(k=2), {"max_new_tokens": 400}, chat=False):
    if isinstance(event, IterationRecord) and not said:
        print(worker.pid, flush=True)
        said = True
sys.stdin.read()  # the run ended: wait here to be killed
"""


def process_ended(pid: int) -> bool:
    """Gone, or a zombie nobody has reaped yet (an orphan's new parent may be slow to, or never)."""
    import psutil

    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_ended(pid: int, deadline_s: float) -> bool:
    import time

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if process_ended(pid):
            return True
        time.sleep(0.05)  # polling a process this test does not own (it cannot wait() for it)
    return process_ended(pid)


def test_a_worker_ends_when_the_process_that_spawned_it_is_killed(dirs) -> None:
    """kill -9 of the spawner runs none of its cleanup: the worker sees its stdin pipe close and stops."""
    import subprocess
    import sys

    parent = subprocess.Popen([sys.executable, "-c", PARENT, *pair_args(dirs)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    worker_pid = 0
    try:
        assert parent.stdout is not None
        worker_pid = int(parent.stdout.readline())  # the worker is decoding the parent's run now
        assert worker_pid in live_worker_pids()  # a grandchild of this test until its parent dies
        os.kill(parent.pid, signal.SIGKILL)
        assert parent.wait(30) == -signal.SIGKILL
        assert wait_ended(worker_pid, 30.0), "the worker outlived the process that spawned it"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
        if worker_pid and not process_ended(worker_pid):
            os.kill(worker_pid, signal.SIGKILL)


# Full tier (11 s: a worker loaded in a process of its own): the other side of --exit-with-parent, whose own
# check (a worker ends with the process that spawned it) stays in the fast tier.
@pytest.mark.slow
def test_serve_without_exit_with_parent_never_reads_its_stdin(dirs) -> None:
    """`specscope serve` run by a person is not tied to its stdin: closed before the load ended (when a watching
    worker would stop at once), the worker still comes up and decodes."""
    import subprocess
    import sys

    from specscope.core.records import ControlValues
    from specscope.core.remote.client import WorkerClient
    from specscope.core.remote.spawn import LocalWorker

    command = [sys.executable, "-m", "specscope", "serve", *pair_args(dirs), "--host", "127.0.0.1", "--port", "0"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdin is not None
    process.stdin.close()  # end of file from the start
    worker = LocalWorker(process)
    try:
        address = worker.wait_ready(120.0)
        with WorkerClient.connect(address) as client:
            events = list(client.start("w5 w6 w7", ControlValues(k=2), {"max_new_tokens": 5}, chat=False))
        assert events and client.result is not None
        assert worker.alive()
    finally:
        code = worker.stop()
    assert code == 0


def test_exit_with_parent_refuses_a_stdin_that_is_not_a_pipe(dirs) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "specscope", "serve", *pair_args(dirs), "--port", "0",
                           "--exit-with-parent"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert "--exit-with-parent needs standard input to be a pipe" in one_sentence(done.stderr)
