"""Keep Python's full garbage collections out of timed steps and out of the window's frames.

A full collection walks every object the cyclic collector tracks, holding the GIL. Once torch, transformers
(and Qt) are imported and a pair is loaded, that is some 400,000 objects and 0.4-0.7 s on the 2-core CPU.
Whichever thread sets one off stops for that long: inside a timed draft or verify step it reads as a slow
step (or paging), and in the app it froze the window 2-3 s into every run (scripts/bench_gui.py,
docs/bench-gui.md). Freezing what is alive after a load moves it out of the collector's reach; frozen
objects are still freed by reference counting when their last reference goes.
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
