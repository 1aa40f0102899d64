"""How a long step (loading a pair, preparing the demo, verifying) says how far it has got.

A step takes ``progress: Progress | None`` and calls :func:`report_progress`; the CLI prints the messages, the app's
status bar shows them with the fraction (0..1).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress", "report_progress"]

Progress = Callable[[str, float], None]  # (message, fraction done)


def report_progress(progress: Progress | None, message: str, fraction: float) -> None:
    """Tell ``progress`` (when there is one) the step's message and the fraction done."""
    if progress is not None:
        progress(message, fraction)
