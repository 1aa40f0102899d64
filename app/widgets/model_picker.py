"""Model picker: the demo, a local directory, or a hub id for the target; a draft model or a drafter kind;
device and dtype per model."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from specscope.app.pair_choice import DEVICE_MAPS, DEVICES, DRAFTER_KINDS, DTYPES, PairChoice


class ModelField(QWidget):
    """A model location: kind (demo / directory / hub id), the path or id, and a Browse button."""

    chosen = Signal()  # a folder was browsed to or a path typed: the dialog checks it at once

    def __init__(self, allow_demo: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        self.kind = QComboBox()
        if allow_demo:
            self.kind.addItem("embedded demo", "demo")
        self.kind.addItem("local directory", "dir")
        self.kind.addItem("hub id (local cache)", "hub")
        self.edit = QLineEdit()
        # a model folder's path is long: wide enough to read one (the dialog's first size was ~120 px for it)
        self.edit.setMinimumWidth(self.edit.fontMetrics().horizontalAdvance("x" * 44))
        self.browse = QPushButton("Browse…")
        row.addWidget(self.kind)
        row.addWidget(self.edit, 1)
        row.addWidget(self.browse)
        self.kind.currentIndexChanged.connect(self._kind_changed)
        self.browse.clicked.connect(self._browse)
        self.edit.editingFinished.connect(self.chosen)
        self._kind_changed()

    def _kind_changed(self) -> None:
        kind = self.kind.currentData()
        self.edit.setEnabled(kind != "demo")
        self.browse.setEnabled(kind == "dir")
        self.edit.setPlaceholderText({"dir": "/path/to/model", "hub": "org/model-name", "demo": ""}[kind])

    def _browse(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Model directory", self.edit.text())
        if path:
            self.edit.setText(path)
            self.chosen.emit()

    def value(self) -> str:
        return "demo" if self.kind.currentData() == "demo" else self.edit.text().strip()

    def set_value(self, value: str) -> None:
        if value == "demo" and self.kind.findData("demo") >= 0:
            self.kind.setCurrentIndex(self.kind.findData("demo"))
            self.edit.clear()
            return
        looks_local = value.startswith(("/", ".", "~")) or "\\" in value
        self.kind.setCurrentIndex(self.kind.findData("dir" if looks_local else "hub"))
        self.edit.setText(value)


def _combo(items: tuple[str, ...], editable: bool = False) -> QComboBox:
    c = QComboBox()
    c.addItems(list(items))
    c.setEditable(editable)
    return c


class PlacementFields:
    """Device map, max memory and offload folder for one model (transformers/accelerate placement)."""

    def __init__(self, form: QFormLayout) -> None:
        self.device_map = _combo(DEVICE_MAPS, editable=True)
        self.device_map.setToolTip("empty: the whole model on its device; auto: accelerate places modules on "
                                   "the device, host memory and disk under the max memory")
        self.max_memory = QLineEdit()
        self.max_memory.setPlaceholderText("e.g. cpu=250MB or cuda:0=10GiB,cpu=30GiB (with auto)")
        self.offload_folder = QLineEdit()
        self.offload_folder.setPlaceholderText("where offloaded weights may go (with auto)")
        form.addRow("device map", self.device_map)
        form.addRow("max memory", self.max_memory)
        form.addRow("offload folder", self.offload_folder)

    def widgets(self) -> tuple[QWidget, ...]:
        return (self.device_map, self.max_memory, self.offload_folder)

    def set(self, device_map: str, max_memory: str, offload_folder: str) -> None:
        self.device_map.setCurrentText(device_map)
        self.max_memory.setText(max_memory)
        self.offload_folder.setText(offload_folder)

    def values(self) -> tuple[str, str, str]:
        return (self.device_map.currentText().strip(), self.max_memory.text().strip(),
                self.offload_folder.text().strip())


class ModelPicker(QDialog):
    def __init__(self, choice: PairChoice, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Choose models")
        layout = QVBoxLayout(self)
        tbox = QGroupBox("Target (the model whose output you get)")
        tf = QFormLayout(tbox)
        self.target = ModelField(allow_demo=True)
        self.target_device = _combo(DEVICES, editable=True)
        self.target_dtype = _combo(DTYPES)
        tf.addRow("model", self.target)
        tf.addRow("device", self.target_device)
        tf.addRow("dtype", self.target_dtype)
        self.target_placement = PlacementFields(tf)
        layout.addWidget(tbox)
        dbox = QGroupBox("Drafter (proposes tokens)")
        df = QFormLayout(dbox)
        self.drafter = _combo(DRAFTER_KINDS)
        self.draft = ModelField(allow_demo=False)
        self.draft_device = _combo(("same as target", *DEVICES), editable=True)
        self.draft_dtype = _combo(DTYPES)
        df.addRow("kind", self.drafter)
        df.addRow("draft model", self.draft)
        df.addRow("device", self.draft_device)
        df.addRow("dtype", self.draft_dtype)
        self.draft_placement = PlacementFields(df)
        self.demo_note = QLabel("The demo brings its own draft model.")
        self.demo_note.setStyleSheet("color:#555")
        df.addRow(self.demo_note)
        layout.addWidget(dbox)
        self.problem = QLabel("")
        self.problem.setStyleSheet("color:#A34400")
        self.problem.setWordWrap(True)
        layout.addWidget(self.problem)
        std = QDialogButtonBox.StandardButton
        buttons = QDialogButtonBox(std.Ok | std.Cancel)
        buttons.button(QDialogButtonBox.StandardButton.Ok).setText("Load")
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
        self.drafter.currentTextChanged.connect(self._update_enabled)
        self.target.kind.currentIndexChanged.connect(self._update_enabled)
        for field in (self.target, self.draft):  # a folder is judged when chosen, not after the engine loads
            field.chosen.connect(self._show_problem)
        self.set_choice(choice)

    def _update_enabled(self) -> None:
        model_drafter = self.drafter.currentText() == "model"
        demo = self.target.value() == "demo"
        for w in (self.draft, self.draft_device, self.draft_dtype, *self.draft_placement.widgets()):
            w.setEnabled(model_drafter and not demo)
        self.demo_note.setVisible(demo and model_drafter)

    def set_choice(self, c: PairChoice) -> None:
        self.target.set_value(c.target)
        self.target_device.setCurrentText(c.target_device)
        self.target_dtype.setCurrentText(c.target_dtype)
        self.drafter.setCurrentText(c.drafter)
        if c.draft:
            self.draft.set_value(c.draft)
        self.draft_device.setCurrentText(c.draft_device or "same as target")
        self.draft_dtype.setCurrentText(c.draft_dtype)
        self.target_placement.set(c.target_device_map, c.target_max_memory, c.target_offload_folder)
        self.draft_placement.set(c.draft_device_map, c.draft_max_memory, c.draft_offload_folder)
        self._update_enabled()

    def choice(self) -> PairChoice:
        draft_device = self.draft_device.currentText().strip()
        demo = self.target.value() == "demo"
        t_map, t_mem, t_off = self.target_placement.values()
        d_map, d_mem, d_off = ("", "", "") if demo else self.draft_placement.values()
        return PairChoice(
            target_device_map=t_map, target_max_memory=t_mem, target_offload_folder=t_off,
            draft_device_map=d_map, draft_max_memory=d_mem, draft_offload_folder=d_off,
            target=self.target.value(), draft="" if demo else self.draft.value(),
            drafter=self.drafter.currentText(), target_device=self.target_device.currentText().strip(),
            draft_device="" if draft_device == "same as target" else draft_device,
            target_dtype=self.target_dtype.currentText(), draft_dtype=self.draft_dtype.currentText(),
        )

    def _show_problem(self) -> None:
        self.problem.setText(self.choice().problem() or "")

    def _accept(self) -> None:
        problem = self.choice().problem()
        if problem:
            self.problem.setText(problem)
            return
        self.accept()
