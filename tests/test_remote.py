"""`specscope serve` and `run --remote` end to end on 127.0.0.1 with the tiny pair: the same tokens and trace as
a local run, controls applied between iterations, and every refusal one sentence."""

from __future__ import annotations

import contextlib
import json
import math
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specscope.core.commands.pair_arguments import spec_from_args
from specscope.core.engine.models import load_pair
from specscope.core.events import ControlChange, RunFinished, RunStarted
from specscope.core.measure.run import Run
from specscope.core.records import ControlValues, IterationRecord
from specscope.core.remote import protocol
from specscope.core.remote.client import WorkerClient, WorkerLost, WorkerRefused
from specscope.core.remote.server import WorkerServer
from specscope.core.remote.url import WorkerAddress
from tests.cli_helpers import cli, one_sentence, sessions
from tests.remote_helpers import pair_args, tiny_pair_dirs

PROMPT = ["--prompt", "w5 w6 w7", "--no-chat-template"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    return tiny_pair_dirs(tmp_path_factory.mktemp("remote"))


@pytest.fixture(scope="module")
def pair(dirs):
    from specscope.core.commands.cli import build_parser

    args = build_parser().parse_args(["serve", *pair_args(dirs)])
    return load_pair(spec_from_args(args))


@pytest.fixture
def worker(pair) -> Iterator[WorkerServer]:
    """A worker serving the tiny pair from a thread of this process; shut down and joined after the test."""
    server = WorkerServer(pair, "127.0.0.1", 0, log=lambda _m: None)
    thread = threading.Thread(target=server.serve_forever, name="specscope-worker-serve", daemon=True)
    thread.start()
    yield server
    server.shutdown()
    thread.join()


def _url(server: WorkerServer, token: str | None = None) -> str:
    a = server.address
    return WorkerAddress(a.host, a.port, a.token if token is None else token).url()


def _comparable(path: Path) -> list[dict[str, Any]]:
    """The trace's events without what a run measures in time (and the machine it describes, its source)."""
    timed = {"t_s", "t_start_s", "t_end_s", "elapsed_s", "prefill_ms", "draft_ms", "verify_ms", "rollback_ms",
             "iteration_ms", "cpu_ms", "preempted", "memory", "flags", "machine", "source"}
    lines = path.read_text(encoding="utf-8").splitlines()[1:]
    return [{k: v for k, v in json.loads(line).items() if k not in timed} for line in lines]


# ---- the same run, here and there ------------------------------------------------------------------------
def test_remote_run_gives_the_local_tokens_and_trace(worker, dirs, tmp_path, capsys) -> None:
    common = [*PROMPT, "--max-new-tokens", "24", "--k", "3", "--baseline-every", "0", "--explore-every", "0",
              "--json"]
    rc, out, err = cli(capsys, "run", *pair_args(dirs), *common, "--trace", str(tmp_path / "local.csv"))
    assert rc == 0, err
    local = json.loads(out)
    before = sessions()
    rc, out, err = cli(capsys, "run", "--remote", _url(worker), *common, "--trace", str(tmp_path / "remote.csv"))
    assert rc == 0, err
    remote = json.loads(out)
    assert remote["token_ids"] == local["token_ids"] and len(remote["token_ids"]) == 24
    assert remote["text"] == local["text"] and remote["finish_reason"] == local["finish_reason"]
    for key in ("tokens", "iterations", "accepted", "judged", "drafted", "alpha", "per_position_acceptance"):
        assert remote["metrics"][key] == local["metrics"][key], key
    assert remote["residency"] == local["residency"]
    assert _comparable(tmp_path / "remote.events.jsonl") == _comparable(tmp_path / "local.events.jsonl")
    # the autosave of a remote run: its own session folder, the same stream, the worker named without its token
    (folder,) = sessions() - before
    assert remote["session_folder"] == str(folder)
    saved = next(iter(folder.glob("*.events.jsonl")))
    assert _comparable(saved) == _comparable(tmp_path / "remote.events.jsonl")
    token = worker.token
    for path in [*folder.iterdir(), *tmp_path.iterdir()]:
        assert token not in path.read_text(encoding="utf-8", errors="replace"), path


def test_remote_summary_text_is_a_local_runs(worker, capsys) -> None:
    rc, out, err = cli(capsys, "run", "--remote", _url(worker), *PROMPT, "--max-new-tokens", "12", "--quiet")
    assert rc == 0, err
    assert "── specscope run" in out and "mode          speculative, drafter model" in out
    assert "residency     target:" in out and "residency     draft:" in out


def test_received_run_feeds_the_one_owner(worker) -> None:
    """The client's numbers are its own run's, fed the events: the same as a replay of them, measured over the
    recent window the worker's run recorded (not the default)."""
    from specscope.core.measure.run import replay

    seen: list[Any] = []
    run = Run(sinks=[lambda e, s: seen.append((e, s))])
    with WorkerClient.connect(worker.address) as client:
        options = {"max_new_tokens": 20, "alpha_window": 3}
        for event in client.start("w5 w6 w7", ControlValues(k=2), options, chat=False):
            run.feed(event)
        assert client.result is not None and client.result["token_ids"] == run.token_ids()
    assert isinstance(run.started, RunStarted) and run.started.source == "remote"
    assert run.started.alpha_window == 3 and run.alpha_window == 3
    assert isinstance(run.finished, RunFinished) and run.finished.tokens == 20
    assert seen == run.observed()
    again = replay(run.events).estimate()
    mine = run.estimate()
    assert mine is not None and mine.window == 3 and again == mine


def test_the_alternatives_arrive_with_their_texts(worker, pair) -> None:
    """The client has no tokenizer: every top-5 alternative's text travels with the record."""
    with WorkerClient.connect(worker.address) as client:
        events = list(client.start("w5 w6 w7", ControlValues(k=3), {"max_new_tokens": 16}, chat=False))
    tokens = [t for e in events if isinstance(e, IterationRecord) for t in e.tokens]
    assert tokens and all(len(t.top5) == 5 for t in tokens)
    for t in tokens:
        assert t.top5_text == [pair.token_text(i) for i, _ in t.top5]
    shown = {t.token_id for t in tokens}
    assert any(i not in shown for t in tokens for i, _ in t.top5)  # ids the stream's own tokens cannot name


def test_a_drafter_swap_acts_on_the_worker_and_keeps_its_target(dirs) -> None:
    """Lookup and the target's own layers need no weights of their own: the worker swaps them in between runs
    without loading the target again; a drafter that needs weights is refused in one sentence."""
    from specscope.core.commands.cli import build_parser

    own = load_pair(spec_from_args(build_parser().parse_args(["serve", *pair_args(dirs)])))  # swapped: not shared
    server = WorkerServer(own, "127.0.0.1", 0, log=lambda _m: None)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    target = own.target
    try:
        with WorkerClient.connect(server.address) as client:
            plain = list(client.start("w5 w6 w7", ControlValues(k=3), {"max_new_tokens": 16}, chat=False))
            info = client.swap_drafter("lookup")
            assert info["drafter"] == "lookup" and info["draft"] is None and "prompt lookup" in info["description"]
            assert server.pair.target is target and server.pair.draft is None  # the target was not reloaded
            assert client.worker_info["pair"] == info == server.info["pair"]
            swapped = list(client.start("w5 w6 w7", ControlValues(k=3), {"max_new_tokens": 16}, chat=False))
            assert {e.drafter for e in swapped if isinstance(e, IterationRecord)} == {"lookup"}
            assert client.result is not None
            # greedy output is the target's whatever drafts: the same 16 tokens as with the draft model
            tokens = [t.token_id for e in plain if isinstance(e, IterationRecord) for t in e.tokens
                      if t.status.committed]
            assert client.result["token_ids"] == tokens
            assert client.swap_drafter("early-exit")["drafter"] == "early-exit"
            with pytest.raises(WorkerRefused, match=r"^the model drafter needs weights of its own"):
                client.swap_drafter("model")
            assert server.pair.drafter_kind == "early-exit"  # a refusal keeps the drafter in use
            client.ping()  # and the connection
    finally:
        server.shutdown()
        thread.join()


def test_the_connection_serves_one_run_after_another(worker) -> None:
    """The next start may follow the idle at once (the last run's thread can still be returning then)."""
    with WorkerClient.connect(worker.address) as client:
        runs = [list(client.start("w5 w6", ControlValues(k=2), {"max_new_tokens": 4}, chat=False))
                for _ in range(6)]
        client.ping()
    tokens = [[t.token_id for e in run if isinstance(e, IterationRecord) for t in e.tokens] for run in runs]
    assert all(t == tokens[0] for t in tokens) and tokens[0]


# ---- controls ------------------------------------------------------------------------------------------------
def test_controls_apply_at_the_next_iteration(worker) -> None:
    events: list[Any] = []
    with WorkerClient.connect(worker.address) as client:
        iterations = 0
        for event in client.start("w5 w6 w7", ControlValues(k=2), {"max_new_tokens": 300, "baseline_every": 0,
                                                                    "explore_every": 0}, chat=False):
            events.append(event)
            iterations += isinstance(event, IterationRecord)
            if iterations == 3 and isinstance(event, IterationRecord):
                client.set_controls(k=4)
            elif isinstance(event, ControlChange):
                client.stop()
    (change,) = [e for e in events if isinstance(e, ControlChange)]
    assert (change.old.k, change.new.k) == (2, 4)
    records = [e for e in events if isinstance(e, IterationRecord)]
    before = [r for r in records if r.iteration < change.iteration]
    after = [r for r in records if r.iteration >= change.iteration]
    assert len(before) >= 3 and after, "the change landed between two iterations of the run"
    assert {r.controls.k for r in before} == {2} and {r.controls.k for r in after} == {4}
    assert max(r.n_drafted for r in after) == 4
    assert isinstance(events[-1], RunFinished) and events[-1].reason == "stop"
    assert events[-1].tokens < 300


def test_close_from_another_thread_ends_the_iteration_and_the_run(worker) -> None:
    """The app's case: its GUI thread closes the connection while a reader thread iterates the events."""
    reached = threading.Event()
    client = WorkerClient.connect(worker.address)
    closer = threading.Thread(target=lambda: (reached.wait(), client.close()))
    closer.start()
    events = []
    for event in client.start("w5 w6 w7", ControlValues(k=2), {"max_new_tokens": 400}, chat=False):
        events.append(event)
        if isinstance(event, IterationRecord) and event.iteration == 2:
            reached.set()
    closer.join()
    assert client.closed and len(events) >= 3  # ended quietly, with what arrived
    assert worker.wait_without_client(10.0)  # the worker stopped the run and let the client go


def test_drill_and_baseline_actions_reach_the_session(worker) -> None:
    from specscope.core.drill_spec import DrillSpec
    from specscope.core.records import PLAIN_MODE, DrillEvent

    events: list[Any] = []
    with WorkerClient.connect(worker.address) as client:
        asked, ended, plain = 0, False, False
        for event in client.start("w5 w6 w7", ControlValues(k=2), {"max_new_tokens": 400, "baseline_every": 0,
                                                                    "explore_every": 0}, chat=False):
            events.append(event)
            if isinstance(event, IterationRecord) and event.iteration == 2 and not asked:
                asked = 1
                client.action("drill", spec=protocol.drill_to_data(DrillSpec("target", layers=1)))
            elif isinstance(event, DrillEvent) and event.kind == "start":
                client.action("baseline")
                client.action("end_drill")
            ended = ended or (isinstance(event, DrillEvent) and event.kind == "end")
            plain = plain or (isinstance(event, IterationRecord) and event.mode == PLAIN_MODE)
            if ended and plain:
                client.stop()
    drills = [e for e in events if isinstance(e, DrillEvent)]
    assert [(d.kind, d.model, d.layers, d.error) for d in drills] == [("start", "target", 1, ""),
                                                                      ("end", "target", 1, "")]
    assert plain and isinstance(events[-1], RunFinished) and events[-1].reason == "stop"  # the baseline came


def test_a_control_out_of_range_is_refused_before_it_is_sent(worker) -> None:
    with WorkerClient.connect(worker.address) as client:
        with pytest.raises(ValueError, match="k must be between 1 and 16"):
            client.set_controls(k=99)
        with pytest.raises(ValueError, match="no control named"):
            client.set_controls(colour=3)
        client.ping()  # the connection is still fine


def test_a_paused_run_stops_when_asked(worker) -> None:
    with WorkerClient.connect(worker.address) as client:
        events = []
        for event in client.start("w5 w6 w7", ControlValues(k=2), {"max_new_tokens": 300}, chat=False):
            events.append(event)
            if isinstance(event, IterationRecord) and event.iteration == 1:
                client.action("pause")
                client.stop()  # a paused loop wakes up to see the stop
        assert isinstance(events[-1], RunFinished) and events[-1].reason == "stop" and events[-1].tokens < 300


def test_a_refused_start_is_one_sentence_and_the_connection_stays(worker, capsys) -> None:
    with WorkerClient.connect(worker.address) as client:
        with pytest.raises(WorkerRefused, match="the worker takes no option 'drill_folder'"):
            list(client.start("w5", ControlValues(), {"drill_folder": "/etc"}))
        with pytest.raises(WorkerRefused, match="k must be between"):
            list(client.start("w5", ControlValues(k=40), {}))
        with pytest.raises(WorkerRefused, match=r"measurement_budget is not a number from 0\.001 to 0\.5"):
            list(client.start("w5", ControlValues(), {"measurement_budget": 0}))  # the schedule needs > 0
        assert [e for e in client.start("w5 w6", ControlValues(k=2), {"max_new_tokens": 4}, chat=False)]
    worker.wait_without_client(10.0)
    long_prompt = " ".join(["w5"] * 600)  # the tiny target holds 512 positions
    rc, _out, err = cli(capsys, "run", "--remote", _url(worker), "--prompt", long_prompt, "--no-chat-template")
    assert rc == 2 and "shorten it to fewer than 512 tokens" in one_sentence(err)


# ---- refusals ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("token, words", [("not-the-token", "wrong token"), ("", "the URL has no token")])
def test_a_wrong_or_missing_token_is_refused(worker, capsys, token, words) -> None:
    before = sessions()
    rc, out, err = cli(capsys, "run", "--remote", _url(worker, token), *PROMPT)
    assert rc == 2 and out == ""
    assert one_sentence(err) == f"specscope: error: The worker refused the connection: {words}" + (
        " (give the whole line `specscope serve` printed)" if not token else "")
    assert sessions() == before  # nothing was decoded: no autosave folder


def test_a_bad_url_or_a_pair_with_remote_is_a_usage_error(capsys) -> None:
    rc, _out, err = cli(capsys, "run", "--remote", "http://127.0.0.1:7777/", *PROMPT)
    assert rc == 2 and "--remote: a worker URL starts with specscope://" in one_sentence(err)
    rc, _out, err = cli(capsys, "run", "--remote", "specscope://127.0.0.1:7777/?token=x", "--demo", *PROMPT)
    assert rc == 2 and "leave out --demo" in one_sentence(err)


def test_nothing_listening_is_one_sentence(capsys) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # a port nobody listens on once this socket closes
    rc, _out, err = cli(capsys, "run", "--remote", f"specscope://127.0.0.1:{port}/?token=abc", *PROMPT)
    assert rc == 2 and "Could not connect to a worker at 127.0.0.1:" in one_sentence(err)


@pytest.mark.parametrize("host", ["", "   "])
def test_serve_refuses_an_empty_host_before_loading(capsys, host) -> None:
    """An empty --host would listen on every interface and print the unusable URL specscope://:7777/."""
    rc, _out, err = cli(capsys, "serve", "--demo", "--host", host)
    assert rc == 2 and "argument --host: needs an address" in err.strip().splitlines()[-1]


def test_a_second_client_is_refused_until_the_first_leaves(worker) -> None:
    first = WorkerClient.connect(worker.address)
    with pytest.raises(WorkerRefused, match=r"The worker already has a client; .* one client at a time"):
        WorkerClient.connect(worker.address)
    first.close()
    assert worker.wait_without_client(10.0)
    with WorkerClient.connect(worker.address) as second:
        second.ping()


def _raw(server: WorkerServer) -> tuple[socket.socket, protocol.MessageReader]:
    sock = socket.create_connection((server.address.host, server.address.port), timeout=10)
    return sock, protocol.MessageReader(sock)


@pytest.mark.parametrize("garbage, words", [
    (b"this is not json\n", "not JSON"),
    (b"\xff\xfe\n", "not UTF-8"),
    (b'{"no": "type"}\n', "without a type"),
    (b"[" * 40 + b"]" * 40 + b"\n", "beyond the protocol's bounds"),
    (b'{"type": "exec", "code": "import os"}\n', "'exec' out of order"),
])
def test_garbage_after_the_handshake_closes_with_one_sentence(worker, garbage, words) -> None:
    sock, reader = _raw(worker)
    with sock:
        sock.sendall(protocol.encode_message(protocol.hello(worker.token, "test")))
        assert reader.read()["type"] == "welcome"
        sock.sendall(garbage)
        bye = reader.read()
        assert bye["type"] == "bye" and words in bye["reason"] and bye["reason"].count(". ") == 0
        assert reader.read() is None  # closed
    assert worker.wait_without_client(10.0)


def test_garbage_instead_of_hello_and_an_endless_line_are_refused(worker) -> None:
    sock, reader = _raw(worker)
    with sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        bye = reader.read()
        assert bye["type"] == "bye" and "not JSON" in bye["reason"]
    sock, reader = _raw(worker)
    with sock:
        with contextlib.suppress(OSError):  # the worker may close before it has all of it
            sock.sendall(b"x" * (protocol.MAX_LINE_BYTES + 2))  # no newline, ever
        bye = reader.read()
        assert bye["type"] == "bye" and "longer than the protocol's 4 MiB" in bye["reason"]


def test_the_client_refuses_a_peer_that_is_not_a_worker() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]

        def answer() -> None:
            conn, _ = listener.accept()
            with conn:
                conn.recv(1 << 16)
                conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer)
        thread.start()
        with pytest.raises(WorkerRefused, match="is not a specscope worker"):
            WorkerClient.connect(WorkerAddress("127.0.0.1", port, "abc"), timeout=10)
        thread.join()


