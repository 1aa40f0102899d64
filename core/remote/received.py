"""A run received from a worker, fed through the one owner as a local session feeds it.

The worker's session emits the events; here they arrive, and :class:`ReceivedRun` does on the client what
``core.session.Session._emit`` does in-process: feed the measurement (the one owner of every derived number),
keep the event, and hand it with the snapshot after it to the sinks (autosave, a GUI's buffer), in order.
Nothing derived crosses the wire, so the client's numbers are the measurement's own, as a replay's are.
"""

from __future__ import annotations

from collections.abc import Callable

from specscope.core.events import Event, RunFinished, RunStarted
from specscope.core.measure.measurement import Measurement
from specscope.core.measure.snapshot import Estimate
from specscope.core.records import DrillEvent, IterationRecord, TokenStatus

Sink = Callable[[Event, Estimate | None], None]
# The tokens an iteration commits to the output (a rejected proposal is not output).
COMMITTED = frozenset({TokenStatus.ACCEPTED, TokenStatus.CORRECTION, TokenStatus.BONUS, TokenStatus.TARGET,
                       TokenStatus.PLAIN})


class ReceivedRun:
    """The client's view of one remote run: the same attributes a local ``Session`` offers its reporters."""

    def __init__(self, sinks: list[Sink] | None = None, alpha_window: int | None = None):
        self.measurement = Measurement(window=alpha_window) if alpha_window else Measurement()
        self.sinks: list[Sink] = list(sinks or [])
        self.events: list[Event] = []
        self.records: list[IterationRecord] = []
        self.drill_events: list[DrillEvent] = []
        self.started: RunStarted | None = None
        self.finished: RunFinished | None = None
        self.snapshot: Estimate | None = None

    def feed(self, event: Event) -> Estimate | None:
        snapshot = self.snapshot = self.measurement.feed(event)
        self.events.append(event)
        if isinstance(event, IterationRecord):
            self.records.append(event)
        elif isinstance(event, DrillEvent):
            self.drill_events.append(event)
        elif isinstance(event, RunStarted):
            self.started = event
        elif isinstance(event, RunFinished):
            self.finished = event
        for sink in self.sinks:
            sink(event, snapshot)
        return snapshot

    @property
    def prefill_ms(self) -> float:
        return self.finished.prefill_ms if self.finished is not None else 0.0

    def token_ids(self) -> list[int]:
        """The output so far, from the records' committed tokens (what arrived, when the result did not)."""
        return [t.token_id for r in self.records for t in r.tokens if t.status in COMMITTED]

    def token_text(self) -> str:
        return "".join(t.text for r in self.records for t in r.tokens if t.status in COMMITTED)

