"""Issue 29's decorations, read at 1280x720: numbered control-change badges that are neither cut nor
overlapping, with the full text on hover and in a list; the memory key; acceptance bars from few samples;
tokens beside the plots only when there is room."""

from __future__ import annotations

from dataclasses import replace

import pytest

pytest.importorskip("pytestqt")

from specscope.core.records import ControlValues

from .app_helpers import make_window, qt_binding_broken, synthetic_records

pytestmark = [pytest.mark.gui,
              pytest.mark.skipif(bool(qt_binding_broken()), reason=str(qt_binding_broken()))]


def with_changes(n: int, changes: dict[int, ControlValues]) -> list:
    """Synthetic records whose controls change at the given iterations (and keep the new values)."""
    values = ControlValues(k=4)
    out = []
    for e in synthetic_records(n, k=4):
        if hasattr(e, "tokens"):
            values = changes.get(e.iteration, values)
            e = replace(e, controls=values)
        out.append(e)
    return out


def badge_numbers(text: str) -> range:
    first, _, last = text.partition("–")
    return range(int(first), int(last or first) + 1)


def test_control_changes_are_numbered_badges_that_are_not_cut_and_do_not_overlap(qtbot, tmp_path):
    w = make_window(qtbot, tmp_path)
    w.resize(1280, 720)
    # Three changes on adjacent iterations (a drag of the k slider), then a temperature change.
    w.ingest(with_changes(150, {40: ControlValues(k=5), 41: ControlValues(k=6), 42: ControlValues(k=7),
                                100: ControlValues(k=7, temperature=0.8)}))
    qtbot.wait(50)
    changes = w.data.control_changes
    assert len(changes) == 4
    for plot in w.plots.live_plots:
        badges = [m.label for m in plot.markers if m.label.isVisible()]
        view = plot.plot_item.vb.sceneBoundingRect()
        rects = [b.sceneBoundingRect() for b in badges]
        for r in rects:
            assert view.contains(r), f"{type(plot).__name__}: a badge is cut by the plot's edge"
        for i, a in enumerate(rects):
            for b in rects[i + 1:]:
                assert not a.intersects(b), f"{type(plot).__name__}: badges overlap"
        # Every change is on some badge, by number ("2" or "1–3"), and its full text is on that badge's hover.
        for number, change in enumerate(changes, start=1):
            badge = next(b for b in badges if number in badge_numbers(b.toPlainText()))
            assert f"{number} · iteration {change.iteration}: {change.label}" in badge.toolTip()
        assert plot.markers[3].label.toPlainText() == "4"  # far from the others: a badge of its own
    listed = w.plots.change_list
    assert listed.isVisible()
    for i, c in enumerate(changes, start=1):
        assert f"{i} · iteration {c.iteration}: {c.label}" in listed.full_text
        assert f"{i} · iteration {c.iteration}: {c.label}" in listed.toolTip()
    w.plots.reset()
    assert not listed.isVisible() and not w.plots.timing.markers
