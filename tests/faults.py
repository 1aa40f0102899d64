"""Faults the real parts cannot produce on demand here: a disk that fills up after N bytes.

A tmpfs of a few kilobytes would be the real thing, but mounting one needs root. ``DiskBudget`` wraps the
files the trace writer opens (``open_for_csv``, the one place trace files are created) so that writes past
the budget raise ``OSError(ENOSPC)`` exactly as a full disk does; creating a file still succeeds, as it does
on a full disk with free inodes.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import IO, Any

import pytest

from specscope.core.trace import autosave
from specscope.core.trace import files as trace


class _BudgetFile:
    def __init__(self, real: IO[str], budget: DiskBudget):
        self._real = real
        self._budget = budget

    def write(self, text: str) -> int:
        n = len(text.encode("utf-8", "backslashreplace"))
        if n > self._budget.free:
            self._budget.refused += 1
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._budget.free -= n
        return self._real.write(text)

    def __getattr__(self, name: str) -> Any:  # flush, close, fileno, name...
        return getattr(self._real, name)


class DiskBudget:
    def __init__(self, free: int):
        self.free = free
        self.refused = 0  # writes refused for lack of space


def full_disk(monkeypatch: pytest.MonkeyPatch, free: int) -> DiskBudget:
    """From now on, trace files can take ``free`` more bytes in all."""
    budget = DiskBudget(free)
    original = trace.open_for_csv

    def opener(path: Path, mode: str) -> Any:
        return _BudgetFile(original(path, mode), budget)

    monkeypatch.setattr(trace, "open_for_csv", opener)
    monkeypatch.setattr(autosave, "open_for_csv", opener)
    return budget


def leftovers(folder: Path) -> list[str]:
    """Temporary or probe files anywhere under ``folder``."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.endswith((".tmp", ".probe")))
