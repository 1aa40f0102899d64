"""The real `specscope serve` in a process of its own (core.remote.spawn): killed mid-run, stopped by a signal,
interrupted from the client, failing to start; and the fixture that catches a worker left running."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from specscope.core.events import RunFinished
from specscope.core.records import IterationRecord
from specscope.core.remote.received import ReceivedRun
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
    feed = ReceivedRun.feed
    count = {"n": 0}

    def feed_and_act(self, event):
        snapshot = feed(self, event)
        if isinstance(event, IterationRecord):
            count["n"] += 1
            if count["n"] == after_iterations:
                action()
        return snapshot

    monkeypatch.setattr(ReceivedRun, "feed", feed_and_act)


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
    assert str(caught.value) == "the model drafter needs --draft (or choose --drafter lookup or early-exit)"


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

