"""Crash-safe autosave: the session's trace written to a session folder as it grows.

``SessionRecorder`` creates ``<root>/<YYYYmmdd-HHMMSS>-<id>/`` holding ``trace.session.json`` (written
first), a ``RUNNING`` marker with the recording process's pid, and ``trace.csv`` / ``trace.tokens.csv`` /
``trace.baselines.csv`` in the trace format of ``trace.py``. Rows are buffered and written at most about
once a second (on the next append, or by a one-shot timer when appends stop), so a crash or kill loses at
most about the last second. ``close`` removes the marker; a folder whose marker outlives its process is an
interrupted session (``find_interrupted_sessions``), readable with ``trace.read_trace(folder)``.

The header of an appended CSV cannot grow, and the memory keys are only known as samples arrive, so
autosaved files carry the memory dict as one JSON column (``memory_json``) and the verify sweep as
``verify_ms_by_len_json``; ``read_trace`` reads both this form and the export form (one column per key).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from .records import BaselineRecord, DrillEvent, IterationRecord
from .trace import (
    SESSION_FOLDER_TRACE,
    TOKEN_COLUMNS,
    TracePaths,
    TraceWriteError,
    atomic_text_files,
    baseline_columns,
    baseline_row,
    iteration_columns,
    iteration_row,
    new_csv_writer,
    open_for_csv,
    sidecar,
    sidecar_text,
    token_rows,
    trace_paths,
)

RUNNING_MARKER = "RUNNING"
DATA_DIR_ENV = "SPECSCOPE_DATA_DIR"
FLUSH_INTERVAL_S = 1.0


def default_data_dir() -> Path:
    """The user's specscope data folder (platformdirs), or ``$SPECSCOPE_DATA_DIR`` when set."""
    override = os.environ.get(DATA_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    from platformdirs import user_data_dir

    return Path(user_data_dir("specscope", appauthor=False))


def default_sessions_dir() -> Path:
    return default_data_dir() / "sessions"


def _process_created(pid: int) -> float | None:
    try:
        import psutil

        return float(psutil.Process(pid).create_time())
    except Exception:  # psutil missing or the process is gone: no start time to compare
        return None


def _process_alive(pid: int, created: float | None) -> bool:
    """True if ``pid`` is a live process; with ``created`` also that it is the same process (pid reuse)."""
    try:
        import psutil
    except ImportError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except OSError:  # exists but not ours
            return True
        return True
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return created is None or abs(proc.create_time() - created) < 1.0
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:  # access denied: it exists
        return True


class SessionRecorder:
    """Appends records to a new session folder; thread-safe (GUI thread, worker, flush timer)."""

    def __init__(
        self,
        root: Path,
        session: dict[str, Any],
        *,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        background_flush: bool = True,
    ):
        self.flush_interval_s = flush_interval_s
        self._clock = clock
        self._background = background_flush
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self._iteration_rows: list[list[str]] = []
        self._token_rows: list[list[str]] = []
        self._baseline_rows: list[list[str]] = []
        self._last_flush: float | None = None
        self._closed = False
        self.n_iterations = 0
        self.n_baselines = 0
        self.error: str | None = None  # set when a write failed; recording stops, the app goes on
        self.flushes = 0

        root = Path(root)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        self.folder = root / f"{stamp}-{secrets.token_hex(3)}"
        self.paths: TracePaths = trace_paths(self.folder / SESSION_FOLDER_TRACE)
        self._session = session
        self._meta = sidecar(session, self.paths, None, None, recording={"state": "running"})
        self._files: list[IO[str]] = []
        try:
            self.folder.mkdir(parents=True)
            with atomic_text_files([self.paths.session]) as (f,):
                f.write(sidecar_text(self._meta))
            marker = {
                "pid": os.getpid(),
                "process_created": _process_created(os.getpid()),
                "host": socket.gethostname(),
                "started": self._meta["created"],
            }
            (self.folder / RUNNING_MARKER).write_text(json.dumps(marker) + "\n", encoding="utf-8")
            for path, header in (
                (self.paths.iterations, iteration_columns(None)),
                (self.paths.tokens, list(TOKEN_COLUMNS)),
                (self.paths.baselines, baseline_columns(None)),
            ):
                f = open_for_csv(path, "x")
                self._files.append(f)
                new_csv_writer(f).writerow(header)
                f.flush()
        except OSError as e:
            for f in self._files:
                f.close()
            raise TraceWriteError(self.folder, e.strerror or str(e)) from e
        self._writers = [new_csv_writer(f) for f in self._files]

    # -- recording ------------------------------------------------------------------------------------

    def append(self, item: IterationRecord | BaselineRecord | DrillEvent) -> None:
        """Buffer one record's rows; write the buffer when the last write is about a second old."""
        with self._lock:
            if self._closed or self.error is not None:
                return
            if isinstance(item, BaselineRecord):
                self._baseline_rows.append(baseline_row(item, None))
                self.n_baselines += 1
            elif not isinstance(item, IterationRecord):
                return  # a drill event: its state is in every iteration's drill_*_layers_count column
            else:
                self._iteration_rows.append(iteration_row(item, None))
                self._token_rows.extend(token_rows(item))
                self.n_iterations += 1
            now = self._clock()
            if self._last_flush is None or now - self._last_flush >= self.flush_interval_s:
                self._flush_locked()
            elif self._background and self._timer is None:
                # Appends may stop (pause, a hang before a crash): make sure these rows still land.
                delay = max(0.0, self.flush_interval_s - (now - self._last_flush))
                self._timer = threading.Timer(delay, self._timer_flush)
                self._timer.daemon = True
                self._timer.start()

    def flush(self) -> None:
        """Write the buffered rows now."""
        with self._lock:
            if not self._closed:
                self._flush_locked()

    def _timer_flush(self) -> None:
        with self._lock:
            self._timer = None
            if not self._closed:
                self._flush_locked()

    def _flush_locked(self) -> None:
        self._last_flush = self._clock()
        if self.error is not None:
            return
        # Tokens and baselines first: a reader never sees an iteration whose tokens are not yet written.
        try:
            self._write_batch(1, self._token_rows)
            self._write_batch(2, self._baseline_rows)
            self._write_batch(0, self._iteration_rows)
            self.flushes += 1
        except OSError as e:
            self.error = f"autosave to {self.folder} stopped: {e.strerror or e}"

    def _write_batch(self, index: int, rows: list[list[str]]) -> None:
        if rows:
            self._writers[index].writerows(rows)
            rows.clear()
        self._files[index].flush()

    # -- closing --------------------------------------------------------------------------------------

    def close(self, ok: bool = True, *, fsync: bool = True) -> None:
        """Write what is buffered, record how the session ended, and remove the RUNNING marker.

        ``ok=False`` (the run ended in an error the app caught) is recorded in the sidecar; either way the
        process saw the end, so the folder is not offered as interrupted. Idempotent.
        """
        with self._lock:
            if self._closed:
                return
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._flush_locked()
            self._closed = True
            for f in self._files:
                with suppress(OSError):
                    if fsync and self.error is None:
                        os.fsync(f.fileno())
                    f.close()
            self._meta["recording"] = {
                "state": "closed",
                "ok": ok,
                "ended": datetime.now().astimezone().isoformat(timespec="seconds"),
                "iterations": self.n_iterations,
                "baselines": self.n_baselines,
            }
            if self.error is not None:
                self._meta["recording"]["error"] = self.error
            with suppress(TraceWriteError), atomic_text_files([self.paths.session]) as (f,):
                f.write(sidecar_text(self._meta))
            with suppress(OSError):
                (self.folder / RUNNING_MARKER).unlink(missing_ok=True)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> SessionRecorder:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        self.close(ok=exc_type is None)


# -- interrupted sessions ---------------------------------------------------------------------------------


def _marker_is_live(marker: Path) -> bool:
    try:
        info = json.loads(marker.read_text(encoding="utf-8"))
        pid = int(info["pid"])
        created = info.get("process_created")
        host = info.get("host")
    except (OSError, ValueError, KeyError, TypeError):
        return False  # unreadable marker: its writer died while writing it
    if host is not None and host != socket.gethostname():
        return True  # another machine's process (shared data folder): cannot tell, do not claim it
    return _process_alive(pid, float(created) if created is not None else None)


def find_interrupted_sessions(root: Path) -> list[Path]:
    """Session folders under ``root`` whose RUNNING marker remains and whose process is gone, newest first."""
    root = Path(root)
    try:
        folders = [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return []
    found = [p for p in folders if (p / RUNNING_MARKER).exists() and not _marker_is_live(p / RUNNING_MARKER)]
    return sorted(found, key=lambda p: p.name, reverse=True)


def dismiss_interrupted_session(folder: Path) -> None:
    """Stop offering ``folder`` as interrupted (the user opened or declined it); its files are kept."""
    with suppress(OSError):
        (Path(folder) / RUNNING_MARKER).unlink(missing_ok=True)
