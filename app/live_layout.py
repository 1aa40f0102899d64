"""While a run is live, the plots keep their size: a change of the window's layout goes to the token view.

Lines come and go above the plots during a run (the run panel's k line, its verdict and paging warning). Each
such change re-lays out everything below it, and a plot that is resized repaints from scratch, its axes
included: all six plots at once cost the GUI thread 55-60 ms on a 2-core machine under Xvfb (a repaint of the
same six without a resize costs about 11 ms; docs/bench-gui.md). So while a run is live the splitter gives
every change of its height to the token view (a stretch factor of 0 for the plots), and gives the plots their
resting stretch back when the run ends, from the sizes as they are then (so nothing jumps).
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSplitter

_RESTING = "specscope_resting_stretch"  # the plots' stretch while held (a dynamic property of the splitter)


def hold_plot_size(splitter: QSplitter, hold: bool) -> None:
    """Keep the splitter's first widget (the plots) at its size while ``hold``; idempotent."""
    held = splitter.property(_RESTING)
    first = splitter.widget(0)
    if first is None or hold == (held is not None and held >= 0):
        return
    sizes = splitter.sizes()
    if hold:
        policy = first.sizePolicy()
        vertical = splitter.orientation() == Qt.Orientation.Vertical
        resting = policy.verticalStretch() if vertical else policy.horizontalStretch()
        splitter.setProperty(_RESTING, resting)
        splitter.setStretchFactor(0, 0)
    else:
        splitter.setStretchFactor(0, int(held))
        splitter.setProperty(_RESTING, -1)
    if splitter.isVisible() and all(sizes):
        # QSplitter lays out from the sizes of the last drag or setSizes, not the current ones: without this,
        # the next layout would move the handle back to where it was before the run's changes.
        splitter.setSizes(sizes)
