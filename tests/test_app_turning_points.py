"""The memory plot draws each counter from the points where it turns (app/widgets/turning_points.py): the same
line as through every record's value, with far fewer points when counters hold still between samples."""

from __future__ import annotations

import os
from dataclasses import replace

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import numpy as np
import pytest

from specscope.app.run_data import GrowingArray
from specscope.app.widgets.turning_points import TurningPoints, turning_mask


def column(values: np.ndarray) -> GrowingArray:
    out = GrowingArray(4)
    for v in values:
        out.append(float(v))
    return out


def stepwise(rng: np.random.Generator, n: int) -> np.ndarray:
    """Values held for runs of 1-40 points, with a few NaN gaps (a counter that appears late or drops out)."""
    out = np.empty(n)
    i = 0
    while i < n:
        run = int(rng.integers(1, 40))
        out[i:i + run] = np.nan if rng.random() < 0.1 else float(rng.integers(0, 5))
        i += run
    return out


def assert_same_line(kx: np.ndarray, ky: np.ndarray, x: np.ndarray, y: np.ndarray) -> None:
    """The kept points lie on the series, and the line through them passes every finite value of it."""
    at = np.searchsorted(x, kx)
    assert np.array_equal(x[at], kx)
    np.testing.assert_array_equal(y[at], ky)  # NaN where the series is NaN
    finite_kept = np.isfinite(ky)
    finite = np.isfinite(y)
    np.testing.assert_array_equal(np.interp(x[finite], kx[finite_kept], ky[finite_kept]), y[finite])


@pytest.mark.parametrize("seed", range(5))
def test_points_fed_in_batches_draw_the_series_line(seed):
    rng = np.random.default_rng(seed)
    y = stepwise(rng, 3000)
    x = np.arange(len(y), dtype=float) + 7
    source = GrowingArray(4)
    points = TurningPoints()
    i = 0
    while i < len(y):
        step = int(rng.integers(1, 60))
        for v in y[i:i + step]:
            source.append(float(v))
        i += step
        added = points.update(source, x)
        shown = y[:i]
        assert_same_line(points.x, points.y, x[:i], shown)
        new = y[i - step:i]  # every value the new points took is among those returned (for the range)
        assert set(new[np.isfinite(new)]) <= set(added[np.isfinite(added)])
    # fed at once or in batches, the same points
    keep = turning_mask(y)
    np.testing.assert_array_equal(points.x, x[keep])
    assert len(points) < len(y) // 5  # the flat runs' insides are left out


def test_a_constant_counter_is_two_points_and_a_new_column_starts_over():
    x = np.arange(1000, dtype=float)
    weights = column(np.full(1000, 1.5e9))
    points = TurningPoints(scale=1e9)
    points.update(weights, x)
    assert list(points.x) == [0.0, 999.0] and list(points.y) == [1.5, 1.5]
    weights.append(1.5e9)
    assert list(points.update(weights, np.arange(1001, dtype=float))) == [1.5, 1.5]
    assert list(points.x) == [0.0, 1000.0]  # the end moved; nothing was added
    other = column(np.array([1e9, 2e9]))  # another run's column, shorter
    points.update(other, x)
    assert list(points.x) == [0.0, 1.0] and list(points.y) == [1.0, 2.0]


def test_the_memory_plot_draws_every_counters_values(qtbot, tmp_path):
    from specscope.app.widgets.memory_plot import is_rate, plotted
    from specscope.core.units import GIB, MIB

    from .app_helpers import make_window, synthetic_records

    w = make_window(qtbot, tmp_path)

    def memory(i: int) -> dict[str, float]:
        sample = i // 7  # a sampler a few times slower than the loop: counters hold for 7 records
        m = {"host_rss_bytes": 5e8 + 1e6 * sample, "target_weights_cpu_bytes": 1.08e9, "swap_used_bytes": 0.0,
             "target_kv_bytes": 4.7e6 * (sample % 5), "host_read_bytes": 1e8 + sample}
        if i >= 30:  # a rate known only from the second sample on: NaN before it
            m["host_read_bytes_per_s"] = 2e6 * (sample % 3)
        return m

    events = [replace(e, memory=memory(e.iteration)) if hasattr(e, "tokens") else e
              for e in synthetic_records(300, k=4)]
    w.plots.memory.totals_box.setChecked(True)  # host series are the machine's totals: drawn on request
    for i in range(0, len(events), 37):  # batches, as the live ticks bring them
        w.ingest(events[i:i + 37])
        w.plots.memory.refresh(w.data)
    plot = w.plots.memory
    x = w.data.col("iteration")
    assert set(plot.series) == {k for k in w.data.memory if plotted(k)} and "host_read_bytes" not in plot.series
    for key, item in plot.series.items():
        scale = MIB if is_rate(key) else GIB
        kx, ky = item.getOriginalDataset()
        assert_same_line(np.asarray(kx), np.asarray(ky), x, w.data.memory[key].view() / scale)
        assert len(kx) < len(x) / 2, key
    weights_x, _ = plot.series["target_weights_cpu_bytes"].getOriginalDataset()
    assert len(weights_x) == 2
    # the rate is on the right axis, and both views show the largest value
    assert plot.series["host_read_bytes_per_s"] in plot.right.addedItems
    assert plot.plot_item.vb.viewRange()[1][1] >= 1.08e9 / GIB
    assert plot.right.viewRange()[1][1] >= 4e6 / MIB
    # a new run starts the points over
    w._reset_view()
    w.ingest(events[:20])
    plot.refresh(w.data)
    kx, _ = plot.series["host_rss_bytes"].getOriginalDataset()
    assert kx[-1] == x[19] and len(kx) <= 6
