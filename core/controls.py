"""Live controls: written by any thread (GUI, CLI), read by the loop between iterations only."""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import Any

from specscope.core.bounds import K_MAX as K_MAX  # re-exported: the controls' own names for them
from specscope.core.bounds import K_MIN as K_MIN
from specscope.core.bounds import TOP_K_MAX, TOP_P_MIN, temperature_problem
from specscope.core.drafter_catalogue import adaptive_k_default, default_k
from specscope.core.records import ControlValues

# New tokens a session decodes unless told otherwise: SessionOptions, the app's run panel and its saved setting.
# (The CLI's run and attach default to 128, bench to 64 and verify to 48: shorter checks; the README says so.)
DEFAULT_MAX_NEW_TOKENS = 256


class InvalidControl(ValueError):
    """A control value out of range; the message says which and why."""


def validate(values: ControlValues) -> ControlValues:
    if not K_MIN <= values.k <= K_MAX:
        raise InvalidControl(f"k must be between {K_MIN} and {K_MAX}, got {values.k}")
    problem = temperature_problem(values.temperature)
    if problem is not None:
        raise InvalidControl(f"temperature {problem}")
    if not 0 <= values.top_k <= TOP_K_MAX:
        raise InvalidControl(f"top-k must be from 0 (off) to {TOP_K_MAX:,}, got {values.top_k}")
    if not TOP_P_MIN <= values.top_p <= 1.0:
        raise InvalidControl(f"top-p must be in (0, 1] (1 = off), got {values.top_p}")
    return values


def switched_drafter_controls(values: ControlValues, old: str, new: str,
                              adaptive_chosen: bool = False) -> ControlValues:
    """The controls after the user switches from drafter ``old`` to ``new``.

    A k still at the old drafter's default moves to the new one's; a k the user chose stays. Adaptive k the
    user set (``adaptive_chosen``: they ticked or unticked it) stays as they left it; otherwise it turns on
    for a drafter that has it by default (prompt lookup's proposes only what pays) and is otherwise left.
    """
    k = default_k(new) if values.k == default_k(old) else values.k
    adaptive = values.adaptive_k if adaptive_chosen else values.adaptive_k or adaptive_k_default(new)
    return replace(values, k=k, adaptive_k=adaptive)


class Controls:
    """Thread-safe holder of pending control values plus pause/stop flags.

    Writers call :meth:`update`, :meth:`pause`, :meth:`resume`, :meth:`stop` from any thread. The loop calls
    :meth:`checkpoint` at each iteration boundary, which blocks while paused and returns the values the next
    iteration must use, or None when a stop was requested.
    """

    def __init__(self, values: ControlValues | None = None) -> None:
        self._lock = threading.Lock()
        self._values = validate(values or ControlValues())
        self._running = threading.Event()  # set = not paused
        self._running.set()
        self._stop = threading.Event()
        self._stop_signalled = False  # set by stop_soon(), from a signal handler: a plain flag, no lock
        self.stop_reason = "stop"  # what ended the run when it was stopped: "stop", "interrupted", "terminated"
        self._baseline_requested = threading.Event()
        self._drill_request: tuple[str, Any] | None = None  # ("start", DrillSpec) or ("end", None)

    @property
    def values(self) -> ControlValues:
        with self._lock:
            return self._values

    def update(self, **changes: object) -> ControlValues:
        with self._lock:
            new = validate(replace(self._values, **changes))  # type: ignore[arg-type]
            self._values = new
            return new

    def pause(self) -> None:
        self._running.clear()

    def resume(self) -> None:
        self._running.set()

    @property
    def paused(self) -> bool:
        return not self._running.is_set()

    def stop(self, reason: str = "stop") -> None:
        self.stop_reason = reason
        self._stop.set()
        self._running.set()  # a paused loop must wake up to see the stop

    def stop_soon(self, reason: str = "stop") -> None:
        """``stop`` for a signal handler. The handler runs on the loop's own thread, between any two bytecodes,
        possibly while that thread holds one of these events' locks, so it takes none: the loop sees the flag at
        its next boundary (a paused loop is not woken; the CLI, which installs the handler, never pauses)."""
        self.stop_reason = reason
        self._stop_signalled = True

    @property
    def stop_requested(self) -> bool:
        return self._stop_signalled or self._stop.is_set()

    def request_baseline(self) -> None:
        """Ask the loop to measure plain step time at the next boundary ("measure baseline now")."""
        self._baseline_requested.set()

    def take_baseline_request(self) -> bool:
        if self._baseline_requested.is_set():
            self._baseline_requested.clear()
            return True
        return False

    def start_drill(self, spec: Any) -> None:
        """Ask the session to start a paging drill (a ``drill.DrillSpec``) at the next iteration boundary."""
        with self._lock:
            self._drill_request = ("start", spec)

    def end_drill(self) -> None:
        """Ask the session to end the running drill at the next iteration boundary."""
        with self._lock:
            self._drill_request = ("end", None)

    def take_drill_request(self) -> tuple[str, Any] | None:
        """The pending drill request (the latest one wins), cleared; None when there is none."""
        with self._lock:
            request, self._drill_request = self._drill_request, None
            return request

    def checkpoint(self) -> ControlValues | None:
        """Called by the loop between iterations: wait while paused; None means stop."""
        while not self._running.wait(timeout=0.1):
            if self.stop_requested:
                return None
        if self.stop_requested:
            return None
        return self.values
