"""Host memory probe: this process's RSS, system available memory, swap in use, major page faults."""

from __future__ import annotations

import contextlib
import os
import sys
import threading


def _major_faults() -> int | None:
    """Cumulative major page faults of this process (pages read from disk: swap or mapped files)."""
    try:
        import resource

        return int(resource.getrusage(resource.RUSAGE_SELF).ru_majflt)
    except (ImportError, OSError, ValueError):
        pass
    try:  # Linux without the resource module: field 12 of /proc/self/stat
        with open(f"/proc/{os.getpid()}/stat") as f:
            stat = f.read()
        return int(stat.rsplit(")", 1)[1].split()[9])
    except (OSError, ValueError, IndexError):
        return None


class _ProcIo:
    """``/proc/self/io`` kept open and re-read from offset 0 (the kernel renders it afresh at each read): one
    system call a step, not an open, a read and a close with a text wrapper around them, which after a model's
    pass has evicted the caches cost 0.1–0.25 ms a step on the demo."""

    def __init__(self) -> None:
        self._fd: int | None = None
        self._pid = -1
        self._lock = threading.Lock()

    def read(self) -> dict[str, int]:
        with self._lock:
            try:
                if self._fd is None or self._pid != os.getpid():  # a forked child reads its own file
                    self._fd, self._pid = os.open("/proc/self/io", os.O_RDONLY), os.getpid()
                text = os.pread(self._fd, 4096, 0)
            except (OSError, AttributeError):  # no such file (not Linux), or no pread (Windows)
                return {}
        out: dict[str, int] = {}
        for line in text.split(b"\n"):
            key, _, value = line.partition(b":")
            if key in (b"read_bytes", b"rchar"):
                try:
                    out[key.decode()] = int(value)
                except ValueError:
                    return {}
        return out


_PROC_IO = _ProcIo()


def process_io() -> dict[str, int]:
    """This process's cumulative I/O counters (Linux ``/proc/self/io``): ``read_bytes`` is what it made
    the kernel fetch from storage (page-cache hits excluded), ``rchar`` every byte its read calls returned;
    empty where the platform has no such file."""
    return _PROC_IO.read()


def _io_counters() -> dict[str, float]:
    """/proc/self/io's read bytes and rchar under the trace's names (absent where the platform has none)."""
    io = process_io()
    return {name: float(io[key]) for key, name in (("read_bytes", "host_read_bytes"), ("rchar", "host_rchar_bytes"))
            if key in io}


def io_and_faults() -> dict[str, float]:
    """The cumulative counters a step's evidence is taken from (read bytes, rchar, major faults); read once a
    step on the decode thread, so /proc is read once each."""
    out = _io_counters()
    faults = _major_faults()
    if faults is not None:
        out["host_major_faults"] = float(faults)
    return out


def host_memory() -> dict[str, float]:
    """Flat readings in bytes (and a fault count); a key is absent when the platform cannot say."""
    out: dict[str, float] = {}
    try:
        import psutil  # type: ignore[import-untyped]
    except ImportError:
        psutil = None  # type: ignore[assignment]
    if psutil is not None:
        for key, read in (
            ("host_rss_bytes", lambda: psutil.Process().memory_info().rss),
            ("host_available_bytes", lambda: psutil.virtual_memory().available),
            ("swap_used_bytes", lambda: psutil.swap_memory().used),
        ):
            with contextlib.suppress(Exception):  # e.g. no swap information in a container
                out[key] = float(read())
    faults = _major_faults()
    if faults is None and psutil is not None and sys.platform == "win32":
        try:  # Windows counts soft and hard faults together: still a trend worth watching
            faults = int(psutil.Process().memory_info().num_page_faults)
        except Exception:
            faults = None
    if faults is not None:
        out["host_major_faults"] = float(faults)
    out.update(_io_counters())
    return out
