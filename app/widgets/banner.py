"""The banner over the plots: one sentence (an error, a warning, what a replay repaired) with an optional action button.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import (
    Qt,
)
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QPushButton,
    QWidget,
)


class Banner(QWidget):
    """A dismissable message strip above the token view (errors, the interrupted-session offer)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 2, 6, 2)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action = QPushButton("")
        self.close_button = QPushButton("Dismiss")
        row.addWidget(self.label, 1)
        row.addWidget(self.action)
        row.addWidget(self.close_button)
        self.close_button.clicked.connect(self.hide)
        self._callback: Callable[[], object] | None = None
        self.action.clicked.connect(self._run_action)
        self.hide()

    def show_message(self, text: str, kind: str = "error", action: str = "",
                     callback: Callable[[], object] | None = None) -> None:
        colours = {"error": ("#FBE3D1", "#7A3300"), "info": ("#D6ECFA", "#003E66")}
        bg, fg = colours.get(kind, colours["info"])
        self.setStyleSheet(f"background:{bg}; color:{fg};")
        self.label.setText(text)
        self.action.setVisible(bool(action))
        self.action.setText(action)
        self._callback = callback
        self.show()

    def _run_action(self) -> None:
        cb = self._callback
        self.hide()
        if cb is not None:
            cb()
