"""A start-up check for a Qt binding that would crash the app later.

PySide6 6.12.0 on Python < 3.12 drops a reference to ``None`` on every call of a method returning void
(``setText``, ``processEvents``...); after a few thousand calls Python aborts with "deallocating None".
From Python 3.12 ``None`` is immortal and the bug is harmless. Checking costs a few microseconds.
"""

from __future__ import annotations

import sys

PROBE_CALLS = 64


def none_refcount_bug() -> bool:
    """True when void Qt calls leak references to None (the app would abort after a while)."""
    if sys.version_info >= (3, 12):
        return False
    from PySide6.QtCore import QObject

    probe = QObject()
    before = sys.getrefcount(None)
    for _ in range(PROBE_CALLS):
        probe.setObjectName("probe")
    return sys.getrefcount(None) < before - PROBE_CALLS // 2


def binding_problem() -> str | None:
    """A one-line message when the installed Qt binding cannot run the app, else None."""
    if none_refcount_bug():
        import PySide6

        return (f"PySide6 {PySide6.__version__} has a reference-count bug on Python "
                f"{sys.version_info.major}.{sys.version_info.minor} that crashes the app; "
                "install another version: pip install 'PySide6-Essentials>=6.6,!=6.12.0'")
    return None
