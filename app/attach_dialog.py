"""File ▸ Attach to server…: stream the editor's prompt from a serving engine into the same views.

The run controller owns the attached run like a local one (``attach_source.AttachRunner``: the same state
machine, buffer, measurement and autosave; Start is disabled while it runs). A failure (server down, no
speculation, the connection dropping) is one sentence in the window's banner; the passes that arrived stay on
screen, are autosaved, and can be exported as a trace. The API key comes from the environment only.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from specscope.core.attach.options import API_KEY_VARIABLES, AttachError, AttachOptions, base_url

DEFAULT_URL = "http://127.0.0.1:8080"


class AttachDialog(QDialog):
    """URL, model, max tokens and timeout; ``options(prompt)`` turns them into AttachOptions."""

    def __init__(self, parent: QWidget | None = None, url: str = DEFAULT_URL) -> None:
        super().__init__(parent)
        self.setWindowTitle("Attach to server")
        self.url_edit = QLineEdit(url)
        self.model_edit = QLineEdit()
        self.model_edit.setPlaceholderText("the first model the server lists")
        self.max_tokens = QSpinBox()
        self.max_tokens.setRange(1, 32768)
        self.max_tokens.setValue(128)
        self.timeout = QDoubleSpinBox()
        self.timeout.setRange(1.0, 3600.0)
        self.timeout.setValue(60.0)
        self.timeout.setSuffix(" s")
        form = QFormLayout()
        form.addRow("Server URL", self.url_edit)
        form.addRow("Model", self.model_edit)
        form.addRow("Max tokens", self.max_tokens)
        form.addRow("Timeout", self.timeout)
        note = QLabel("vLLM, llama.cpp's server (started with --metrics) or SGLang. API key from "
                      + " or ".join(f"${v}" for v in API_KEY_VARIABLES) + "; it is never saved.")
        note.setWordWrap(True)
        self.error_label = QLabel()
        self.error_label.setStyleSheet("color: #c0392b")
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._check_and_accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(self.error_label)
        layout.addWidget(buttons)

    def _check_and_accept(self) -> None:
        try:
            base_url(self.url_edit.text().strip())
        except AttachError as exc:
            self.error_label.setText(str(exc))
            return
        self.accept()

    def options(self, prompt: str) -> AttachOptions:
        return AttachOptions(url=self.url_edit.text().strip(), prompt=prompt,
                             model=self.model_edit.text().strip() or None, max_tokens=self.max_tokens.value(),
                             timeout_s=self.timeout.value())


def open_attach(window: Any) -> None:
    """The menu action: ask for the server, then stream the editor's prompt from it into the window."""
    if window.controller.state.active:
        window.message_box("Run in progress", "Stop the current run before attaching to a server.")
        return
    prompt = window.panel.prompt_text()
    if not prompt:
        window.show_error("The prompt is empty: type one or pick one from the list.")
        return
    dialog = AttachDialog(window, url=getattr(window, "attach_url", DEFAULT_URL))
    if dialog.exec() != QDialog.DialogCode.Accepted:
        return
    window.attach_url = dialog.url_edit.text().strip()
    start_attach(window, dialog.options(prompt))


def start_attach(window: Any, options: AttachOptions) -> Any:
    """Stream ``options`` into the window through its run controller (also the entry point tests drive); returns
    the runner (its ``result`` holds the engine's answer once it finished)."""
    window.attach_result = None  # the last request's answer: set when this one finishes
    runner = window.controller.start_attach(options)
    if runner is None:
        return None
    window.run_panel.show_attached(runner.shown_url, "running")

    def done(error: str) -> None:
        result = runner.result
        window.attach_result = result
        window.attach_session = result.session if result is not None else {}
        engine = str(window.attach_session.get("engine") or "server")
        window.run_panel.show_attached(f"{engine} at {runner.shown_url}", "failed" if error else "finished")
        if error:
            window.show_error(error)
        elif result is not None:
            window.status.show_message(f"Attached run finished: {len(result.records)} verify passes from "
                                       f"{engine}.", 8000)

    runner.finished.connect(done)
    return runner


def add_attach_action(window: Any, menu: Any) -> QAction:
    """The one hook MainWindow needs: File ▸ Attach to server…"""
    act = QAction("&Attach to server…", window)
    act.triggered.connect(lambda: open_attach(window))
    menu.addAction(act)
    return act
