"""Temporary files and folders a killed process left in a cache, removed at the next start without touching
one that another live process is still writing.

A writer *claims* its temporary path for as long as it writes: it holds an exclusive ``flock`` on the file
itself, or on a lock file inside the folder. The lock dies with the process, however it ends (a kill -9
included), so at the next start a path whose lock can be taken is abandoned. A path with no lock (left by
an older release, or by a kill in the instant between creating it and locking it) and a platform without
``flock`` fall back to age: nothing written to it for ``STALE_AFTER_S``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: age only
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".in-progress.lock"
STALE_AFTER_S = 15 * 60  # a conversion takes ~20 s: a quarter of an hour without a write is abandoned


def lock_fd(fd: int) -> None:
    """Claim an open file (the writer's own temporary file) for this process's lifetime or until closed."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX)


@contextlib.contextmanager
def exclusive_lock(lock: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive ``flock`` on the file ``lock`` (created if missing, never removed: a lock file unlinked
    while another process opens it would let two holders in) for the block, waiting while another process
    holds it; ``on_wait`` is called first when it must wait. Without ``flock`` (Windows) nothing is held."""
    if fcntl is None:
        yield
        return
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            lock_fd(fd)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def claimed_folder(folder: Path) -> Iterator[None]:
    """Hold a lock inside ``folder`` while the block writes it; the lock file is gone when the block ends
    (before the folder is renamed into place), the lock itself when the process ends."""
    lock = folder / LOCK_NAME
    fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        lock_fd(fd)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                lock.unlink()
    finally:
        os.close(fd)


def _held_by_someone(lock: Path) -> bool | None:
    """True if a live process holds ``lock``, False if nobody does, None if that cannot be told."""
    if fcntl is None:
        return None
    try:
        fd = os.open(lock, os.O_RDWR)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return None
    finally:
        os.close(fd)  # closing releases the lock we may have taken
    return False


def _last_write(path: Path) -> float:
    """The newest modification time of ``path`` and, for a folder, of what is directly in it."""
    newest = path.lstat().st_mtime
    if path.is_dir():
        for child in path.iterdir():
            with contextlib.suppress(OSError):
                newest = max(newest, child.lstat().st_mtime)
    return newest


def is_abandoned(path: Path, now: float | None = None, stale_after_s: float = STALE_AFTER_S) -> bool:
    """A temporary file or folder no live process is writing."""
    lock = path / LOCK_NAME if path.is_dir() else path
    held = _held_by_someone(lock) if lock.exists() else None
    if held is not None:
        return not held
    return (now if now is not None else time.time()) - _last_write(path) > stale_after_s


def remove_abandoned(parent: Path, patterns: tuple[str, ...]) -> list[Path]:
    """Remove the entries of ``parent`` matching ``patterns`` (globs) that are abandoned; returns them."""
    removed: list[Path] = []
    if not parent.is_dir():
        return removed
    for pattern in patterns:
        for path in sorted(parent.glob(pattern)):
            try:
                if not is_abandoned(path):
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path)
                else:
                    path.unlink()
            except OSError:  # gone meanwhile, or not ours to remove: leave it
                continue
            removed.append(path)
    return removed
