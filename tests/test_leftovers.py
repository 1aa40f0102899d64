"""A kill during the demo's conversion or unpacking leaves a temporary folder or file in the cache; the next
start removes it, and never one a live process is still writing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from specscope.core import leftovers
from specscope.core.engine import demo

needs_flock = pytest.mark.skipif(leftovers.fcntl is None, reason="flock is POSIX-only (age is used elsewhere)")

HOLD_A_CLAIM = """
import sys, time
from pathlib import Path
from specscope.core.leftovers import claimed_folder
folder = Path(sys.argv[1])
folder.mkdir()
(folder / "model.safetensors").write_bytes(b"half")
with claimed_folder(folder):
    print("claimed", flush=True)
    time.sleep(600)
"""


def _claim_in_child(folder: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", HOLD_A_CLAIM, str(folder)], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "claimed"
    return child


@needs_flock
def test_a_killed_writers_folder_is_removed_and_a_live_writers_kept(tmp_path: Path) -> None:
    dead = tmp_path / ".SmolLM2-135M-Instruct.dead"
    live = tmp_path / ".SmolLM2-135M-Instruct.live"
    killed = _claim_in_child(dead)
    alive = _claim_in_child(live)
    try:
        killed.send_signal(signal.SIGKILL)  # as a user's kill during the first conversion
        killed.wait(30)
        assert dead.is_dir()  # what the kill leaves behind
        removed = leftovers.remove_abandoned(tmp_path, (".SmolLM2-135M-Instruct.*",))
        assert removed == [dead] and not dead.exists()
        assert live.is_dir() and (live / leftovers.LOCK_NAME).exists()  # still being written: untouched
    finally:
        alive.kill()
        alive.wait(30)
    assert leftovers.remove_abandoned(tmp_path, (".SmolLM2-135M-Instruct.*",)) == [live]  # its writer is gone now


def test_a_folder_without_a_lock_goes_by_age(tmp_path: Path) -> None:
    old = tmp_path / ".SmolLM2-135M-Instruct.old"  # left by a release before the lock, empty as in the issue
    fresh = tmp_path / ".SmolLM2-135M-Instruct.fresh"  # just made by a writer that has not locked it yet
    old.mkdir()
    fresh.mkdir()
    an_hour_ago = time.time() - 3600
    os.utime(old, (an_hour_ago, an_hour_ago))
    assert leftovers.remove_abandoned(tmp_path, (".SmolLM2-135M-Instruct.*",)) == [old]
    assert fresh.is_dir()


@needs_flock
def test_an_unpacking_file_is_kept_while_its_writer_holds_it(tmp_path: Path) -> None:
    partial = tmp_path / ".draft_layers.abc123"
    fd = os.open(partial, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        leftovers.lock_fd(fd)
        assert leftovers.remove_abandoned(tmp_path, (".draft_layers.*",)) == []
    finally:
        os.close(fd)  # the writer is gone (as after a kill): the file is a leftover now
    assert leftovers.remove_abandoned(tmp_path, (".draft_layers.*",)) == [partial]


def test_the_demo_cache_is_cleaned_at_the_next_start_and_keeps_the_rest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path))
    cache = demo.demo_cache_dir()
    cache.mkdir(parents=True)
    left = cache / ".SmolLM2-135M-Instruct.k2j4x_"
    left.mkdir()
    (left / leftovers.LOCK_NAME).touch()  # locked by nobody: its writer was killed
    kept = [cache / "SmolLM2-135M-Instruct", cache / "draft_layers-0123456789abcdef.safetensors"]
    kept[0].mkdir()
    kept[1].write_bytes(b"x")
    assert demo.remove_leftovers() == ([left] if leftovers.fcntl is not None else [])
    assert all(p.exists() for p in kept)
