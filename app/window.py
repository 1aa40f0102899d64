"""The main window: controls on the left, plots and the token stream in a splitter, a run panel on top.

The window lays out widgets and forwards the user's intents to the :class:`RunController`, which owns the
run (state, worker, records, autosave, throttles); widgets render what the controller announces. Engine
modules are imported lazily in handlers, never at module level.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import (
    QSize,
    Qt,
    QTimer,
    Signal,
)
from PySide6.QtGui import QAction, QCloseEvent, QGuiApplication, QKeySequence, QResizeEvent
from PySide6.QtWidgets import (
    QDockWidget,
    QMainWindow,
    QMenu,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from specscope.app.live_layout import hold_plot_size
from specscope.app.pair_choice import PairChoice
from specscope.app.run_controller import RunController, RunState
from specscope.app.run_data import RunData
from specscope.app.sentences import FINISH_WORDS, full_stop
from specscope.app.settings import AppSettings
from specscope.app.trace_files import TraceFiles
from specscope.app.widgets.banner import Banner
from specscope.app.widgets.control_panel import ControlPanel
from specscope.app.widgets.drill_control import DrillControl
from specscope.app.widgets.legend import TokenLegend
from specscope.app.widgets.model_picker import ModelPicker
from specscope.app.widgets.plot_base import IDLE_TEXT
from specscope.app.widgets.plots_panel import PlotsPanel
from specscope.app.widgets.run_panel import RunPanel
from specscope.app.widgets.status_panel import StatusPanel
from specscope.app.widgets.token_view import TokenView
from specscope.app.worker import Event, PairFactory, RunRequest, WorkerHost
from specscope.core.controls import switched_drafter_controls
from specscope.core.events import ControlChange
from specscope.core.records import ATTACHED_MODE, ControlValues, DrillEvent, IterationRecord

if TYPE_CHECKING:
    from specscope.core.trace.autosave import SessionRecorder

log = logging.getLogger(__name__)

__all__ = ["MainWindow"]


SAVE_DELAY_MS = 400  # settings are written this long after the last change (a burst of typing: one write)


class CentralArea(QWidget):
    """The window's central widget; says when its width changes (the window, or the dock beside it, moved)."""

    resized = Signal()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.resized.emit()


MIN_PLOT_COLUMN_PX = 340  # below this the plots' ticks run into each other
MIN_TOKEN_COLUMN_PX = 300
BESIDE_MIN_WIDTH = 2 * MIN_PLOT_COLUMN_PX + MIN_TOKEN_COLUMN_PX + 12  # two plot columns, tokens, the handle


def engine_imported() -> bool:
    """torch and transformers are loaded in this process (the worker imports them on the first load)."""
    return "torch" in sys.modules and "transformers" in sys.modules


def full_screen_keys() -> list[QKeySequence]:
    """F11 everywhere, plus the platform's own full-screen key where it has another (Ctrl+Meta+F on macOS)."""
    keys = [QKeySequence("F11")]
    keys += [k for k in QKeySequence.keyBindings(QKeySequence.StandardKey.FullScreen) if k not in keys]
    return keys


# While a run is live, the token view, status and plot titles are brought up to date at most this often (10 Hz):
# on the tiny pair at every 33 ms tick they took 5 of the app's 10 ms of CPU per iteration, and the GUI thread
# shares the interpreter lock with the decode (scripts/bench_app_rate.py, docs/bench-overhead.md).
LIVE_VIEW_PERIOD_S = 0.1


