"""The run panel above the plots: the run's state in words, the pair and drafter in use, the k line (the k in
use with the snapshot's α and speed-up, in the words every surface uses), and the two sentences that must be
read in full — the verdict (speculation is losing, and why) and the last paging warning. They wrap instead of
being cut at the status bar's width."""

from __future__ import annotations

import html

from PySide6.QtCore import Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QHBoxLayout, QLabel, QSizePolicy, QVBoxLayout, QWidget

from specscope.app.run_state import RunState
from specscope.app.widgets.elided_label import ElidedLabel, Span
from specscope.app.widgets.steady_label import SteadyLabel

STATE_COLOURS = {
    RunState.NO_MODEL: "#777777", RunState.LOADING: "#0072B2", RunState.READY: "#006B4E",
    RunState.RUNNING: "#006B4E", RunState.PAUSED: "#A36A00", RunState.FINISHED: "#333333",
    RunState.STOPPED: "#333333", RunState.FAILED: "#A34400", RunState.REPLAY: "#5B3A8C",
}

STATE_HINTS = {
    RunState.NO_MODEL: "load a pair: Models ▸ Load the embedded demo",
    RunState.LOADING: "loading the models…",
    RunState.READY: "press Start (F5) to decode the prompt",
    RunState.PAUSED: "Resume (F6) continues at the next iteration",
    RunState.FAILED: "see the message below",
    RunState.REPLAY: "a saved run · Start (F5) runs the loaded pair",
}


NOTE_PADDING_PX = 2  # above and below a verdict's or warning's text
VERDICT_STYLE = f"color:#FFFFFF; background:#A34400; padding:{NOTE_PADDING_PX}px 6px; font-weight:bold"
NOTE_STYLE = f"color:#444444; background:#EEEEEE; padding:{NOTE_PADDING_PX}px 6px"
NO_VERDICT = "No verdict"  # core/measure/verdict.py's words when it cannot say yet


def _wrapping(style: str) -> SteadyLabel:
    label = SteadyLabel("")
    label.setWordWrap(True)
    label.setStyleSheet(style)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # wraps, never widens
    label.hide()
    return label


class RunPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        col = self._column = QVBoxLayout(self)
        col.setContentsMargins(4, 2, 4, 2)
        col.setSpacing(2)
        row = QHBoxLayout()
        row.setSpacing(12)
        self.state = QLabel("")
        self.state.setMinimumWidth(110)
        self.pair = ElidedLabel()  # a long description ends in "…" (full text on hover), the drafter stays
        self.k_in_use = SteadyLabel("")  # changes with every snapshot: re-lays out the window only to grow
        self.k_in_use.setWordWrap(True)
        self.k_in_use.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)  # wraps, never widens
        self.k_in_use.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.k_in_use.hide()
        self.hint = QLabel("")
        self.hint.setStyleSheet("color:#555")
        row.addWidget(self.state)
        row.addWidget(self.pair, 1)
        row.addWidget(self.hint)
        col.addLayout(row)
        col.addWidget(self.k_in_use)  # its own line: the numbers must be read in full
        self.verdict = _wrapping(VERDICT_STYLE)
        self.warning = _wrapping(f"color:#7A3300; background:#FBE3D1; padding:{NOTE_PADDING_PX}px 6px")
        col.addWidget(self.verdict)
        col.addWidget(self.warning)
        col.addStretch(1)  # room held for a note line stays below the lines shown
        self._holding = False  # a run is live: the panel keeps its height (see hold_height)

    def show_state(self, state: RunState, detail: str = "") -> None:
        colour = STATE_COLOURS.get(state, "#333333")
        self.state.setText(f'<span style="color:{colour}; font-weight:bold">● {state.value}</span>'
                           + (f" <span style='color:#555'>({detail})</span>" if detail else ""))
        self.hint.setText(STATE_HINTS.get(state, ""))
        self.hold_height(state.active)

    def hold_height(self, hold: bool) -> None:
        """While a run is live the panel's height only grows: the k line has its room from Start (before the
        first snapshot fills it), so has one note line (the verdict or the warning, whichever comes first; a run
        that has both grows once more), and a line that goes (a verdict, a wrap) leaves its room until the run
        ends. A change of this panel's height moves and resizes everything below it: every plot then repaints
        whole, its axes included (15-25 ms of the GUI thread, twice that beside a busy program: a run's first
        verdict or warning was among the latest moments of issue 40's latency bench). A note line that never
        comes leaves a blank line until the run ends; both held were a grey band above the plots in every run
        without a note, the common one."""
        policy = self.k_in_use.sizePolicy()
        policy.setRetainSizeWhenHidden(hold)
        self.k_in_use.setSizePolicy(policy)
        if hold and not self.k_in_use.text():
            self.k_in_use.setText("&nbsp;")  # one line's room, kept (held) when the first snapshot fills it
        for line in (self.k_in_use, self.verdict, self.warning):
            line.hold(hold)
        self._holding = hold
        if not hold or not self.isVisible():
            self.setMinimumHeight(0)
            return
        layout = self._column
        layout.invalidate()  # the k line's room, just given
        wanted = layout.sizeHint().height()
        if not (self.verdict.isVisible() or self.warning.isVisible()):
            wanted += self.note_line_px()
        self.setMinimumHeight(max(self.height(), wanted))

    def number_lines(self) -> list[QWidget]:
        """The lines a snapshot changes: the k line, the verdict, the warning."""
        return [self.k_in_use, self.verdict, self.warning]

    def note_line_px(self) -> int:
        """The height a one-line verdict or warning adds to the panel (its text, its padding, the spacing)."""
        return self.verdict.fontMetrics().lineSpacing() + 2 * NOTE_PADDING_PX + self._column.spacing()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        if self._holding and event.size().height() > self.minimumHeight():
            self.setMinimumHeight(event.size().height())

    def show_pair(self, description: str, drafter: str) -> None:
        if not description:
            self.pair.setText("no pair loaded")
            return
        self.pair.set_spans([Span("pair: "), Span(description, bold=True, elide=True), Span(" · drafter: "),
                             Span(drafter, bold=True)])

    def show_attached(self, where: str, state: str) -> None:
        """An attached request: the engine runs the pair, this window only reads it."""
        colour = {"running": "#0072B2", "finished": "#009E73", "failed": "#D55E00"}.get(state, "#333333")
        self.state.setText(f'<span style="color:{colour}; font-weight:bold">● attached: {state}</span>')
        self.hint.setText("")
        self.pair.set_spans([Span("engine: "), Span(where, bold=True, elide=True), Span(" · its own drafter and k")])

    def show_k(self, k: int | None, adaptive: bool, why: str = "", numbers: str = "") -> None:
        """The k the last iteration ran with (with adaptive k, the controller's choice, not the slider), why the
        controller differs from best k when it does, and ``numbers``: the snapshot's α and speed-up texts."""
        if k is None and not numbers:
            self.k_in_use.setText("")
            self.k_in_use.setToolTip("")
            self.k_in_use.hide()
            return
        parts = []
        if k is not None:
            parts.append(f"k in use: <b>{k}</b>" + (" (adaptive)" if adaptive else "")
                         + (f" <span style='color:#555'>— {html.escape(why)}</span>" if why else ""))
        if numbers:
            parts.append(html.escape(numbers))
        self.k_in_use.setText(" · ".join(parts))
        self.k_in_use.setToolTip(why)
        self.k_in_use.show()

    def show_verdict(self, verdict: str | None) -> None:
        """The verdict in the alarm colours when speculation is losing; "No verdict…" (not enough quiet data,
        an interval too wide) is a note, in grey: nothing is wrong yet."""
        text = verdict or ""
        style = NOTE_STYLE if text.startswith(NO_VERDICT) else VERDICT_STYLE
        if self.verdict.styleSheet() != style:
            self.verdict.setStyleSheet(style)
        self.verdict.setText(text)
        self.verdict.setVisible(bool(verdict))

    def show_warning(self, sentence: str | None, iteration: int | None = None) -> None:
        text = f"⚠ iteration {iteration}: {sentence}" if sentence and iteration is not None else (sentence or "")
        self.warning.setText(text)
        self.warning.setVisible(bool(sentence))
