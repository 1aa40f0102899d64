"""The main window: controls on the left, plots on top, the token stream below, a live status bar.

The window only renders and forwards: a 30 Hz timer drains the worker's record buffer into ``RunData``,
appends the new tokens to the token view, redraws the plots (one ``setData`` per curve) and feeds the
autosave recorder. Engine modules are imported lazily in handlers, never at module level.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import replace
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import (
    QDockWidget,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMessageBox,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from specscope.core.controls import InvalidControl
from specscope.core.kinds import adaptive_k_default
from specscope.core.records import BaselineRecord, ControlValues, IterationRecord

from .pair_choice import PairChoice
from .run_data import RunData
from .settings import AppSettings
from .widgets.control_panel import ControlPanel
from .widgets.drill_control import DrillControl
from .widgets.legend import TokenLegend
from .widgets.model_picker import ModelPicker
from .widgets.plots_panel import PlotsPanel
from .widgets.status_panel import StatusPanel
from .widgets.token_view import TokenView
from .worker import RunRequest, WorkerHost

log = logging.getLogger(__name__)
TICK_MS = 33  # ~30 Hz drain and redraw
# Painting the plots is the GUI's biggest cost (software rendering, and every paint callback needs the GIL
# the decoding thread is using). During a run each tick redraws one plot in turn, so no event-loop turn
# paints all six: each plot updates at 30/6 = 5 Hz, tokens and the status bar at 30 Hz.
# A tick also caps its own work: it ingests records in chunks until a time budget is spent (the rest wait in
# a queue for the next tick, none is dropped), and skips the plot redraw when ingesting already used it.
INGEST_CHUNK = 32  # records per RunData.extend call
TICK_BUDGET_S = 0.012  # ingest time after which this tick takes no more records and redraws no plot


def merge_events(records: list[IterationRecord], baselines: list[BaselineRecord]) -> list[Any]:
    """Records and baselines in the order the loop emitted them (a baseline precedes its iteration)."""
    out: list[Any] = []
    pending = sorted(baselines, key=lambda b: b.after_iteration)
    i = 0
    for r in records:
        while i < len(pending) and pending[i].after_iteration <= r.iteration:
            out.append(pending[i])
            i += 1
        out.append(r)
    out.extend(pending[i:])
    return out


class Banner(QWidget):
    """A dismissable message strip above the token view (errors, the interrupted-session offer)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(6, 2, 6, 2)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.action = QPushButton("")
        self.close_button = QPushButton("Dismiss")
        row.addWidget(self.label, 1)
        row.addWidget(self.action)
        row.addWidget(self.close_button)
        self.close_button.clicked.connect(self.hide)
        self._callback: Any = None
        self.action.clicked.connect(self._run_action)
        self.hide()

    def show_message(self, text: str, kind: str = "error", action: str = "", callback: Any = None) -> None:
        colours = {"error": ("#FBE3D1", "#7A3300"), "info": ("#D6ECFA", "#003E66")}
        bg, fg = colours.get(kind, colours["info"])
        self.setStyleSheet(f"background:{bg}; color:{fg};")
        self.label.setText(text)
        self.action.setVisible(bool(action))
        self.action.setText(action)
        self._callback = callback
        self.show()

    def _run_action(self) -> None:
        cb = self._callback
        self.hide()
        if cb is not None:
            cb()


