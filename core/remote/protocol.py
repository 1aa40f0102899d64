"""The worker protocol, v1: UTF-8 JSON lines over one TCP connection (see docs in README "Remote worker").

Data only: every line is parsed by the bounded parser every trace reader uses (``trace_errors.bounded_json``),
never unpickled or evaluated; events travel as the exact objects the event log writes (``event_log.encode``)
and are read back range-checked (``event_log.decode``). A line that does not parse, an unknown type or a
message out of order is a :class:`ProtocolError` with one sentence; the receiver says it in a ``bye`` and
closes.

Client → worker: ``hello`` (first, with the token), ``start``, ``control``, ``drafter`` (between runs: swap in
a drafter that needs no weights of its own, the target staying loaded), ``ping``, ``bye``.
Worker → client: ``welcome`` or ``bye`` (the answer to hello), then per run ``event``… ``result``, ``idle``;
``error`` (a start or a drafter swap refused), ``pair`` (the pair after a swap), ``pong``, ``bye``.
"""

from __future__ import annotations

import json
import math
import socket
import time
from collections.abc import Iterator, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from specscope.core.controls import InvalidControl, validate
from specscope.core.events import Event
from specscope.core.records import ControlValues
from specscope.core.trace.errors import JsonLimitError, bounded_json
from specscope.core.trace.event_log import MAX_DEPTH as EVENT_MAX_DEPTH
from specscope.core.trace.event_log import decode, encode

PROTOCOL_VERSION = 1
MAX_LINE_BYTES = 4 * 1024 * 1024
# An event may nest as deep as the event log allows; the message around it adds one level.
MAX_DEPTH = EVENT_MAX_DEPTH + 1
CLIENT_TYPES = frozenset({"hello", "start", "control", "drafter", "ping", "bye"})
WORKER_TYPES = frozenset({"welcome", "event", "result", "idle", "error", "pong", "pair", "bye"})
ACTIONS = frozenset({"pause", "resume", "stop", "baseline", "drill", "end_drill"})
_READ_CHUNK = 1 << 16

if TYPE_CHECKING:  # core.memory.drill imports torch: a GUI process reading the protocol must not
    from specscope.core.drill_spec import DrillSpec


class ProtocolError(ValueError):
    """A message that breaks the protocol; ``str(e)`` is the one sentence both sides report."""


# ---- lines ------------------------------------------------------------------------------------------------
def encode_message(message: Mapping[str, Any]) -> bytes:
    """One message as one line of JSON (NaN refused: JSON has none)."""
    if not isinstance(message.get("type"), str):
        raise ValueError("a protocol message needs a type")
    line = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    if len(line) >= MAX_LINE_BYTES:
        raise ValueError(f"a {message['type']} message of {len(line):,} bytes is over the protocol's 4 MiB")
    return line + b"\n"


def encode_event_message(event: Event) -> bytes:
    """``{"type":"event","event":…}`` around the event log's own line for the event (no second encoding)."""
    line = b'{"type":"event","event":' + encode(event).encode("utf-8") + b"}\n"
    if len(line) > MAX_LINE_BYTES:
        raise ValueError(f"an event of {len(line):,} bytes is over the protocol's 4 MiB")
    return line


def parse_line(line: bytes) -> dict[str, Any]:
    """One received line as a message (a dict with a string ``type``), or ProtocolError."""
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("the peer sent a line that is not UTF-8 text") from None
    try:
        obj = bounded_json(text, max_depth=MAX_DEPTH, max_chars=MAX_LINE_BYTES)
    except JsonLimitError as exc:
        raise ProtocolError(f"the peer sent a message beyond the protocol's bounds ({exc})") from None
    except ValueError:
        raise ProtocolError("the peer sent a line that is not JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ProtocolError("the peer sent a message without a type")
    return obj


class MessageReader:
    """Reads messages from a socket, one line at a time, at most 4 MiB a line.

    ``read()`` returns the next message, or None when the peer closed the connection; ProtocolError for a
    line that breaks the protocol, OSError when the connection fails, TimeoutError once ``deadline`` (a
    ``time.monotonic()``) passes: one deadline for the whole message, however the peer spaces its bytes. One
    thread reads; others may send.
    """

    def __init__(self, sock: socket.socket):
        self._sock = sock
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer already searched for a newline

    def read(self, deadline: float | None = None) -> dict[str, Any] | None:
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[:end])
                del self._buffer[:end + 1]
                self._scanned = 0
                return parse_line(line)
            self._scanned = len(self._buffer)
            if len(self._buffer) > MAX_LINE_BYTES:
                raise ProtocolError("the peer sent a line longer than the protocol's 4 MiB")
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError("the deadline passed")
                self._sock.settimeout(left)
            chunk = self._sock.recv(_READ_CHUNK)
            if not chunk:
                if self._buffer:
                    raise ProtocolError("the connection closed in the middle of a message")
                return None
            self._buffer += chunk

    def __iter__(self) -> Iterator[dict[str, Any]]:
        while (message := self.read()) is not None:
            yield message


