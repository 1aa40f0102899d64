"""The client side of the worker protocol: connect with the token, start runs, stream their events back.

One thread iterates a run's events (:meth:`WorkerClient.start`); any other thread may send controls at the
same time (:meth:`set_controls`, :meth:`action`): sends are serialized by a lock, and only the iterating thread
reads. The events are decoded and range-checked as a trace's lines are; nothing derived travels, so whoever
iterates feeds them to its own measurement (``core.measure.run.Run``).

Every failure is one sentence: :class:`WorkerRefused` before a run could begin (no worker there, a wrong or
missing token, another client connected, a start the worker refused: the caller's input), :class:`WorkerLost`
once it had begun (the worker killed, the connection cut, a message that breaks the protocol).
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

from specscope import __version__
from specscope.core.controls import validate
from specscope.core.events import Event, RunFinished
from specscope.core.records import ControlValues
from specscope.core.remote import protocol
from specscope.core.remote.protocol import ProtocolError
from specscope.core.remote.url import WorkerAddress

CLIENT_NAME = f"specscope {__version__}"
CONNECT_TIMEOUT_S = 10.0


class WorkerError(Exception):
    """Base of the client's errors; ``str(e)`` is one sentence for the user."""


class WorkerRefused(WorkerError):
    """No run could begin: nothing listens there, the token is wrong or missing, the worker is busy with
    another client, or it refused the start (bad controls, a prompt too long). The user's input: exit 2."""


class WorkerLost(WorkerError):
    """The connection ended while a run was under way or expected: the worker died, or broke the protocol."""


