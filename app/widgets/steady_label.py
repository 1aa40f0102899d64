"""A label whose new text re-lays out the window only when it needs a different size.

Every ``QLabel.setText`` asks its parent's layout to be redone (``updateGeometry``), and Qt passes that request
up through every layout to the main window unless the label has a fixed size. The labels that change with each
snapshot (the run panel's k line, the token legend's counts, the status bar's numbers) made the window lay
itself out ten times a second while a run decoded: the label size hints of the whole window recomputed, their
text laid out again, about a sixth of the GUI thread's time and the tail of its longest stretches beside a
busy program (issue 40; docs/bench-gui.md).

``SteadyLabel`` is a plain widget holding a ``QLabel`` it places itself (it has no layout, so the label's
request stops here). It takes the label's size hints as its own and passes a request on only when one of them
has changed. ``hold(True)`` makes the hints grow only (a number one digit shorter keeps its room) until
``hold(False)``: while a run is live nothing around the label moves as its digits do.
"""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QFontMetrics, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget


class SteadyLabel(QWidget):
    """A ``QLabel`` (``.label``) in a host that relays its size hints, and a layout request only when they
    change. The label's text, tooltip, style and wrapping are set through the host."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.label = QLabel(text, self)
        self._held = False
        self._stale = False  # the text changed while hidden: measure when asked
        self._hints = self._label_hints()
        self.setSizePolicy(self.label.sizePolicy())

    # ---- what the label shows --------------------------------------------------------------------------
    def setText(self, text: str) -> None:
        if text == self.label.text():
            return
        self.label.setText(text)  # its own request goes to this host, which has no layout to redo
        self._relay()

    def text(self) -> str:
        return self.label.text()

    def setToolTip(self, text: str) -> None:
        super().setToolTip(text)
        self.label.setToolTip(text)

    def setStyleSheet(self, style: str) -> None:
        self.label.setStyleSheet(style)
        self._relay()

    def styleSheet(self) -> str:
        return self.label.styleSheet()

    def setWordWrap(self, on: bool) -> None:
        self.label.setWordWrap(on)
        self._keep_wrap_flag()
        self._relay()

    def wordWrap(self) -> bool:
        return self.label.wordWrap()

    def setTextInteractionFlags(self, flags: Qt.TextInteractionFlag) -> None:
        self.label.setTextInteractionFlags(flags)

    def fontMetrics(self) -> QFontMetrics:
        return self.label.fontMetrics()  # the label's style may set its font

    # ---- size ------------------------------------------------------------------------------------------
    def hold(self, on: bool) -> None:
        """While on, the size hints only grow; off, they follow the text again (and the layout is redone
        once if that makes them smaller)."""
        self._held = on
        if not on:
            self._relay(force=True)

    def _label_hints(self) -> tuple[QSize, QSize, int, int]:
        """The label's size hint, minimum size hint, and (when it wraps) its height at this width, and the
        width."""
        label, width = self.label, self.width()
        height_for_width = label.heightForWidth(width) if label.hasHeightForWidth() else -1
        return label.sizeHint(), label.minimumSizeHint(), height_for_width, width

    def _grown(self, new: tuple[QSize, QSize, int, int]) -> tuple[QSize, QSize, int, int]:
        old = self._hints
        return (new[0].expandedTo(old[0]), new[1].expandedTo(old[1]),
                max(new[2], old[2]) if new[3] == old[3] else new[2], new[3])

    def _relay(self, force: bool = False) -> None:
        """Measure the label again, and ask for a layout if it needs another size. Each measure lays its text
        out, so only what the layout reads is measured: nothing while hidden (Qt lays the window out again when
        it is shown), and a wrapping label as wide as its row (its width ignored) only by its height."""
        if self.isHidden() and not force:
            self._stale = True
            return
        old = self._hints
        label = self.label
        if not force and not self._stale and label.hasHeightForWidth() and (
                self.sizePolicy().horizontalPolicy() == QSizePolicy.Policy.Ignored) and old[3] == self.width():
            height = label.heightForWidth(self.width())
            if height == old[2] or (self._held and height < old[2]):
                return  # the same lines at this width: nothing around it moves
        new = self._label_hints()
        if self._held and not force:
            new = self._grown(new)
        self._stale = False
        self._hints = new
        if new[:3] != old[:3] or force:
            self.updateGeometry()

    def _current(self) -> tuple[QSize, QSize, int, int]:
        if self._stale:  # text set while hidden, now asked for
            self._stale = False
            new = self._label_hints()
            self._hints = self._grown(new) if self._held else new
        return self._hints

    def sizeHint(self) -> QSize:
        return self._current()[0]

    def minimumSizeHint(self) -> QSize:
        return self._current()[1]

    def hasHeightForWidth(self) -> bool:
        return self.label.hasHeightForWidth()

    def heightForWidth(self, width: int) -> int:
        height = self.label.heightForWidth(width)
        hints = self._current()
        return max(height, hints[2]) if self._held and width == hints[3] else height

    def setSizePolicy(self, *policy: object) -> None:  # type: ignore[override]
        """The host's policy, and the label's: both say whether it wraps (its height for a width), whatever
        the policy handed in says (a QLabel sets that flag with its word wrap; a policy set over it lost it,
        and the wrapped label asked for its unwrapped height, four lines in a narrow window)."""
        super().setSizePolicy(*policy)  # type: ignore[call-overload]
        self._keep_wrap_flag()

    def _keep_wrap_flag(self) -> None:
        wraps = self.label.wordWrap()
        policy = self.sizePolicy()
        if policy.hasHeightForWidth() != wraps:
            policy.setHeightForWidth(wraps)
            super().setSizePolicy(policy)
        self.label.setSizePolicy(policy)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.label.setGeometry(0, 0, event.size().width(), event.size().height())
        if self.label.hasHeightForWidth() and event.size().width() != event.oldSize().width():
            self._relay()  # the wrapped height at the new width
