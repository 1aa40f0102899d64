"""Keep Python's full garbage collections out of timed steps and out of the window's frames.

A full collection walks every object the cyclic collector tracks, holding the GIL. Once torch, transformers
(and Qt) are imported and a pair is loaded, that is some 400,000 objects and 0.4-0.7 s on the 2-core CPU.
Whichever thread sets one off stops for that long: inside a timed draft or verify step it reads as a slow
step (or paging), and in the app it froze the window 2-3 s into every run (scripts/bench_gui.py,
docs/bench-gui.md). Freezing what is alive after a load moves it out of the collector's reach; frozen
objects are still freed by reference counting when their last reference goes. The window's process, which
imports no torch when the pair decodes in a worker, still holds 440,000 objects after start-up (Qt,
pyqtgraph, numpy, its widgets): it freezes them at its first tick and a run's records as they accumulate
(``PeriodicFreeze``).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


def freeze_what_is_loaded(collect: bool = True) -> None:
    """Collect once (unless ``collect`` is false), then freeze everything alive. Without the collection,
    garbage not yet collected is frozen too, until the next unfreeze: the app's worker thread freezes that
    way, because a collection there would run the destructors of the window's dropped Qt wrappers off the
    GUI thread (and stall the window for the collection's length)."""
    if collect:
        gc.collect()
    gc.freeze()


def unfreeze() -> None:
    """Give the frozen objects back to the collector (before a pair is replaced, so its cycles are collected)."""
    gc.unfreeze()


@contextmanager
def loaded_objects_frozen() -> Iterator[None]:
    """Frozen for the block (a CLI run, a bench), given back after it: a caller in a longer-lived process
    (the tests call the CLI in-process) does not keep objects that later become cyclic garbage."""
    freeze_what_is_loaded()
    try:
        yield
    finally:
        unfreeze()


class PeriodicFreeze:
    """For a process that keeps what it makes (the window: its widgets, then a run's records): freeze at the
    first ``count`` and again once ``every`` more items were counted, so a full collection walks only what was
    made since. Without collecting first: cyclic garbage frozen with the rest stays (a little memory) rather
    than a collection of the whole process on the thread that counts. Frozen objects are still freed by
    reference counting (a new run's reset frees the last run's records)."""

    def __init__(self, every: int) -> None:
        self.every = every
        self.since = -1  # items counted since the last freeze; -1 before the first

    def count(self, n: int) -> bool:
        """Count ``n`` new items; True when this call froze."""
        self.since = self.since + n if self.since >= 0 else -1
        if 0 <= self.since < self.every:
            return False
        freeze_what_is_loaded(collect=False)
        self.since = 0
        return True