# ---- message builders -------------------------------------------------------------------------------------
def hello(token: str, client: str) -> dict[str, Any]:
    return {"type": "hello", "protocol": PROTOCOL_VERSION, "token": token, "client": client}


def welcome(worker: dict[str, Any]) -> dict[str, Any]:
    return {"type": "welcome", "protocol": PROTOCOL_VERSION, "worker": worker}


def bye(reason: str = "") -> dict[str, Any]:
    return {"type": "bye", "reason": reason} if reason else {"type": "bye"}


def drafter(kind: str) -> dict[str, Any]:
    return {"type": "drafter", "drafter": kind}


def pair(info: dict[str, Any]) -> dict[str, Any]:
    return {"type": "pair", "pair": info}


def error(message: str) -> dict[str, Any]:
    return {"type": "error", "message": message}


def start(prompt: str | list[int], controls: ControlValues, options: Mapping[str, Any],
          chat: bool | None = None) -> dict[str, Any]:
    message: dict[str, Any] = {"type": "start", "controls": controls_to_data(controls), "options": dict(options)}
    if isinstance(prompt, str):
        message["prompt"] = prompt
    else:
        message["prompt_ids"] = [int(t) for t in prompt]
    if chat is not None:
        message["chat"] = bool(chat)
    return message


def control_set(**values: Any) -> dict[str, Any]:
    return {"type": "control", "set": values}


def control_action(name: str, **data: Any) -> dict[str, Any]:
    if name not in ACTIONS:
        raise ValueError(f"unknown control action {name!r}")
    return {"type": "control", "action": name, **data}


# ---- checked fields ---------------------------------------------------------------------------------------
def reason_of(message: Mapping[str, Any], default: str) -> str:
    """A bye's or an error's sentence, cut to a line; ``default`` when it has none."""
    text = message.get("reason", message.get("message"))
    if not isinstance(text, str) or not text.strip():
        return default
    return " ".join(text.split())[:1000]


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ProtocolError(f"the control {name} is not a finite number")
    return float(value)


def _whole(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ProtocolError(f"the control {name} is not a whole number")
    return value


_CONTROL_FIELDS = {f.name for f in fields(ControlValues)}


def controls_to_data(values: ControlValues) -> dict[str, Any]:
    return {f: getattr(values, f) for f in sorted(_CONTROL_FIELDS)}


def control_changes(data: Any) -> dict[str, Any]:
    """The control fields a message sets, type-checked (ranges are the Controls' own check)."""
    if not isinstance(data, dict):
        raise ProtocolError("the controls are not an object")
    unknown = sorted(set(data) - _CONTROL_FIELDS)
    if unknown:
        raise ProtocolError(f"there is no control named {unknown[0]!r}")
    out: dict[str, Any] = {}
    for name, value in data.items():
        if name in ("k", "top_k"):
            out[name] = _whole(value, name)
        elif name in ("temperature", "top_p"):
            out[name] = _number(value, name)
        elif name == "adaptive_k":
            if not isinstance(value, bool):
                raise ProtocolError("the control adaptive_k is not true or false")
            out[name] = value
    return out


def controls_from_data(data: Any) -> ControlValues:
    """Whole control values from a start message; ProtocolError for a wrong type, InvalidControl's sentence
    (as a ProtocolError) for a value out of range."""
    try:
        return validate(ControlValues(**control_changes(data)))
    except InvalidControl as exc:
        raise ProtocolError(str(exc)) from None


def drill_to_data(spec: DrillSpec) -> dict[str, Any]:
    return {"model": spec.model, "layers": spec.layers, "start": spec.start, "end": spec.end}


def drill_from_data(data: Any) -> DrillSpec:
    if not isinstance(data, dict) or data.get("model") not in ("draft", "target"):
        raise ProtocolError("a drill names its model: draft or target")
    layers = data.get("layers")
    if layers is not None and (_whole(layers, "drill layers") < 1 or layers > 100_000):
        raise ProtocolError("a drill's layers is a whole number from 1")
    start_at, end_at = (_whole(data.get(k, 0), f"drill {k}") for k in ("start", "end"))
    if not 0 <= start_at <= 10**9 or not 0 <= end_at <= 10**9:
        raise ProtocolError("a drill's start and end are iteration numbers")
    from specscope.core.drill_spec import DrillSpec

    return DrillSpec(model=str(data["model"]), layers=layers, start=start_at, end=end_at)


def decode_event(message: Mapping[str, Any]) -> Event:
    """The event an ``event`` message carries, range-checked as a trace line is; ProtocolError otherwise."""
    try:
        return decode(message.get("event"))
    except (ValueError, TypeError) as exc:
        raise ProtocolError(f"the worker sent an event that does not hold ({exc})") from None
