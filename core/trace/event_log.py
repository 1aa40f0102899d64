"""The event stream on disk: one JSON object per line (``<stem>.events.jsonl``), in the order the run emitted it.

This file is the trace: replay reads it and feeds it through the measurement, so a replayed run shows exactly
what the live one showed. The flat CSVs beside it are an export for spreadsheets, written from the same stream
(``core.trace.files.write_trace``). The first line names the format; every later line is one event with a ``type``.

Trace files are data: lines are parsed with ``json`` under a depth and size bound, never evaluated, and every
field is checked against its range before an event is built, so a damaged or hostile file gives one sentence
(``TraceFormatError``), or a warning when only a recording cut short by a crash is missing its last line.
Non-finite numbers are written as ``null`` (JSON has no NaN), and read back as NaN where a time may be unknown
(an attached engine does not split its passes).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import fields, is_dataclass
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from specscope import __version__
from specscope.core.bounds import (
    K_MAX,
    MAX_DRAFTED,
    MAX_ITERATION,
    MAX_MEMORY_KEYS,
    MAX_POSITION,
    MAX_TOKEN_ID,
    MEMORY_VALUE_MAX,
    TEMPERATURE_MAX,
    TEMPERATURE_MIN,
    TOP_K_MAX,
    TOP_P_MIN,
    memory_key_problem,
)
from specscope.core.events import ALPHA_WINDOW, MAX_ALPHA_WINDOW, ControlChange, Event, RunFinished, RunStarted
from specscope.core.records import (
    ATTACHED_MODE,
    PLAIN_MODE,
    SPECULATIVE_MODE,
    BaselineRecord,
    ControlValues,
    DrillEvent,
    IterationRecord,
    TokenRecord,
    TokenStatus,
)
from specscope.core.trace.errors import JsonLimitError, TraceFormatError, bounded_json, read_trace_text

EVENT_LOG_FORMAT = "specscope-events"
EVENT_LOG_VERSION = 1
EVENTS_SUFFIX = ".events.jsonl"
MAX_LINE_CHARS = 4 * 1024 * 1024  # one event; an iteration with 17 tokens and their top-5 is a few kB
MAX_DEPTH = 8
PROBABILITY_MAX = 1.0 + 1e-6  # a float32 softmax may sum a hair over 1
MODES = frozenset({SPECULATIVE_MODE, PLAIN_MODE, ATTACHED_MODE})
_TYPES: dict[type, str] = {
    RunStarted: "run_started", IterationRecord: "iteration", BaselineRecord: "baseline",
    ControlChange: "control_change", DrillEvent: "drill", RunFinished: "run_finished",
}


# ---- writing ----------------------------------------------------------------------------------------------
def _finite(obj: Any) -> Any:
    """JSON-ready: NaN and infinities become null (JSON has none)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    if isinstance(obj, TokenStatus):
        return obj.value
    return obj


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _plain(obj: Any) -> Any:
    """``_finite(asdict(obj))`` in one pass: the same JSON-ready value without asdict's deep copies, which were
    two thirds of an iteration's encoding time (an event is encoded for every sink that writes or sends it)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, TokenStatus):
        return obj.value
    if obj is None or isinstance(obj, (str, int)):
        return obj
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    names = _FIELD_NAMES.get(type(obj))
    if names is None and is_dataclass(obj):
        names = _FIELD_NAMES[type(obj)] = tuple(f.name for f in fields(obj))
    if names is not None:
        return {name: _plain(getattr(obj, name)) for name in names}
    return obj


def encode(event: Event) -> str:
    """One line of JSON for one event."""
    kind = _TYPES.get(type(event))
    if kind is None:
        raise TypeError(f"not an event of a run: {type(event).__name__}")
    return json.dumps({"type": kind, **_plain(event)}, ensure_ascii=False, allow_nan=False,
                      separators=(",", ":"))


def header_line() -> str:
    return json.dumps({"format": EVENT_LOG_FORMAT, "format_version": EVENT_LOG_VERSION,
                       "specscope_version": __version__,
                       "created": datetime.now().astimezone().isoformat(timespec="seconds")})


class EventLogAppender:
    """Writes the header at once; ``append`` renders an event's line and keeps it until ``flush``."""

    def __init__(self, f: IO[str]):
        self._f = f
        self._pending: list[str] = []
        self.n_events = 0
        self.n_iterations = 0
        self.repairs = Repairs()
        f.write(header_line() + "\n")
        f.flush()

    def append(self, event: Event) -> None:
        """Render one event's line. It is read back before it is kept, so what the log holds always reads: a
        field out of its range is written clamped (or, for a memory reading, left out) and said in
        ``repairs``, never the event lost; TypeError for an object that is no event."""
        event, notes = repaired(event)
        if notes:
            self.repairs.note(notes)
        self._pending.append(encode(event))
        self.n_events += 1
        self.n_iterations += isinstance(event, IterationRecord)

    def flush(self) -> None:
        if self._pending:
            self._f.write("\n".join(self._pending) + "\n")
            self._pending.clear()
        self._f.flush()


