"""The window's views of the run, brought up to date with what its controller announces: the state (buttons,
Run actions, the run panel, the plots' idle text, the title), the numbers (status bar, run panel, the k note)
and the tokens and plots, at the live pace while a run decodes and at once otherwise.

Every number shown is read from the run's snapshot (``RunData.estimate``); nothing is computed here.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from specscope.app.live_layout import hold_plot_size
from specscope.app.run_state import RunState
from specscope.app.sentences import FINISH_WORDS
from specscope.app.widgets.paint_later import after_queued, hold_repaints
from specscope.app.widgets.plot_base import IDLE_TEXT
from specscope.core.records import ATTACHED_MODE, DrillEvent, IterationRecord

if TYPE_CHECKING:
    from PySide6.QtWidgets import QSplitter

    from specscope.app.run_controller import RunController
    from specscope.app.widgets.control_panel import ControlPanel
    from specscope.app.widgets.drill_control import DrillControl
    from specscope.app.widgets.legend import TokenLegend
    from specscope.app.widgets.plots_panel import PlotsPanel
    from specscope.app.widgets.run_panel import RunPanel
    from specscope.app.widgets.status_panel import StatusPanel
    from specscope.app.widgets.token_view import TokenView
    from specscope.app.window_menus import WindowMenus

__all__ = ["LIVE_VIEW_PERIOD_S", "NO_PAIR_TEXT", "RunViews"]

NO_PAIR_TEXT = "no data yet: load a pair (Models ▸ Load the embedded demo), or open a trace (File ▸ Open trace…)"

# While a run is live, the token view, status and plot titles are brought up to date at most this often (10 Hz):
# on the tiny pair at every 33 ms tick they took 5 of the app's 10 ms of CPU per iteration, and the GUI thread
# shares the interpreter lock with the decode (docs/bench-overhead.md; bench_app_rate.py is in commit a985f13).
LIVE_VIEW_PERIOD_S = 0.1


class RunViews:
    """Renders one window's run; the window connects its controller's signals here. It is handed the controller
    it reads, the widgets it renders into, the menus whose Run actions it enables, the splitter it holds still
    while a run is live, the drafter chosen in the window (``chosen_drafter()``) and how to title the window."""

    def __init__(self, controller: RunController, *, panel: ControlPanel, run_panel: RunPanel,
                 drill_control: DrillControl, plots: PlotsPanel, token_view: TokenView, legend: TokenLegend,
                 status: StatusPanel, menus: WindowMenus, splitter: QSplitter, chosen_drafter: Callable[[], str],
                 set_title: Callable[[str], None]) -> None:
        self._controller = controller
        self._panel = panel
        self._run_panel = run_panel
        self._drill_control = drill_control
        self._plots = plots
        self._token_view = token_view
        self._legend = legend
        self._status = status
        self._menus = menus
        self._splitter = splitter
        self._chosen_drafter = chosen_drafter
        self._set_title = set_title
        self._unshown: list[IterationRecord] = []  # ingested, not in the token view yet (see show_tokens)
        self._shown_at = -1e9
        self._plot_due = False  # the period's plot, drawn on the tick after its text
        self._words_due = False  # the period's titles, numbers and bars, drawn on the tick after its plot

    # ---- the state -------------------------------------------------------------------------------------
    def render_state(self, state: RunState) -> None:
        c = self._controller
        chosen = self._chosen_drafter()
        self._panel.set_state(state, c.can_start)
        menus = self._menus
        for action, on in ((menus.start_action, c.can_start), (menus.pause_action, state.active),
                           (menus.stop_action, state.active), (menus.baseline_action, state.active)):
            action.setEnabled(on)
        detail = FINISH_WORDS.get(c.finish_reason, c.finish_reason) if state in (
            RunState.FINISHED, RunState.REPLAY) else ""
        self._run_panel.show_state(state, detail)
        self._status.hold(state.active)
        # live: the run panel's changes go to the token view, not the plots (app/live_layout.py)
        hold_plot_size(self._splitter, state.active)
        shown = c.shown
        if state == RunState.REPLAY and not c.has_pair:  # nothing loaded: Start has nothing to run
            self._run_panel.hint.setText("a saved run · Models ▸ Load the embedded demo to decode")
        elif state == RunState.REPLAY and shown is not None and c.pair_drafter_shown(chosen) != (
                shown.drafter):  # the drafter box is what Start runs, not the trace's
            self._run_panel.hint.setText(f"a saved run · Start (F5) runs the loaded pair with "
                                         f"{c.pair_drafter_shown(chosen)}, not {shown.drafter}")
        if shown is not None:  # the run on screen: a replay's, an attached engine's, or the live run's own
            self._run_panel.show_pair(shown.description or shown.target, shown.drafter)
        else:
            drafter = c.pair_drafter or chosen
            self._run_panel.show_pair(c.pair_description if c.has_pair else "", drafter)
        self._panel.set_drafter(c.pair_drafter_shown(chosen))
        self._drill_control.set_state(state.value)
        menus.restart_worker_action.setEnabled(c.on_worker and not state.active and state != RunState.LOADING)
        self._plots.set_live(state.active or state == RunState.READY)
        self._plots.set_idle_text(self.idle_text(state), c.data)
        self.update_title()

    def idle_text(self, state: RunState) -> str:
        """What the plots say before the run's first iteration: a run under way is not 'press Start'."""
        if state.active:
            shown = self._controller.shown
            prefill = (f"prefill of {shown.prompt_tokens} prompt tokens" if shown is not None
                       and shown.prompt_tokens else "prefill of the prompt")
            return f"{state.value}: waiting for the first iteration ({prefill}…)"
        if state == RunState.LOADING:
            return "no data yet: loading the pair…"
        if not self._controller.has_pair:  # Start is grey: do not send the user to it
            return NO_PAIR_TEXT
        return IDLE_TEXT

    def update_title(self) -> None:
        c = self._controller
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
        self._set_title(f"specscope — {what}")

    def show_drills(self, events: list[DrillEvent]) -> None:
        """A paging drill started or ended: the drill control says so."""
        for e in events:
            self._drill_control.on_event(e)

    # ---- tokens, plots and numbers ---------------------------------------------------------------------
    def clear(self) -> None:
        self._unshown.clear()
        self._drill_control.clear()
        self._token_view.clear_tokens()
        self._legend.set_counts({})
        self._plots.reset()
        self.render_numbers()

    def add_records(self, records: list[IterationRecord]) -> None:
        self._unshown.extend(records)
        if not self._controller.state.active:
            self.show_tokens()

    def show_tokens(self) -> None:
        """Append the records not shown yet to the token view (while a run is live, at most every
        ``LIVE_VIEW_PERIOD_S``: each append lays out and repaints the text, the GUI thread's largest cost per
        record, and that thread shares the interpreter lock with the decode)."""
        self._shown_at = time.monotonic()
        if self._unshown:
            records, self._unshown = self._unshown, []
            self._token_view.append_records(records)
            self._legend.set_counts(self._token_view.counts)

    def on_frame(self, time_left: bool) -> None:
        """End of a controller tick. While a run is live: the tokens every ``LIVE_VIEW_PERIOD_S``, on the next
        tick one plot in turn (when that tick left time for it), and on the one after the status, titles and
        bars; otherwise everything now."""
        c, plots = self._controller, self._plots
        data = c.data
        if c.state.active:
            # The text and the plot of one period go on two ticks, not one: together they were the GUI
            # thread's longest stretch while a fast pair decodes (docs/bench-gui.md).
            # The period's words go on a third tick: titles, numbers and bars, all of the latest snapshot, so
            # no frame has the k advisor's α at one iteration and the status bar's at the one before. Drawn
            # with the plot (as before), every plot whose title moved repainted in the plot's frame, the
            # longest stretch beside a CPU hog (issue 40's latency); drawn on the text tick too, twice a period.
            if self._plot_due:
                self._plot_due = False
                if time_left and plots.stale(data):
                    plots.refresh_one(data)
                self._words_due = True
                return
            if self._words_due:
                self._words_due = False
                # All of them painted together a pass of the event loop later, the titles set then: timers and
                # input due meanwhile wait for the words or their repaint, not both (issue 40's latency)
                release = hold_repaints([*plots.word_widgets(), *self._run_panel.number_lines(),
                                         *self._status.number_labels(), self._panel.k_in_use])
                show_titles = plots.refresh_words(data)
                self.render_numbers()

                def paint_words() -> None:
                    try:
                        show_titles()
                    finally:
                        release()  # never left held: a held label would not be painted again

                after_queued(self._run_panel, paint_words)
                return
            if time.monotonic() - self._shown_at < LIVE_VIEW_PERIOD_S:
                return
            self.show_tokens()
            self._plot_due = True
            return
        else:
            self._plot_due = self._words_due = False
            self.show_tokens()
            if plots.stale(data) or plots.live_ranges:
                plots.refresh(data)
        plots.refresh_titles(data)  # the titles agree with the status bar
        self.render_numbers()

    def render_numbers(self) -> None:
        data = self._controller.data
        self._status.update(data)
        est = data.estimate
        last = data.records[-1] if data.records else None
        k = est.k if est is not None else None
        if last is not None and last.mode == ATTACHED_MODE and not k:  # the engine did not say its k: what it drafted
            k = max(r.n_drafted for r in data.records[-8:])
        adaptive = bool(est and est.adaptive)
        numbers = "" if est is None else " · ".join(
            [est.alpha_text(), f"speed-up {est.speedup_text()}", *([est.cost.text()] if est.cost else [])])
        self._run_panel.show_k(k, adaptive, est.k_note_text() if est is not None else "", numbers)
        # the panel's note reads the controls as they are now: once adaptive is unticked it says nothing
        self._panel.show_k_in_use(k if adaptive and self._panel.values().adaptive_k else None)
        self._run_panel.show_verdict(est.verdict if est is not None else None)
        band = data.latest_warning()
        self._run_panel.show_warning(band.last_sentence or band.sentence if band else None,
                                     band.end if band else None)

    def redraw_all(self) -> None:
        self.show_tokens()
        self._plots.refresh(self._controller.data)
        self.render_numbers()
