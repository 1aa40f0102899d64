"""What a paging drill asks for, as plain data (no torch): the Run panel and a worker's client build it without
loading the engine; ``core.memory.drill`` runs it."""

from __future__ import annotations

import re
from dataclasses import dataclass

DRILL_MODELS = ("draft", "target")
_DRILL_RE = re.compile(r"^(\d+):(\d+):([a-z]+)(?::(\d+))?$")


class DrillError(ValueError):
    """A drill that cannot be run; the message is one sentence for the user."""


@dataclass(frozen=True)
class DrillSpec:
    """Layers of ``model`` off its device from iteration ``start`` until before ``end`` (None = all layers).

    ``start``/``end`` matter only for a scheduled drill (the CLI); a live drill starts and ends on request.
    """

    model: str
    layers: int | None = None
    start: int = 0
    end: int = 0


def parse_drill(text: str) -> DrillSpec:
    """``START:END:MODEL[:LAYERS]``, e.g. ``20:40:draft`` or ``10:30:target:18``; DrillError otherwise."""
    m = _DRILL_RE.match(text.strip().lower())
    if m is None:
        raise DrillError(f"bad drill {text!r}: write START:END:MODEL[:LAYERS], e.g. 20:40:draft or "
                         "10:30:target:18")
    start, end, model, layers = int(m[1]), int(m[2]), m[3], m[4]
    if model not in DRILL_MODELS:
        raise DrillError(f"bad drill {text!r}: the model is draft or target, not {model!r}")
    if end <= start:
        raise DrillError(f"bad drill {text!r}: it must end after it starts (END > START)")
    n = int(layers) if layers is not None else None
    if n is not None and n < 1:
        raise DrillError(f"bad drill {text!r}: move at least 1 layer")
    return DrillSpec(model=model, layers=n, start=start, end=end)
