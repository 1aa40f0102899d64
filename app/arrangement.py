"""How the window's areas are arranged: the run panel above a splitter that holds the plots and the tokens,
the tokens beside the plots or below them, the split between the two, the window's first size, full screen.

Beside is a wish (View ▸ Tokens beside the plots): it is shown only while the central area leaves room for two
readable plot columns and the tokens (:data:`BESIDE_MIN_WIDTH`), below them otherwise, and the tokens move as
the window is resized. The settings keep the wish, and the splitter's sizes only while the layout shown is the
one wished for.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QResizeEvent
from PySide6.QtWidgets import QDockWidget, QMainWindow, QSplitter, QVBoxLayout, QWidget

__all__ = ["BESIDE_MIN_WIDTH", "MIN_PLOT_COLUMN_PX", "Arrangement", "full_screen_keys"]

MIN_PLOT_COLUMN_PX = 340  # below this the plots' ticks run into each other
MIN_TOKEN_COLUMN_PX = 300
BESIDE_MIN_WIDTH = 2 * MIN_PLOT_COLUMN_PX + MIN_TOKEN_COLUMN_PX + 12  # two plot columns, tokens, the handle
FIRST_SIZE = QSize(1400, 900)


class CentralArea(QWidget):
    """The window's central widget; says when its width changes (the window, or the dock beside it, moved)."""

    resized = Signal()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.resized.emit()


def full_screen_keys() -> list[QKeySequence]:
    """F11 everywhere, plus the platform's own full-screen key where it has another (Ctrl+Meta+F on macOS)."""
    keys = [QKeySequence("F11")]
    keys += [k for k in QKeySequence.keyBindings(QKeySequence.StandardKey.FullScreen) if k not in keys]
    return keys


class Arrangement(QObject):
    """Builds the window's central area and keeps the tokens where they fit; owns View ▸ Tokens beside the
    plots and View ▸ Full screen. ``say(text, ms)`` shows a sentence in the status bar."""

    def __init__(self, window: QMainWindow, run_panel: QWidget, plots: QWidget, tokens: QWidget,
                 controls_dock: QDockWidget, say: Callable[[str, int], None]) -> None:
        super().__init__(window)
        self._window = window
        self._plots = plots
        self._dock = controls_dock
        self._say = say
        self._beside_wanted = False
        # Watching the prompt decode is the first thing users do: the token stream gets a real share of the
        # window (40% below the plots, or a column beside them) and a handle wide enough to find.
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("main_splitter")
        self.splitter.setHandleWidth(8)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setStyleSheet("QSplitter::handle { background:#D0D0D0; border:1px solid #B8B8B8; }"
                                    "QSplitter::handle:hover { background:#A8C8E8; }")
        self.splitter.addWidget(plots)
        self.splitter.addWidget(tokens)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        central = CentralArea()
        central.resized.connect(self.fit)
        column = QVBoxLayout(central)
        column.setContentsMargins(0, 0, 0, 0)
        column.setSpacing(2)
        column.addWidget(run_panel)
        column.addWidget(self.splitter, 1)
        window.setCentralWidget(central)

        self.beside_action = QAction("Tokens &beside the plots (wide windows)", window)
        self.beside_action.setCheckable(True)
        self.beside_action.setToolTip(f"Beside the plots when the window leaves {BESIDE_MIN_WIDTH} px for them and "
                                      "the tokens; below them otherwise")
        self.beside_action.triggered.connect(self._toggle_beside)
        self.full_screen_action = QAction("&Full screen", window)
        self.full_screen_action.setShortcuts(full_screen_keys())
        self.full_screen_action.setCheckable(True)
        self.full_screen_action.triggered.connect(self._toggle_full_screen)

    # ---- beside or below -------------------------------------------------------------------------------
    @property
    def shown_beside(self) -> bool:
        return self.splitter.orientation() == Qt.Orientation.Horizontal

    def set_beside(self, beside: bool) -> None:
        """Tokens in a column right of the plots (wide windows) or in a band below them. Beside is a wish: a
        window too narrow for two plot columns and the tokens shows them below until it is wide enough."""
        self._beside_wanted = beside
        self.beside_action.setChecked(beside)
        self.fit(announce=False)

    def fit(self, announce: bool = True) -> None:
        """Tokens beside the plots only where both fit (see BESIDE_MIN_WIDTH); otherwise below them."""
        beside = self._beside_wanted and self._room_for_plots_and_tokens() >= BESIDE_MIN_WIDTH
        if beside == self.shown_beside:
            return
        self.splitter.setOrientation(Qt.Orientation.Horizontal if beside else Qt.Orientation.Vertical)
        # The plots keep two readable columns whatever the handle's drag (the tokens get no minimum, which
        # would hold the window wider than the switch back needs).
        self._plots.setMinimumWidth(2 * MIN_PLOT_COLUMN_PX if beside else 0)
        self.default_split()
        if announce:
            self._say_why_tokens_are_below()

    def _room_for_plots_and_tokens(self) -> int:
        """The central area's width, less what the controls dock was squeezed by to make it (beside the
        plots the columns' minimum widths take the room from the dock first)."""
        panel, central = self._dock.widget(), self._window.centralWidget()
        squeezed = 0
        if panel is not None and self._dock.isVisible() and not self._dock.isFloating():
            squeezed = max(0, panel.sizeHint().width() - self._dock.width())
        return (central.width() if central is not None else self._window.width()) - squeezed

    def _say_why_tokens_are_below(self) -> None:
        if self._beside_wanted and not self.shown_beside:
            self._say(f"Tokens below the plots: beside them needs {BESIDE_MIN_WIDTH} px for the plots and "
                      "tokens; they move there when the window is wide enough", 8000)

    def _toggle_beside(self) -> None:
        self.set_beside(self.beside_action.isChecked())
        self.default_split()
        self._say_why_tokens_are_below()

    # ---- the split, the size, full screen --------------------------------------------------------------
    def default_split(self) -> None:
        """Tokens get 40% of the room, 30% when it is short (three rows of plots need ~400 px to read)."""
        total = sum(self.splitter.sizes()) or 1000
        share = 0.4 if total >= 700 or self.shown_beside else 0.3
        self.splitter.setSizes([int(total * (1 - share)), int(total * share)])

    def restore(self, beside: bool, sizes: list[int]) -> None:
        """The saved wish and sizes (none: the default split)."""
        self.set_beside(beside)
        # Once the window is laid out: sizes given to a splitter without its final size get rescaled.
        QTimer.singleShot(0, (lambda: self.splitter.setSizes(sizes)) if sizes else self.default_split)

    def to_save(self) -> tuple[bool, list[int]]:
        """The wish, and the sizes when the layout shown is the one wished for (while "beside" waits for room
        they would not fit it)."""
        return self._beside_wanted, self.splitter.sizes() if self._beside_wanted == self.shown_beside else []

    def first_size(self) -> QSize:
        """1400x900, or 95% of a smaller screen (a window larger than the screen hides the status bar)."""
        screen = self._window.screen() or QGuiApplication.primaryScreen()
        if screen is None:
            return FIRST_SIZE
        room = screen.availableGeometry().size()
        return QSize(min(FIRST_SIZE.width(), int(room.width() * 0.95)),
                     min(FIRST_SIZE.height(), int(room.height() * 0.95)))

    def _toggle_full_screen(self) -> None:
        if self._window.isFullScreen():
            self._window.showNormal()
        else:
            self._window.showFullScreen()
        self.full_screen_action.setChecked(self._window.isFullScreen())
