"""What a window keeps between launches: its pair, the prompt, the controls, the run options and the layout.

Settings are written a moment after each change (:data:`SAVE_DELAY_MS`), not only on a clean exit: a killed
window keeps its pair, drafter, prompt and controls.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QTimer

if TYPE_CHECKING:
    from specscope.app.window import MainWindow

__all__ = ["SAVE_DELAY_MS", "SettingsKeeper"]

SAVE_DELAY_MS = 400  # settings are written this long after the last change (a burst of typing: one write)


class SettingsKeeper:
    """Restores a window from ``window.settings`` and writes it back after each change and on close."""

    def __init__(self, window: MainWindow) -> None:
        self._window = window
        self._save_soon = QTimer(window)
        self._save_soon.setObjectName("save_settings_soon")
        self._save_soon.setSingleShot(True)
        self._save_soon.setInterval(SAVE_DELAY_MS)
        self._save_soon.timeout.connect(self.save)
        panel = window.panel
        for changed in (panel.controls_changed, panel.prompt_edit.textChanged, panel.max_new.valueChanged,
                        panel.seed.valueChanged, panel.adaptive.clicked):
            changed.connect(self.save_soon)

    def restore(self) -> None:
        w, s = self._window, self._window.settings
        w.panel.set_values(s.controls(w.pair_choice.drafter))
        w.panel.adaptive_chosen = s.adaptive_chosen()
        prompt = s.prompt()
        if prompt:
            w.panel.set_prompt_text(prompt)
        max_new, seed = s.run_options()
        w.panel.max_new.setValue(max_new)
        w.panel.seed.setValue(seed)
        geometry, state = s.geometry(), s.state()
        if geometry is not None:
            w.restoreGeometry(geometry)
        else:
            w.resize(w.arrangement.first_size())
        if state is not None:
            w.restoreState(state)
        w.arrangement.restore(*s.token_layout())

    def save_soon(self, *_: object) -> None:
        self._save_soon.start()

    def save(self) -> None:
        self._save_soon.stop()
        w, s = self._window, self._window.settings
        s.set_controls(w.panel.values())
        s.set_adaptive_chosen(w.panel.adaptive_chosen)
        s.set_prompt(w.panel.prompt_edit.toPlainText())
        s.set_run_options(w.panel.max_new.value(), w.panel.seed.value())
        s.set_pair_choice(w.pair_choice)
        s.set_layout(w.saveGeometry(), w.saveState())
        s.set_token_layout(*w.arrangement.to_save())
        s.sync()
