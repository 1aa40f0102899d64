"""File ▸ Connect to worker…: decode on a worker someone started with ``specscope serve`` (a GPU server, say).

The URL is the one line the worker printed, ``specscope://HOST:PORT/?token=…``; it is checked here (one sentence
under the field when it is not a worker URL) and never saved, since its token lets anyone who has it drive the
worker. Once connected, the window shows the worker's pair and Start decodes there; the run controller owns it
like its own worker (``worker_link.WorkerLink``), so a refusal or a worker that goes away is one sentence in
the window's banner and the events received stay on screen.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QLineEdit, QVBoxLayout, QWidget

from specscope.core.remote.url import BadWorkerUrl, WorkerAddress, parse_worker_url

HELP = ("Start a worker on the machine with the models: <code>specscope serve --demo</code>, or with the model "
        "options of <code>specscope run</code> (<code>--target</code>, <code>--draft</code>, "
        "<code>--device cuda</code> …). It prints one line, <code>specscope://HOST:PORT/?token=…</code>: paste "
        "it here. On another machine, tunnel the port first: <code>ssh -L PORT:127.0.0.1:PORT SERVER</code>, then "
        "use the line as printed. The token is not saved.")


class ConnectDialog(QDialog):
    def __init__(self, parent: QWidget | None = None, url: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle("Connect to worker")
        self.setMinimumWidth(560)
        label = QLabel("Worker URL")
        self.url_edit = QLineEdit(url)
        self.url_edit.setPlaceholderText("specscope://127.0.0.1:PORT/?token=…")
        note = QLabel(HELP)
        note.setWordWrap(True)
        self.error_label = QLabel()
        self.error_label.setWordWrap(True)
        self.error_label.setStyleSheet("color: #c0392b")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        ok = buttons.button(QDialogButtonBox.StandardButton.Ok)
        if ok is not None:
            ok.setText("Connect")
        buttons.accepted.connect(self._check_and_accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(label)
        layout.addWidget(self.url_edit)
        layout.addWidget(note)
        layout.addWidget(self.error_label)
        layout.addWidget(buttons)
        self.address: WorkerAddress | None = None

    def _check_and_accept(self) -> None:
        try:
            self.address = parse_worker_url(self.url_edit.text())
        except BadWorkerUrl as exc:
            text = str(exc)
            self.error_label.setText(text[:1].upper() + text[1:] + ".")
            return
        self.accept()


def open_connect(window: Any) -> None:
    """The menu action: ask for the worker's URL, then connect the window to it."""
    if window.controller.state.active:
        window.message_box("Run in progress", "Stop the current run before connecting to a worker.")
        return
    dialog = ConnectDialog(window)
    if dialog.exec() != QDialog.DialogCode.Accepted or dialog.address is None:
        return
    connect_worker(window, dialog.address)


def connect_worker(window: Any, address: WorkerAddress) -> bool:
    """Connect the window to the worker at ``address`` (also the entry point tests drive)."""
    window.banner.hide()
    window.last_error = None
    return bool(window.controller.connect_worker(address))


def add_connect_action(window: Any, menu: Any) -> QAction:
    """The one hook MainWindow needs: File ▸ Connect to worker…"""
    act = QAction("&Connect to worker…", window)
    act.setToolTip("Decode on a worker started with `specscope serve` (this machine or a GPU server)")
    act.triggered.connect(lambda: open_connect(window))
    menu.addAction(act)
    return act
