"""Issue 40's last cosmetics, as seen at 1280x720 and 1600x1000: the window's first size and a restored one on
another screen, the token view's share, the k advisor's axis, the sample sizes under the acceptance bars, and
the "no data yet" notes beside the axes' labels."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from specscope.app.widgets.plot_base import step_up

from .app_helpers import make_window, qt_binding_broken, synthetic_records, synthetic_stream

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]


def test_a_first_start_fills_most_of_the_screen(qtbot, tmp_path):
    from PySide6.QtCore import QSize

    from specscope.app.arrangement import first_size_for

    assert first_size_for(QSize(1600, 1000)) == QSize(1472, 920)  # 92%
    assert first_size_for(QSize(3840, 2160)) == QSize(2400, 1500)  # not a whole 4K screen
    small = first_size_for(QSize(1280, 720))  # all of a small screen but the window manager's frame
    assert 1260 <= small.width() < 1280 and 680 <= small.height() < 720
    w = make_window(qtbot, tmp_path)
    room = w.screen().availableGeometry()
    assert w.size() == first_size_for(room.size()) and room.contains(w.geometry())


def test_a_geometry_restored_on_its_own_screen_is_kept_and_clamped_to_it(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    room = w.screen().availableGeometry()
    least = w.minimumSizeHint()
    chosen = ((least.width() + room.width()) // 2, (least.height() + room.height()) // 2)
    w.resize(*chosen)  # a size the user chose, smaller than the first one
    w.close()
    again = make_window(qtbot, tmp_path)
    assert (again.width(), again.height()) == chosen
    again.resize(room.width() + 500, room.height() + 400)  # larger than the screen (a hand edit, a bigger one)
    again.close()
    third = make_window(qtbot, tmp_path)
    assert third.width() < room.width() and third.height() < room.height()
    assert room.contains(third.geometry())


def test_a_geometry_saved_on_a_screen_of_another_size_opens_as_a_first_start(qtbot, tmp_path):
    from specscope.app.arrangement import first_size_for

    w = make_window(qtbot, tmp_path)
    room = w.screen().availableGeometry()
    least = w.minimumSizeHint()
    w.resize((least.width() + room.width()) // 2, (least.height() + room.height()) // 2)
    w.close()
    assert w.settings.screen_room() == [room.width(), room.height()]
    w.settings.put("window/screen", [room.width() + 320, room.height() + 280])  # saved on a 1600x1000 screen
    w.settings.sync()
    again = make_window(qtbot, tmp_path)
    assert again.size() == first_size_for(room.size())


def test_fitted_shrinks_and_moves_a_window_onto_the_room():
    from PySide6.QtCore import QRect

    from specscope.app.arrangement import fitted

    room = QRect(0, 0, 1280, 720)
    big = fitted(QRect(300, 200, 1400, 900), room)
    assert big.width() < 1280 and big.height() < 720 and room.contains(big)
    off = fitted(QRect(1100, 650, 600, 400), room)
    assert off.size() == QRect(0, 0, 600, 400).size() and room.contains(off)
    inside = QRect(40, 30, 800, 500)
    assert fitted(inside, room) == inside


def test_only_a_dragged_split_is_kept_and_the_tokens_keep_six_lines(qtbot, tmp_path):
    from PySide6.QtGui import QFontMetrics

    from specscope.app.widgets.token_view import MIN_LINES

    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    qtbot.waitUntil(lambda: w.token_view.height() > 0)
    line = QFontMetrics(w.token_view.document().defaultFont()).lineSpacing()
    w.splitter.setSizes([2000, 10])  # the layout's own change (a run's lines above the plots), not a drag
    qtbot.wait(20)
    assert w.token_view.height() >= MIN_LINES * line  # never squeezed to a few lines
    w.settings_keeper.save()
    assert w.settings.token_layout() == (False, [])  # not the user's: the next start splits by default
    total = sum(w.splitter.sizes())
    w.splitter.moveSplitter(total // 2, 1)  # the user drags the handle: that split is theirs
    qtbot.wait(20)
    dragged = w.splitter.sizes()
    w.close()
    assert w.settings.token_layout() == (False, dragged)
    again = make_window(qtbot, tmp_path)
    again.resize(1280, 720)
    qtbot.waitUntil(lambda: again.splitter.sizes() == dragged)


def test_the_k_advisors_axis_spans_the_k_in_use_and_the_best_k_without_jumping(qtbot, tmp_path):
    from specscope.app.widgets.k_advisor import K_SHOWN_MIN, next_k_span

    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_stream(synthetic_records(60, k=3, baseline_every=10)))
    advisor = w.plots.k_advisor
    est = advisor.estimate
    assert est is not None and est.k == 3
    shown = advisor.getPlotItem().vb.viewRange()[0][1]
    assert shown == pytest.approx(max(K_SHOWN_MIN, 3 + 2, (est.best_k or 0) + 2) + 0.3)  # not a fixed 0..8
    assert next_k_span(5, replace(est, best_k=6), 3) == 8  # a best k further out widens it at once
    assert next_k_span(8, replace(est, best_k=2), 3) == 8  # and a best k back near k does not narrow it...
    assert next_k_span(8, replace(est, k=2, best_k=2), 3) == K_SHOWN_MIN  # ...until the k in use changes
    assert next_k_span(8, None, 3) == K_SHOWN_MIN  # or the run is cleared


def test_the_sample_sizes_under_the_bars_stay_as_the_counts_grow(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    records = synthetic_stream(synthetic_records(130, k=8, baseline_every=40, accept=lambda i: i % 9))
    shown = []
    for start in range(0, len(records), 5):
        w.ingest(records[start:start + 5])
        ticks = w.plots.positions._ticks
        if ticks and ticks[0]:
            shown.append(all("n=" in text for _, text in ticks[0]))
    first = shown.index(True)
    assert all(shown[first:]), "the n= labels came and went"  # they read n=97, then vanished at n=100
    assert any("n=1" in text and len(text) >= 7 for _, text in w.plots.positions._ticks[0])  # three digits


def test_no_data_notes_sit_between_the_axes(qtbot, tmp_path):
    from specscope.app.widgets.plot_base import data_area

    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    qtbot.wait(50)
    plots = w.plots
    for plot, note in ((p, p.empty) for p in plots.live_plots):
        if plot.width() < 300:
            continue
        note.place()
        axis_right = left_axis_right(plot)
        assert note.isVisible() and note.x() > axis_right, type(plot).__name__  # the tick labels show
        assert data_area(plot).contains(note.geometry().center())
    advisor = plots.k_advisor
    advisor.note.place()
    assert advisor.note.x() > left_axis_right(advisor)


def left_axis_right(plot) -> int:
    """The right edge of a plot's left axis (its tick labels), in the plot widget's coordinates: the axis' own
    geometry, not its bounding rect (which spans the grid lines across the view)."""
    item = plot.getPlotItem()
    return int(plot.mapFromScene(item.mapRectToScene(item.getAxis("left").geometry())).boundingRect().right())


def test_k_in_use_is_written_away_from_the_curve(qtbot, tmp_path):
    from specscope.app.widgets.k_advisor import label_at_top
    from specscope.core.measure.snapshot import CurvePoint

    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_stream(synthetic_records(60, k=3, baseline_every=10)))
    advisor = w.plots.k_advisor
    est = advisor.estimate
    assert est is not None
    rising = replace(est, k=3, curve=tuple(CurvePoint(k, 1.0 + 0.5 * k) for k in range(5)))
    falling = replace(est, k=3, curve=tuple(CurvePoint(k, 2.0 - 0.3 * k) for k in range(5)))
    assert not label_at_top(rising) and label_at_top(falling)  # the curve is high at k = 3: the label goes low
    advisor.show_estimate(rising)
    assert advisor.current.label.orthoPos < 0.5
    advisor.show_estimate(falling)
    assert advisor.current.label.orthoPos > 0.5


def test_the_k_advisors_y_axis_grows_at_once_and_shrinks_only_when_half_empty():
    from specscope.app.widgets.k_advisor import held_y_top

    assert held_y_top(None, 0.6) == step_up(1.0)  # the 1.0 line (plain decoding) is always in view
    assert held_y_top(None, 1.9) == 2.0
    assert held_y_top(2.0, 1.5) == 2.0  # a lower curve keeps the axis
    assert held_y_top(2.0, 2.1) == 2.5  # a higher one grows it at once
    assert held_y_top(4.0, 1.4) == 1.5  # under half of it: it comes down


def test_the_k_advisors_y_axis_holds_between_turns_and_respects_a_zoom(qtbot, tmp_path):
    """pyqtgraph's auto-range followed every new curve: the left axis re-rendered its picture at each of the
    advisor's turns (issue 40). Now a curve that fits keeps the range; one that outgrows it is still in view."""
    from specscope.core.measure.snapshot import CurvePoint

    w = make_window(qtbot, tmp_path)
    w.ingest(synthetic_stream(synthetic_records(60, k=3, baseline_every=10)))
    advisor = w.plots.k_advisor
    vb = advisor.getPlotItem().vb
    est = advisor.estimate
    assert est is not None

    def curve(top: float):
        return replace(est, k=3, best_k=2, best_speedup=top,
                       curve=tuple(CurvePoint(k, top - 0.1 * abs(k - 2)) for k in range(6)))

    advisor.show_estimate(curve(1.8))
    held = vb.viewRange()[1]
    assert held[0] <= 0 and 1.8 < held[1] <= 2.5
    for top in (1.7, 1.75, 1.6):
        advisor.show_estimate(curve(top))
        assert vb.viewRange()[1] == pytest.approx(held)  # the axis picture stays cached
    advisor.show_estimate(curve(3.1))
    assert vb.viewRange()[1][1] >= 3.1  # the star stays in view

    vb.setYRange(0.5, 1.0, padding=0)  # the user's zoom
    vb.sigRangeChangedManually.emit([False, True])
    advisor.show_estimate(curve(5.0))
    assert vb.viewRange()[1] == pytest.approx([0.5, 1.0])
    advisor.getPlotItem().autoBtnClicked()  # 'A': the held range again, at the next curve
    advisor.show_estimate(curve(4.9))
    assert vb.viewRange()[1][0] <= 0 and vb.viewRange()[1][1] >= 4.9
