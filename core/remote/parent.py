"""A spawned worker ends with the process that started it: ``specscope serve --exit-with-parent``.

The spawner (``core.remote.spawn``: the app, or a script) gives the worker a pipe as its standard input and never
writes to it. The kernel closes the pipe's write end when the spawner's process ends, however it ends (a kill -9
and a crash included, which run no cleanup), and the worker then reads end of file. A thread here waits for that
and stops the worker as SIGTERM does: a run under way stops at its next iteration and the server says bye (no
client is left to read it, but nothing is cut half-way); during the pair's load, SIGTERM's default ends the
process at once. Should the stop hang (a model call that never returns), the process exits after a grace period.

Only when asked: ``specscope serve`` run by a person from a terminal reads nothing from its standard input and
serves until SIGINT or SIGTERM, as before.
"""

from __future__ import annotations

import os
import signal
import stat
import threading
import time
from collections.abc import Callable

STOP_GRACE_S = 60.0  # after the parent's end, how long a stop may take before the worker exits regardless
EXIT_WITH_PARENT_OPTION = "--exit-with-parent"


def stdin_is_a_pipe(fd: int = 0) -> bool:
    """Standard input is a pipe or a socket (what a spawner gives), not a terminal, a file or /dev/null."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _read_until_closed(fd: int) -> None:
    while True:
        try:
            if not os.read(fd, 4096):  # b"": the write end closed (the parent is gone); data is ignored
                return
        except InterruptedError:
            continue
        except OSError:
            return


def say(log: Callable[[str], None], message: str) -> None:
    """Log, or, when the output's reader was the parent that is gone (a broken pipe), send this process's
    output to /dev/null from now on: a write to a pipe nobody reads raises in whichever thread logs next, and
    the stop must not fail on its way out for want of an audience."""
    try:
        log(message)
        return
    except OSError:
        pass
    devnull = os.open(os.devnull, os.O_WRONLY)
    for out in (1, 2):
        os.dup2(devnull, out)
    os.close(devnull)


def exit_with_parent(log: Callable[[str], None], fd: int = 0, grace_s: float = STOP_GRACE_S) -> threading.Thread:
    """Start the thread that stops this process once ``fd`` (standard input, a pipe from the parent) closes."""

    def watch() -> None:
        _read_until_closed(fd)
        say(log, "the process that started this worker has ended: stopping")
        os.kill(os.getpid(), signal.SIGTERM)  # the main thread's handler (or the default) stops the worker
        time.sleep(grace_s)  # a normal stop ends the process first (this thread is a daemon)
        say(log, f"the stop took over {grace_s:g} s: exiting now")
        os._exit(1)

    thread = threading.Thread(target=watch, name="specscope-parent-watch", daemon=True)
    thread.start()
    return thread