class MainWindow(QMainWindow):
    pair_ready = Signal()
    pair_failed = Signal(str)
    run_ended = Signal(str)  # "finished:<reason>" or "error:<message>"
    trace_opened = Signal(str)
    drained = Signal(int)  # iterations drained this tick

    def __init__(self, settings: AppSettings | None = None, data_dir: Path | None = None,
                 check_interrupted: bool = True) -> None:
        super().__init__()
        self.settings = settings or AppSettings()
        self._data_dir = data_dir
        self.pair_choice = self.settings.pair_choice() or PairChoice()
        self.last_error: str | None = None
        self.last_message: tuple[str, str] | None = None  # (title, text) of the last message box
        self.interrupted_folder: Path | None = None
        self._beside_wanted = False  # View ▸ Tokens beside the plots, shown when the window is wide enough
        self.controller = RunController(lambda: self.sessions_dir, self.settings.keep_sessions, self)

        self.panel = ControlPanel()
        self.drill_control = DrillControl(lambda: self.controller.controls)  # in the Run panel, above the stretch
        panel_layout = self.panel.layout()
        if isinstance(panel_layout, QVBoxLayout):
            panel_layout.insertWidget(panel_layout.count() - 1, self.drill_control)
        dock = QDockWidget("Controls", self)
        dock.setObjectName("controls_dock")
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.panel)
        dock.setWidget(scroll)
        # Closable: without it Qt greys out the dock's own View ▸ Controls toggle.
        dock.setFeatures(QDockWidget.DockWidgetFeature.DockWidgetMovable
                         | QDockWidget.DockWidgetFeature.DockWidgetFloatable
                         | QDockWidget.DockWidgetFeature.DockWidgetClosable)
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
        # Watching the prompt decode is the first thing users do: the token stream gets a real share of the
        # window (40% below the plots, or a column beside them) and a handle wide enough to find.
        self.splitter = QSplitter(Qt.Orientation.Vertical)
        self.splitter.setObjectName("main_splitter")
        self.splitter.setHandleWidth(8)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.setStyleSheet("QSplitter::handle { background:#D0D0D0; border:1px solid #B8B8B8; }"
                                    "QSplitter::handle:hover { background:#A8C8E8; }")
        self.splitter.addWidget(self.plots)
        self.splitter.addWidget(bottom)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 2)
        self.run_panel = RunPanel()
        central = CentralArea()
        central.resized.connect(self._fit_token_layout)
        cl = QVBoxLayout(central)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setSpacing(2)
        cl.addWidget(self.run_panel)
        cl.addWidget(self.splitter, 1)
        self.setCentralWidget(central)
        self.status = StatusPanel(self.statusBar())
        self.files = TraceFiles(self)  # export, open and recover traces
        self._build_menus()
        # Settings are written a moment after each change, not only on a clean exit: a killed window keeps
        # its pair, drafter, prompt and controls.
        self._save_soon = QTimer(self)
        self._save_soon.setObjectName("save_settings_soon")
        self._save_soon.setSingleShot(True)
        self._save_soon.setInterval(SAVE_DELAY_MS)
        self._save_soon.timeout.connect(self.save_settings)
        self._connect()
        self._restore_settings()
        self._render_state(self.controller.state)
        if check_interrupted:
            QTimer.singleShot(0, self.files.offer_interrupted_session)

    # ---- wiring ----------------------------------------------------------------------------------------
    def _connect(self) -> None:
        c = self.controller
        self.panel.start_clicked.connect(self.start_run)
        self.panel.stop_clicked.connect(self.stop_run)
        self.panel.pause_toggled.connect(self.set_paused)
        self.panel.baseline_clicked.connect(self.request_baseline)
        self.panel.controls_changed.connect(c.update_controls)
        self.panel.drafter_changed.connect(self.change_drafter)
        self.legend.show_rejected_changed.connect(self.token_view.set_show_rejected)
        for changed in (self.panel.controls_changed, self.panel.prompt_edit.textChanged,
                        self.panel.max_new.valueChanged, self.panel.seed.valueChanged, self.panel.adaptive.clicked):
            changed.connect(self.save_settings_soon)
        c.state_changed.connect(self._render_state)
        c.drill_changed.connect(self._on_drill_events)
        c.progress.connect(self.status.show_progress)
        c.pair_loaded.connect(self._on_loaded)
        c.load_failed.connect(self._on_load_failed)
        c.run_ended.connect(self._on_run_ended)
        c.message.connect(self.status.show_message)
        c.error.connect(self.show_error)
        c.data_reset.connect(self._clear_views)
        self._unshown: list[IterationRecord] = []  # ingested, not in the token view yet (see _show_tokens)
        self._views_shown_at = -1e9
        c.records_added.connect(self._show_records)
        c.frame.connect(self._on_frame)
        c.baseline_requested.connect(self._on_baseline_requested)
        c.drained.connect(self.drained)
        c.shown_run.connect(self._on_shown_run)
        c.worker_lost.connect(self._on_worker_lost)

    def _build_menus(self) -> None:
        mb = self.menuBar()
        file_menu = mb.addMenu("&File")
        self.file_menu = file_menu
        self._action(file_menu, "&Open trace…", self.files.open_dialog, QKeySequence.StandardKey.Open)
        from specscope.app.attach_dialog import add_attach_action

        add_attach_action(self, file_menu)
        from specscope.app.connect_dialog import add_connect_action

        self.connect_action = add_connect_action(self, file_menu)
        file_menu.addSeparator()
        self.export_action = self._action(file_menu, "Export &trace (CSV + tokens + session JSON)…",
                                          self.files.export_trace_dialog, QKeySequence("Ctrl+E"))
        from specscope.app.shortcuts import WindowWideShortcuts

        # Ctrl+E works wherever the focus is: a spin box with the focus used to take it (X11's "end of line")
        self.window_wide_shortcuts = WindowWideShortcuts(self, [self.export_action])
        self._action(file_menu, "Export &Chrome trace JSON (Perfetto)…", self.files.export_chrome_dialog)
        self._action(file_menu, "Export plots as &PNG…", self.files.export_png_dialog)
        file_menu.addSeparator()
        self._action(file_menu, "&Quit", self.close, QKeySequence.StandardKey.Quit)
        models = mb.addMenu("&Models")
        self.models_menu = models
        self._action(models, "&Choose models…", self.choose_models, QKeySequence("Ctrl+M"))
        self._action(models, "Load the embedded &demo", self.load_demo)
        models.addSeparator()
        self.restart_worker_action = self._action(models, "&Restart the worker", self.restart_worker)
        self.restart_worker_action.setToolTip("Start the worker process again (or reconnect to the remote one) "
                                              "with the same pair")
        run = mb.addMenu("&Run")
        self.run_menu = run
        self.start_action = self._action(run, "&Start", self.start_run, QKeySequence("F5"))
        self.pause_action = self._action(run, "&Pause / resume", self.panel.pause_button.click, QKeySequence("F6"))
        self.stop_action = self._action(run, "S&top", self.stop_run, QKeySequence("Shift+F5"))
        run.addSeparator()
        self.baseline_action = self._action(run, "Measure &baseline now", self.request_baseline, QKeySequence("F7"))
        view = mb.addMenu("&View")
        self.view_menu = view
        view.addAction(self.controls_dock.toggleViewAction())
        self.beside_action = self._action(view, "Tokens &beside the plots (wide windows)", self._toggle_tokens_beside)
        self.beside_action.setCheckable(True)
        self.beside_action.setToolTip(f"Beside the plots when the window leaves {BESIDE_MIN_WIDTH} px for them and "
                                      "the tokens; below them otherwise")
        self.full_screen_action = self._action(view, "&Full screen", self._toggle_full_screen)
        self.full_screen_action.setShortcuts(full_screen_keys())
        self.full_screen_action.setCheckable(True)

    def _action(self, menu: QMenu, text: str, slot: Callable[[], object],
                shortcut: QKeySequence | QKeySequence.StandardKey | None = None) -> QAction:
        act = QAction(text, self)
        if shortcut is not None:
            act.setShortcut(shortcut)
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    def _restore_settings(self) -> None:
        s = self.settings
        self.panel.set_values(s.controls(self.pair_choice.drafter))
        self.panel.adaptive_chosen = s.adaptive_chosen()
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
            self.resize(self._first_size())
        if state is not None:
            self.restoreState(state)
        beside, sizes = s.token_layout()
        self.set_tokens_beside(beside)
        # Once the window is laid out: sizes given to a splitter without its final size get rescaled.
        QTimer.singleShot(0, (lambda: self.splitter.setSizes(sizes)) if sizes else self._default_split)

    def _first_size(self) -> QSize:
        """1400x900, or 95% of a smaller screen (a window larger than the screen hides the status bar)."""
        screen = self.screen() or QGuiApplication.primaryScreen()
        if screen is None:
            return QSize(1400, 900)
        room = screen.availableGeometry().size()
        return QSize(min(1400, int(room.width() * 0.95)), min(900, int(room.height() * 0.95)))

    def _default_split(self) -> None:
        """Tokens get 40% of the room, 30% when it is short (three rows of plots need ~400 px to read)."""
        total = sum(self.splitter.sizes()) or 1000
        share = 0.4 if total >= 700 or self.splitter.orientation() == Qt.Orientation.Horizontal else 0.3
        self.splitter.setSizes([int(total * (1 - share)), int(total * share)])

    def set_tokens_beside(self, beside: bool) -> None:
        """Tokens in a column right of the plots (wide windows) or in a band below them. Beside is a wish: a
        window too narrow for two plot columns and the tokens shows them below until it is wide enough."""
        self._beside_wanted = beside
        self.beside_action.setChecked(beside)
        self._fit_token_layout(announce=False)

    @property
    def tokens_shown_beside(self) -> bool:
        return self.splitter.orientation() == Qt.Orientation.Horizontal

    def _fit_token_layout(self, announce: bool = True) -> None:
        """Tokens beside the plots only where both fit (see BESIDE_MIN_WIDTH); otherwise below them."""
        beside = self._beside_wanted and self._room_for_plots_and_tokens() >= BESIDE_MIN_WIDTH
        if beside == self.tokens_shown_beside:
            return
        self.splitter.setOrientation(Qt.Orientation.Horizontal if beside else Qt.Orientation.Vertical)
        # The plots keep two readable columns whatever the handle's drag (the tokens get no minimum, which
        # would hold the window wider than the switch back needs).
        self.plots.setMinimumWidth(2 * MIN_PLOT_COLUMN_PX if beside else 0)
        self._default_split()
        if announce:
            self._say_why_tokens_are_below()

    def _room_for_plots_and_tokens(self) -> int:
        """The central area's width, less what the controls dock was squeezed by to make it (beside the
        plots the columns' minimum widths take the room from the dock first)."""
        dock, panel, central = self.controls_dock, self.controls_dock.widget(), self.centralWidget()
        squeezed = 0
        if panel is not None and dock.isVisible() and not dock.isFloating():
            squeezed = max(0, panel.sizeHint().width() - dock.width())
        return (central.width() if central is not None else self.width()) - squeezed

    def _say_why_tokens_are_below(self) -> None:
        if self._beside_wanted and not self.tokens_shown_beside:
            self.status.show_message(f"Tokens below the plots: beside them needs {BESIDE_MIN_WIDTH} px for the "
                                     "plots and tokens; they move there when the window is wide enough", 8000)

    def _toggle_tokens_beside(self) -> None:
        self.set_tokens_beside(self.beside_action.isChecked())
        self._default_split()
        self._say_why_tokens_are_below()

    def _toggle_full_screen(self) -> None:
        if self.isFullScreen():
            self.showNormal()
        else:
            self.showFullScreen()
        self.full_screen_action.setChecked(self.isFullScreen())

    def save_settings_soon(self, *_: object) -> None:
        self._save_soon.start()

    def save_settings(self) -> None:
        self._save_soon.stop()
        s = self.settings
        s.set_controls(self.panel.values())
        s.set_adaptive_chosen(self.panel.adaptive_chosen)
        s.set_prompt(self.panel.prompt_edit.toPlainText())
        s.set_run_options(self.panel.max_new.value(), self.panel.seed.value())
        s.set_pair_choice(self.pair_choice)
        s.set_layout(self.saveGeometry(), self.saveState())
        # The sizes belong to the layout shown; while "beside" waits for room they would not fit it.
        shown_as_wished = self._beside_wanted == self.tokens_shown_beside
        s.set_token_layout(self._beside_wanted, self.splitter.sizes() if shown_as_wished else [])
        s.sync()

    # ---- what the controller owns, as the window's tests and scripts read it ---------------------------
    @property
    def state(self) -> RunState:
        return self.controller.state

    @property
    def data(self) -> RunData:
        return self.controller.data

    @property
    def host(self) -> WorkerHost:
        return self.controller.host

    @property
    def recorder(self) -> SessionRecorder | None:
        return self.controller.recorder

    @property
    def replay_path(self) -> str | None:
        return self.controller.replay_path

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            from specscope.core.trace.autosave import default_data_dir

            self._data_dir = default_data_dir()
        return self._data_dir

    @property
    def sessions_dir(self) -> Path:
        return self.data_dir / "sessions"

    # ---- rendering what the controller says -------------------------------------------------------------
    def _on_drill_events(self, events: list[DrillEvent]) -> None:
        for e in events:
            self.drill_control.on_event(e)

    def _render_state(self, state: RunState) -> None:
        c = self.controller
        self.panel.set_state(state, c.can_start)
        for action, on in ((self.start_action, c.can_start), (self.pause_action, state.active),
                           (self.stop_action, state.active), (self.baseline_action, state.active)):
            action.setEnabled(on)
        detail = FINISH_WORDS.get(c.finish_reason, c.finish_reason) if state in (
            RunState.FINISHED, RunState.REPLAY) else ""
        self.run_panel.show_state(state, detail)
        hold_plot_size(self.splitter, state.active)  # live: the run panel's changes skip the plots (app/live_layout.py)
        if state == RunState.REPLAY and not c.has_pair:  # nothing loaded: Start has nothing to run
            self.run_panel.hint.setText("a saved run · Models ▸ Load the embedded demo to decode")
        shown = c.shown
        if shown is not None:  # the run on screen: a replay's, an attached engine's, or the live run's own
            self.run_panel.show_pair(shown.description or shown.target, shown.drafter)
        else:
            drafter = c.pair_drafter or self.pair_choice.drafter
            self.run_panel.show_pair(c.pair_description if c.has_pair else "", drafter)
        self.panel.set_drafter(self.pair_choice.drafter)
        self.drill_control.set_state(state.value)
        self.restart_worker_action.setEnabled(c.on_worker and not state.active and state != RunState.LOADING)
        self.plots.set_idle_text(self._idle_text(state), self.data)
        self._update_title()

    def _idle_text(self, state: RunState) -> str:
        """What the plots say before the run's first iteration: a run under way is not 'press Start'."""
        if state.active:
            shown = self.controller.shown
            prefill = (f"prefill of {shown.prompt_tokens} prompt tokens" if shown is not None
                       and shown.prompt_tokens else "prefill of the prompt")
            return f"{state.value}: waiting for the first iteration ({prefill}…)"
        if state == RunState.LOADING:
            return "no data yet: loading the pair…"
        return IDLE_TEXT

    def _update_title(self) -> None:
        c = self.controller
        shown = c.shown
        if c.replay_path and c.state == RunState.REPLAY:
            what = f"{Path(c.replay_path).name} (replay" + (f" of {shown.description or shown.target})"
                                                             if shown is not None else ")")
        elif c.state == RunState.LOADING:
            what = "loading a pair…"  # not the old pair's name, nor a replay's
        elif shown is not None and shown.source == "attach":
            what = shown.description
        else:
            what = c.pair_description if c.has_pair else "speculative decoding profiler"
        self.setWindowTitle(f"specscope — {what}")

    def _clear_views(self) -> None:
        self._unshown.clear()
        self.token_view.clear_tokens()
        self.legend.set_counts({})
        self.plots.reset()
        self._render_numbers()

    def _show_records(self, records: list[IterationRecord]) -> None:
        self._unshown.extend(records)
        if not self.state.active:
            self._show_tokens()

    def _show_tokens(self) -> None:
        """Append the records not shown yet to the token view (while a run is live, at most every
        ``LIVE_VIEW_PERIOD_S``: each append lays out and repaints the text, the GUI thread's largest cost per
        record, and that thread shares the interpreter lock with the decode)."""
        self._views_shown_at = time.monotonic()
        if self._unshown:
            records, self._unshown = self._unshown, []
            self.token_view.append_records(records)
            self.legend.set_counts(self.token_view.counts)

    def _on_frame(self, time_left: bool) -> None:
        """End of a controller tick. While a run is live: tokens, status and titles every
        ``LIVE_VIEW_PERIOD_S``, one plot in turn when the tick left time for it; otherwise everything now."""
        data = self.data
        if self.state.active:
            if time.monotonic() - self._views_shown_at < LIVE_VIEW_PERIOD_S:
                return
            self._show_tokens()
            if time_left and self.plots.stale(data):
                self.plots.refresh_one(data)
        else:
            self._show_tokens()
            if self.plots.stale(data):
                self.plots.refresh(data)
        self.plots.refresh_titles(data)  # the titles agree with the status bar
        self._render_numbers()

    def _render_numbers(self) -> None:
        data = self.data
        self.status.update(data)
        est = data.estimate
        last = data.records[-1] if data.records else None
        k = est.k if est is not None else None
        if last is not None and last.mode == ATTACHED_MODE and not k:  # the engine did not say its k: what it drafted
            k = max(r.n_drafted for r in data.records[-8:])
        adaptive = bool(est and est.adaptive)
        numbers = "" if est is None else " · ".join(
            [est.alpha_text(), f"speed-up {est.speedup_text()}", *([est.cost.text()] if est.cost else [])])
        self.run_panel.show_k(k, adaptive, est.controller_text().partition(": ")[2] if est is not None else "",
                              numbers)
        # the panel's note reads the controls as they are now: once adaptive is unticked it says nothing
        self.panel.show_k_in_use(k if adaptive and self.panel.values().adaptive_k else None)
        self.run_panel.show_verdict(est.verdict if est is not None else None)
        band = data.flag_bands[-1] if data.flag_bands else None
        self.run_panel.show_warning(band.last_sentence or band.sentence if band else None,
                                    band.end if band else None)

    def redraw_all(self) -> None:
        self._show_tokens()
        self.plots.refresh(self.data)
        self._render_numbers()

    # ---- models ----------------------------------------------------------------------------------------
    def choose_models(self) -> None:
        dialog = ModelPicker(self.pair_choice, self)
        if dialog.exec():
            self.load_pair(dialog.choice())

    def change_drafter(self, kind: str) -> None:
        """The control panel's drafter list: reload the current pair with another drafter kind."""
        if kind == self.pair_choice.drafter and self.controller.has_pair:
            return
        self.load_pair(replace(self.pair_choice, drafter=kind))
        self.panel.set_drafter(self.pair_choice.drafter)  # back to the one in use if the load was refused

    def load_demo(self) -> None:
        self.load_pair(PairChoice())

    def load_pair(self, what: PairChoice | PairFactory) -> None:
        """Load a PairChoice (or a factory ``f(progress) -> ModelPair``) on the worker."""
        if isinstance(what, PairChoice):
            problem = what.problem()
            if problem:
                self.show_error(problem)
                return
            if what.drafter != self.pair_choice.drafter:
                self.panel.set_values(switched_drafter_controls(self.panel.values(), self.pair_choice.drafter,
                                                                what.drafter, self.panel.adaptive_chosen))
            label = what.describe()
        else:
            label = "custom pair"
        if not self.controller.load(what):
            return
        if isinstance(what, PairChoice):
            self.pair_choice = what
            self.status.set_device(what.target_device)
            self.save_settings_soon()  # the pair and drafter, and the controls the switch moved
        # The first step says what the wait is: on a first load, importing the engine is most of it.
        if self.controller.on_worker:
            step = "starting a worker process"
        else:
            step = "starting" if engine_imported() else "importing torch and transformers"
        self.status.show_progress(f"Loading {label}: {step}…", -1.0)

    def _on_loaded(self, description: str) -> None:
        self.status.hide_progress()
        self.status.show_message(f"Ready: {description}", 5000)
        # In this process only on the in-process path; a worker's tokens come with their text (top-5 shows the
        # ids the stream has not spelled out).
        self.token_view.decode = getattr(self.controller.pair, "token_text", None)
        if self.controller.device:
            self.status.set_device(self.controller.device)
        self._update_title()
        self.pair_ready.emit()

    def _on_load_failed(self, message: str) -> None:
        self.status.hide_progress()
        # The last progress line ("Reading <folder>…") is over: say it failed, and where the reason is.
        self.status.show_message("Loading failed: the reason is above the tokens", 15000)
        self.last_error = full_stop(f"Could not load the models: {message}")
        # The way back, in the error itself: the demo always loads. (Models ▸ Choose models… reopens the
        # dialog with what was typed, to correct it.)
        self.banner.show_message(f"{self.last_error} Correct it in Models ▸ Choose models… (Ctrl+M), or:",
                                 "error", "Load the embedded demo", self.load_demo)
        self.pair_failed.emit(message)

    def _on_worker_lost(self, sentence: str) -> None:
        """The worker went away: one sentence, the events received stay, and the way back is in the banner."""
        self.status.hide_progress()
        self.last_error = sentence
        again = "Reconnect" if self.controller.link.kind == "remote" else "Restart the worker"
        self.banner.show_message(sentence, "error", again, self.restart_worker)
        self.status.show_message("The worker is gone: the reason is above the tokens", 15000)

    def restart_worker(self) -> None:
        """Start this app's worker again with the same pair, or reconnect to the remote one; the events the lost
        worker sent stay on screen until the next Start."""
        if self.controller.restart_worker(self.pair_choice):
            self.banner.hide()
            self.last_error = None
            remote = self.controller.link.kind == "remote"
            self.status.show_progress("Reconnecting to the worker…" if remote else
                                      f"Restarting the worker: loading {self.pair_choice.describe()}…", -1.0)

    # ---- running ---------------------------------------------------------------------------------------
    def start_run(self) -> bool:
        if not self.controller.can_start:
            return False
        prompt = self.panel.prompt_text()
        if not prompt:
            self.show_error("The prompt is empty: type one or pick one from the list.")
            return False
        self.panel.flush()
        values = self.panel.values()
        request = RunRequest(prompt=prompt, max_new_tokens=self.panel.max_new.value(),
                             seed=self.panel.seed_value())
        self.banner.hide()
        self.last_error = None
        return self.controller.start(request, values, self._session_meta(request, values))

    def _session_meta(self, request: RunRequest, values: ControlValues) -> dict[str, Any]:
        return {"pair": self.pair_choice.to_dict(), "pair_description": self.controller.pair_description,
                "prompt": request.prompt, "max_new_tokens": request.max_new_tokens, "seed": request.seed,
                "controls": {"k": values.k, "temperature": values.temperature, "top_k": values.top_k,
                             "top_p": values.top_p, "adaptive_k": values.adaptive_k},
                "app": "specscope desktop"}

    def stop_run(self) -> None:
        self.controller.stop()

    def set_paused(self, paused: bool) -> None:
        self.controller.set_paused(paused)

    def request_baseline(self) -> None:
        self.controller.request_baseline()

    def _on_baseline_requested(self, after: int) -> None:
        if self.state == RunState.PAUSED:  # said at once: nothing else moves until the run resumes
            self.status.show_message(f"Baseline requested: the run is paused, so its plain target steps run "
                                     f"when you resume (F6), after iteration {after}; a 'baseline' marker shows "
                                     "where", 0)
            return
        self.status.show_message(f"Baseline requested: plain target steps run after iteration {after}; "
                                 "a 'baseline' marker shows where", 6000)

    def _on_run_ended(self, how: str) -> None:
        self.redraw_all()
        self.run_ended.emit(how)

    def tick(self) -> None:
        self.controller.tick()

    def drain_all(self) -> None:
        self.controller.drain_all()

    def ingest(self, events: list[Event], redraw: bool = True) -> None:
        """Add events as if a run had produced them (benchmarks, tests), then redraw: they go through the
        controller's measurement for events that come without one."""
        self.controller.feed(events)
        if redraw:
            self._on_frame(True)

    def _reset_view(self) -> None:
        self.controller.reset_data()

    # ---- messages --------------------------------------------------------------------------------------
    def show_error(self, text: str) -> None:
        self.last_error = full_stop(text)
        self.banner.show_message(self.last_error, "error")

    def message_box(self, title: str, text: str) -> None:
        """A non-blocking warning box (tests read ``last_message``)."""
        self.last_message = (title, text)
        box = QMessageBox(QMessageBox.Icon.Warning, title, text, QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()

    # ---- replay ----------------------------------------------------------------------------------------
    def _on_shown_run(self, shown: Any, replay: bool) -> None:
        """A replay shows the run it holds: its prompt and the controls it ended with in the editor (a live run's
        are already there), so the panel agrees with the k line and the segment the numbers name."""
        if replay and shown is not None:
            self.panel.set_prompt_text(shown.prompt)
            changes = [e for e in self.data.events if isinstance(e, ControlChange)]
            self.panel.set_values(changes[-1].new if changes else shown.controls)
            if shown.max_new_tokens > 0:  # a trace from before the event log does not say
                self.panel.max_new.setValue(shown.max_new_tokens)
        self._render_state(self.controller.state)

    # ---- closing ---------------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        self.save_settings()
        was_running = self.state.active
        self.controller.shutdown()
        self.panel.stop_timers()
        self.status.stop_timers()
        if was_running:
            log.info("run stopped on close")
        super().closeEvent(event)
