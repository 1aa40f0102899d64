"""File ▸ Attach to server…: stream the editor's prompt from a serving engine into the same views.

The request runs on a plain Python thread (``core.attach.attach`` is blocking I/O, no torch); records cross to
the GUI thread through a queued Qt signal and go through ``MainWindow.ingest`` like a local run's. A failure
(server down, no speculation, the connection dropping) is one sentence in the window's banner; the records
that arrived stay on screen and can be exported as a trace. The API key comes from the environment only.
"""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import QObject, Signal
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

from specscope.core.attach.client import (
    API_KEY_VARIABLES,
    AttachError,
    AttachOptions,
    AttachResult,
    attach,
    base_url,
    redact_url,
)

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


class AttachRunner(QObject):
    """Runs one attached request off the GUI thread; ``record`` and ``finished`` arrive on the GUI thread."""

    record = Signal(object)  # IterationRecord
    finished = Signal(object)  # AttachResult

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.cancel = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self, options: AttachOptions) -> None:
        self.cancel.clear()
        self._thread = threading.Thread(target=self._run, args=(options,), name="specscope-attach", daemon=True)
        self._thread.start()

    def _run(self, options: AttachOptions) -> None:
        try:
            result = attach(options, on_record=self.record.emit, cancel=self.cancel)
        except AttachError as exc:
            result = AttachResult(records=[], text="", session={}, scrapes=[], final_timings=None, error=str(exc))
        self.finished.emit(result)

    def stop(self, timeout_s: float = 5.0) -> None:
        self.cancel.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout_s)


def open_attach(window: Any) -> None:
    """The menu action: ask for the server, then stream the editor's prompt from it into the window."""
    runner: AttachRunner | None = getattr(window, "attach_runner", None)
    if (runner is not None and runner.running) or window.host.running:
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


def start_attach(window: Any, options: AttachOptions) -> AttachRunner:
    """Reset the views and stream ``options`` into them (also the entry point tests drive)."""
    runner = AttachRunner(window)
    window.attach_runner = runner
    window._reset_view()
    window.attach_result = None
    shown_url = redact_url(options.url)
    window.setWindowTitle(f"specscope — attached to {shown_url}")
    window.run_panel.show_attached(shown_url, "running")
    runner.record.connect(lambda rec: window.ingest([rec]))

    def done(result: AttachResult) -> None:
        window.attach_result = result
        window.attach_session = result.session
        engine = str(result.session.get("engine") or "server")
        window.run_panel.show_attached(f"{engine} at {shown_url}", "failed" if result.error else "finished")
        if result.error:
            window.show_error(result.error)
        else:
            window.status.show_message(f"Attached run finished: {len(result.records)} verify passes from "
                                       f"{result.session.get('engine')}", 8000)

    runner.finished.connect(done)
    runner.start(options)
    return runner


def add_attach_action(window: Any, menu: Any) -> QAction:
    """The one hook MainWindow needs: File ▸ Attach to server…"""
    act = QAction("&Attach to server…", window)
    act.triggered.connect(lambda: open_attach(window))
    menu.addAction(act)
    return act
