"""A run: its event stream fed through the one owner of every derived number, with the snapshot after each event.

A ``Run`` is the only place a ``Measurement`` is built. Every source of events — a local session, a worker's
stream received over a socket, an attached engine, a trace read back — only produces events; whoever consumes
them feeds one ``Run``, which keeps the stream and the snapshot after each event, and hands ``(event, snapshot)``
to its sinks (autosave, the window's buffer, the socket, the CLI's summary) on the feeding thread, in order.
Export writes the snapshots the Run holds, so a CSV row is exactly what the run showed live.

Every option that changes a number is recorded in the stream: the recent window (``RunStarted.alpha_window``)
sets the measurement's window when the run starts, so replaying a trace, exporting it or receiving it from a
worker gives the numbers the run had, whatever window it ran with.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from specscope.core.events import ALPHA_WINDOW, Event, RunFinished, RunStarted
from specscope.core.measure.measurement import Measurement
from specscope.core.measure.snapshot import Estimate
from specscope.core.records import DrillEvent, IterationRecord


class RunSink(Protocol):
    """Receives each event with the snapshot after it (None before the first iteration), in the stream's order."""

    def __call__(self, event: Event, snapshot: Estimate | None, /) -> None: ...


class Run:
    """One run's events fed through one measurement; the snapshot after each event kept beside it.

    ``alpha_window`` is the recent window to measure with until the stream's ``RunStarted`` says which one the
    run used (None: the default). ``keep_snapshots``: keep the snapshot after each event for export (about
    7 kB each: a 2,000-iteration run holds ~17 MB of them); a run nobody exports from (the worker's, whose
    client measures for itself) keeps only the latest, and :meth:`observed` derives the rest again. Thread-safe
    for one feeder and any number of readers of :meth:`estimate`.
    """

    def __init__(self, sinks: Iterable[RunSink] = (), alpha_window: int | None = None, keep_snapshots: bool = True):
        self.sinks: list[RunSink] = list(sinks)
        self.keep_snapshots = keep_snapshots
        self._measurement = Measurement(window=alpha_window or ALPHA_WINDOW)
        self._lock = threading.Lock()  # events and snapshots grow together: a reader sees whole pairs
        self.events: list[Event] = []
        self.snapshots: list[Estimate | None] = []  # the snapshot after each event of ``events``
        self.records: list[IterationRecord] = []
        self.drill_events: list[DrillEvent] = []
        self.started: RunStarted | None = None
        self.finished: RunFinished | None = None

    @property
    def alpha_window(self) -> int:
        """The recent window the numbers are measured over (the recorded one once the run has started)."""
        return self._measurement.window

    def feed(self, event: Event) -> Estimate | None:
        """Feed one event: the snapshot after it, handed with the event to every sink and returned."""
        if isinstance(event, RunStarted) and not self.records and event.alpha_window != self._measurement.window:
            # the run says which window it measured with: nothing derived yet, so measure with that one
            self._measurement = Measurement(window=event.alpha_window)
        snapshot = self._measurement.feed(event)
        with self._lock:
            self.events.append(event)
            if self.keep_snapshots:
                self.snapshots.append(snapshot)
        if isinstance(event, IterationRecord):
            self.records.append(event)
        elif isinstance(event, DrillEvent):
            self.drill_events.append(event)
        elif isinstance(event, RunStarted):
            self.started = self.started or event
        elif isinstance(event, RunFinished):
            self.finished = event
        for sink in self.sinks:
            sink(event, snapshot)
        return snapshot

    def follow(self, events: Iterable[Event]) -> Iterator[tuple[Event, Estimate | None]]:
        """Feed each event of a source as it comes; yields it with the snapshot after it."""
        for event in events:
            yield event, self.feed(event)

    def estimate(self) -> Estimate | None:
        """The snapshot after the last event (None before any iteration)."""
        return self._measurement.estimate()

    def observed(self) -> list[tuple[Event, Estimate | None]]:
        """Every event so far with the snapshot after it (what export writes): the ones this run gave, or, where
        it kept none, a replay's (the same numbers: the same owner, the same stream, the recorded window)."""
        with self._lock:
            if self.keep_snapshots:
                return list(zip(self.events, self.snapshots, strict=True))
            events = list(self.events)
        return replay(events, self.alpha_window).observed()

    @property
    def prefill_ms(self) -> float:
        return self.finished.prefill_ms if self.finished is not None else 0.0

    def token_ids(self) -> list[int]:
        """The output so far, from the records' committed tokens (what arrived, when no result did)."""
        return [t.token_id for r in self.records for t in r.committed_tokens]

    def token_text(self) -> str:
        return "".join(t.text for r in self.records for t in r.committed_tokens)


def replay(events: Iterable[Event], alpha_window: int | None = None) -> Run:
    """A recorded stream fed through a new run: the same owner, the same numbers as live (the recorded window,
    or ``alpha_window`` for a stream without a ``RunStarted``)."""
    run = Run(alpha_window=alpha_window)
    for event in events:
        run.feed(event)
    return run


def feed_all(events: Iterable[Event], run: Run | None = None) -> Iterator[tuple[Event, Estimate | None]]:
    """Each event with the snapshot after it: what a live run hands its sinks, for a recorded stream."""
    return (run or Run()).follow(events)


def observed_stream(source: Run | Sequence[Event]) -> list[tuple[Event, Estimate | None]]:
    """A run's events with its own snapshots, or a bare stream replayed: what the writers of a trace take."""
    return source.observed() if isinstance(source, Run) else replay(source).observed()