class MainWindow(QMainWindow):
    pair_ready = Signal()
    pair_failed = Signal(str)
    run_ended = Signal(str)  # "finished:<reason>" or "error:<message>"
    trace_opened = Signal(str)
    drained = Signal(int)  # iterations drained this tick

    def __init__(self, settings: AppSettings | None = None, data_dir: Path | None = None,
                 check_interrupted: bool = True) -> None:
        super().__init__()
        self.setWindowTitle("specscope — speculative decoding profiler")
        self.settings = settings or AppSettings()
        self._data_dir = data_dir
        self.data = RunData()
        self.state = "no_model"
        self.pair_choice = self.settings.pair_choice() or PairChoice()
        self.pair_description = ""
        self.replay_path: str | None = None
        self.recorder: Any = None
        self.last_error: str | None = None
        self.last_message: tuple[str, str] | None = None  # (title, text) of the last message box
        self._pending: deque[Any] = deque()  # drained from the worker, not yet ingested
        self._run_started_at: float | None = None
        self.host = WorkerHost(self)

        self.panel = ControlPanel()
        self.drill_control = DrillControl(lambda: self.host.controls)  # in the Run panel, above the stretch
        panel_layout = self.panel.layout()
        if isinstance(panel_layout, QVBoxLayout):
            panel_layout.insertWidget(panel_layout.count() - 1, self.drill_control)
        dock = QDockWidget("Controls", self)
        dock.setObjectName("controls_dock")
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.panel)
        dock.setWidget(scroll)
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, dock)
        self.controls_dock = dock

        self.plots = PlotsPanel()
        self.token_view = TokenView()
        self.legend = TokenLegend()
        self.banner = Banner()
        bottom = QWidget()
        bl = QVBoxLayout(bottom)
        bl.setContentsMargins(0, 0, 0, 0)
        bl.setSpacing(2)
        bl.addWidget(self.banner)
        bl.addWidget(self.legend)
        bl.addWidget(self.token_view, 1)
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("main_splitter")
        self.splitter.addWidget(self.plots)
        self.splitter.addWidget(bottom)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 1)
        self.setCentralWidget(self.splitter)
        self.status = StatusPanel(self.statusBar())
        self._build_menus()

        self.panel.start_clicked.connect(self.start_run)
        self.panel.stop_clicked.connect(self.stop_run)
        self.panel.pause_toggled.connect(self.set_paused)
        self.panel.baseline_clicked.connect(self.request_baseline)
        self.panel.controls_changed.connect(self.apply_controls)
        self.legend.show_rejected_changed.connect(self.token_view.set_show_rejected)
        w = self.host.worker
        # Slots must belong to QObjects living on the GUI thread, so Qt queues the worker's emissions.
        w.progress.connect(self._on_progress)
        w.loaded.connect(self._on_loaded)
        w.load_failed.connect(self._on_load_failed)
        w.finished.connect(self._on_finished)
        w.error.connect(self._on_error)

        self._restore_settings()
        self.timer = QTimer(self)
        self.timer.setInterval(TICK_MS)
        self.timer.timeout.connect(self.tick)
        self.timer.start()
        if check_interrupted:
            QTimer.singleShot(0, self.offer_interrupted_session)

    # ---- layout ----------------------------------------------------------------------------------------
    def _build_menus(self) -> None:
        mb = self.menuBar()
        file_menu = mb.addMenu("&File")
        self._action(file_menu, "&Open trace…", self._open_trace_dialog, QKeySequence.StandardKey.Open)
        from .attach_dialog import add_attach_action

        add_attach_action(self, file_menu)
        file_menu.addSeparator()
        self._action(file_menu, "Export &trace (CSV + tokens + session JSON)…", self._export_trace_dialog,
                     QKeySequence("Ctrl+E"))
        self._action(file_menu, "Export &Chrome trace JSON (Perfetto)…", self._export_chrome_dialog)
        self._action(file_menu, "Export plots as &PNG…", self._export_png_dialog)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        models = mb.addMenu("&Models")
        self._action(models, "&Choose models…", self.choose_models, QKeySequence("Ctrl+M"))
        self._action(models, "Load the embedded &demo", lambda: self.load_pair(PairChoice()))
        view = mb.addMenu("&View")
        view.addAction(self.controls_dock.toggleViewAction())

    def _action(self, menu: Any, text: str, slot: Any, shortcut: Any = None) -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(shortcut)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _restore_settings(self) -> None:
        s = self.settings
        self.panel.set_values(s.controls())
        prompt = s.prompt()
        if prompt:
            self.panel.set_prompt_text(prompt)
        max_new, seed = s.run_options()
        self.panel.max_new.setValue(max_new)
        self.panel.seed.setValue(seed)
        geometry, state = s.geometry(), s.state()
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1400, 900)
        if state is not None:
            self.restoreState(state)

    def save_settings(self) -> None:
        s = self.settings
        s.set_controls(self.panel.values())
        s.set_prompt(self.panel.prompt_edit.toPlainText())
        s.set_run_options(self.panel.max_new.value(), self.panel.seed.value())
        s.set_pair_choice(self.pair_choice)
        s.set_layout(self.saveGeometry(), self.saveState())
        s.sync()

    # ---- state -----------------------------------------------------------------------------------------
    def set_state(self, state: str) -> None:
        self.state = state
        panel_state = {"replay": "idle" if self.host.has_pair else "no_model"}.get(state, state)
        self.panel.set_state(panel_state)
        self.drill_control.set_state(panel_state)

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            from specscope.core.autosave import default_data_dir

            self._data_dir = default_data_dir()
        return self._data_dir

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    # ---- models ----------------------------------------------------------------------------------------
    def choose_models(self) -> None:
        dialog = ModelPicker(self.pair_choice, self)
        if dialog.exec():
            self.load_pair(dialog.choice())

    def load_pair(self, what: Any) -> None:
        """Load a PairChoice (or a factory ``f(progress) -> ModelPair``) on the worker."""
        if self.host.running:
            self.show_error("Stop the run before loading other models.")
            return
        if isinstance(what, PairChoice):
            problem = what.problem()
            if problem:
                self.show_error(problem)
                return
            if what.drafter != self.pair_choice.drafter and adaptive_k_default(what.drafter):
                # prompt lookup's adaptive k proposes only what pays: on by default when switching to it
                self.panel.set_values(replace(self.panel.values(), adaptive_k=True))
            self.pair_choice = what
            label = what.describe()
            self.status.set_device(what.target_device)
        else:
            label = "custom pair"
        self.set_state("loading")
        self.status.show_progress(f"Loading {label}…", -1.0)
        self.host.load(what)

    def _on_progress(self, message: str, fraction: float) -> None:
        self.status.show_progress(message, fraction)

    def _on_loaded(self, description: str) -> None:
        self.pair_description = description
        self.status.hide_progress()
        self.status.show_message(f"Ready: {description}", 5000)
        pair = self.host.worker.pair
        self.token_view.decode = getattr(pair, "token_text", None)
        device = getattr(getattr(pair, "target", None), "device", None)
        if device is not None:
            self.status.set_device(str(device))
        self.setWindowTitle(f"specscope — {description}")
        self.set_state("replay" if self.replay_path else "idle")
        self.pair_ready.emit()

    def _on_load_failed(self, message: str) -> None:
        self.status.hide_progress()
        self.set_state("replay" if self.replay_path else "no_model")
        self.show_error(f"Could not load the models: {message}")
        self.pair_failed.emit(message)

    # ---- running ---------------------------------------------------------------------------------------
    def start_run(self) -> bool:
        if not self.host.has_pair or self.host.busy:
            return False
        prompt = self.panel.prompt_text()
        if not prompt:
            self.show_error("The prompt is empty: type one or pick one from the list.")
            return False
        self.panel.flush()
        self._reset_view()
        self.replay_path = None
        values = self.panel.values()
        request = RunRequest(prompt=prompt, max_new_tokens=self.panel.max_new.value(),
                             seed=self.panel.seed_value())
        self._start_recorder(request, values)
        self.banner.hide()
        self.last_error = None
        self._run_started_at = time.monotonic()
        self.host.start(request, values)
        self.set_state("running")
        return True

    def _session_meta(self, request: RunRequest, values: ControlValues) -> dict[str, Any]:
        return {"pair": self.pair_choice.to_dict(), "pair_description": self.pair_description,
                "prompt": request.prompt, "max_new_tokens": request.max_new_tokens, "seed": request.seed,
                "controls": {"k": values.k, "temperature": values.temperature, "top_k": values.top_k,
                             "top_p": values.top_p, "adaptive_k": values.adaptive_k},
                "app": "specscope desktop"}

    def _start_recorder(self, request: RunRequest, values: ControlValues) -> None:
        try:
            from specscope.core.autosave import SessionRecorder

            self.recorder = SessionRecorder(self.sessions_dir, self._session_meta(request, values))
        except Exception as exc:  # autosave is a safety net; a failure must not stop the run
            log.warning("autosave disabled: %s", exc)
            self.recorder = None
            self.status.show_message(f"Autosave disabled: {exc}", 8000)

    def _close_recorder(self, ok: bool) -> None:
        if self.recorder is not None:
            try:
                self.recorder.close(ok=ok)
            except Exception as exc:
                log.warning("autosave close failed: %s", exc)
            self.recorder = None

    def stop_run(self) -> None:
        self.host.stop()

    def set_paused(self, paused: bool) -> None:
        if paused:
            self.host.controls.pause()
            if self.state == "running":
                self.set_state("paused")
        else:
            self.host.controls.resume()
            if self.state == "paused":
                self.set_state("running")

    def request_baseline(self) -> None:
        self.host.controls.request_baseline()
        self.status.show_message("Plain-step baseline requested for the next iteration", 3000)

    def apply_controls(self, values: ControlValues) -> None:
        """Forward a (coalesced) control change to the running loop; it applies at the next iteration."""
        if not self.host.running:
            return
        try:
            self.host.controls.update(k=values.k, temperature=values.temperature, top_k=values.top_k,
                                      top_p=values.top_p, adaptive_k=values.adaptive_k)
        except InvalidControl as exc:
            self.show_error(str(exc))

    def _catch_up(self) -> None:
        """Drain what is left and redraw every plot (during a run they redraw one per tick)."""
        self.drain_all()
        self.plots.refresh(self.data)
        self.status.update(self.data)

    def _on_finished(self, reason: str) -> None:
        self._catch_up()
        self._close_recorder(ok=True)
        self.set_state("idle")
        elapsed = time.monotonic() - self._run_started_at if self._run_started_at else 0.0
        self.status.show_message(
            f"Run ended ({reason}) after {elapsed:.1f} s, {len(self.data)} iterations", 8000)
        self.run_ended.emit(f"finished:{reason}")

    def _on_error(self, message: str) -> None:
        self._catch_up()
        self._close_recorder(ok=False)
        self.set_state("idle" if self.host.has_pair else "no_model")
        self.show_error(f"The run stopped with an error: {message}. The {len(self.data)} iterations so far "
                        "are kept and can be exported.")
        self.run_ended.emit(f"error:{message}")

    # ---- the 30 Hz tick --------------------------------------------------------------------------------
    def tick(self) -> None:
        self._pending.extend(self.host.buffer.drain())
        started = time.monotonic()
        n_records = 0
        while self._pending:  # at least one chunk per tick, so a backlog always shrinks
            chunk = [self._pending.popleft() for _ in range(min(INGEST_CHUNK, len(self._pending)))]
            self.ingest(chunk, record=True, redraw=False)
            n_records += sum(1 for e in chunk if isinstance(e, IterationRecord))
            if time.monotonic() - started >= TICK_BUDGET_S:
                break
        if time.monotonic() - started < TICK_BUDGET_S and self.plots.stale(self.data):
            self.plots.refresh_one(self.data)  # else deferred: the next tick redraws
        self.drained.emit(n_records)

    def drain_all(self) -> None:
        """Ingest everything the worker handed over, however long it takes (end of run, closing)."""
        self._pending.extend(self.host.buffer.drain())
        events = list(self._pending)
        self._pending.clear()
        if events:
            self.ingest(events, record=True, redraw=False)
        self.drained.emit(sum(1 for e in events if isinstance(e, IterationRecord)))

    def ingest(self, events: list[Any], record: bool = False, redraw: bool = True) -> None:
        n_before = len(self.data.records)
        self.data.extend(events)
        for e in events:
            if type(e).__name__ == "DrillEvent":
                self.drill_control.on_event(e)
        new_records = self.data.records[n_before:]
        self.token_view.append_records(new_records)
        self.legend.set_counts(self.token_view.counts)
        if record and self.recorder is not None:
            for e in events:
                self.recorder.append(e)
        live = self.host.running
        if redraw and live:
            self.plots.refresh_one(self.data)
        elif redraw:
            self.plots.refresh(self.data)
        self.status.update(self.data)

    def _reset_view(self) -> None:
        self._pending.clear()
        self.data = RunData()
        self.token_view.clear_tokens()
        self.legend.set_counts({})
        self.plots.reset()
        self.status.update(self.data)

    # ---- messages --------------------------------------------------------------------------------------
    def show_error(self, text: str) -> None:
        self.last_error = text
        self.banner.show_message(text, "error")

    def message_box(self, title: str, text: str) -> None:
        """A non-blocking warning box (tests read ``last_message``)."""
        self.last_message = (title, text)
        box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()

    # ---- export and replay -----------------------------------------------------------------------------
    def _save_path(self, title: str, filt: str, default: str) -> str | None:
        start = str(Path(self.settings.last_dir() or Path.home()) / default)
        path, _ = QFileDialog.getSaveFileName(self, title, start, filt)
        if path:
            self.settings.set_last_dir(str(Path(path).parent))
        return path or None

    def _require_records(self) -> bool:
        if not self.data.records:
            self.message_box("Nothing to export", "There are no iterations yet: start a run or open a trace.")
            return False
        return True

    def _export_trace_dialog(self) -> None:
        if self._require_records():
            path = self._save_path("Export trace", "Trace CSV (*.csv)", "specscope-trace.csv")
            if path:
                self.export_trace(path)

    def _export_chrome_dialog(self) -> None:
        if self._require_records():
            path = self._save_path("Export Chrome trace", "Trace Event JSON (*.json)", "specscope-trace.json")
            if path:
                self.export_chrome_trace(path)

    def _export_png_dialog(self) -> None:
        path = self._save_path("Export plots", "PNG image (*.png)", "specscope-plots.png")
        if path:
            self.export_png(path)

    def current_session_meta(self) -> dict[str, Any]:
        values = self.panel.values()
        request = RunRequest(prompt=self.panel.prompt_text(), max_new_tokens=self.panel.max_new.value(),
                             seed=self.panel.seed_value())
        return self._session_meta(request, values)

    def export_trace(self, path: str | Path) -> bool:
        from specscope.core.trace import TraceError, write_trace

        try:
            paths = write_trace(Path(path), self.data.records, self.data.baselines,
                                self.current_session_meta())
        except (TraceError, ValueError, OSError) as exc:
            self.message_box("Export failed", str(exc))
            return False
        self.status.show_message(f"Trace written: {paths.iterations} (+ tokens, baselines, session)",
                                     8000)
        return True

    def export_chrome_trace(self, path: str | Path) -> bool:
        from specscope.core.chrome_trace import write_chrome_trace
        from specscope.core.trace import TraceError

        try:
            write_chrome_trace(Path(path), self.data.records, self.data.baselines,
                               self.current_session_meta())
        except (TraceError, ValueError, OSError) as exc:
            self.message_box("Export failed", str(exc))
            return False
        self.status.show_message(f"Chrome trace written: {path} (open it in ui.perfetto.dev)", 8000)
        return True

    def export_png(self, path: str | Path) -> bool:
        if not self.plots.grab_png(str(path)):
            self.message_box("Export failed", f"could not write {path}")
            return False
        self.status.show_message(f"Plots saved: {path}", 8000)
        return True

    def _open_trace_dialog(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open trace", self.settings.last_dir(),
                                              "specscope trace (*.csv *.json);;All files (*)")
        if path:
            self.settings.set_last_dir(str(Path(path).parent))
            self.open_trace(path)

    def open_trace(self, path: str | Path) -> bool:
        """Rebuild the plots and token view from a saved trace or session folder (no model needed)."""
        if self.host.running:
            self.message_box("Run in progress", "Stop the run before opening a trace.")
            return False
        from specscope.core.measurement import replay
        from specscope.core.trace import TraceError, read_trace

        try:
            loaded = read_trace(Path(path))
        except TraceError as exc:
            self.message_box("Cannot open trace", str(exc))
            return False
        except Exception as exc:  # a foreign file can fail in ways the reader did not foresee
            self.message_box("Cannot open trace", f"{Path(path).name} is not a specscope trace ({exc})")
            return False
        self._reset_view()
        self.replay_path = str(path)
        self.token_view.decode = None  # replay: top-5 shown as ids
        events = merge_events(loaded.records, loaded.baselines)
        replay(events)  # the measurement owner fills every record's numbers, as in a live run
        self.ingest(events)
        self.plots.refresh(self.data)
        self.status.update(self.data)
        self.set_state("replay")
        self.setWindowTitle(f"specscope — {Path(path).name} (replay)")
        if loaded.warnings:
            self.banner.show_message("Opened with warnings: " + "; ".join(loaded.warnings[:3]), "info")
        self.status.show_message(f"Opened {path}: {len(loaded.records)} iterations", 8000)
        self.trace_opened.emit(str(path))
        return True

    def offer_interrupted_session(self) -> None:
        try:
            from specscope.core.autosave import find_interrupted_sessions

            found = find_interrupted_sessions(self.sessions_dir)
        except Exception as exc:
            log.warning("could not look for interrupted sessions: %s", exc)
            return
        if not found:
            return
        folder = found[0]
        more = f" ({len(found) - 1} older ones too)" if len(found) > 1 else ""
        self.banner.show_message(f"A session was interrupted: {folder.name}{more}. Open its trace?", "info",
                                 "Open", lambda: self._open_interrupted(folder))
        self.interrupted_folder = folder

    def _open_interrupted(self, folder: Path) -> None:
        from specscope.core.autosave import dismiss_interrupted_session

        if self.open_trace(folder):
            dismiss_interrupted_session(folder)

    # ---- closing ---------------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_settings()
        self.timer.stop()
        was_running = self.host.running
        ended = self.host.shutdown()
        if ended:
            self.drain_all()
        self._close_recorder(ok=True)
        if not ended:
            log.warning("the worker did not stop in time (still inside a model call)")
        if was_running:
            log.info("run stopped on close")
        super().closeEvent(event)
