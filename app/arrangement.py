"""How the window's areas are arranged: the run panel above a splitter that holds the plots and the tokens,
the tokens beside the plots or below them, the split between the two, the window's first size, full screen.

Beside is a wish (View ▸ Tokens beside the plots): it is shown only while the central area leaves room for two
readable plot columns and the tokens (:data:`BESIDE_MIN_WIDTH`), below them otherwise, and the tokens move as
the window is resized. The settings keep the wish, and the splitter's sizes only while the layout shown is the
one wished for.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QObject, QRect, QSize, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QGuiApplication, QKeySequence, QResizeEvent, QScreen
from PySide6.QtWidgets import QDockWidget, QMainWindow, QSplitter, QVBoxLayout, QWidget

__all__ = ["BESIDE_MIN_WIDTH", "MIN_PLOT_COLUMN_PX", "Arrangement", "first_size_for", "fitted", "full_screen_keys"]

MIN_PLOT_COLUMN_PX = 340  # below this the plots' ticks run into each other
MIN_TOKEN_COLUMN_PX = 300
BESIDE_MIN_WIDTH = 2 * MIN_PLOT_COLUMN_PX + MIN_TOKEN_COLUMN_PX + 12  # two plot columns, tokens, the handle
FIRST_SHARE = 0.92  # a first start fills most of the screen: six plots and the token stream want the room
FIRST_SIZE_MAX = QSize(2400, 1500)  # ...but not a whole 4K screen, where 92% is more than the plots can use
SMALL_SCREEN = QSize(1440, 900)  # below this a first start takes all the room: at 1280x720, 92% made the
# controls scroll and left the token view five lines
FRAME_ALLOWANCE = QSize(8, 32)  # the window manager's title bar and borders, not yet known before the first show


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
        self._dragged = False  # the user moved the splitter's handle: only then are its sizes theirs to keep
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
        self.splitter.splitterMoved.connect(self._on_handle_dragged)
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
        self._dragged = False
        self.splitter.setSizes([int(total * (1 - share)), int(total * share)])

    def _on_handle_dragged(self, *_: object) -> None:
        self._dragged = True

    def restore(self, beside: bool, sizes: list[int]) -> None:
        """The saved wish and sizes (none: the default split)."""
        self.set_beside(beside)

        def split() -> None:
            if sizes:
                self.splitter.setSizes(sizes)  # the proportions of the user's drag, at this window's size
                self._dragged = True
            else:
                self.default_split()

        # Once the window is laid out: sizes given to a splitter without its final size get rescaled.
        QTimer.singleShot(0, split)

    def to_save(self) -> tuple[bool, list[int]]:
        """The wish, and the sizes where the user dragged the handle and the layout shown is the one wished for
        (while "beside" waits for room they would not fit it). Sizes the window's own layout made are not kept:
        during a run the run panel's lines take their room from the tokens (app/live_layout.py), and kept
        from run to run that left the token view a few lines at 1280x720."""
        keep = self._dragged and self._beside_wanted == self.shown_beside
        return self._beside_wanted, self.splitter.sizes() if keep else []

    def first_size(self) -> QSize:
        """:func:`first_size_for` the window's screen."""
        screen = self._screen()
        return first_size_for(screen.availableGeometry().size()) if screen is not None else QSize(1400, 900)

    def place_first(self) -> None:
        """A first start: :meth:`first_size`, centred on the screen."""
        size = self.first_size()
        self._window.resize(size)
        screen = self._screen()
        if screen is not None:
            room = screen.availableGeometry()
            self._window.move(room.x() + (room.width() - size.width()) // 2,
                              room.y() + max(0, (room.height() - size.height() - FRAME_ALLOWANCE.height()) // 2))

    def screen_room(self) -> QSize:
        """The available size of the window's screen (what the settings keep beside the geometry)."""
        screen = self._screen()
        return screen.availableGeometry().size() if screen is not None else QSize()

    def fit_to_screen(self) -> None:
        """A restored geometry clamped to the screen it opens on: no larger than its room, and wholly on it."""
        screen = self._screen()
        if screen is None or self._window.isFullScreen() or self._window.isMaximized():
            return
        room = screen.availableGeometry()
        fitted_rect = fitted(self._window.geometry(), room)
        if fitted_rect != self._window.geometry():
            self._window.resize(fitted_rect.size())
            self._window.move(fitted_rect.topLeft())

    def _screen(self) -> QScreen | None:
        return self._window.screen() or QGuiApplication.primaryScreen()

    def _toggle_full_screen(self) -> None:
        if self._window.isFullScreen():
            self._window.showNormal()
        else:
            self._window.showFullScreen()
        self.full_screen_action.setChecked(self._window.isFullScreen())


def first_size_for(room: QSize) -> QSize:
    """A first start's size on a screen with ``room`` available: most of it (:data:`FIRST_SHARE`, at most
    :data:`FIRST_SIZE_MAX`), all of it less the window's frame on a small screen (:data:`SMALL_SCREEN`)."""
    if room.width() < SMALL_SCREEN.width() or room.height() < SMALL_SCREEN.height():
        return QSize(room.width() - FRAME_ALLOWANCE.width(), room.height() - FRAME_ALLOWANCE.height())
    return QSize(min(FIRST_SIZE_MAX.width(), int(room.width() * FIRST_SHARE)),
                 min(FIRST_SIZE_MAX.height(), int(room.height() * FIRST_SHARE)))


def fitted(window: QRect, room: QRect) -> QRect:
    """``window`` (its client area) shrunk to fit ``room`` with the window manager's frame around it, and moved
    onto it where it lay partly off it."""
    width = min(window.width(), room.width() - FRAME_ALLOWANCE.width())
    height = min(window.height(), room.height() - FRAME_ALLOWANCE.height())
    x = min(max(window.x(), room.x()), room.right() + 1 - width - FRAME_ALLOWANCE.width() // 2)
    y = min(max(window.y(), room.y()), room.bottom() + 1 - height - FRAME_ALLOWANCE.height())
    return QRect(max(x, room.x()), max(y, room.y()), width, height)
