"""Driving the CLI in-process as a user would, and reading its one error sentence."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from specscope.core.commands.cli import main
from specscope.core.trace.autosave import default_sessions_dir


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process: (exit code, stdout, stderr); argparse's refusals count as exit codes."""
    try:
        rc = main(list(argv))
    except SystemExit as exc:
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


def one_sentence(err: str) -> str:
    """The one ``specscope: error:`` line; asserts there is exactly one and no traceback."""
    lines = [ln for ln in err.splitlines() if ln.startswith("specscope: error: ")]
    assert len(lines) == 1, err
    assert "Traceback" not in err and "Exception ignored" not in err, err
    return lines[0]


def sessions() -> set[Path]:
    root = default_sessions_dir()
    return set(root.iterdir()) if root.exists() else set()


def char_device(path: Path, major: int = 1, minor: int = 3) -> Path:
    """A character device at ``path`` (1,3 is /dev/null's number, 1,7 /dev/full's); skips where mknod needs
    a privilege this process lacks."""
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
    except PermissionError:
        pytest.skip("making a character device needs root here")
    return path


def fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def is_char_device(path: Path) -> bool:
    return stat.S_ISCHR(os.stat(path).st_mode)
