"""The worker's port under hostile clients (issue 41, item 6), with real sockets on 127.0.0.1: the hello has one
deadline however its bytes are spaced, half a message never holds a slot past it, and however many silent or
slow connections wait, the holder of the token gets in."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from specscope.core.commands.pair_arguments import spec_from_args
from specscope.core.engine.models import load_pair
from specscope.core.remote import protocol
from specscope.core.remote.client import WorkerClient
from specscope.core.remote.server import MAX_PENDING_HANDSHAKES, WorkerServer
from tests.remote_helpers import pair_args, tiny_pair_dirs

HANDSHAKE_S = 1.0  # the tests' handshake deadline (the worker's default is 10 s)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    from specscope.core.commands.cli import build_parser

    dirs: dict[str, Path] = tiny_pair_dirs(tmp_path_factory.mktemp("port"))
    return load_pair(spec_from_args(build_parser().parse_args(["serve", *pair_args(dirs)])))


@pytest.fixture
def worker(pair) -> Iterator[WorkerServer]:
    server = WorkerServer(pair, "127.0.0.1", 0, handshake_timeout_s=HANDSHAKE_S, log=lambda _m: None)
    thread = threading.Thread(target=server.serve_forever, name="specscope-worker-serve", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join()


def _raw(server: WorkerServer) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.address.port), timeout=10)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def _bye(sock: socket.socket) -> dict:
    """The worker's last message on ``sock`` (it sends a bye, then closes)."""
    reader = protocol.MessageReader(sock)
    message = reader.read()
    assert message is not None and message["type"] == "bye", message
    return message


def _token_holder_gets_in(server: WorkerServer) -> None:
    client = WorkerClient.connect(server.address, timeout=10)
    try:
        assert client.worker_info["pair"]["target"]
    finally:
        client.close()
    assert server.wait_without_client(10.0)


class _Drip:
    """A client that sends a hello one byte every ``every_s``, never finishing it, until stopped."""

    def __init__(self, server: WorkerServer, every_s: float):
        self.sock = _raw(server)
        self.every_s = every_s
        self.sent = 0
        self.closed_at: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._drip, name="drip", daemon=True)
        self._thread.start()

    def _drip(self) -> None:
        line = b'{"type":"hello","token":"' + b"x" * 10_000
        while not self._stop.wait(self.every_s):
            try:
                self.sock.sendall(line[self.sent:self.sent + 1])
            except OSError:  # the worker closed it
                self.closed_at = time.monotonic()
                return
            self.sent += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        with contextlib.suppress(OSError):
            self.sock.close()


def test_a_hello_dripped_a_byte_at_a_time_meets_one_deadline(worker) -> None:
    """Each byte comes well within the deadline, so a timeout per read never fires; the hello's one does."""
    start = time.monotonic()
    drip = _Drip(worker, every_s=HANDSHAKE_S / 5)
    try:
        bye = _bye(drip.sock)
        waited = time.monotonic() - start
    finally:
        drip.stop()
    assert f"no hello within {HANDSHAKE_S:g} s" in bye["reason"]
    assert waited < 3 * HANDSHAKE_S  # per-read timeouts kept it open for as long as the drip went on
    assert drip.sent >= 2  # it did send in time, byte by byte
    _token_holder_gets_in(worker)


@pytest.mark.parametrize("half", [b'{"type":"hello","protocol":1,"tok', b"{", b""])
def test_half_a_hello_holds_nothing_past_the_deadline(worker, half) -> None:
    sock = _raw(worker)
    with sock:
        sock.sendall(half)
        start = time.monotonic()
        bye = _bye(sock)
        assert time.monotonic() - start < 3 * HANDSHAKE_S
        assert "no hello within" in bye["reason"]
    _token_holder_gets_in(worker)


def test_the_token_holder_gets_in_past_a_flood_of_silent_and_slow_connections(worker) -> None:
    """More silent connections and drips than there are slots: each newcomer pushes out the oldest waiting
    one, so the token holder's hello, sent as it connects, is always read."""
    silent = [_raw(worker) for _ in range(MAX_PENDING_HANDSHAKES + 4)]
    drips = [_Drip(worker, every_s=HANDSHAKE_S / 10) for _ in range(MAX_PENDING_HANDSHAKES)]
    try:
        _token_holder_gets_in(worker)
        # The oldest silent ones were pushed out, with a sentence saying why.
        bye = _bye(silent[0])
        assert "dropped this connection" in bye["reason"] and "no hello" in bye["reason"]
        # A new flood while a client is connected: the client keeps its connection, and the next one gets in.
        client = WorkerClient.connect(worker.address, timeout=10)
        silent += [_raw(worker) for _ in range(2 * MAX_PENDING_HANDSHAKES)]
        client.ping()
        client.close()
        assert worker.wait_without_client(10.0)
        _token_holder_gets_in(worker)
    finally:
        for d in drips:
            d.stop()
        for s in silent:
            s.close()


def test_a_flood_of_connections_that_close_at_once_leaves_the_port_open(worker) -> None:
    for _ in range(200):
        s = _raw(worker)
        s.close()
    _token_holder_gets_in(worker)


def test_a_wrong_token_dripped_in_is_refused_and_the_right_one_gets_in(worker) -> None:
    sock = _raw(worker)
    with sock:
        line = protocol.encode_message(protocol.hello("wrong", "test"))
        for i in range(0, len(line), 7):  # a whole hello, in pieces, inside the deadline
            sock.sendall(line[i:i + 7])
        assert "wrong token" in _bye(sock)["reason"]
    _token_holder_gets_in(worker)
