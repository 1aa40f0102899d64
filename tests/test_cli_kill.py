"""kill -9 during ``specscope run`` loses at most about the last second of iterations: the CLI records through
the app's autosave recorder. Judged from the autosaved trace against the moment of the kill, both on the
system-wide monotonic clock the iteration timestamps use (``time.monotonic()``)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specscope.core.trace.autosave import FLUSH_INTERVAL_S, RUNNING_MARKER, find_interrupted_sessions
from specscope.core.trace.files import read_trace
from tests.models import save_model_dir, tiny_model, word_tokenizer
from tests.warm_python import WarmPython, WarmRun

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="CLOCK_MONOTONIC shared across processes")

# Scheduling slack on a busy 2-core machine: the flush timer's thread needs the GIL and a core to run.
SCHEDULING_SLACK_S = 0.5


@pytest.fixture(scope="module")
def endless_target(tmp_path_factory) -> Path:
    model = tiny_model(7, vocab_size=64, logit_scale=3.0)
    model.config.max_position_embeddings = 1 << 20
    tokenizer = word_tokenizer()
    tokenizer.eos_token = None  # only the kill ends the run
    return save_model_dir(tmp_path_factory.mktemp("kill") / "target", model, tokenizer)


def start_run(warm: WarmPython, target: Path, data_dir: Path) -> WarmRun:
    """``python -m specscope.core.commands.cli run …`` as a process of its own, forked from the session's warm
    interpreter (tests/warm_python.py): the kill still hits a real process, which starts without ten seconds of
    imports."""
    env = dict(os.environ, SPECSCOPE_DATA_DIR=str(data_dir), OMP_NUM_THREADS="1")
    argv = ["run", "--target", str(target), "--drafter", "lookup", "--no-chat-template", "--prompt",
            "w5 w6 w7 w5 w6", "--max-new-tokens", "100000", "--quiet"]
    return warm.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_until_recording(proc: WarmRun, data_dir: Path, timeout: float = 180.0) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        for log in (data_dir / "sessions").glob("*/trace.events.jsonl"):
            if b'"type":"iteration"' in log.read_bytes():  # a first iteration is on disk
                return log.parent
        time.sleep(0.02)
    proc.kill()
    raise AssertionError("the run never started recording")


def kill_and_measure(warm: WarmPython, target: Path, data_dir: Path, extra_s: float) -> dict[str, float]:
    proc = start_run(warm, target, data_dir)
    try:
        folder = wait_until_recording(proc, data_dir)
        time.sleep(extra_s)  # the kill's moment: a random point of the run, not a wait for a race
        t_kill = time.monotonic()
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    records = read_trace(folder).records
    assert records, "nothing was saved"
    lost_window = t_kill - records[-1].t_end_s
    steps = sorted(r.iteration_ms for r in records)
    return {"saved": len(records), "lost_window_s": lost_window, "max_iteration_s": steps[-1] / 1000.0,
            "median_iteration_s": steps[len(steps) // 2] / 1000.0, "folder_is_offered": float(
                folder in find_interrupted_sessions(data_dir / "sessions") and (folder / RUNNING_MARKER).exists())}


def test_kill_9_loses_at_most_about_a_second(endless_target: Path, tmp_path: Path, warm_python) -> None:
    rng = random.Random(14)
    for n in range(3):
        m = kill_and_measure(warm_python, endless_target, tmp_path / f"data{n}", extra_s=rng.uniform(0.2, 3.0))
        # Completed iterations not on disk all ended after the last saved one and before the kill.
        assert 0.0 <= m["lost_window_s"] <= FLUSH_INTERVAL_S + m["max_iteration_s"] + SCHEDULING_SLACK_S, m
        assert m["folder_is_offered"] == 1.0  # and the app offers it as an interrupted session
