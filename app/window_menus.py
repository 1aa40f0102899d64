"""The window's menu bar: File (traces, attach, connect, export, quit), Models, Run and View.

Each action calls one of the intents the window hands over (:class:`MenuIntents`, or its trace files'); the
View menu shows the actions the window's dock and arrangement own. The Run actions are enabled and disabled by
the run views as the state changes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

from specscope.app.shortcuts import WindowWideShortcuts

if TYPE_CHECKING:
    from specscope.app.trace_files import TraceFiles

__all__ = ["MenuIntents", "WindowMenus"]


@dataclass(frozen=True)
class MenuIntents:
    """What the menus can ask of the window: one callable per action, and the two File actions whose dialogs
    add themselves to a menu (``attach(menu)``, ``connect(menu)``: File ▸ Attach to server…, Connect to worker…)."""

    choose_models: Callable[[], object]
    load_demo: Callable[[], object]
    restart_worker: Callable[[], object]
    start_run: Callable[[], object]
    pause_or_resume: Callable[[], object]
    stop_run: Callable[[], object]
    request_baseline: Callable[[], object]
    quit: Callable[[], object]
    attach: Callable[[QMenu], QAction]
    connect: Callable[[QMenu], QAction]


class WindowMenus:
    """Builds the menus of one window once; keeps the actions other parts enable, check or trigger. It is handed
    the window (its menu bar, the actions' parent), the intents, the trace files and the View menu's actions."""

    def __init__(self, window: QMainWindow, intents: MenuIntents, files: TraceFiles,
                 view_actions: list[QAction]) -> None:
        self._window = window
        mb = window.menuBar()
        self.file_menu = mb.addMenu("&File")
        self._action(self.file_menu, "&Open trace…", files.open_dialog, QKeySequence.StandardKey.Open)
        intents.attach(self.file_menu)
        self.connect_action = intents.connect(self.file_menu)
        self.file_menu.addSeparator()
        self.export_action = self._action(self.file_menu, "Export &trace (CSV + tokens + session JSON)…",
                                          files.export_trace_dialog, QKeySequence("Ctrl+E"))
        # Ctrl+E works wherever the focus is: a spin box with the focus used to take it (X11's "end of line")
        self.window_wide_shortcuts = WindowWideShortcuts(window, [self.export_action])
        self._action(self.file_menu, "Export &Chrome trace JSON (Perfetto)…", files.export_chrome_dialog)
        self._action(self.file_menu, "Export plots as &PNG…", files.export_png_dialog)
        self.file_menu.addSeparator()
        self._action(self.file_menu, "&Quit", intents.quit, QKeySequence.StandardKey.Quit)

        self.models_menu = mb.addMenu("&Models")
        self._action(self.models_menu, "&Choose models…", intents.choose_models, QKeySequence("Ctrl+M"))
        self._action(self.models_menu, "Load the embedded &demo", intents.load_demo)
        self.models_menu.addSeparator()
        self.restart_worker_action = self._action(self.models_menu, "&Restart the worker", intents.restart_worker)
        self.restart_worker_action.setToolTip("Start the worker process again (or reconnect to the remote one) "
                                              "with the same pair")

        self.run_menu = mb.addMenu("&Run")
        self.start_action = self._action(self.run_menu, "&Start", intents.start_run, QKeySequence("F5"))
        self.pause_action = self._action(self.run_menu, "&Pause / resume", intents.pause_or_resume,
                                         QKeySequence("F6"))
        self.stop_action = self._action(self.run_menu, "S&top", intents.stop_run, QKeySequence("Shift+F5"))
        self.run_menu.addSeparator()
        self.baseline_action = self._action(self.run_menu, "Measure &baseline now", intents.request_baseline,
                                            QKeySequence("F7"))

        self.view_menu = mb.addMenu("&View")
        for action in view_actions:
            self.view_menu.addAction(action)

    def _action(self, menu: QMenu, text: str, slot: Callable[[], object],
                shortcut: QKeySequence | QKeySequence.StandardKey | None = None) -> QAction:
        act = QAction(text, self._window)
        if shortcut is not None:
            act.setShortcut(shortcut)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act
