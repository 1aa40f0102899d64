"""Window-wide shortcuts: a menu shortcut that works wherever the focus is in the window.

A focused widget may claim a key before the window's shortcuts see it (Qt sends it a ShortcutOverride event
first, and a text field accepts the keys its platform binds to editing): where Ctrl+E means "end of line" (the
X11 key scheme), a focused spin box or line edit took Ctrl+E and File ▸ Export trace did nothing.
``WindowWideShortcuts`` refuses those ShortcutOverride events, for the keys of the actions it is given, to every
widget of the window that gets the focus (floating docks included), so the action runs instead.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QObject
from PySide6.QtGui import QAction, QKeyEvent, QKeySequence
from PySide6.QtWidgets import QApplication, QWidget


class WindowWideShortcuts(QObject):
    """Keeps ``actions``' shortcuts working in every widget of ``window``. Watches only the widget that has the
    focus (an event filter on each widget of the window as it gets the focus), not every event of the app."""

    def __init__(self, window: QWidget, actions: Sequence[QAction]) -> None:
        super().__init__(window)
        self._window = window
        self._actions = list(actions)
        app = QApplication.instance()
        if isinstance(app, QApplication):
            app.focusChanged.connect(self._on_focus)
        focused = QApplication.focusWidget()
        if focused is not None:
            self._on_focus(None, focused)

    def _in_window(self, widget: QWidget) -> bool:
        w: QWidget | None = widget
        while w is not None:  # parentWidget, not window(): a floating dock is a window of its own
            if w is self._window:
                return True
            w = w.parentWidget()
        return False

    def _on_focus(self, _old: QWidget | None, new: QWidget | None) -> None:
        if new is not None and self._in_window(new):
            new.installEventFilter(self)  # installing again only moves it to the front

    def claims(self, key: QKeySequence) -> bool:
        """Whether ``key`` is the shortcut of one of the actions (enabled ones only)."""
        return any(a.isEnabled() and any(s.matches(key) == QKeySequence.SequenceMatch.ExactMatch
                                         for s in a.shortcuts()) for a in self._actions)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.ShortcutOverride or not isinstance(event, QKeyEvent):
            return False
        # Consumed while still ignored: the widget never claims the key, and the window's shortcut fires.
        return self.claims(QKeySequence(event.keyCombination()))
