"""What the run is doing, in the words the window shows: the one state the run controller sets and every view
(buttons, run panel, status, title) reads."""

from __future__ import annotations

from enum import Enum

__all__ = ["RunState"]


class RunState(str, Enum):
    """What the run is doing, in the words the window shows."""

    NO_MODEL = "no model"  # nothing loaded (started with --no-load, or the last load failed)
    LOADING = "loading"
    READY = "ready"  # a pair is loaded, no run yet
    RUNNING = "running"
    PAUSED = "paused"
    FINISHED = "finished"  # end of sequence or max tokens
    STOPPED = "stopped"  # the user stopped it
    FAILED = "failed"  # a load or a run failed (the error says which)
    REPLAY = "replay"  # showing a saved run (its own pair, prompt and end); a loaded pair can still start

    @property
    def active(self) -> bool:
        """A run is in progress (running or paused)."""
        return self in (RunState.RUNNING, RunState.PAUSED)
