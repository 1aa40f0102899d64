"""A kill during the demo's conversion or unpacking leaves a temporary folder or file in the cache; the next
start removes it, and never one a live process is still writing."""

from __future__ import annotations

import json
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


HOLD_THE_CONVERSION_LOCK = """
import json, sys
from pathlib import Path
from specscope.core.leftovers import exclusive_lock
cache, marker = Path(sys.argv[1]), json.loads(sys.argv[2])
with exclusive_lock(cache / "conversion.lock"):
    print("converting", flush=True)
    sys.stdin.readline()  # until the other process is seen waiting
    target = cache / "SmolLM2-135M-Instruct"
    target.mkdir()
    (target / "config.json").write_text("{}")
    (target / "specscope-demo.json").write_text(json.dumps(marker))
"""


def _fake_gguf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The demo's cache in ``tmp_path`` and a stand-in GGUF: the marker names its size and mtime."""
    monkeypatch.setenv("SPECSCOPE_CACHE_DIR", str(tmp_path))
    gguf = tmp_path / demo.DEMO_GGUF
    gguf.write_bytes(b"GGUF stand-in")
    monkeypatch.setattr(demo, "demo_gguf_path", lambda: gguf)
    return gguf


@needs_flock
def test_a_second_process_waits_for_the_first_conversion_and_takes_its_result(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two processes start the demo at once (two windows, or two test workers sharing a cache): the second
    waits on the cache's lock and converts nothing; before the lock both converted and the later one renamed
    its copy over the folder the first was loading from."""
    gguf = _fake_gguf(tmp_path, monkeypatch)
    cache = demo.demo_cache_dir()
    cache.mkdir(parents=True)
    marker = demo._source_identity(gguf) | {"files": ["config.json"]}
    assert demo.CONVERSION_LOCK == "conversion.lock"  # the name the child locks
    first = subprocess.Popen([sys.executable, "-c", HOLD_THE_CONVERSION_LOCK, str(cache), json.dumps(marker)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    conversions: list[Path] = []
    monkeypatch.setattr(demo, "_convert", lambda gguf, out, progress: conversions.append(out))
    reports: list[str] = []

    def progress(message: str, fraction: float) -> None:
        reports.append(message)
        if message.startswith("Waiting"):  # blocked on the lock: let the first process finish its conversion
            assert first.stdin is not None
            first.stdin.write("done\n")
            first.stdin.close()

    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "converting"
        assert demo.ensure_demo_target(progress) == demo.demo_target_dir()
    finally:
        first.kill()
        first.wait(30)
    assert conversions == []
    assert reports == ["Waiting for another specscope to convert the demo model", "Demo model found in the cache"]
    assert (cache / demo.CONVERSION_LOCK).exists() and demo.remove_leftovers() == []  # the lock file stays


def test_a_valid_cache_that_appears_during_a_conversion_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without flock (Windows) two conversions can overlap: the one that ends second keeps the first's
    folder, which a process may already be loading from, and drops its own copy."""
    gguf = _fake_gguf(tmp_path, monkeypatch)
    monkeypatch.setattr(leftovers, "fcntl", None)
    target = demo.demo_target_dir()

    def convert_while_another_finishes(gguf_path: Path, out: Path, progress: object) -> None:
        (out / "config.json").write_text('{"ours": true}')
        (out / demo.MARKER).write_text(json.dumps(demo._source_identity(gguf_path) | {"files": ["config.json"]}))
        target.mkdir()  # the other process's rename lands first
        (target / "config.json").write_text('{"theirs": true}')
        (target / demo.MARKER).write_text(json.dumps(demo._source_identity(gguf) | {"files": ["config.json"]}))

    monkeypatch.setattr(demo, "_convert", convert_while_another_finishes)
    assert demo.ensure_demo_target() == target
    assert json.loads((target / "config.json").read_text()) == {"theirs": True}
    assert [p.name for p in target.parent.iterdir() if p.name.startswith(".")] == []  # our copy is gone
