"""The control panel: prompt, k / adaptive k, sampling, limits, and run buttons.

Live controls (k, temperature, top-k, top-p, adaptive) are coalesced: a drag across a slider emits at most
one ``controls_changed`` per 100 ms, so the loop sees a handful of changes, not hundreds.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from specscope.app.run_state import RunState
from specscope.core.bounds import MAX_NEW_TOKENS
from specscope.core.controls import DEFAULT_MAX_NEW_TOKENS, K_MAX, K_MIN
from specscope.core.drafter_catalogue import DRAFTER_HELP, DRAFTER_KINDS
from specscope.core.records import ControlValues

COALESCE_MS = 100
CUSTOM = "custom"  # the preset list's entry for the user's own text

FALLBACK_PROMPTS = {
    "examples": [
        ("Explain KV cache", "Explain in three sentences what a KV cache is and why it speeds up decoding."),
        ("Python function", "Write a Python function that returns the n-th Fibonacci number iteratively."),
        ("Story opening", "Write the first paragraph of a short story set on a night train."),
    ]
}


@dataclass
class PromptChoice:
    title: str
    text: str


def load_prompt_choices() -> dict[str, list[PromptChoice]]:
    """The bundled prompt sets (core.prompts), or a few built-in examples when they are missing."""
    try:
        from specscope.core.prompts import load_prompt_sets

        sets = load_prompt_sets()
        out = {name: [PromptChoice(p.title or p.id, p.text) for p in prompts]
               for name, prompts in sets.items()}
        if out:
            return out
    except Exception:  # a missing or broken prompt file must not stop the app
        pass
    return {name: [PromptChoice(t, x) for t, x in items] for name, items in FALLBACK_PROMPTS.items()}


PROMPT_PX = 110
PROMPT_COMPACT_PX = 62  # about three lines: at 1280x720 the panel must show the drill box without scrolling


class ControlsScroll(QScrollArea):
    """The Controls dock's scroll area: when the panel would need scrolling, it asks the panel to fit first
    (a shorter prompt editor, the drafter's help on hover only), so the paging drill at its bottom is in view."""

    def __init__(self, panel: ControlPanel) -> None:
        super().__init__()
        self.setWidgetResizable(True)
        self.setWidget(panel)
        self.panel = panel

    def resizeEvent(self, event: QResizeEvent) -> None:
        self.panel.fit_height(self.viewport().height())
        super().resizeEvent(event)


class ControlPanel(QWidget):
    controls_changed = Signal(object)  # ControlValues, coalesced
    start_clicked = Signal()
    pause_toggled = Signal(bool)
    stop_clicked = Signal()
    baseline_clicked = Signal()
    drafter_changed = Signal(str)  # a drafter kind the user picked

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.prompt_sets = load_prompt_choices()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)

        prompt_box = QGroupBox("Prompt")
        pl = QVBoxLayout(prompt_box)
        row = QHBoxLayout()
        self.set_combo = QComboBox()
        self.set_combo.addItems(list(self.prompt_sets))
        self.prompt_combo = QComboBox()
        self.prompt_combo.setMinimumContentsLength(11)  # 11: room beside the longest kind, repeated-task
        self.prompt_combo.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        row.addWidget(self.set_combo, 1)
        row.addWidget(self.prompt_combo, 2)
        pl.addLayout(row)
        self.prompt_edit = QPlainTextEdit()
        self.prompt_edit.setPlaceholderText("Type a prompt, or pick one above")
        self.prompt_edit.setMaximumHeight(PROMPT_PX)
        self._compact = False
        self._natural_height = 0
        pl.addWidget(self.prompt_edit)
        layout.addWidget(prompt_box)
        self.set_combo.activated.connect(self._pick_set)
        self.prompt_combo.activated.connect(self._pick_prompt)
        self.prompt_edit.textChanged.connect(self._follow_text)
        self._custom_text = ""  # what the user typed last, restored by choosing "custom"

        spec_box = QGroupBox("Speculation")
        form = QFormLayout(spec_box)
        # The drafter kinds come from core.drafter_catalogue (declared once); a new kind appears here by itself.
        self.drafter = QComboBox()
        for kind in DRAFTER_KINDS:
            self.drafter.addItem(kind, kind)
            self.drafter.setItemData(self.drafter.count() - 1, DRAFTER_HELP.get(kind, ""),
                                     Qt.ItemDataRole.ToolTipRole)
        self.drafter.setToolTip("How proposals are made; changing it reloads the pair (not during a run)")
        self.drafter_help = QLabel("")
        self.drafter_help.setWordWrap(True)
        self.drafter_help.setStyleSheet("color:#555")
        form.addRow("drafter", self.drafter)
        form.addRow(self.drafter_help)
        self.drafter.activated.connect(lambda i: self.drafter_changed.emit(self.drafter.itemData(i)))
        self.drafter.currentIndexChanged.connect(self._show_drafter_help)
        self.k_slider = QSlider(Qt.Orientation.Horizontal)
        self.k_slider.setRange(K_MIN, K_MAX)
        self.k_spin = QSpinBox()
        self.k_spin.setRange(K_MIN, K_MAX)
        k_row = QHBoxLayout()
        k_row.addWidget(self.k_slider, 1)
        k_row.addWidget(self.k_spin)
        form.addRow("k (draft tokens)", k_row)
        self.adaptive = QCheckBox("adaptive k (cost model picks k)")
        form.addRow(self.adaptive)
        self.k_in_use = QLabel("")
        self.k_in_use.setWordWrap(True)  # one long line widened the panel past its dock (clipped, scrolled)
        self.k_in_use.setStyleSheet("color:#0072B2")
        form.addRow(self.k_in_use)
        self.temp_slider = QSlider(Qt.Orientation.Horizontal)
        self.temp_slider.setRange(0, 200)
        self.temp_spin = QDoubleSpinBox()
        self.temp_spin.setRange(0.0, 2.0)
        self.temp_spin.setSingleStep(0.05)
        self.temp_spin.setDecimals(2)
        self.temp_spin.setSpecialValueText("0 (greedy)")
        t_row = QHBoxLayout()
        t_row.addWidget(self.temp_slider, 1)
        t_row.addWidget(self.temp_spin)
        form.addRow("temperature", t_row)
        self.top_k = QSpinBox()
        self.top_k.setRange(0, 100_000)
        self.top_k.setSpecialValueText("off")
        form.addRow("top-k", self.top_k)
        self.top_p = QDoubleSpinBox()
        self.top_p.setRange(0.01, 1.0)
        self.top_p.setSingleStep(0.05)
        self.top_p.setDecimals(2)
        form.addRow("top-p", self.top_p)
        layout.addWidget(spec_box)

        run_box = QGroupBox("Run")
        rform = QFormLayout(run_box)
        self.max_new = QSpinBox()
        self.max_new.setRange(1, MAX_NEW_TOKENS)  # what the worker takes (core.bounds)
        self.max_new.setValue(DEFAULT_MAX_NEW_TOKENS)
        rform.addRow("max new tokens", self.max_new)
        self.seed = QSpinBox()
        self.seed.setRange(-1, 2**31 - 1)
        self.seed.setSpecialValueText("random")
        self.seed.setValue(0)
        rform.addRow("seed", self.seed)
        buttons = QHBoxLayout()
        self.start_button = QPushButton("Start")
        self.start_button.setDefault(True)
        self.pause_button = QPushButton("Pause")
        self.pause_button.setCheckable(True)
        self.stop_button = QPushButton("Stop")
        for b in (self.start_button, self.pause_button, self.stop_button):
            buttons.addWidget(b)
        rform.addRow(buttons)
        self.baseline_button = QPushButton("Measure baseline now")
        self.baseline_button.setToolTip("Time plain target steps on the live context at the next iteration")
        rform.addRow(self.baseline_button)
        layout.addWidget(run_box)
        layout.addStretch(1)

        self._coalesce = QTimer(self)
        self._coalesce.setSingleShot(True)
        self._coalesce.setInterval(COALESCE_MS)
        self._coalesce.timeout.connect(self._emit_controls)
        self._syncing = False
        self.k_slider.valueChanged.connect(self.k_spin.setValue)
        self.k_spin.valueChanged.connect(self.k_slider.setValue)
        self.k_spin.valueChanged.connect(self._changed)
        self.temp_slider.valueChanged.connect(lambda v: self.temp_spin.setValue(v / 100.0))
        self.temp_spin.valueChanged.connect(lambda v: self.temp_slider.setValue(round(v * 100)))
        self.temp_spin.valueChanged.connect(self._changed)
        self.top_k.valueChanged.connect(self._changed)
        self.top_p.valueChanged.connect(self._changed)
        self.adaptive.toggled.connect(self._changed)
        self.adaptive.toggled.connect(self._adaptive_toggled)
        # Ticked or unticked by the user (a click or the keyboard, never set_values): a drafter switch keeps it.
        self.adaptive_chosen = False
        self.adaptive.clicked.connect(self._adaptive_clicked)
        self.start_button.clicked.connect(self.start_clicked)
        self.pause_button.toggled.connect(self._pause_toggled)
        self.stop_button.clicked.connect(self.stop_clicked)
        self.baseline_button.clicked.connect(self.baseline_clicked)
        self.set_values(ControlValues())
        self._fill_prompts(self.set_combo.currentText())
        self._pick_prompt(1 if self.prompt_combo.count() > 1 else 0)
        self.set_state(RunState.NO_MODEL, False)

    # ---- prompt ----------------------------------------------------------------------------------------
    # What is decoded is always the box's text; the two lists follow it. A kind lists its prompts under a
    # first entry "custom" (the user's own text); choosing a kind loads its first prompt, choosing "custom"
    # brings back what was typed, and typing or pasting selects the preset the text matches, or "custom".
    def _fill_prompts(self, set_name: str) -> None:
        self.prompt_combo.blockSignals(True)
        self.prompt_combo.clear()
        self.prompt_combo.addItem(CUSTOM, None)
        for p in self.prompt_sets.get(set_name, []):
            self.prompt_combo.addItem(p.title, p.text)
        self.prompt_combo.blockSignals(False)

    def _pick_set(self, index: int) -> None:
        self._fill_prompts(self.set_combo.itemText(index))
        self._pick_prompt(1 if self.prompt_combo.count() > 1 else 0)

    def _pick_prompt(self, index: int) -> None:
        text = self.prompt_combo.itemData(index)
        self.prompt_edit.setPlainText(str(text) if text else self._custom_text)

    def _follow_text(self) -> None:
        text = self.prompt_edit.toPlainText()
        found = self.find_preset(text)
        if found is None:
            self._custom_text = text
            self.prompt_combo.setCurrentIndex(0)
            return
        set_name, index = found
        if self.set_combo.currentText() != set_name:
            self.set_combo.setCurrentText(set_name)
            self._fill_prompts(set_name)
        self.prompt_combo.setCurrentIndex(index + 1)

    def find_preset(self, text: str) -> tuple[str, int] | None:
        """(kind, index) of the preset whose text this is (ignoring surrounding blanks), or None."""
        wanted = text.strip()
        for set_name, prompts in self.prompt_sets.items():
            for i, p in enumerate(prompts):
                if p.text.strip() == wanted:
                    return set_name, i
        return None

    def prompt_text(self) -> str:
        return self.prompt_edit.toPlainText().strip()

    def set_prompt_text(self, text: str) -> None:
        self.prompt_edit.setPlainText(text)

    # ---- values ----------------------------------------------------------------------------------------
    def values(self) -> ControlValues:
        return ControlValues(k=self.k_spin.value(), temperature=round(self.temp_spin.value(), 4),
                             top_k=self.top_k.value(), top_p=round(self.top_p.value(), 4),
                             adaptive_k=self.adaptive.isChecked())

    def set_values(self, v: ControlValues) -> None:
        self._syncing = True
        try:
            self.k_spin.setValue(v.k)
            self.temp_spin.setValue(v.temperature)
            self.top_k.setValue(v.top_k)
            self.top_p.setValue(v.top_p)
            self.adaptive.setChecked(v.adaptive_k)
        finally:
            self._syncing = False

    def seed_value(self) -> int | None:
        s = self.seed.value()
        return None if s < 0 else s

    def _changed(self, *_: object) -> None:
        if not self._syncing and not self._coalesce.isActive():
            self._coalesce.start()

    def _emit_controls(self) -> None:
        self.controls_changed.emit(self.values())

    def flush(self) -> None:
        """Emit a pending coalesced change now (before a run starts)."""
        if self._coalesce.isActive():
            self._coalesce.stop()
            self._emit_controls()

    def _adaptive_clicked(self) -> None:
        self.adaptive_chosen = True

    def _adaptive_toggled(self, on: bool) -> None:
        self.k_slider.setEnabled(not on)
        self.k_spin.setEnabled(not on)
        if not on:
            self.show_k_in_use(None)  # the slider applies again: the controller's k is no longer the story

    def fit_height(self, available: int) -> None:
        """Compact the panel when its natural height is more than ``available`` (and back when there is room):
        the prompt editor about three lines, the drafter's help in its tooltip, tighter spacing."""
        if not self._compact:
            self._natural_height = self.sizeHint().height()
        compact = self._natural_height > available
        if compact == self._compact:
            return
        self._compact = compact
        self.prompt_edit.setMaximumHeight(PROMPT_COMPACT_PX if compact else PROMPT_PX)
        self.drafter_help.setVisible(not compact)
        layout = self.layout()
        if layout is not None:
            layout.setSpacing(2 if compact else -1)

    @property
    def compact(self) -> bool:
        return self._compact

    def _show_drafter_help(self) -> None:
        self.drafter_help.setText(DRAFTER_HELP.get(str(self.drafter.currentData()), ""))

    def set_drafter(self, kind: str) -> None:
        """Show the drafter in use (no signal: only a user's pick asks for a reload)."""
        i = self.drafter.findData(kind)
        if i >= 0 and i != self.drafter.currentIndex():
            self.drafter.setCurrentIndex(i)
        self._show_drafter_help()

    def show_k_in_use(self, k: int | None) -> None:
        """With adaptive k on, the slider is not what runs: say what the controller chose."""
        text = f"adaptive k is using k = {k} (the slider applies when adaptive is off)"
        self.k_in_use.setText("" if k is None else text)
        self.k_in_use.setVisible(k is not None)

    def stop_timers(self) -> None:
        """Closing: a pending coalesced change has nowhere to go."""
        self._coalesce.stop()

    def _pause_toggled(self, paused: bool) -> None:
        self.pause_button.setText("Resume" if paused else "Pause")
        self.pause_toggled.emit(paused)

    # ---- state -----------------------------------------------------------------------------------------
    def set_state(self, state: RunState, can_start: bool) -> None:
        """Enable what the run's state allows."""
        running = state.active
        self.start_button.setEnabled(can_start)
        self.pause_button.setEnabled(running)
        self.stop_button.setEnabled(running)
        self.baseline_button.setEnabled(running)
        self.max_new.setEnabled(not running)
        self.seed.setEnabled(not running)
        self.drafter.setEnabled(not running and state != RunState.LOADING)
        if not running and self.pause_button.isChecked():
            self.pause_button.blockSignals(True)
            self.pause_button.setChecked(False)
            self.pause_button.setText("Pause")
            self.pause_button.blockSignals(False)
