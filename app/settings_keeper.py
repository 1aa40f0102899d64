"""What a window keeps between launches: its pair, the prompt, the controls, the run options and the layout.

Settings are written a moment after each change (:data:`SAVE_DELAY_MS`), not only on a clean exit: a killed
window keeps its pair, drafter, prompt and controls.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QMainWindow

if TYPE_CHECKING:
    from specscope.app.arrangement import Arrangement
    from specscope.app.pair_choice import PairChoice
    from specscope.app.settings import AppSettings
    from specscope.app.widgets.control_panel import ControlPanel

__all__ = ["SAVE_DELAY_MS", "SettingsKeeper"]

SAVE_DELAY_MS = 400  # settings are written this long after the last change (a burst of typing: one write)


class SettingsKeeper:
    """Restores a window from ``settings`` and writes it back after each change and on close. It is handed the
    window (its geometry and dock state), the control panel, the arrangement and the pair chosen
    (``pair_choice()``: the window replaces it on each load)."""

    def __init__(self, window: QMainWindow, settings: AppSettings, panel: ControlPanel, arrangement: Arrangement,
                 pair_choice: Callable[[], PairChoice]) -> None:
        self._window = window
        self._settings = settings
        self._panel = panel
        self._arrangement = arrangement
        self._pair_choice = pair_choice
        self._save_soon = QTimer(window)
        self._save_soon.setObjectName("save_settings_soon")
        self._save_soon.setSingleShot(True)
        self._save_soon.setInterval(SAVE_DELAY_MS)
        self._save_soon.timeout.connect(self.save)
        for changed in (panel.controls_changed, panel.prompt_edit.textChanged, panel.max_new.valueChanged,
                        panel.seed.valueChanged, panel.adaptive.clicked):
            changed.connect(self.save_soon)

    def restore(self) -> None:
        w, s, panel = self._window, self._settings, self._panel
        panel.set_values(s.controls(self._pair_choice().drafter))
        panel.adaptive_chosen = s.adaptive_chosen()
        prompt = s.prompt()
        if prompt:
            panel.set_prompt_text(prompt)
        max_new, seed = s.run_options()
        panel.max_new.setValue(max_new)
        panel.seed.setValue(seed)
        geometry, state = s.geometry(), s.state()
        room = self._arrangement.screen_room()
        # A geometry saved on a screen of another size (a laptop docked, another Xvfb size) is not this
        # screen's: the window opens as on a first start, filling most of it, rather than at a stale size.
        if geometry is not None and s.screen_room() == [room.width(), room.height()]:
            w.restoreGeometry(geometry)
            self._arrangement.fit_to_screen()
        else:
            self._arrangement.place_first()
        if state is not None:
            w.restoreState(state)
        self._arrangement.restore(*s.token_layout())

    def save_soon(self, *_: object) -> None:
        self._save_soon.start()

    def save(self) -> None:
        self._save_soon.stop()
        w, s, panel = self._window, self._settings, self._panel
        s.set_controls(panel.values())
        s.set_adaptive_chosen(panel.adaptive_chosen)
        s.set_prompt(panel.prompt_edit.toPlainText())
        s.set_run_options(panel.max_new.value(), panel.seed.value())
        s.set_pair_choice(self._pair_choice())
        room = self._arrangement.screen_room()
        s.set_layout(w.saveGeometry(), w.saveState(), [room.width(), room.height()])
        s.set_token_layout(*self._arrangement.to_save())
        s.sync()
