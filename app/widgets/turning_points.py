"""A series drawn from the points where it turns: the inside of each flat run left out.

The memory counters are sampled a few times a second (``core/memory/sampler.py``) and joined to every record,
so at hundreds of iterations a second a counter holds one value for dozens of records at a time, and weights or
swap never move. A line through those points is the same line through each flat run's two ends, and the stroke
of a 1.5 px pen costs per point: the memory plot's repaint was the GUI thread's longest stretch with the tiny
pair decoding (docs/bench-gui.md). Points are folded in as they arrive (only the ones not seen before), into
preallocated buffers that grow by doubling, like ``RunData``'s columns.
"""

from __future__ import annotations

import numpy as np

from specscope.app.run_data import GrowingArray


def same_as_next(y: np.ndarray) -> np.ndarray:
    """For each pair of neighbours, whether they are one value (NaN beside NaN counts as one: a gap)."""
    a, b = y[:-1], y[1:]
    return np.asarray((a == b) | (np.isnan(a) & np.isnan(b)))


def turning_mask(y: np.ndarray) -> np.ndarray:
    """Which points a line through ``y`` needs: the ends, and every point that differs from a neighbour."""
    keep = np.ones(len(y), dtype=bool)
    if len(y) > 2:
        same = same_as_next(y)
        keep[1:-1] = ~(same[:-1] & same[1:])
    return keep


class TurningPoints:
    """One series' kept points (x, and y divided by ``scale``), brought up to date from its column."""

    def __init__(self, scale: float = 1.0, capacity: int = 256) -> None:
        self.scale = scale
        self._capacity = capacity
        self.reset()

    def reset(self) -> None:
        self._x = np.empty(self._capacity)
        self._y = np.empty(self._capacity)
        self._n = 0
        self._source: GrowingArray | None = None
        self._consumed = 0  # points of the source folded in

    def __len__(self) -> int:
        return self._n

    @property
    def x(self) -> np.ndarray:
        return self._x[: self._n]

    @property
    def y(self) -> np.ndarray:
        return self._y[: self._n]

    def update(self, source: GrowingArray, x: np.ndarray) -> np.ndarray:
        """Fold in the points of ``source`` (x from ``x``, the same length) not folded yet, and return the
        scaled values of the points kept or moved by it (every value the series took is among them, so their
        extremes are the new points' extremes). Another column, or a shorter one, starts over."""
        values = source.view()
        if source is not self._source or len(values) < self._consumed:
            self.reset()
            self._source = source
        if len(values) == self._consumed:
            return values[:0]
        # The last two kept points are the new points' left neighbours: the last one, the series' end so far,
        # is left out now if it turns out to sit inside a flat run. The one before it stays whatever comes.
        start = max(0, self._n - 2)
        ys = np.concatenate((self._y[start: self._n], values[self._consumed:] / self.scale))
        xs = np.concatenate((self._x[start: self._n], x[self._consumed: len(values)]))
        keep = turning_mask(ys)
        kept_x, kept_y = xs[keep], ys[keep]
        end = start + len(kept_y)
        if end > len(self._x):
            size = max(end, 2 * len(self._x))
            for name in ("_x", "_y"):
                grown = np.empty(size)
                grown[: self._n] = getattr(self, name)[: self._n]
                setattr(self, name, grown)
        self._x[start:end] = kept_x
        self._y[start:end] = kept_y
        self._n = end
        self._consumed = len(values)
        return kept_y
