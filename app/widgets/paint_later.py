"""A widget's repaint held until the event loop has served what came due while it was being changed.

Qt paints what a timer's work made dirty in the very next pass of its event loop, before the timers that came
due meanwhile and before the input that arrived: a live plot's turn (its new points and ranges, then its
repaint) was one stretch of the GUI thread, and on a machine shared with a busy program the window's input
and timers waited for both halves (issue 40's latency; docs/bench-gui.md). Holding the repaint until a
one-millisecond timer fires puts a pass of the event loop's timers between the two halves: timers due earlier
fire first, and input queued meanwhile is handled. (A zero-delay single shot would not: Qt 6 posts it as an
event, handled before the timers.) The repaint is the same one, a few milliseconds later.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from PySide6.QtCore import QObject, QTimer
from PySide6.QtWidgets import QWidget


def hold_repaints(widgets: Iterable[QWidget]) -> Callable[[], None]:
    """Hold these widgets' repaints; returns their release, which repaints each whole (Qt drops the updates
    asked for while held). A hidden one is held too: shown meanwhile (a run's first verdict), it is painted with
    the rest."""
    held = [w for w in widgets if w.updatesEnabled()]
    for widget in held:
        widget.setUpdatesEnabled(False)

    def release() -> None:
        for widget in held:
            widget.setUpdatesEnabled(True)

    return release


def after_queued(context: QObject, then: Callable[[], None]) -> None:
    """Call ``then`` at the event loop's next pass of due timers (a precise one-millisecond timer: Qt 6 runs a
    zero-delay single shot as a posted event, before the timers); not at all once ``context`` is gone."""
    QTimer.singleShot(1, context, then)


def paint_after_queued(widget: QWidget) -> None:
    """Hold ``widget``'s repaints until the event loop's next pass of due timers, then repaint it whole."""
    if widget.isVisible():
        after_queued(widget, hold_repaints([widget]))
