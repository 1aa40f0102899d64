"""The plot grid: four per-iteration plots (one shared x range) plus acceptance-by-position and the k advisor."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QGridLayout, QVBoxLayout, QWidget

from specscope.app.run_data import RunData
from specscope.app.widgets.acceptance_bars import AcceptanceBars
from specscope.app.widgets.alpha_plot import AlphaPlot
from specscope.app.widgets.k_advisor import KAdvisorPlot
from specscope.app.widgets.markers import ChangeList
from specscope.app.widgets.memory_plot import MemoryPlot
from specscope.app.widgets.paint_later import paint_after_queued
from specscope.app.widgets.plot_base import LivePlot, SharedXRange, room_for_last_tick
from specscope.app.widgets.speedup_plot import SpeedupPlot
from specscope.app.widgets.timing_plot import TimingPlot


class PlotsPanel(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.timing = TimingPlot()
        self.alpha = AlphaPlot()
        self.memory = MemoryPlot()
        self.speedup = SpeedupPlot()
        self.positions = AcceptanceBars()
        self.k_advisor = KAdvisorPlot()
        self.shared_x = SharedXRange()  # zoom one iteration range, see it everywhere
        for plot in self.live_plots:
            self.shared_x.add(plot)
        room_for_last_tick(self.speedup.plot_item)  # the right-hand column's plot without a right axis
        self.change_list = ChangeList()  # the numbered badges on the plots, spelled out
        col = QVBoxLayout(self)
        col.setContentsMargins(0, 0, 0, 0)
        col.setSpacing(2)
        col.addWidget(self.change_list)
        grid = QGridLayout()
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setSpacing(4)
        col.addLayout(grid, 1)
        grid.addWidget(self.timing, 0, 0)
        grid.addWidget(self.alpha, 0, 1)
        grid.addWidget(self.memory, 1, 0)
        grid.addWidget(self.speedup, 1, 1)
        grid.addWidget(self.positions, 2, 0)
        grid.addWidget(self.k_advisor, 2, 1)
        for row, stretch in enumerate((3, 3, 2)):
            grid.setRowStretch(row, stretch)
        self._turn = 0
        self._titles_set = 0  # titles shown so far: a deferred show (refresh_words) yields to a newer one
        self._advisor_due = False  # the k advisor's turn came: drawn with the next words

    @property
    def live_plots(self) -> list[LivePlot]:
        return [self.timing, self.alpha, self.memory, self.speedup]

    def stale(self, data: RunData) -> bool:
        """True when some plot has not drawn the latest data yet."""
        return self.positions._version != data.version or any(
            p._version != data.version for p in self.live_plots)

    @property
    def live_ranges(self) -> bool:
        """Whether some plot's x axis is still in a live run's coarse steps (a run that ended is fitted closer)."""
        return any(p.follower.live for p in self.live_plots)

    def refresh_one(self, data: RunData) -> None:
        """Redraw the curves of the next plot in turn, not its title (the k advisor counts as one turn: its
        curve, star and title are drawn together by ``refresh_words``, as its title names the best k its star
        marks)."""
        turn = self._turn % 5
        self._turn += 1
        if turn < 4:
            plot = self.live_plots[turn]
            paint_after_queued(plot.viewport())  # the event loop serves what is due before this turn's repaint
            plot.refresh(data, title=False, live=True)
        else:
            self._advisor_due = True

    def refresh_words(self, data: RunData) -> Callable[[], None]:
        """The live period's words, all of one snapshot: the change list, the acceptance bars (a handful of
        rectangles: they show the snapshot the numbers beside them show, not one several turns old), the k
        advisor when its turn came, and every title. On a tick of their own, after the plot's: together, every
        plot whose title moved repainted in the same frame as the plot drawn (docs/bench-gui.md).

        The live plots' titles are returned, to be shown when the caller lets the words be painted (see
        RunViews.on_frame: their repaint waits a pass of the event loop, with the run panel's and the status
        bar's numbers): a title is in its plot's scene, and holding a plot's repaint repaints it whole. They are
        not shown if the titles are refreshed meanwhile (the run ended: they show a newer snapshot)."""
        self.change_list.show_changes(data.markers)
        self.positions.refresh(data)
        if self._advisor_due:
            self._advisor_due = False
            self.k_advisor.show_estimate(data.estimate)
        self._advisor_title(data)
        self._titles_set += 1
        generation = self._titles_set
        headlines = [(plot, plot.headline_for(data)) for plot in self.live_plots]

        def show_titles() -> None:
            if generation == self._titles_set:
                for plot, headline in headlines:
                    plot.show_headline(headline)

        return show_titles

    def word_widgets(self) -> list[QWidget]:
        """What ``refresh_words`` changes besides the live plots' titles (held with the numbers: see above)."""
        return [self.change_list, self.positions.viewport(), self.k_advisor.viewport()]

    def refresh(self, data: RunData) -> None:
        self.change_list.show_changes(data.markers)
        for plot in self.live_plots:
            plot.refresh(data)
        self.positions.refresh(data)
        self.k_advisor.show_estimate(data.estimate)

    def refresh_titles(self, data: RunData) -> None:
        """Every frame: the titles show the latest snapshot's words (the curves redraw at their own turn)."""
        self._titles_set += 1
        for plot in self.live_plots:
            plot.refresh_title(data)
        self._advisor_title(data)

    def _advisor_title(self, data: RunData) -> None:
        est, drawn = data.estimate, self.k_advisor.estimate
        if est is not None and drawn is not None and est.best_k != drawn.best_k:
            self.k_advisor.show_estimate(est)  # the title names the best k: its star must not mark another
        else:
            self.k_advisor.show_title(est)

    def set_live(self, live: bool) -> None:
        """A run is live or can start (or neither): the plots lay out ahead what its first records would
        change."""
        self.memory.expect_rates(live)

    def set_idle_text(self, text: str, data: RunData) -> None:
        """What the live plots say while the run has no iteration yet."""
        for plot in self.live_plots:
            plot.set_idle_text(text, data)

    def reset(self) -> None:
        for plot in self.live_plots:
            plot.reset()
        self.positions.reset()
        self.k_advisor.show_estimate(None)
        self.change_list.show_changes([])
        empty = RunData()
        for plot in self.live_plots:
            plot.refresh(empty)

    def grab_png(self, path: str) -> bool:
        pixmap: QPixmap = self.grab()
        return bool(pixmap.save(path, "PNG"))
