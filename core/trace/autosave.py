"""Crash-safe autosave: the run's event stream written to a session folder as it grows (the app and the CLI).

``SessionRecorder`` creates ``<root>/<YYYYmmdd-HHMMSS>-<id>/`` holding ``trace.session.json`` (written
first), a ``RUNNING`` marker with the recording process's pid, and ``trace.events.jsonl``, the event log
(``core.trace.event_log``) that export writes too and replay reads. It is a sink of the session, so it records on
the thread that decodes, in the stream's order, and a stalled window never delays it. Lines are buffered and
written at most about once a second (by a writer thread, or on the next append or a one-shot timer), so a
crash or kill loses at most about the last second. ``close`` removes the marker; a folder whose marker
outlives its process, and that holds at least one iteration, is an interrupted session
(``find_interrupted_sessions``), readable with ``trace.read_trace(folder)``.

A full disk must not cost more than the rows it could not write: a recorder that cannot start removes what
it created; one stopped mid-run keeps what is on disk and still records in ``trace.session.json`` that it
ended (the file is written with spare room, so the final state fits over it in place when no new file can
be created).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from contextlib import suppress
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from specscope.core.events import Event
from specscope.core.trace.errors import TraceWriteError
from specscope.core.trace.event_log import EventLogAppender
from specscope.core.trace.files import atomic_text_files, open_for_csv, sidecar, sidecar_text
from specscope.core.trace.layout import SESSION_FOLDER_TRACE, TracePaths, trace_paths

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


SIDECAR_SPARE_BYTES = 1024  # room left in the running session file for its final state (see close)



class SessionRecorder:
    """Appends records to a new session folder; thread-safe (GUI thread, worker, flush timer).

    ``writer_thread=True`` (the app and the CLI) moves all the work off the caller: ``append`` only queues
    the record, and a writer thread renders the queued rows and writes them every ``flush_interval_s``. The
    GUI thread then never formats a CSV cell (it was an eighth of its busy time), a signal handled on the
    CLI's thread never lands in the middle of a row, and the loss on a kill is the same: at most the last
    interval. Without it, ``append`` renders at once and writes when the last write is about an interval
    old, from a timer thread when appends stop (``background_flush``); the tests drive that mode with a
    fake clock.
    """

    def __init__(
        self,
        root: Path,
        session: dict[str, Any],
        *,
        flush_interval_s: float = FLUSH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        background_flush: bool = True,
        writer_thread: bool = False,
    ):
        self.flush_interval_s = flush_interval_s
        self._clock = clock
        self._background = background_flush
        self._lock = threading.RLock()
        self._timer: threading.Timer | None = None
        self._last_flush: float | None = None
        self._closed = False
        self.error: str | None = None  # set when a write failed; recording stops, the run goes on
        self.flushes = 0
        self._queued: deque[Event] = deque()  # writer-thread mode: not rendered yet
        self._stop_writer = threading.Event()
        self._writer: threading.Thread | None = None

        root = Path(root)
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        self.folder = root / f"{stamp}-{secrets.token_hex(3)}"
        self.paths: TracePaths = trace_paths(self.folder / SESSION_FOLDER_TRACE)
        self._session = session
        self._meta = sidecar(session, self.paths, None, recording={"state": "running"})
        self._files: list[IO[str]] = []
        created: list[Path] = []
        try:
            self.folder.mkdir(parents=True)
            created.append(self.folder)
            with atomic_text_files([self.paths.session]) as (f,):
                f.write(sidecar_text(self._meta) + " " * SIDECAR_SPARE_BYTES + "\n")
            created.append(self.paths.session)
            marker = {
                "pid": os.getpid(),
                "process_created": _process_created(os.getpid()),
                "host": socket.gethostname(),
                "started": self._meta["created"],
            }
            marker_path = self.folder / RUNNING_MARKER
            created.append(marker_path)
            marker_path.write_text(json.dumps(marker) + "\n", encoding="utf-8")
            created.append(self.paths.events)
            self._files.append(open_for_csv(self.paths.events, "x"))
            self._appender = EventLogAppender(self._files[0])
            if writer_thread:
                self._writer = threading.Thread(target=self._write_loop, name="specscope-autosave", daemon=True)
                self._writer.start()
        except (OSError, TraceWriteError) as e:
            # Nothing recorded yet: leave nothing behind (a folder with a marker and empty files would be
            # offered as an interrupted session that holds nothing).
            for f in self._files:
                with suppress(OSError):
                    f.close()
            for p in reversed(created):
                with suppress(OSError):
                    p.rmdir() if p == self.folder else p.unlink(missing_ok=True)
            if isinstance(e, TraceWriteError):
                raise
            raise TraceWriteError(self.folder, e.strerror or str(e)) from e

    @property
    def n_iterations(self) -> int:
        return self._appender.n_iterations

    @property
    def n_events(self) -> int:
        return self._appender.n_events

    # -- recording ------------------------------------------------------------------------------------

    def __call__(self, event: Event, snapshot: object = None) -> None:
        """A session sink: the recorder keeps the event (the snapshot is the measurement's, recomputed on replay)."""
        self.append(event)

    def append(self, item: Event) -> None:
        """Buffer one event's line; write the buffer when the last write is about a second old."""
        if self._writer is not None:
            if not self._closed and self.error is None:
                self._queued.append(item)  # deque.append is atomic: no lock, so no wait on a write
            return
        with self._lock:
            if self._closed or self.error is not None:
                return
            self._render_locked(item)
            if self.error is not None:
                return
            now = self._clock()
            if self._last_flush is None or now - self._last_flush >= self.flush_interval_s:
                self._flush_locked()
            elif self._background and self._timer is None:
                # Appends may stop (pause, a hang before a crash): make sure these rows still land.
                delay = max(0.0, self.flush_interval_s - (now - self._last_flush))
                self._timer = threading.Timer(delay, self._timer_flush)
                self._timer.daemon = True
                self._timer.start()

    def _render_locked(self, item: Event) -> None:
        try:
            self._appender.append(item)
        except (TypeError, ValueError) as e:  # an event the format cannot hold: stop recording, never the run
            self._flush_locked()  # the rows before it are good: write them first
            self.error = f"autosave to {self.folder} stopped: {e}"

    def _render_queued_locked(self) -> bool:
        """Render what the writer-thread mode queued; True if there was anything."""
        rendered = False
        while self._queued and self.error is None:
            self._render_locked(self._queued.popleft())
            rendered = True
        return rendered

    def _write_loop(self) -> None:
        while not self._stop_writer.wait(self.flush_interval_s):
            with self._lock:
                if self._closed:
                    return
                if self._render_queued_locked():
                    self._flush_locked()

    def flush(self) -> None:
        """Write the buffered rows now."""
        with self._lock:
            if not self._closed:
                self._render_queued_locked()
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
        try:
            self._appender.flush()
            self.flushes += 1
        except OSError as e:
            self.error = f"autosave to {self.folder} stopped: {e.strerror or e}"

    # -- closing --------------------------------------------------------------------------------------

    def close(self, ok: bool = True, *, fsync: bool = True, reason: str = "") -> None:
        """Write what is buffered, record how the session ended, and remove the RUNNING marker.

        ``ok=False`` (the run ended in an error the caller caught) is recorded in the sidecar, with
        ``reason`` when given; either way the process saw the end, so the folder is not offered as
        interrupted. Idempotent.
        """
        if self._writer is not None:
            self._stop_writer.set()
            self._writer.join()  # at most one render and write of an interval's rows
        with self._lock:
            if self._closed:
                return
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            self._render_queued_locked()
            self._flush_locked()
            self._closed = True
            for f in self._files:
                with suppress(OSError):
                    if fsync and self.error is None:
                        os.fsync(f.fileno())
                with suppress(OSError):
                    f.close()
            self._meta["recording"] = {
                "state": "closed",
                "ok": ok and self.error is None,
                "ended": datetime.now().astimezone().isoformat(timespec="seconds"),
                "iterations": self.n_iterations,
                "events": self.n_events,
            }
            if reason:
                self._meta["recording"]["reason"] = reason
            if self.error is not None:
                self._meta["recording"]["error"] = self.error
            if self._appender.repairs:  # fields clamped to what the format holds: the events were kept
                self._meta["recording"]["repairs"] = self._appender.repairs.sentences()
            self._write_final_sidecar()
            with suppress(OSError):
                (self.folder / RUNNING_MARKER).unlink(missing_ok=True)

    def _write_final_sidecar(self) -> None:
        text = sidecar_text(self._meta)
        try:
            with atomic_text_files([self.paths.session]) as (f,):
                f.write(text)
            return
        except TraceWriteError:
            pass
        # No new file can be made (disk full): overwrite the running sidecar in place, which needs no new
        # blocks when the text fits in the room it was written with.
        data = text.encode("utf-8")
        with suppress(OSError), open(self.paths.session, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            if len(data) <= size:
                f.seek(0)
                f.write(data + b" " * (size - len(data)))

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
    """Session folders under ``root`` whose RUNNING marker remains, whose process is gone and that hold at
    least one iteration, newest first."""
    root = Path(root)
    try:
        folders = [p for p in root.iterdir() if p.is_dir()]
    except OSError:
        return []
    found = [p for p in folders if (p / RUNNING_MARKER).exists() and not _marker_is_live(p / RUNNING_MARKER)
             and _holds_an_iteration(p)]
    return sorted(found, key=lambda p: p.name, reverse=True)


def _holds_an_iteration(folder: Path) -> bool:
    """True when the folder's event log holds an iteration (or, for a folder from before the event log, its
    iteration CSV a row after its header): a session killed before its first iteration (or whose disk was
    full) holds nothing worth offering."""
    paths = trace_paths(folder / SESSION_FOLDER_TRACE)
    try:
        if paths.events.exists():
            with open(paths.events, "rb") as f:
                return any(b'"type":"iteration"' in line for line in f)
        with open(paths.iterations, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    first_newline = head.find(b"\n")
    return first_newline >= 0 and head[first_newline + 1:].strip() != b""


def prune_sessions(root: Path, keep: int) -> list[Path]:
    """Delete all but the ``keep`` newest finished session folders under ``root``; returns those deleted.

    Folders still marked RUNNING by a live run, or by an interrupted one that holds iterations (it is waiting to
    be offered), are never deleted; one whose recording process died before its first iteration holds nothing
    to offer and is pruned like a finished one. Only folders that look like sessions (they hold a session
    sidecar) are touched, so a user's own files in the folder are safe."""
    try:
        folders = [p for p in Path(root).iterdir() if p.is_dir()]
    except OSError:
        return []

    def done(folder: Path) -> bool:
        marker = folder / RUNNING_MARKER
        return not marker.exists() or (not _marker_is_live(marker) and not _holds_an_iteration(folder))

    finished = [p for p in folders if trace_paths(p / SESSION_FOLDER_TRACE).session.exists() and done(p)]
    finished.sort(key=lambda p: p.name, reverse=True)  # names start with a timestamp
    deleted = []
    for folder in finished[keep:]:
        shutil.rmtree(folder, ignore_errors=True)
        deleted.append(folder)
    return deleted


def start_recorder(root: Path, session: dict[str, Any], keep: int = 0) -> tuple[SessionRecorder | None, str]:
    """The one place a run's autosave starts (the CLI and the app's worker): prune to the ``keep`` newest
    session folders (0 = keep all), then start a recorder with a writer thread. (None, one sentence) when it
    cannot start: a run goes on without it, and the user is told that the safety net is off."""
    try:
        if keep > 0:
            prune_sessions(root, keep=keep - 1)  # the new one makes it ``keep``
        return SessionRecorder(root, session, writer_thread=True), ""
    except TraceWriteError as exc:
        return None, f"autosave is off for this run: {exc}"


def dismiss_interrupted_session(folder: Path) -> None:
    """Stop offering ``folder`` as interrupted (the user opened or declined it); its files are kept."""
    with suppress(OSError):
        (Path(folder) / RUNNING_MARKER).unlink(missing_ok=True)