class WorkerClient:
    def __init__(self, sock: socket.socket, reader: protocol.MessageReader, address: WorkerAddress,
                 worker_info: dict[str, Any]):
        self._sock = sock
        self._reader = reader
        self._send_lock = threading.Lock()
        self._closed = threading.Event()
        self._running = False
        self.address = address
        self.worker_info = worker_info  # the welcome's "worker": pair, device, pid, version
        self.result: dict[str, Any] | None = None  # the last run's "result" message (token ids, text, residency)

    # ---- connecting ---------------------------------------------------------------------------------------
    @classmethod
    def connect(cls, address: WorkerAddress, timeout: float = CONNECT_TIMEOUT_S,
                client_name: str = CLIENT_NAME) -> WorkerClient:
        """Connect and shake hands; WorkerRefused with one sentence when no run can be had there."""
        where = address.netloc
        try:
            sock = socket.create_connection((address.host, address.port), timeout=timeout)
        except TimeoutError:
            raise WorkerRefused(f"The worker at {where} did not answer within {timeout:g} s.") from None
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise WorkerRefused(f"Could not connect to a worker at {where}: {why} (is `specscope serve` running "
                                "there, and the ssh tunnel up?).") from None
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # one event per line, sent at once
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            sock.sendall(protocol.encode_message(protocol.hello(address.token, client_name)))
            reader = protocol.MessageReader(sock)
            answer = reader.read()
        except TimeoutError:
            sock.close()
            raise WorkerRefused(f"The peer at {where} did not answer the handshake within {timeout:g} s; "
                                "is it a specscope worker?") from None
        except ProtocolError:
            sock.close()
            raise WorkerRefused(f"The peer at {where} is not a specscope worker (it answered with something "
                                "other than the worker protocol).") from None
        except OSError as exc:
            sock.close()
            raise WorkerRefused(f"The connection to {where} failed during the handshake: "
                                f"{exc.strerror or exc}.") from None
        if answer is None:
            sock.close()
            raise WorkerRefused(f"The peer at {where} closed the connection without answering the handshake.")
        if answer["type"] == "bye":
            sock.close()
            raise WorkerRefused(protocol.reason_of(answer, "The worker refused the connection."))
        worker = answer.get("worker")
        if answer["type"] != "welcome" or not isinstance(worker, dict):
            sock.close()
            raise WorkerRefused(f"The peer at {where} answered the handshake with {answer['type']!r}, not a "
                                "welcome; is it a specscope worker?")
        if answer.get("protocol") != protocol.PROTOCOL_VERSION:
            sock.close()
            raise WorkerRefused(f"The worker at {where} speaks protocol {answer.get('protocol')!r}; this "
                                f"specscope speaks {protocol.PROTOCOL_VERSION}.")
        sock.settimeout(None)  # a run may pause for as long as the user likes
        return cls(sock, reader, address, worker)  # the reader may have read ahead: one per connection

    # ---- sending (any thread) -----------------------------------------------------------------------------
    def _send(self, message: Mapping[str, Any]) -> None:
        data = protocol.encode_message(message)
        with self._send_lock:
            if self._closed.is_set():
                raise WorkerLost("The connection to the worker is closed.")
            try:
                self._sock.sendall(data)
            except OSError as exc:
                raise WorkerLost(f"The connection to the worker failed: {exc.strerror or exc}.") from None

    def set_controls(self, **values: Any) -> None:
        """Change controls (k, temperature, top_k, top_p, adaptive_k); applied between iterations."""
        changes = protocol.control_changes(values)  # a wrong name or type fails here, not on the worker
        validate(replace(ControlValues(), **changes))  # and a value out of range (InvalidControl, a ValueError)
        self._send(protocol.control_set(**changes))

    def action(self, name: str, **data: Any) -> None:
        """pause, resume, stop, baseline, end_drill, or drill with ``spec=drill_to_data(DrillSpec)``."""
        self._send(protocol.control_action(name, **data))

    def stop(self, reason: str = "stop") -> None:
        """Stop the run at its next iteration; ``reason`` (stop, interrupted, terminated) is what its
        RunFinished says, as a local run stopped by a signal says interrupted."""
        self.action("stop", reason=reason)

    # ---- runs (one thread) --------------------------------------------------------------------------------
    def start(self, prompt: str | list[int], controls: ControlValues | None = None,
              options: Mapping[str, Any] | None = None, chat: bool | None = None) -> Iterator[Event]:
        """Start a run and return its events, in order, RunStarted to RunFinished. The start is sent now;
        iterate to the end (stop early with :meth:`stop` and keep iterating). Closing the iterator early
        closes the connection, which stops the run on the worker."""
        if self._running:
            raise RuntimeError("a run is already under way on this connection")
        self._running = True
        self.result = None
        try:
            self._send(protocol.start(prompt, controls or ControlValues(), options or {}, chat))
        except BaseException:
            self._running = False
            raise
        return self._events()

    def _events(self) -> Iterator[Event]:
        began = finished = False
        try:
            while True:
                message = self._read()
                if message is None:
                    if self._closed.is_set():
                        return  # closed on purpose (close() from another thread)
                    raise WorkerLost("The worker closed the connection mid-run (it stopped or was killed).")
                kind = message["type"]
                if kind == "event":
                    event = protocol.decode_event(message)
                    began = True
                    finished = isinstance(event, RunFinished)
                    yield event
                elif kind == "result" and finished:
                    self.result = message
                elif kind == "idle" and finished:
                    return
                elif kind == "error" and not began:
                    raise WorkerRefused(protocol.reason_of(message, "The worker refused to start the run."))
                elif kind == "bye":
                    raise WorkerLost(protocol.reason_of(message, "The worker ended the connection."))
                elif kind != "pong":
                    raise ProtocolError(f"the worker sent {kind!r} out of order")
        except ProtocolError as exc:
            self._say_bye(str(exc))
            raise WorkerLost(f"The worker broke the protocol: {exc}.") from None
        except GeneratorExit:
            self.close()  # the worker stops a run whose client is gone
            raise
        finally:
            self._running = False
            if self._closed.is_set():
                self._sock.close()

    def _read(self) -> dict[str, Any] | None:
        try:
            return self._reader.read()
        except OSError as exc:
            if self._closed.is_set():
                return None
            raise WorkerLost(f"The connection to the worker failed: {exc.strerror or exc}.") from None

    def ping(self) -> None:
        """Liveness between runs: WorkerLost when the worker does not answer."""
        if self._running:
            raise RuntimeError("ping between runs; during a run its events say it is alive")
        self._send({"type": "ping"})
        message = self._answer_between_runs()
        if message["type"] != "pong":
            self._say_bye(f"the worker sent {message['type']!r} out of order")
            raise WorkerLost(f"The worker answered a ping with {message['type']!r}.")

    def swap_drafter(self, kind: str) -> dict[str, Any]:
        """Between runs: the worker's target with drafter ``kind`` (one needing no weights of its own); returns
        the new pair's info (as the welcome's "pair"). WorkerRefused with the worker's sentence when it cannot."""
        if self._running:
            raise RuntimeError("a drafter swap between runs; stop the run first")
        self._send(protocol.drafter(kind))
        while True:
            message = self._answer_between_runs()
            kind_said = message["type"]
            if kind_said == "pair" and isinstance(message.get("pair"), dict):
                self.worker_info = {**self.worker_info, "pair": message["pair"]}
                return dict(message["pair"])
            if kind_said == "error":
                raise WorkerRefused(protocol.reason_of(message, "The worker refused the drafter."))
            if kind_said != "pong":
                self._say_bye(f"the worker sent {kind_said!r} out of order")
                raise WorkerLost(f"The worker answered a drafter swap with {kind_said!r}.")

    def _answer_between_runs(self) -> dict[str, Any]:
        """The worker's next message between runs; WorkerLost when it broke the protocol, closed or said bye."""
        try:
            message = self._read()
        except ProtocolError as exc:
            self._say_bye(str(exc))
            raise WorkerLost(f"The worker broke the protocol: {exc}.") from None
        if message is None:
            raise WorkerLost("The worker closed the connection.")
        if message["type"] == "bye":
            raise WorkerLost(protocol.reason_of(message, "The worker ended the connection."))
        return message

    # ---- closing ------------------------------------------------------------------------------------------
    def _say_bye(self, reason: str) -> None:
        with contextlib.suppress(WorkerLost, ValueError):
            self._send(protocol.bye(reason))
        self.close()

    def close(self) -> None:
        """Say goodbye and close; safe from any thread, more than once. A run under way stops on the worker."""
        if self._closed.is_set():
            return
        with self._send_lock:
            if self._closed.is_set():
                return
            with contextlib.suppress(OSError):
                self._sock.sendall(protocol.encode_message(protocol.bye()))
            self._closed.set()
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)  # wakes the reading thread
        if not self._running:  # else the reading thread closes it when it wakes
            self._sock.close()

    def __enter__(self) -> WorkerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
        self._sock.close()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()