class Repairs:
    """What a writer changed to keep events the format could not hold as they were: each distinct sentence
    once, with how often it recurred, at most ``MAX_SHOWN`` of them (a run can repeat one a million times)."""

    MAX_SHOWN = 20

    def __init__(self) -> None:
        self._counts: dict[str, int] = {}
        self.total = 0

    def note(self, notes: Iterable[str]) -> None:
        for note in notes:
            self.total += 1
            if note in self._counts or len(self._counts) < self.MAX_SHOWN:
                self._counts[note] = self._counts.get(note, 0) + 1

    def sentences(self) -> list[str]:
        out = [note + (f" ({n:,} times)" if n > 1 else "") for note, n in self._counts.items()]
        shown = sum(self._counts.values())
        if self.total > shown:
            out.append(f"and {self.total - shown:,} more fields out of range")
        return out

    def __bool__(self) -> bool:
        return self.total > 0


def write_events(f: IO[str], events: Iterable[Event]) -> int:
    appender = EventLogAppender(f)
    for e in events:
        appender.append(e)
    appender.flush()
    return appender.n_events


# ---- reading ----------------------------------------------------------------------------------------------
class _Bad(ValueError):
    """A field out of its range; the message names it."""


# While ``_repairing`` is active (the writer's ``repaired``), a value out of its range is replaced by the
# nearest one the format holds, and the sentence noted here instead of raised.
_REPAIRS: ContextVar[list[str] | None] = ContextVar("specscope_event_log_repairs", default=None)


@contextmanager
def _repairing() -> Iterator[list[str]]:
    notes: list[str] = []
    token = _REPAIRS.set(notes)
    try:
        yield notes
    finally:
        _REPAIRS.reset(token)


def _out_of_range(message: str, fix: Any) -> Any:
    """``fix`` (noted) while repairing; otherwise _Bad(message)."""
    notes = _REPAIRS.get()
    if notes is None:
        raise _Bad(message)
    notes.append(f"{message}; written as {_shown(fix)}" if fix is not None else f"{message}; left out")
    return fix


