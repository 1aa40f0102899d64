"""The worker: one loaded pair, one client at a time, a ``core.session.Session`` per ``start``.

The pair is loaded once. An accepted connection must say ``hello`` with the token (compared in constant time
with ``hmac.compare_digest``) within the handshake timeout; it then becomes the one client, and a second one
is refused with a sentence. Each ``start`` runs a session on a thread of its own whose sink sends every event
the moment it is emitted (the event only: the client feeds its own measurement); the connection's thread
meanwhile reads controls and hands them to the session's ``Controls``, which the loop reads between
iterations. A message that breaks the protocol ends the connection with a ``bye`` saying why; the client
leaving stops its run. Nothing in a message is executed: every field is type- and range-checked data.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import queue
import secrets
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from specscope import __version__
from specscope.core.controls import Controls, InvalidControl
from specscope.core.events import Event
from specscope.core.remote import protocol
from specscope.core.remote.options import OPTION_FIELDS, checked_option
from specscope.core.remote.protocol import ProtocolError, drill_from_data
from specscope.core.remote.url import WorkerAddress

HANDSHAKE_TIMEOUT_S = 10.0  # for the whole hello, however its bytes are spaced
# Connections still owing their hello; when one more arrives, the oldest is dropped. The holder of the token
# sends its hello the moment it connects, so slow or silent peers can delay it by a round trip, never lock it out.
MAX_PENDING_HANDSHAKES = 8
LINGER_S = 1.0  # a refused peer gets this long in all to read its bye before the socket closes
MAX_PROMPT_CHARS = 1 << 20
STOP_WAIT_S = 60.0  # a stopped run's last iteration and events may take this long before its client counts as gone
STOP_REASONS = frozenset({"stop", "interrupted", "terminated"})  # what a run's RunFinished may say after a stop

Log = Callable[[str], None]


def _stderr_log(message: str) -> None:
    print(f"specscope serve: {message}", file=sys.stderr, flush=True)


def pair_info(pair: Any) -> dict[str, Any]:
    """What the welcome says about the loaded pair: what a client's session description needs."""
    draft = pair.draft
    return {
        "target": str(pair.target.name), "target_source": str(pair.target.source),
        "target_device": str(pair.target.device),
        "target_dtype": str(pair.target.dtype).replace("torch.", ""),
        "draft": str(draft.name) if draft is not None else None,
        "draft_device": str(draft.device) if draft is not None else None,
        "drafter": str(pair.drafter_kind), "description": str(getattr(pair, "description", "") or ""),
        "context_window": pair.context_window, "use_chat_template": bool(pair.use_chat_template),
    }


def _close_gently(sock: socket.socket) -> None:
    """Close after the peer has had a moment to read what was sent (a reset would throw it away): at most
    ``LINGER_S`` in all, however the peer spaces what it still sends."""
    deadline = time.monotonic() + LINGER_S
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(1 << 16):
                break
    sock.close()


