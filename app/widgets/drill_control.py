"""The paging drill in the Run panel: move N layers of the draft or the target off its device, and back.

Self-contained: it asks the run's ``Controls`` for the drill (applied by the session at the next iteration
boundary) and shows what the engine reported back through the record stream's drill events. The engine is
imported only when a drill is asked for, never at module level.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtWidgets import QComboBox, QGroupBox, QHBoxLayout, QLabel, QPushButton, QSpinBox, QVBoxLayout, QWidget

RUNNING_STATES = ("running", "paused")


class DrillControl(QGroupBox):
    def __init__(self, controls: Callable[[], Any], parent: QWidget | None = None) -> None:
        super().__init__("Paging drill", parent)
        self._controls = controls
        self.setToolTip("Move layers of one model off its device (GPU: to host memory; CPU: to disk) through "
                        "accelerate's offload hooks, to see what paging looks like on this machine")
        layout = QVBoxLayout(self)
        row = QHBoxLayout()
        self.model = QComboBox()
        self.model.addItems(["draft", "target"])
        self.layers = QSpinBox()
        self.layers.setRange(0, 1024)
        self.layers.setSpecialValueText("all layers")
        self.layers.setSuffix(" layers")
        row.addWidget(self.model)
        row.addWidget(self.layers)
        layout.addLayout(row)
        buttons = QHBoxLayout()
        self.start_button = QPushButton("Start drill")
        self.end_button = QPushButton("End drill")
        buttons.addWidget(self.start_button)
        buttons.addWidget(self.end_button)
        layout.addLayout(buttons)
        self.status = QLabel("No drill.")
        self.status.setWordWrap(True)
        layout.addWidget(self.status)
        self.start_button.clicked.connect(self.start_drill)
        self.end_button.clicked.connect(self.end_drill)
        self._active = False
        self.set_state("no_model")

    def start_drill(self) -> None:
        from specscope.core.drill_spec import DrillSpec  # plain data: no torch in the GUI

        layers = self.layers.value() or None
        self._controls().start_drill(DrillSpec(model=self.model.currentText(), layers=layers))
        self.status.setText(f"Drill on the {self.model.currentText()} asked for: it starts at the next "
                            "iteration.")

    def end_drill(self) -> None:
        self._controls().end_drill()
        self.status.setText("Ending the drill at the next iteration.")

    def on_event(self, event: Any) -> None:
        """A ``DrillEvent`` from the record stream."""
        if event.error:
            self._active = False
            self.status.setText(f"The drill failed: {event.error}")
        elif event.kind == "start":
            self._active = True
            self.status.setText(f"{event.label} (from iteration {event.iterations_done}).")
        else:
            self._active = False
            self.status.setText(f"Layers back on the device from iteration {event.iterations_done}.")
        self.end_button.setEnabled(self._active)

    def clear(self) -> None:
        """Another run (or none) is on screen: what the last drill did is not this run's."""
        self._active = False
        self.status.setText("No drill.")
        self.end_button.setEnabled(False)

    def set_state(self, state: str) -> None:
        """The window's run state: the drill can be asked for only while a run goes."""
        running = state in RUNNING_STATES
        self.start_button.setEnabled(running)
        self.end_button.setEnabled(running and self._active)
        if not running:
            self._active = False