def test_a_worker_that_breaks_the_protocol_mid_run_is_lost(worker) -> None:
    """A fake worker: a proper welcome, then an event that does not hold: WorkerLost, and a bye back."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        said: list[dict[str, Any]] = []

        def fake() -> None:
            conn, _ = listener.accept()
            with conn:
                reader = protocol.MessageReader(conn)
                reader.read()
                conn.sendall(protocol.encode_message(protocol.welcome(worker.info)))
                reader.read()  # start
                conn.sendall(b'{"type":"event","event":{"type":"iteration","n_drafted":-4}}\n')
                while (message := reader.read()) is not None:
                    said.append(message)

        thread = threading.Thread(target=fake)
        thread.start()
        with (WorkerClient.connect(WorkerAddress("127.0.0.1", port, "abc")) as client,
              pytest.raises(WorkerLost, match="broke the protocol: the worker sent an event that does not hold")):
            list(client.start("w5", ControlValues(), {}))
        thread.join()
    assert said and said[0]["type"] == "bye" and "does not hold" in said[0]["reason"]


def test_protocol_lines_round_trip_an_event() -> None:
    from specscope.core.trace.event_log import encode

    event = RunFinished(reason="eos", iterations=3, tokens=7, elapsed_s=0.5, prefill_ms=1.25, t_s=1.0)
    line = protocol.encode_event_message(event)
    assert line == b'{"type":"event","event":' + encode(event).encode() + b"}\n"
    a, b = socket.socketpair()
    with a, b:
        a.sendall(line + protocol.encode_message({"type": "idle"}))
        reader = protocol.MessageReader(b)
        assert protocol.decode_event(reader.read()) == event
        assert reader.read() == {"type": "idle"}


def test_the_event_line_is_what_asdict_gave(pair) -> None:
    """event_log.encode builds its JSON without asdict's deep copies: the lines are the same, NaN, enums,
    int keys and tuples included."""
    from dataclasses import asdict

    from specscope.core.records import DrillEvent
    from specscope.core.trace.event_log import _TYPES, _finite, encode
    from tests.trace_samples import sample_baselines, sample_records

    def with_asdict(event: Any) -> str:
        return json.dumps({"type": _TYPES[type(event)], **_finite(asdict(event))}, ensure_ascii=False,
                          allow_nan=False, separators=(",", ":"))

    records = sample_records()
    records[1].draft_ms = math.nan
    controls = ControlValues(k=3, temperature=0.5, adaptive_k=True)
    events: list[Any] = [
        RunStarted("remote", "t", "d", "model", "t with d", "p ✓", 3, controls, 10, seed=7,
                   options={"baseline_every": 6, "extra": {"nested": [1, 2.5, float("inf")]}},
                   machine={"platform": "x"}, t_s=1.0),
        *records, *sample_baselines(),
        ControlChange(2, controls, ControlValues(k=5), t_s=2.0),
        DrillEvent("start", "target", 2, 2, "disk", 3, moved_bytes=10, t_s=3.0),
        RunFinished("eos", 5, 9, 0.5, 1.25, t_s=4.0),
    ]
    assert [encode(e) for e in events] == [with_asdict(e) for e in events]


# ---- addresses -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text, host, port, token", [
    ("specscope://127.0.0.1:7777/?token=abc_-9", "127.0.0.1", 7777, "abc_-9"),
    ("specscope://[::1]:7777/?token=Zq9_secret", "::1", 7777, "Zq9_secret"),
    ("  specscope://gpu-host.example:1/  ", "gpu-host.example", 1, ""),
    ("SPECSCOPE://localhost:65535?token=Kx7-secret", "localhost", 65535, "Kx7-secret"),
])
def test_worker_urls_parse(text, host, port, token) -> None:
    from specscope.core.remote.url import parse_worker_url

    address = parse_worker_url(text)
    assert (address.host, address.port, address.token) == (host, port, token)
    assert parse_worker_url(address.url()) == address
    if token:
        assert token not in repr(address) and token not in str(address) and token not in address.redacted()


@pytest.mark.parametrize("text, words", [
    ("", "is empty"),
    ("http://127.0.0.1:7777/?token=x", "starts with specscope://"),
    ("specscope://::1:7777/?token=x", "put it in brackets"),
    ("specscope://[::1:7777/?token=x", "no closing bracket"),
    ("specscope://[nothost]:7777/", "is not an IPv6 address"),
    ("specscope://host/?token=x", "has no port"),
    ("specscope://host:99999/", "from 1 to 65535"),
    ("specscope://user@host:1/", "carries no user name"),
    ("specscope://host:1/path?token=x", "has no path"),
    ("specscope://host:1/?token=x&token=y", "more than once"),
    ("specscope://host:1/?key=x", "unknown parameter 'key'"),
    ("specscope://host:1/?token=a%20b", "characters a worker token never has"),
    ("specscope://host name:1/", "not a host name or address"),
])
def test_bad_worker_urls_are_one_sentence(text, words) -> None:
    from specscope.core.remote.url import BadWorkerUrl, parse_worker_url

    with pytest.raises(BadWorkerUrl, match=words):
        parse_worker_url(text)


def test_a_worker_on_ipv6_loopback(pair) -> None:
    if not socket.has_ipv6:
        pytest.skip("no IPv6 here")
    try:
        server = WorkerServer(pair, "::1", 0, log=lambda _m: None)
    except OSError as exc:
        pytest.skip(f"cannot listen on ::1 here: {exc}")
    thread = threading.Thread(target=server.serve_forever, name="specscope-worker-serve", daemon=True)
    thread.start()
    try:
        assert server.address.url().startswith("specscope://[::1]:")
        with WorkerClient.connect(server.address) as client:
            client.ping()
    finally:
        server.shutdown()
        thread.join()


def test_the_client_side_imports_no_torch() -> None:
    """A GUI process talks to its worker through these modules: none of them may pull torch in."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import specscope.core.remote.client, specscope.core.measure.run, specscope.core.remote.spawn\n"
            "import specscope.core.remote.url, specscope.core.remote.protocol\n"
            "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("::1", True), ("localhost", True),
                                            ("0.0.0.0", False), ("::", False), ("gpu-host", False)])
def test_serve_knows_when_it_listens_beyond_this_machine(host, loopback) -> None:
    from specscope.core.commands.serve import _loopback

    assert _loopback(host) is loopback  # beyond loopback, serve warns that the stream is not encrypted