def listen(host: str, port: int) -> socket.socket:
    """The worker's listening socket, bound now: a busy port or a host that is no address of this machine is an
    OSError before minutes of loading, not after."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    return socket.create_server((host, port), family=family)


class WorkerServer:
    """Serve ``pair`` on ``host:port`` (0 = a free port), or on ``listener`` when it is bound already;
    :attr:`address` holds the real port and the token."""

    def __init__(self, pair: Any, host: str = "127.0.0.1", port: int = 0, token: str | None = None, *,
                 handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S, log: Log = _stderr_log,
                 listener: socket.socket | None = None):
        self.pair = pair
        self.spec: Any = None  # the PairSpec that loaded ``pair``, when known: a drafter swap keeps its options
        self.token = token or secrets.token_urlsafe(24)
        self.handshake_timeout_s = handshake_timeout_s
        self.log = log
        self._listener = listener if listener is not None else listen(host, port)
        self.address = WorkerAddress(host, self._listener.getsockname()[1], self.token)
        self._wake_r, self._wake_w = socket.socketpair()
        self._stopping = threading.Event()
        self._lock = threading.Condition()
        self._client: _Connection | None = None
        self._threads: list[threading.Thread] = []
        self._waiting: list[_Connection] = []  # accepted, hello not yet read: oldest first
        self.info = {"pair": pair_info(pair), "device": str(pair.target.device), "pid": os.getpid(),
                     "version": __version__}

    # ---- accepting --------------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        """Accept connections until :meth:`shutdown`; then stop the run under way and say bye."""
        with selectors.DefaultSelector() as selector:
            selector.register(self._listener, selectors.EVENT_READ)
            selector.register(self._wake_r, selectors.EVENT_READ)
            while not self._stopping.is_set():
                for key, _ in selector.select():
                    if key.fileobj is self._listener and not self._stopping.is_set():
                        self._accept()
        self._finish()

    def _accept(self) -> None:
        try:
            sock, peer = self._listener.accept()
        except OSError:
            return
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._threads = [t for t in self._threads if t.is_alive()]
        connection = _Connection(self, sock, f"{peer[0]}:{peer[1]}")
        with self._lock:
            self._waiting = [c for c in self._waiting if c.waiting]
            if len(self._waiting) >= MAX_PENDING_HANDSHAKES:
                self._waiting.pop(0).drop("The worker dropped this connection: it sent no hello while newer "
                                          "ones waited.")
            self._waiting.append(connection)
        thread = threading.Thread(target=connection.serve, name="specscope-worker-connection", daemon=True)
        self._threads.append(thread)
        thread.start()

    def claim(self, connection: _Connection) -> bool:
        """Make ``connection`` the one client; False when another one is."""
        with self._lock:
            if self._client is not None or self._stopping.is_set():
                return False
            self._client = connection
            return True

    def release(self, connection: _Connection) -> None:
        with self._lock:
            if self._client is connection:
                self._client = None
                self._lock.notify_all()

    def wait_without_client(self, timeout_s: float | None = None) -> bool:
        """Wait until no client is connected (its run ended, its connection closed); False on timeout."""
        with self._lock:
            return self._lock.wait_for(lambda: self._client is None, timeout_s)

    # ---- stopping ---------------------------------------------------------------------------------------
    def shutdown(self) -> None:
        """Stop serving (any thread, or a signal handler): serve_forever returns once the run under way ended."""
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def _finish(self) -> None:
        with self._lock:
            client = self._client
        if client is not None:
            client.end("The worker is shutting down.")
        for thread in self._threads:
            thread.join(timeout=30.0)
        self.close()

    def close(self) -> None:
        for s in (self._listener, self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                s.close()


class _Connection:
    """One accepted connection: the handshake, then messages, with a run thread while a run is under way."""

    def __init__(self, server: WorkerServer, sock: socket.socket, peer: str):
        self.server = server
        self.sock = sock
        self.peer = peer
        self.reader = protocol.MessageReader(sock)
        self.send_lock = threading.Lock()
        self.broken = threading.Event()  # a send failed: the client is gone
        self.controls: Controls | None = None
        self.run_thread: threading.Thread | None = None
        self.outbox: queue.SimpleQueue[Event | None] = queue.SimpleQueue()
        self.run_over = threading.Event()
        self.ending = ""
        self.waiting = True  # until its hello is read (or it is dropped)
        self.dropped = False

    # ---- sending ----------------------------------------------------------------------------------------
    def send_bytes(self, data: bytes) -> None:
        if self.broken.is_set():
            return
        with self.send_lock:
            try:
                self.sock.sendall(data)
            except OSError:
                self.broken.set()
                if self.controls is not None:
                    self.controls.stop()  # nobody is listening: end the run at the next boundary

    def send(self, message: dict[str, Any]) -> None:
        self.send_bytes(protocol.encode_message(message))

    def send_event(self, event: Event, snapshot: object = None) -> None:
        """The sink of the run the session feeds: the event alone, handed to the sender thread as it is emitted.
        The loop's thread only queues it (as the autosave recorder's sink does): encoding and sending happen
        beside the next iteration's passes, not between iterations (docs/bench-remote.md)."""
        self.outbox.put(event)

    def _send_events(self) -> None:
        """The sender thread of a run: each queued event, in order, as the event log writes it; None ends it."""
        while (event := self.outbox.get()) is not None:
            self.send_bytes(protocol.encode_event_message(event))

    # ---- the connection's life --------------------------------------------------------------------------
    def serve(self) -> None:
        claimed = False
        try:
            if not self._handshake():
                return
            claimed = True
            self._messages()
        finally:
            self._stop_run("stop")
            if claimed:
                self.server.release(self)
            if self.ending:
                with contextlib.suppress(OSError, ValueError):
                    self.send(protocol.bye(self.ending))
            _close_gently(self.sock)

    def _refuse(self, reason: str) -> bool:
        if self.dropped:  # what its read raised is the drop's doing; the drop's reason stands
            return False
        self.server.log(f"refused {self.peer}: {reason}")
        self.ending = reason
        return False

    def drop(self, reason: str) -> None:
        """From the accepting thread: end a connection that has not said hello (its reading thread returns)."""
        self.ending = reason
        self.dropped = True
        self.waiting = False
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RD)

    def _handshake(self) -> bool:
        try:
            return self._greet()
        finally:
            self.waiting = False

    def _greet(self) -> bool:
        deadline = time.monotonic() + self.server.handshake_timeout_s
        try:
            hello = self.reader.read(deadline)
        except TimeoutError:
            return self._refuse("The worker closed the connection: no hello within "
                                f"{self.server.handshake_timeout_s:g} s.")
        except ProtocolError as exc:
            return self._refuse(f"The worker refused the connection: {exc}.")
        except OSError:
            return False
        with self.server._lock:  # the lock the accepting thread drops connections under
            if hello is None or self.dropped:  # closed, or dropped for a newer connection as its hello arrived
                return False
            self.waiting = False  # read: no longer one a newer connection may push out
        if hello["type"] != "hello":
            return self._refuse(f"The worker refused the connection: it expected hello, not {hello['type']!r}.")
        token = hello.get("token")
        if not isinstance(token, str) or not token:
            return self._refuse("The worker refused the connection: the URL has no token "
                                "(give the whole line `specscope serve` printed).")
        if not hmac.compare_digest(token.encode("utf-8"), self.server.token.encode("utf-8")):
            return self._refuse("The worker refused the connection: wrong token.")
        if hello.get("protocol") != protocol.PROTOCOL_VERSION:
            return self._refuse(f"The worker speaks protocol {protocol.PROTOCOL_VERSION}, the client "
                                f"{hello.get('protocol')!r}: use the same specscope version on both sides.")
        if not self.server.claim(self):
            return self._refuse("The worker already has a client; close it (or stop its run) first: one "
                                "client at a time.")
        self.sock.settimeout(None)
        self.server.log(f"client connected from {self.peer}")
        self.send(protocol.welcome(self.server.info))
        return True

    def _messages(self) -> None:
        while not self.broken.is_set():
            try:
                message = self.reader.read()
            except ProtocolError as exc:
                self.ending = f"The worker closed the connection: {exc}."
                self.server.log(f"{self.peer}: {exc}")
                return
            except OSError:
                return
            if message is None:
                self.server.log(f"client {self.peer} left")
                return
            kind = message["type"]
            try:
                if kind == "bye":
                    return
                if kind == "ping":
                    self.send({"type": "pong"})
                elif kind == "start":
                    self._start(message)
                elif kind == "control":
                    self._control(message)
                elif kind == "drafter":
                    self._swap_drafter(message)
                else:
                    raise ProtocolError(f"the client sent {kind!r} out of order")
            except ProtocolError as exc:
                self.ending = f"The worker closed the connection: {exc}."
                self.server.log(f"{self.peer}: {exc}")
                return

    def end(self, reason: str) -> None:
        """From the server's thread: stop the run, say ``reason`` and close (the reading thread then ends)."""
        self.ending = reason
        self._stop_run("terminated")
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RD)

    # ---- runs -------------------------------------------------------------------------------------------
    def _running(self) -> bool:
        """A run is under way until its idle is sent (its thread may still be returning then)."""
        return self.run_thread is not None and not self.run_over.is_set()

    def _stop_run(self, reason: str) -> None:
        thread, controls = self.run_thread, self.controls
        if thread is not None and controls is not None:
            controls.stop(reason)
            thread.join(STOP_WAIT_S)
            if thread.is_alive():  # the sender is stuck in a send: a client that stopped reading is gone
                with contextlib.suppress(OSError):
                    self.sock.shutdown(socket.SHUT_RDWR)
                thread.join()
        self.run_thread = None

    def _start(self, message: dict[str, Any]) -> None:
        if self._running():
            raise ProtocolError("the client sent start while a run was under way")
        try:
            session, prompt_ids = self._session(message)
        except (ValueError, InvalidControl) as exc:  # the run does not start; the connection stays
            self.send(protocol.error(str(exc)))
            return
        if self.run_thread is not None:
            self.run_thread.join()  # the last run's thread, returning after its idle
        self.controls = session.controls
        self.run_over.clear()
        self.run_thread = threading.Thread(target=self._run, args=(session, prompt_ids),
                                           name="specscope-worker-run", daemon=True)
        self.run_thread.start()

    def _swap_drafter(self, message: dict[str, Any]) -> None:
        """Between runs: the loaded target with another drafter that needs no weights of its own (the app's
        drafter list acts on this worker, never on a pair loaded elsewhere). A refusal keeps the old one."""
        from dataclasses import replace

        from specscope.core.engine.models import swap_drafter
        from specscope.core.engine.pair_spec import ModelLoadError, PairSpec

        if self._running():
            raise ProtocolError("the client sent drafter while a run was under way")
        kind = message.get("drafter")
        if not isinstance(kind, str) or not kind:
            raise ProtocolError("the client sent drafter without a drafter name")
        server = self.server
        if kind == server.pair.drafter_kind:
            self.send(protocol.pair(pair_info(server.pair)))
            return
        try:
            # a worker started without its spec (tests, embedders): the drafters' default options
            spec = replace(server.spec if server.spec is not None else PairSpec(target=str(server.pair.target.name)),
                           drafter=kind, draft=None)
            pair = swap_drafter(server.pair, spec)
        except ModelLoadError as exc:
            self.send(protocol.error(str(exc)))
            return
        server.pair = pair
        server.spec = spec
        info = pair_info(pair)
        server.info = {**server.info, "pair": info}
        server.log(f"drafter swapped to {kind}: {pair.description}")
        self.send(protocol.pair(info))

    def _session(self, message: dict[str, Any]) -> tuple[Any, list[int]]:
        from specscope.core.measure.run import Run
        from specscope.core.session import Session

        pair = self.server.pair
        controls = Controls(protocol.controls_from_data(message.get("controls", {})))
        text, prompt_ids = self._prompt(message)
        options = session_options_from_data(message.get("options", {}), pair, prompt_text=text)
        _check_length(pair, prompt_ids, options.max_new_tokens)
        # the client measures the events for itself: this run only drives the session's policies
        run = Run(sinks=[self.send_event], keep_snapshots=False)
        return Session(pair, controls, options, run=run), prompt_ids

    def _prompt(self, message: dict[str, Any]) -> tuple[str, list[int]]:
        pair = self.server.pair
        chat = message.get("chat")
        if chat is not None and not isinstance(chat, bool):
            raise ProtocolError("chat is not true, false or absent")
        if "prompt" in message:
            text = message["prompt"]
            if not isinstance(text, str) or len(text) > MAX_PROMPT_CHARS:
                raise ValueError(f"the prompt is not text of at most {MAX_PROMPT_CHARS:,} characters")
            return text, list(pair.encode_prompt(text, chat=chat))
        ids = message.get("prompt_ids")
        if (not isinstance(ids, list) or len(ids) > MAX_PROMPT_CHARS
                or not all(isinstance(t, int) and not isinstance(t, bool) and 0 <= t < pair.vocab_size
                           for t in ids)):
            raise ValueError(f"prompt_ids is not a list of token ids below the vocabulary's {pair.vocab_size:,}")
        return "", list(ids)

    def _run(self, session: Any, prompt_ids: list[int]) -> None:
        """The run thread: every event goes out from the session's sink as it is emitted (by the sender)."""
        sender = threading.Thread(target=self._send_events, name="specscope-worker-sender", daemon=True)
        sender.start()
        try:
            for _event in session.stream(prompt_ids):
                pass
        except Exception as exc:  # a model failing mid-run: RunFinished (sent) says so; the worker lives on
            self.server.log(f"the run failed: {type(exc).__name__}: {exc}")
        finally:
            self.outbox.put(None)
            sender.join()  # every event is out before the result and idle
        self.send(self._result(session))
        self.run_over.set()  # before idle: the client may start the next run the moment idle arrives
        self.send({"type": "idle"})

    def _result(self, session: Any) -> dict[str, Any]:
        """What the client cannot derive from the events: the text as the tokenizer decodes it, and where
        the weights live on this machine (the summary's residency lines)."""
        from specscope.core.memory.residency import model_residency

        pair = self.server.pair
        result = session.result
        token_ids = list(result.token_ids) if result is not None else []
        residency = {"target": model_residency(pair.target.model, pair.target.device, "target")}
        if pair.draft is not None:
            residency["draft"] = model_residency(pair.draft.model, pair.draft.device, "draft")
        return {"type": "result", "token_ids": token_ids,
                "text": pair.tokenizer.decode(token_ids, skip_special_tokens=True),
                "residency": {name: asdict(r) for name, r in residency.items()}}

    def _control(self, message: dict[str, Any]) -> None:
        controls = self.controls if self._running() else None
        if "set" in message:
            changes = protocol.control_changes(message["set"])
            if controls is not None:
                try:
                    controls.update(**changes)
                except InvalidControl as exc:
                    raise ProtocolError(f"a control out of range ({exc})") from None
            return
        action = message.get("action")
        if action not in protocol.ACTIONS:
            raise ProtocolError(f"the client asked for an unknown control action {action!r}")
        spec = protocol.drill_from_data(message.get("spec")) if action == "drill" else None
        if controls is None:
            return  # a control that arrives just after the run ended changes nothing
        if action == "pause":
            controls.pause()
        elif action == "resume":
            controls.resume()
        elif action == "stop":
            reason = message.get("reason", "stop")
            if reason not in STOP_REASONS:
                raise ProtocolError(f"a stop's reason is one of {', '.join(sorted(STOP_REASONS))}")
            controls.stop(reason)
        elif action == "baseline":
            controls.request_baseline()
        elif action == "end_drill":
            controls.end_drill()
        else:
            controls.start_drill(spec)


