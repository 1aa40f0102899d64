"""The window's menu bar: File (traces, attach, connect, export, quit), Models, Run and View.

Each action calls the window's own handler (or its trace files', or its arrangement's); the Run actions are
enabled and disabled by the run views as the state changes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMenu

from specscope.app.attach_dialog import add_attach_action
from specscope.app.connect_dialog import add_connect_action
from specscope.app.shortcuts import WindowWideShortcuts

if TYPE_CHECKING:
    from specscope.app.window import MainWindow

__all__ = ["WindowMenus"]


class WindowMenus:
    """Builds the menus of one window once; keeps the actions other parts enable, check or trigger."""

    def __init__(self, window: MainWindow) -> None:
        self._window = window
        mb = window.menuBar()
        files = window.files
        self.file_menu = mb.addMenu("&File")
        self._action(self.file_menu, "&Open trace…", files.open_dialog, QKeySequence.StandardKey.Open)
        add_attach_action(window, self.file_menu)
        self.connect_action = add_connect_action(window, self.file_menu)
        self.file_menu.addSeparator()
        self.export_action = self._action(self.file_menu, "Export &trace (CSV + tokens + session JSON)…",
                                          files.export_trace_dialog, QKeySequence("Ctrl+E"))
        # Ctrl+E works wherever the focus is: a spin box with the focus used to take it (X11's "end of line")
        self.window_wide_shortcuts = WindowWideShortcuts(window, [self.export_action])
        self._action(self.file_menu, "Export &Chrome trace JSON (Perfetto)…", files.export_chrome_dialog)
        self._action(self.file_menu, "Export plots as &PNG…", files.export_png_dialog)
        self.file_menu.addSeparator()
        self._action(self.file_menu, "&Quit", window.close, QKeySequence.StandardKey.Quit)

        self.models_menu = mb.addMenu("&Models")
        self._action(self.models_menu, "&Choose models…", window.choose_models, QKeySequence("Ctrl+M"))
        self._action(self.models_menu, "Load the embedded &demo", window.load_demo)
        self.models_menu.addSeparator()
        self.restart_worker_action = self._action(self.models_menu, "&Restart the worker", window.restart_worker)
        self.restart_worker_action.setToolTip("Start the worker process again (or reconnect to the remote one) "
                                              "with the same pair")

        self.run_menu = mb.addMenu("&Run")
        self.start_action = self._action(self.run_menu, "&Start", window.start_run, QKeySequence("F5"))
        self.pause_action = self._action(self.run_menu, "&Pause / resume", window.panel.pause_button.click,
                                         QKeySequence("F6"))
        self.stop_action = self._action(self.run_menu, "S&top", window.stop_run, QKeySequence("Shift+F5"))
        self.run_menu.addSeparator()
        self.baseline_action = self._action(self.run_menu, "Measure &baseline now", window.request_baseline,
                                            QKeySequence("F7"))

        self.view_menu = mb.addMenu("&View")
        self.view_menu.addAction(window.controls_dock.toggleViewAction())
        self.view_menu.addAction(window.arrangement.beside_action)
        self.view_menu.addAction(window.arrangement.full_screen_action)

    def _action(self, menu: QMenu, text: str, slot: Callable[[], object],
                shortcut: QKeySequence | QKeySequence.StandardKey | None = None) -> QAction:
        act = QAction(text, self._window)
        if shortcut is not None:
            act.setShortcut(shortcut)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act
