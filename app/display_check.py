"""Is there a screen to open the window on? Asked before Qt starts, because Qt cannot say it well.

Without a display (an ssh session, a container) Qt's xcb plugin prints five lines that blame a missing
``libxcb-cursor0`` and then aborts the process (a core dump, exit 134). The user needs one sentence: there is
no display, and here is how to work without one. Imports no Qt.
"""

from __future__ import annotations

import os
import re
import socket
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

X_SOCKETS = Path("/tmp/.X11-unix")
X_TCP_BASE = 6000  # X display N listens on TCP 6000 + N (an ssh -X forward: localhost:10 -> 6010)
PROBE_SECONDS = 1.0
_X_DISPLAY = re.compile(r"^(?P<host>[^:/]*):(?P<number>\d+)(\.\d+)?$")

HEADLESS_WAYS = ("decode headless with `specscope run --demo --prompt TEXT`, or start `specscope serve` here and "
                 "connect to it from the app on a desktop (File > Connect to worker…)")


def display_problem(environ: Mapping[str, str] | None = None, platform: str = sys.platform,
                    x_sockets: Path = X_SOCKETS) -> str | None:
    """One sentence when the window has no screen to open on, else None (also when unsure: Qt then decides).

    Only Linux and the BSDs need a display server; a Qt platform chosen by hand (QT_QPA_PLATFORM, e.g.
    offscreen) is the user's decision."""
    env = os.environ if environ is None else environ
    if not platform.startswith(("linux", "freebsd", "openbsd", "netbsd")) or env.get("QT_QPA_PLATFORM"):
        return None
    if env.get("WAYLAND_DISPLAY"):
        return None  # Qt picks Wayland (or falls back to X through Xwayland); a Wayland socket is not probed
    display = env.get("DISPLAY", "")
    if not display:
        return f"no display to open the window on (DISPLAY and WAYLAND_DISPLAY are not set): {HEADLESS_WAYS}"
    if x_display_reachable(display, x_sockets) is False:
        return f"cannot reach the X display {display} to open the window on: {HEADLESS_WAYS}"
    return None


def x_display_reachable(display: str, x_sockets: Path = X_SOCKETS) -> bool | None:
    """Whether an X server answers at ``display`` (":0", "localhost:10.0", "unix:1"); None when the name is
    not one this check understands (a launchd path on macOS, for instance)."""
    parsed = _X_DISPLAY.match(display)
    if parsed is None:
        return None
    host, number = parsed["host"], int(parsed["number"])
    if host in ("", "unix"):
        path = str(x_sockets / f"X{number}")
        # the file system socket, then the abstract one Xorg and Xvfb also listen on under Linux
        return any(_connects(socket.AF_UNIX, address) for address in (path, "\0" + path))
    try:
        infos = socket.getaddrinfo(host, X_TCP_BASE + number, type=socket.SOCK_STREAM)
    except OSError:
        return False
    return any(_connects(family, address) for family, _, _, _, address in infos)


def _connects(family: int, address: Any) -> bool:
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.settimeout(PROBE_SECONDS)
        try:
            probe.connect(address)
        except OSError:
            return False
    return True