def _shown(value: Any) -> str:
    """A value as an error message quotes it: its repr, cut to 60 characters (a file may hold megabytes there)."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _get(d: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    if key not in d or d[key] is None:
        if default is ...:
            raise _Bad(f"{key} is missing")
        return default
    v = d[key]
    if kind is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    if not isinstance(v, kind) or (isinstance(v, bool) and kind is not bool):
        raise _Bad(f"{key} is {type(v).__name__}, not {getattr(kind, '__name__', kind)}")
    return v


def _int(d: dict[str, Any], key: str, lo: int, hi: int, default: Any = ...) -> Any:
    v = _get(d, key, int, default)
    if v is None:
        return None
    if not lo <= v <= hi:
        return _out_of_range(f"{key} = {v} is outside {lo}..{hi}", min(max(v, lo), hi))
    return int(v)


def _num(d: dict[str, Any], key: str, lo: float = 0.0, hi: float = math.inf, default: Any = ...,
         unknown_nan: bool = False) -> Any:
    if unknown_nan and key in d and d[key] is None:
        return math.nan
    v = _get(d, key, float, default)
    if v is None:
        return None
    if not (math.isfinite(v) and lo <= v <= hi):
        fix = math.nan if unknown_nan and math.isnan(v) else min(max(v, lo), hi) if not math.isnan(v) else lo
        return _out_of_range(f"{key} = {v} is outside {lo:g}..{hi:g}", float(fix))
    return float(v)


def _text(d: dict[str, Any], key: str, default: Any = ..., max_chars: int = 1 << 20) -> str:
    v = _get(d, key, str, default)
    if v is not None and len(v) > max_chars:
        raise _Bad(f"{key} is longer than {max_chars:,} characters")
    return v  # type: ignore[no-any-return]


def _controls(d: Any) -> ControlValues:
    if not isinstance(d, dict):
        raise _Bad("controls is not an object")
    temperature = _num(d, "temperature", 0.0, TEMPERATURE_MAX)
    if 0.0 < temperature < TEMPERATURE_MIN:  # sampling cannot divide by it (core.bounds)
        temperature = _out_of_range(f"temperature = {temperature} is between 0 (greedy) and {TEMPERATURE_MIN:g}",
                                    TEMPERATURE_MIN)
    return ControlValues(
        k=_int(d, "k", 0, K_MAX), temperature=temperature,
        top_k=_int(d, "top_k", 0, TOP_K_MAX), top_p=_num(d, "top_p", TOP_P_MIN, 1.0),
        adaptive_k=_get(d, "adaptive_k", bool, False),
    )


def _top5(v: Any) -> list[tuple[int, float]]:
    if not isinstance(v, list) or len(v) > 64:
        raise _Bad("top5 is not a short list")
    out = []
    for pair in v:
        if (not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], int)
                or isinstance(pair[0], bool) or not isinstance(pair[1], (int, float)) or isinstance(pair[1], bool)
                or not math.isfinite(pair[1])):
            raise _Bad("top5 holds something other than [token id, probability] pairs")
        token_id, p = _int({"top5 token id": pair[0]}, "top5 token id", -1, MAX_TOKEN_ID), float(pair[1])
        if not 0.0 <= p <= PROBABILITY_MAX:
            p = _out_of_range(f"a top5 probability = {p} is outside 0..1", min(max(p, 0.0), 1.0))
        out.append((token_id, p))
    return out


def _top5_text(v: Any, n_top5: int) -> list[str]:
    """The top 5's texts: as many strings as there are alternatives (empty in traces from before they were
    recorded)."""
    if v == []:
        return []
    if not isinstance(v, list) or len(v) != n_top5 or not all(isinstance(t, str) and len(t) <= 4096 for t in v):
        raise _Bad(f"top5_text is not a list of {n_top5} texts, one per top5 entry")
    return v


def _token(d: Any) -> TokenRecord:
    if not isinstance(d, dict):
        raise _Bad("a token is not an object")
    status = _text(d, "status")
    try:
        st = TokenStatus(status)
    except ValueError:
        raise _Bad(f"token status {_shown(status)} is not one of {', '.join(s.value for s in TokenStatus)}") from None
    top5 = _top5(d.get("top5") or [])
    return TokenRecord(
        # -1: an attached engine's token, known by its text only (core.attach.passes.UNKNOWN_TOKEN_ID)
        token_id=_int(d, "token_id", -1, MAX_TOKEN_ID), text=_text(d, "text", max_chars=4096), status=st,
        position=_int(d, "position", 0, MAX_POSITION),
        p=_num(d, "p", 0.0, PROBABILITY_MAX, default=None), q=_num(d, "q", 0.0, PROBABILITY_MAX, default=None),
        top5=top5, top5_text=_top5_text(d.get("top5_text") or [], len(top5)),
    )


def _memory(v: Any) -> dict[str, float]:
    """The memory sample: each key a name a CSV header can hold (it becomes a column), each reading a number
    from 0 to ``MEMORY_VALUE_MAX``; while repairing, a reading that is neither is left out."""
    if not isinstance(v, dict) or len(v) > MAX_MEMORY_KEYS:
        raise _Bad(f"memory is not an object of at most {MAX_MEMORY_KEYS} numbers")
    out: dict[str, float] = {}
    for k, x in v.items():
        if x is None:
            continue
        problem = memory_key_problem(k)
        if problem is not None:
            _out_of_range(problem, None)
            continue
        if not isinstance(x, (int, float)) or isinstance(x, bool):
            raise _Bad(f"memory {_shown(k)} is not a number")
        if not (math.isfinite(x) and 0.0 <= x <= MEMORY_VALUE_MAX):
            _out_of_range(f"memory {k} = {x} is outside 0..{MEMORY_VALUE_MAX:g}", None)
            continue
        out[str(k)] = float(x)
    return out


def _iteration(d: dict[str, Any]) -> IterationRecord:
    mode = _text(d, "mode")
    if mode not in MODES:
        raise _Bad(f"mode {_shown(mode)} is not one of {', '.join(sorted(MODES))}")
    n_drafted = _int(d, "n_drafted", 0, MAX_DRAFTED)  # an engine may draft more than our K_MAX
    n_accepted = _int(d, "n_accepted", 0, n_drafted)
    tokens = d.get("tokens") or []
    if not isinstance(tokens, list):
        raise _Bad("tokens is not a list")
    if len(tokens) > n_drafted + 2:
        tokens = _out_of_range(f"tokens holds {len(tokens)}, more than n_drafted + 2 = {n_drafted + 2}",
                               tokens[:n_drafted + 2])
    flags = d.get("flags") or []
    if not isinstance(flags, list) or not all(isinstance(f, str) for f in flags) or len(flags) > 64:
        raise _Bad("flags is not a list of sentences")
    t_start_s, t_end_s = _num(d, "t_start_s", 0.0), _num(d, "t_end_s", 0.0)
    if t_end_s < t_start_s:
        t_end_s = _out_of_range(f"t_end_s = {t_end_s} is before t_start_s = {t_start_s}", t_start_s)
    return IterationRecord(
        iteration=_int(d, "iteration", 0, MAX_ITERATION), mode=mode, drafter=_text(d, "drafter", max_chars=200),
        controls=_controls(d.get("controls")), tokens=[_token(t) for t in tokens],
        n_drafted=n_drafted, n_accepted=n_accepted, n_emitted=_int(d, "n_emitted", 0, n_drafted + 1),
        draft_ms=_num(d, "draft_ms", unknown_nan=True), verify_ms=_num(d, "verify_ms", unknown_nan=True),
        rollback_ms=_num(d, "rollback_ms", unknown_nan=True), iteration_ms=_num(d, "iteration_ms"),
        context_len=_int(d, "context_len", 0, MAX_POSITION), generated_len=_int(d, "generated_len", 0, MAX_POSITION),
        t_start_s=t_start_s, t_end_s=t_end_s,
        finished=_get(d, "finished", bool, False), finish_reason=_text(d, "finish_reason", "", 40),
        memory=_memory(d.get("memory") or {}), flags=[str(f) for f in flags],
        cpu_ms=_num(d, "cpu_ms", default=None), preempted=_int(d, "preempted", 0, 2**31, default=None),
        explore=_get(d, "explore", bool, False), k_note=_text(d, "k_note", "", 400),
        match_len=_int(d, "match_len", 0, 2**31, default=None),
        expected_accepted=_num(d, "expected_accepted", 0.0, 1e6, default=None),
    )


def _baseline(d: dict[str, Any]) -> BaselineRecord:
    steps = d.get("step_ms")
    if not isinstance(steps, list) or len(steps) > 1000:
        raise _Bad("step_ms is not a list")
    by_len = d.get("verify_ms_by_len") or {}
    if not isinstance(by_len, dict):
        raise _Bad("verify_ms_by_len is not an object")
    return BaselineRecord(
        iterations_done=_int(d, "iterations_done", 0, 10**9), context_len=_int(d, "context_len", 0, 2**31),
        step_ms=[_num({"s": s}, "s") for s in steps],
        verify_ms_by_len={_int({"n": int(n)}, "n", 1, K_MAX + 1): _num({"ms": ms}, "ms") for n, ms in by_len.items()},
        t_s=_num(d, "t_s", 0.0, default=0.0),
    )


def _drill(d: dict[str, Any]) -> DrillEvent:
    kind = _text(d, "kind")
    if kind not in ("start", "end"):
        raise _Bad(f"drill kind {_shown(kind)} is not start or end")
    return DrillEvent(
        kind=kind, model=_text(d, "model", max_chars=40), layers=_int(d, "layers", 0, 100_000),
        total_layers=_int(d, "total_layers", 0, 100_000), place=_text(d, "place", max_chars=40),
        iterations_done=_int(d, "iterations_done", 0, 10**9), moved_bytes=_int(d, "moved_bytes", 0, 2**62, 0),
        t_s=_num(d, "t_s", 0.0, default=0.0), error=_text(d, "error", "", 2000),
    )


def _started(d: dict[str, Any]) -> RunStarted:
    options, machine = d.get("options") or {}, d.get("machine") or {}
    if not isinstance(options, dict) or not isinstance(machine, dict):
        raise _Bad("options and machine must be objects")
    return RunStarted(
        source=_text(d, "source", max_chars=40), target=_text(d, "target", max_chars=4096),
        draft=_text(d, "draft", "", 4096), drafter=_text(d, "drafter", max_chars=40),
        description=_text(d, "description", "", 4096), prompt=_text(d, "prompt", ""),
        prompt_tokens=_int(d, "prompt_tokens", 0, 2**31), controls=_controls(d.get("controls")),
        max_new_tokens=_int(d, "max_new_tokens", 0, 2**31), plain=_get(d, "plain", bool, False),
        seed=_int(d, "seed", -(2**63), 2**64, default=None), options=options, machine=machine,
        t_s=_num(d, "t_s", 0.0, default=0.0),
        # absent in traces written before RunStarted recorded it: those runs used the default
        alpha_window=_int(d, "alpha_window", 1, MAX_ALPHA_WINDOW, default=ALPHA_WINDOW),
    )


def _change(d: dict[str, Any]) -> ControlChange:
    return ControlChange(iteration=_int(d, "iteration", 0, 10**9), old=_controls(d.get("old")),
                         new=_controls(d.get("new")), t_s=_num(d, "t_s", 0.0, default=0.0))


def _finished(d: dict[str, Any]) -> RunFinished:
    return RunFinished(
        reason=_text(d, "reason", max_chars=40), iterations=_int(d, "iterations", 0, 10**9),
        tokens=_int(d, "tokens", 0, 2**31), elapsed_s=_num(d, "elapsed_s"), prefill_ms=_num(d, "prefill_ms"),
        error=_text(d, "error", "", 4000), t_s=_num(d, "t_s", 0.0, default=0.0),
    )


# Keys renamed since traces were first written, by event type: old key -> the key it is now. A line with the
# old key reads as one with the new (the new one wins where a line has both); writers write only the new.
OLD_KEYS: dict[str, dict[str, str]] = {
    "baseline": {"after_iteration": "iterations_done"},
    "drill": {"before_iteration": "iterations_done"},
}


def _with_current_keys(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """``obj`` with the old keys of its event type under their current names (the line itself when it has
    none: iterations, the bulk of a log, pass straight through)."""
    renamed = {old: new for old, new in OLD_KEYS.get(kind, {}).items() if old in obj and new not in obj}
    if not renamed:
        return obj
    return {renamed.get(key, key): value for key, value in obj.items()}


_DECODERS: dict[str, Callable[[dict[str, Any]], Event]] = {
    "run_started": _started, "iteration": _iteration, "baseline": _baseline, "control_change": _change,
    "drill": _drill, "run_finished": _finished,
}


def decode(obj: Any) -> Event:
    """One event from its parsed JSON object; ValueError naming the field when it does not hold one."""
    if not isinstance(obj, dict):
        raise _Bad("the line is not a JSON object")
    kind = obj.get("type")
    parse = _DECODERS.get(kind) if isinstance(kind, str) else None
    if parse is None or not isinstance(kind, str):
        raise _Bad(f"unknown event type {_shown(kind)}")
    event: Event = parse(_with_current_keys(kind, obj))
    return event


def repaired(event: Event) -> tuple[Event, list[str]]:
    """``event`` as the event log holds it, and what had to change: ``event`` itself and no sentence when every
    field is in its range; otherwise a copy with each field out of range clamped to it (a memory reading left
    out), each change one sentence naming the event and the field. The writers keep what a run decoded even
    when one field of it is odd (an engine's counter, a hostile worker's memory key); TypeError for an object
    that is no event, ValueError for one whose structure no clamp can mend."""
    obj = json.loads(encode(event))
    try:
        decode(obj)
        return event, []
    except _Bad:
        pass
    with _repairing() as notes:
        fixed = decode(obj)
    where = (f"iteration {fixed.iteration}" if isinstance(fixed, IterationRecord)
             else str(obj.get("type", "event")).replace("_", " "))
    return fixed, [f"{where}: {note}" for note in notes]


def _sequence_warnings(name: str, events: list[Event]) -> list[str]:
    """What the order of the events says is wrong, one sentence each naming where: no run start before a run's
    iterations (an attached engine's trace has none: its passes are not a run of ours), iteration numbers with
    a gap, tokens missing from some iterations while others hold theirs."""
    out: list[str] = []
    iterations = [e for e in events if isinstance(e, IterationRecord)]
    if iterations and not any(isinstance(e, RunStarted) for e in events) and any(
            r.mode != ATTACHED_MODE for r in iterations):
        out.append(f"{name}: no run_started event: the run's models, prompt and settings are unknown")
    expected, missing, first_missing = 0, 0, -1
    for r in iterations:
        if r.iteration > expected:
            missing += r.iteration - expected
            first_missing = expected if first_missing < 0 else first_missing
        expected = r.iteration + 1
    if missing:
        out.append(f"{name}: {missing:,} iteration{'s' * (missing != 1)} missing from the numbering (the first "
                   f"is iteration {first_missing}): lines were deleted, and the replay shows the run without them")
    if any(r.tokens for r in iterations):  # tokens were recorded: every iteration that drafted has them
        # (proposals are always recorded as tokens; an attached engine's pass may carry no text for them)
        bare = [r for r in iterations if not r.tokens and r.n_drafted > 0 and r.mode != ATTACHED_MODE]
        if bare:
            out.append(f"{name}: iteration {bare[0].iteration}: tokens is empty while n_drafted = "
                       f"{bare[0].n_drafted}" + (f" ({len(bare):,} such iterations)" if len(bare) > 1 else "")
                       + "; its tokens are missing from the replay")
    return out


def read_events(path: Path) -> tuple[list[Event], list[str]]:
    """The events of a log, and warnings for what was repaired: a last line cut by a crash is dropped, an
    iteration whose number does not follow the one before (a duplicated or reordered line) is dropped and
    counted. Anything else wrong gives TraceFormatError naming the line and the field."""
    warnings: list[str] = []
    text = read_trace_text(path, "event log")
    lines = text.split("\n")
    cut = not text.endswith("\n")  # the writer always ends a line: a crash cut the last one
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise TraceFormatError(f"{path.name}: empty file, not a specscope event log")
    try:
        head = bounded_json(lines[0], max_depth=2, max_chars=4096)
    except (JsonLimitError, ValueError):
        head = None
    if not isinstance(head, dict) or head.get("format") != EVENT_LOG_FORMAT:
        raise TraceFormatError(f"{path.name}: not a specscope event log (its first line names no format)")
    version = head.get("format_version")
    if isinstance(version, int) and version > EVENT_LOG_VERSION:
        warnings.append(f"{path.name}: written by a newer specscope (format {version}); data may be missing")
    events: list[Event] = []
    last_iteration = -1
    dropped = 0
    started_at = 0
    for number, line in enumerate(lines[1:], start=2):
        last = number == len(lines)
        if not line.strip():
            continue
        try:
            event = decode(bounded_json(line, max_depth=MAX_DEPTH, max_chars=MAX_LINE_CHARS))
        except (JsonLimitError, ValueError, TypeError) as e:
            if last and cut:
                warnings.append(f"{path.name}: line {number}: the last event was cut off (the recording "
                                "stopped mid-write); it is dropped")
                break
            raise TraceFormatError(f"{path.name}: line {number}: {e}") from None
        if isinstance(event, RunStarted):
            if started_at:
                warnings.append(f"{path.name}: line {number}: a second run_started (the first is on line "
                                f"{started_at}); it is dropped")
                continue
            started_at = number
            if events:
                warnings.append(f"{path.name}: line {number}: run_started comes after {len(events):,} other "
                                "event(s), not first")
        if isinstance(event, IterationRecord):
            if event.iteration <= last_iteration:
                dropped += 1
                continue
            last_iteration = event.iteration
        events.append(event)
    if dropped:
        warnings.append(f"{path.name}: {dropped} iteration line(s) repeated or out of order were dropped")
    warnings += _sequence_warnings(path.name, events)
    return events, warnings