def _check_length(pair: Any, prompt_ids: list[int], max_new_tokens: int) -> None:
    """The CLI's own context check (``prompts.context_problem``), as the error sentence of a refused start."""
    from specscope.core.prompts import context_problem

    problem = context_problem(len(prompt_ids), pair.context_window, pair.target.name)
    if problem is not None:
        raise ValueError(problem)


def serve(pair_factory: Callable[[], Any], host: str = "127.0.0.1", port: int = 0, token: str | None = None,
          on_ready: Callable[[WorkerServer], None] | None = None, log: Log = _stderr_log) -> None:
    """Load the pair once, bind, call ``on_ready`` (``specscope serve`` prints the URL there), serve until
    :meth:`WorkerServer.shutdown`."""
    from specscope.core.gc_freeze import loaded_objects_frozen

    listener = listen(host, port)  # before the load: a busy port is said at once
    try:
        pair = pair_factory()
    except BaseException:
        listener.close()
        raise
    server = WorkerServer(pair, host, port, token, log=log, listener=listener)
    try:
        if on_ready is not None:
            on_ready(server)
        with loaded_objects_frozen():  # no full collection in a timed step (core/gc_freeze.py)
            server.serve_forever()
    finally:
        server.close()


def session_options_from_data(data: Any, pair: Any, prompt_text: str = "") -> Any:
    """``SessionOptions`` for a run on the worker; ValueError with one sentence when a field is wrong."""
    from specscope.core.session import SessionOptions

    if not isinstance(data, dict):
        raise ProtocolError("the start's options are not an object")
    unknown = sorted(set(data) - set(OPTION_FIELDS) - {"drill"})
    if unknown:
        raise ValueError(f"the worker takes no option {unknown[0]!r}")
    fields = {name: checked_option(name, value) for name, value in data.items() if name != "drill"}
    drill = None
    if data.get("drill") is not None:
        try:
            drill = drill_from_data(data["drill"])
        except ProtocolError as exc:
            raise ValueError(str(exc)) from None
        if drill.model == "draft" and (fields.get("plain") or pair.draft is None):
            raise ValueError("a draft drill needs a draft model (--drafter model, not --plain): drill the target")
    return SessionOptions(**fields, drill=drill, prompt_text=prompt_text, source="remote")
