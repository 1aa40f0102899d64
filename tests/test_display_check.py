"""The app says in one sentence that it has no screen, instead of Qt's abort (exit 134, a core dump)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from specscope.app.display_check import display_problem, x_display_reachable


def test_no_display_variable_is_one_sentence_that_names_the_headless_ways() -> None:
    problem = display_problem({}, platform="linux")
    assert problem is not None and "DISPLAY and WAYLAND_DISPLAY are not set" in problem
    assert "specscope run --demo" in problem and "specscope serve" in problem


def test_a_display_nobody_listens_on_is_named(tmp_path: Path) -> None:
    problem = display_problem({"DISPLAY": ":7"}, platform="linux", x_sockets=tmp_path)
    assert problem is not None and "cannot reach the X display :7" in problem


def test_an_x_server_listening_on_its_socket_is_reachable(tmp_path: Path) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(str(tmp_path / "X3"))
        server.listen(1)
        assert x_display_reachable(":3.0", tmp_path) is True
        assert display_problem({"DISPLAY": ":3"}, platform="linux", x_sockets=tmp_path) is None
    assert x_display_reachable(":4", tmp_path) is False


def test_a_forwarded_display_is_probed_over_tcp() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        number = server.getsockname()[1] - 6000
        if number < 0:  # an ephemeral port below 6000: no display number maps to it
            return
        assert x_display_reachable(f"127.0.0.1:{number}.0") is True


def test_the_users_own_choices_are_left_to_qt(tmp_path: Path) -> None:
    assert display_problem({"QT_QPA_PLATFORM": "offscreen"}, platform="linux") is None
    assert display_problem({"WAYLAND_DISPLAY": "wayland-0"}, platform="linux") is None
    assert display_problem({}, platform="darwin") is None and display_problem({}, platform="win32") is None
    assert x_display_reachable("/private/tmp/com.apple.launchd.x/org.xquartz:0") is None


def test_the_app_without_a_display_exits_with_one_line_not_an_abort() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    done = subprocess.run([sys.executable, "-m", "specscope", "--no-load"], capture_output=True, text=True,
                          env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("specscope: error: no display to open the window on"), lines
