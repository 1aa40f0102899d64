"""The main window: controls on the left, plots and the token stream in a splitter, a run panel on top.

The window builds its widgets and forwards the user's intents to the :class:`RunController`, which owns the
run (state, worker, records, autosave, throttles). Its parts have one job each: :class:`Arrangement` places the
areas (tokens beside or below the plots, full screen), :class:`WindowMenus` builds the menu bar,
:class:`RunViews` renders what the controller announces, :class:`SettingsKeeper` restores and saves the
settings, :class:`TraceFiles` exports, opens and recovers traces. Engine modules are imported lazily in
handlers, never at module level.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QCloseEvent
from PySide6.QtWidgets import QDockWidget, QMainWindow, QMessageBox, QVBoxLayout, QWidget

from specscope.app.arrangement import Arrangement
from specscope.app.attach_dialog import add_attach_action
from specscope.app.connect_dialog import add_connect_action
from specscope.app.pair_choice import PairChoice
from specscope.app.run_controller import RunController
from specscope.app.run_data import RunData
from specscope.app.run_state import RunState
from specscope.app.run_views import RunViews
from specscope.app.sentences import full_stop
from specscope.app.settings import AppSettings
from specscope.app.settings_keeper import SettingsKeeper
from specscope.app.trace_files import TraceFiles
from specscope.app.widgets.banner import Banner
from specscope.app.widgets.control_panel import ControlPanel, ControlsScroll
from specscope.app.widgets.drill_control import DrillControl
from specscope.app.widgets.legend import TokenLegend
from specscope.app.widgets.model_picker import ModelPicker
from specscope.app.widgets.plots_panel import PlotsPanel
from specscope.app.widgets.run_panel import RunPanel
from specscope.app.widgets.status_panel import StatusPanel
from specscope.app.widgets.token_view import TokenView
from specscope.app.window_menus import MenuIntents, WindowMenus
from specscope.app.worker import Event, PairFactory, RunRequest, WorkerHost
from specscope.core.controls import switched_drafter_controls
from specscope.core.drafter_catalogue import DRAFTER_KINDS, IN_PLACE_DRAFTERS
from specscope.core.events import ControlChange
from specscope.core.records import ControlValues

if TYPE_CHECKING:
    from specscope.core.trace.autosave import SessionRecorder

log = logging.getLogger(__name__)

__all__ = ["MainWindow"]


def engine_imported() -> bool:
    """torch and transformers are loaded in this process (the worker imports them on the first load)."""
    return "torch" in sys.modules and "transformers" in sys.modules


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
        self.controller = RunController(lambda: self.sessions_dir, self.settings.keep_sessions, self)

        self.panel = ControlPanel()
        self.drill_control = DrillControl(lambda: self.controller.controls)  # in the Run panel, above the stretch
        panel_layout = self.panel.layout()
        if isinstance(panel_layout, QVBoxLayout):
            panel_layout.insertWidget(panel_layout.count() - 1, self.drill_control)
        dock = QDockWidget("Controls", self)
        dock.setObjectName("controls_dock")
        dock.setWidget(ControlsScroll(self.panel))
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
        self.run_panel = RunPanel()
        self.status = StatusPanel(self.statusBar())
        self.arrangement = Arrangement(self, self.run_panel, self.plots, bottom, dock, self.status.show_message)
        self.splitter = self.arrangement.splitter  # plots | tokens
        # The parts are handed what they drive (the controller, their widgets, the window's intents), never
        # the window itself: none of them imports this module.
        self.files = TraceFiles(self, self.controller, self.settings, status=self.status, banner=self.banner,
                                plots=self.plots, token_view=self.token_view, say=self.message_box,
                                panel_meta=self.panel_session_meta, replay_shown=self._on_replay_shown,
                                opened=self.trace_opened.emit, sessions_dir=lambda: self.sessions_dir)
        intents = MenuIntents(choose_models=self.choose_models, load_demo=self.load_demo,
                              restart_worker=self.restart_worker, start_run=self.start_run,
                              pause_or_resume=self.panel.pause_button.click, stop_run=self.stop_run,
                              request_baseline=self.request_baseline, quit=self.close,
                              attach=lambda menu: add_attach_action(self, menu),
                              connect=lambda menu: add_connect_action(self, menu))
        self.menus = WindowMenus(self, intents, self.files, [dock.toggleViewAction(),
                                                             self.arrangement.beside_action,
                                                             self.arrangement.full_screen_action])
        self.views = RunViews(self.controller, panel=self.panel, run_panel=self.run_panel,
                              drill_control=self.drill_control, plots=self.plots, token_view=self.token_view,
                              legend=self.legend, status=self.status, menus=self.menus,
                              splitter=self.arrangement.splitter, chosen_drafter=lambda: self.pair_choice.drafter,
                              set_title=self.setWindowTitle)
        self.settings_keeper = SettingsKeeper(self, self.settings, self.panel, self.arrangement,
                                              lambda: self.pair_choice)
        self._connect()
        self.settings_keeper.restore()
        self.views.render_state(self.controller.state)
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
        c.state_changed.connect(self.views.render_state)
        c.drill_changed.connect(self.views.show_drills)
        c.progress.connect(self.status.show_progress)
        c.pair_loaded.connect(self._on_loaded)
        c.load_failed.connect(self._on_load_failed)
        c.run_ended.connect(self._on_run_ended)
        c.message.connect(self.status.show_message)
        c.error.connect(self.show_error)
        c.data_reset.connect(self.views.clear)
        c.records_added.connect(self.views.add_records)
        c.frame.connect(self.views.on_frame)
        c.baseline_requested.connect(self._on_baseline_requested)
        c.drained.connect(self.drained)
        c.shown_run.connect(self._on_shown_run)
        c.worker_lost.connect(self._on_worker_lost)
        c.connect_failed.connect(self._on_connect_failed)

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
    def interrupted_folder(self) -> Path | None:
        """The interrupted run the banner offers to open, if any."""
        return self.files.interrupted_folder

    @property
    def data_dir(self) -> Path:
        if self._data_dir is None:
            from specscope.core.trace.autosave import default_data_dir

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

    def change_drafter(self, kind: str) -> None:
        """The control panel's drafter list: reload the current pair with another drafter kind. A remote
        worker's pair is its own (decoding must not move from the GPU server to this machine unasked), and a
        run on screen is not wiped without the user's word."""
        c = self.controller
        in_use = c.pair_drafter_shown(self.pair_choice.drafter)
        if kind == in_use and c.has_pair:
            return
        self.panel.set_drafter(in_use)  # the box shows what runs until the switch happens
        refusal = c.source.drafter_switch_refusal(kind, in_use)
        if refusal and c.has_pair:
            self.show_error(refusal)
            return
        if c.data.records and not c.state.active:
            how = ("keeps the target loaded and clears the run on screen" if kind in IN_PLACE_DRAFTERS
                   and c.link.ready else "loads the pair again and clears the run on screen")
            self.banner.show_message(f"Switching to {kind} {how} (File ▸ Export trace… keeps it).", "info",
                                     f"Switch to {kind}", lambda: self.switch_drafter(kind))
            return
        self.switch_drafter(kind)

    def switch_drafter(self, kind: str) -> None:
        """The current pair with drafter ``kind`` (the user has agreed to lose what is on screen): swapped into
        the worker's pair where it needs no weights of its own (the target stays loaded; on a remote worker,
        that worker's), else the pair loaded again."""
        in_use = self.controller.pair_drafter_shown(self.pair_choice.drafter)
        if self.controller.swap_drafter(kind):  # the choice follows when the worker says it swapped (_on_loaded)
            self.panel.set_values(switched_drafter_controls(self.panel.values(), in_use, kind,
                                                            self.panel.adaptive_chosen))
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
            self.settings_keeper.save_soon()  # the pair and drafter, and the controls the switch moved
        # The first step says what the wait is: on a first load, importing the engine is most of it.
        if self.controller.on_worker:
            step = "starting a worker process"
        else:
            step = "starting" if engine_imported() else "importing torch and transformers"
        self.status.show_progress(f"Loading {label}: {step}…", -1.0)

    def _on_loaded(self, description: str) -> None:
        self.status.hide_progress()
        self.status.show_message(f"Ready: {description}", 5000)
        # In this process only on the in-process path; a worker's tokens come with their texts, the top 5's too.
        self.token_view.decode = getattr(self.controller.pair, "token_text", None)
        swapped = self.controller.source.own_drafter_in_use()
        if swapped in DRAFTER_KINDS and swapped != self.pair_choice.drafter:  # swapped into this app's worker
            self.pair_choice = replace(self.pair_choice, drafter=swapped)
            self.settings_keeper.save_soon()
        self.panel.set_drafter(self.controller.pair_drafter_shown(self.pair_choice.drafter))
        if self.controller.device:
            self.status.set_device(self.controller.device)
        self.views.update_title()
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

    def _on_connect_failed(self, sentence: str) -> None:
        """A worker tried did not come up: the busy bar and "Connecting to the worker…" end; the sentence is in
        the banner (the controller's error), and the worker and run in use, if any, are still there."""
        self.status.hide_progress()
        self.status.show_message("Not connected: the reason is above the tokens", 15000)

    def _on_worker_lost(self, sentence: str) -> None:
        """The worker went away: one sentence, the events received stay, and the way back is in the banner."""
        self.status.hide_progress()
        self.last_error = sentence
        self.banner.show_message(sentence, "error", self.controller.source.restart_label, self.restart_worker)
        self.status.show_message("The worker is gone: the reason is above the tokens", 15000)

    def restart_worker(self) -> None:
        """Start this app's worker again with the same pair, or reconnect to the remote one; the events the lost
        worker sent stay on screen until the next Start."""
        progress = self.controller.restart_worker(self.pair_choice)
        if progress is not None:
            self.banner.hide()
            self.last_error = None
            self.status.show_progress(progress, -1.0)

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
        started = self.controller.start(request, values, self.session_meta(request, values))
        if started:
            self.status.show_message("")  # "Ready: <pair>" no longer says what the window is doing
        return started

    def panel_session_meta(self) -> dict[str, Any]:
        """The session meta of what the panel holds now (the prompt, the run options, the controls)."""
        request = RunRequest(prompt=self.panel.prompt_text(), max_new_tokens=self.panel.max_new.value(),
                             seed=self.panel.seed_value())
        return self.session_meta(request, self.panel.values())

    def session_meta(self, request: RunRequest, values: ControlValues) -> dict[str, Any]:
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
        self.views.redraw_all()
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
            self.views.on_frame(True)

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
    def _on_replay_shown(self) -> None:
        """A trace was opened: everything is drawn now, not at the live pace."""
        self.views.redraw_all()
        self.views.render_state(self.controller.state)

    def _on_shown_run(self, shown: Any, replay: bool) -> None:
        """A replay shows the run it holds: its prompt and the controls it ended with in the editor (a live run's
        are already there), so the panel agrees with the k line and the segment the numbers name."""
        if replay and shown is not None:
            self.panel.set_prompt_text(shown.prompt)
            changes = [e for e in self.data.events if isinstance(e, ControlChange)]
            self.panel.set_values(changes[-1].new if changes else shown.controls)
            if shown.max_new_tokens > 0:  # a trace from before the event log does not say
                self.panel.max_new.setValue(shown.max_new_tokens)
        self.views.render_state(self.controller.state)

    # ---- closing ---------------------------------------------------------------------------------------
    def closeEvent(self, event: QCloseEvent) -> None:
        self.settings_keeper.save()
        was_running = self.state.active
        self.controller.shutdown()
        self.panel.stop_timers()
        self.status.stop_timers()
        if was_running:
            log.info("run stopped on close")
        super().closeEvent(event)
