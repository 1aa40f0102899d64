"""``specscope serve`` and ``specscope run --remote URL``.

``serve`` loads the pair (the model options of ``run``), prints one line, the worker's URL with its token, and
serves until SIGINT or SIGTERM (or, with ``--exit-with-parent``, until its standard input closes: the program
that spawned it ended; ``core.remote.parent``). ``run --remote`` decodes on that worker and prints and writes
exactly what a local run does: the received events feed the client's own run (``core.measure.run.Run``),
the autosave recorder is a sink of that path as it is of a local session, and ``--trace`` writes the same
stream. Exit 2 for what the user can fix (a bad URL, a wrong or missing token, a busy worker, a start it
refused), 1 when the worker is lost mid-run (what arrived is kept), 128+N after a signal (the run on the worker
stopped at an iteration).
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from dataclasses import fields
from types import FrameType, SimpleNamespace
from typing import Any

from specscope.core.commands.cli_checks import CliError, Interrupted, SignalGuard, emit
from specscope.core.controls import Controls
from specscope.core.remote.client import WorkerClient, WorkerLost, WorkerRefused
from specscope.core.remote.options import session_options_to_data
from specscope.core.remote.url import BadWorkerUrl, parse_worker_url

# run's model options name a pair; with --remote the worker's pair decodes
_PAIR_OPTIONS = ("target", "draft", "demo", "drafter")


# ---- serve ------------------------------------------------------------------------------------------------
def _host(text: str) -> str:
    """An address to listen on; an empty one would listen on every interface and print an unusable URL."""
    if not text.strip():
        raise argparse.ArgumentTypeError("needs an address (127.0.0.1, or 0.0.0.0 for every interface), got an "
                                          "empty one")
    return text.strip()


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    from specscope.core.commands.cli_checks import whole_number
    from specscope.core.commands.pair_arguments import add_pair_arguments

    add_pair_arguments(parser)
    g = parser.add_argument_group("serving")
    g.add_argument("--host", type=_host, default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: reach it from elsewhere through an ssh tunnel)")
    g.add_argument("--port", type=whole_number(0, 65535), default=7777,
                   help="port (default 7777; 0 = any free port, the printed URL has the real one)")
    g.add_argument("--quiet", action="store_true", help="no progress messages on stderr")
    g.add_argument("--exit-with-parent", action="store_true",
                   help="stop when standard input closes: for a program that spawns the worker with a pipe as its "
                        "standard input (the app does), so the worker ends with that program, even after a kill -9 "
                        "(standard input must be a pipe; without this option it is never read)")


def check_serve_arguments(args: argparse.Namespace) -> None:
    """The worker's refusals that need no torch, made before the engine's imports (a wrong option, or a stdin
    that --exit-with-parent cannot watch, is said in a second): the pair's options and config.json files."""
    from specscope.core.commands.pair_arguments import check_pair_choice
    from specscope.core.engine.pair_spec import ModelLoadError

    if args.exit_with_parent:
        from specscope.core.remote.parent import stdin_is_a_pipe

        if not stdin_is_a_pipe():
            raise CliError("--exit-with-parent needs standard input to be a pipe from the program that started the "
                           "worker (the worker stops when that pipe closes)")
    try:
        check_pair_choice(args)
    except ModelLoadError as exc:
        raise CliError(str(exc)) from None


def cmd_serve(args: argparse.Namespace) -> int:
    """``specscope serve``, its options already checked by ``check_serve_arguments`` (cli.main, before the
    engine's imports)."""
    from specscope.core.commands.pair_arguments import spec_from_args
    from specscope.core.commands.run import load_progress, quiet_libraries
    from specscope.core.engine.models import load_pair
    from specscope.core.engine.pair_spec import ModelLoadError
    from specscope.core.remote.server import WorkerServer, listen

    if args.quiet:
        quiet_libraries()
    if args.exit_with_parent:  # before the load, which can take minutes: a parent gone meanwhile ends it too
        from specscope.core.remote.parent import exit_with_parent

        exit_with_parent((lambda _m: None) if args.quiet else _log)
    try:  # bound before the load (seconds to minutes): a busy port or a wrong --host is said at once
        listener = listen(args.host, args.port)
    except OSError as exc:
        # socket.create_server adds "(while attempting to bind on address ...)" to the OS's reason
        reason = (exc.strerror or str(exc)).split(" (while attempting to bind")[0]
        raise CliError(f"cannot listen on {args.host}:{args.port}: {reason}") from None
    try:
        spec = spec_from_args(args)
        pair = load_pair(spec, progress=load_progress(args.quiet))
    except ModelLoadError as exc:
        listener.close()
        raise CliError(str(exc)) from None
    except BaseException:
        listener.close()
        raise
    server = WorkerServer(pair, args.host, args.port, log=(lambda _m: None) if args.quiet else _log,
                          listener=listener)
    server.spec = spec  # a client's drafter swap keeps the options the pair was loaded with

    def stop(signum: int, frame: FrameType | None) -> None:
        server.shutdown()

    previous = {s: signal.signal(s, stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        emit(server.address.url() + "\n")  # the one line on stdout; the token is in it, and nowhere else
        sys.stdout.flush()
        if not args.quiet:
            _log(f"serving {pair.description or pair.target.name} on {server.address.netloc}; "
                 "one client at a time; Ctrl-C stops")
        if not _loopback(args.host):
            _log(f"warning: listening on {args.host}, beyond this machine: the stream (and the token in the "
                 "hello) is not encrypted; an ssh tunnel to 127.0.0.1 is the safer way in")
        from specscope.core.gc_freeze import loaded_objects_frozen

        with loaded_objects_frozen():
            server.serve_forever()
    finally:
        server.close()
        for s, h in previous.items():
            signal.signal(s, h)
    return 0


def _loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _log(message: str) -> None:
    print(f"specscope serve: {message}", file=sys.stderr, flush=True)


# ---- run --remote -----------------------------------------------------------------------------------------
class _StopForwarder(Controls):
    """What the CLI's signal guard stops: the first Ctrl-C asks the worker to stop at its next iteration.

    The guard calls ``stop_soon`` from a signal handler on the reading thread, so the stop is sent by a
    thread of its own (the handler only sets an event no other code on that thread holds)."""

    def __init__(self, client: WorkerClient):
        super().__init__()
        self.client = client
        self.asked = threading.Event()
        self.done = False
        self.thread = threading.Thread(target=self._forward, name="specscope-remote-stop", daemon=True)
        self.thread.start()

    def stop_soon(self, reason: str = "stop") -> None:
        super().stop_soon(reason)
        self.asked.set()

    def _forward(self) -> None:
        self.asked.wait()
        if not self.done:
            with contextlib.suppress(WorkerLost):
                self.client.stop(self.stop_reason)  # interrupted or terminated, as a local run's stream says

    def finish(self) -> None:
        self.done = True
        self.asked.set()
        self.thread.join()


def _refuse_pair_options(args: argparse.Namespace) -> None:
    given = [f"--{name}" for name in _PAIR_OPTIONS if getattr(args, name, None)]
    if given:
        raise CliError(f"--remote decodes with the worker's pair: leave out {', '.join(given)} (give the model "
                       "options to `specscope serve`)")


def remote_description(args: argparse.Namespace, client: WorkerClient) -> dict[str, Any]:
    """The session description a local run writes (``cli.session_description``), from the worker's welcome;
    the worker's address without its token."""
    from specscope.core.commands.run import session_description

    info = client.worker_info.get("pair") or {}
    text = {k: info.get(k) for k in ("target", "target_source", "target_device", "target_dtype", "draft_device")}
    draft = info.get("draft")
    pair = SimpleNamespace(
        target=SimpleNamespace(name=text["target"], source=text["target_source"], device=text["target_device"],
                               dtype=text["target_dtype"]),
        draft=SimpleNamespace(name=draft, device=text["draft_device"]) if draft else None,
        drafter_kind=info.get("drafter"))
    description = session_description(args, pair)
    description["worker"] = client.address.redacted()
    return description


def cmd_run_remote(args: argparse.Namespace) -> int:
    from specscope.core.commands.run import (
        check_outputs_and_quiet,
        controls_from_args,
        drill_from_args,
        prompt_text_from_args,
    )
    from specscope.core.drafter_catalogue import adaptive_k_default, default_k
    from specscope.core.session import SessionOptions

    _refuse_pair_options(args)
    try:
        address = parse_worker_url(args.remote)
    except BadWorkerUrl as exc:
        raise CliError(f"--remote: {exc}") from None
    quiet = check_outputs_and_quiet(args)
    try:
        client = WorkerClient.connect(address)
    except WorkerRefused as exc:
        raise CliError(str(exc).rstrip(".")) from None
    try:
        info = client.worker_info.get("pair") or {}
        drafter = str(info.get("drafter") or "model")
        args.demo = info.get("target") == "demo"  # the demo's prompt when none is given, as a local --demo run
        args.drafter = drafter
        if args.adaptive_k is None:
            args.adaptive_k = adaptive_k_default(drafter)
        if args.k is None:
            args.k = default_k(drafter)
        controls = controls_from_args(args)
        drill = drill_from_args(args)
        text = prompt_text_from_args(args)
        options = session_options_to_data(SessionOptions(
            max_new_tokens=args.max_new_tokens, seed=args.seed, plain=args.plain,
            baseline_every=args.baseline_every, explore_every=args.explore_every, drill=drill))
        description = remote_description(args, client)
        description.update(prompt=text, pair_description=str(info.get("description") or ""))
        forwarder = _StopForwarder(client)
        try:
            with SignalGuard(forwarder).installed() as guard:
                return _receive_and_report(args, client, controls, options, text, description, guard, quiet)
        finally:
            forwarder.finish()
    finally:
        client.close()


class _LazyRecorder:
    """The autosave recorder, started when the run's first event arrives (a start the worker refuses leaves
    no empty session folder behind); a sink of the received run, as the recorder is of a local session."""

    def __init__(self, args: argparse.Namespace, description: dict[str, Any], quiet: bool):
        self.args = args
        self.description = description
        self.quiet = quiet
        self.recorder: Any = None
        self.started = False

    def __call__(self, event: Any, snapshot: object = None) -> None:
        if not self.started:
            from specscope.core.commands.run import start_autosave

            self.started = True
            self.recorder = start_autosave(self.args, self.description, self.quiet)
        if self.recorder is not None:
            self.recorder(event, snapshot)


def _receive_and_report(args: argparse.Namespace, client: WorkerClient, controls: Controls,
                        options: dict[str, Any], text: str, description: dict[str, Any], guard: SignalGuard,
                        quiet: bool) -> int:
    from specscope.core.commands.run import warn_autosave_off
    from specscope.core.commands.run_report import RunOutcome, nothing_decoded, report_run
    from specscope.core.events import RunStarted
    from specscope.core.measure.run import Run  # the measurement (numpy): not for --help

    lazy = _LazyRecorder(args, description, quiet)
    received = Run(sinks=[lazy], keep_snapshots=args.trace is not None or args.chrome_trace is not None)
    error: str | None = None
    stopped: Interrupted | None = None
    warned = False
    try:
        stream = client.start(text, controls.values, options, chat=False if args.no_chat_template else None)
        for event in stream:
            received.feed(event)
            if isinstance(event, RunStarted):
                _note_context(client, event, quiet)
            recorder = lazy.recorder
            if recorder is not None and recorder.error is not None and not warned:
                warned = True
                warn_autosave_off(recorder)
    except WorkerRefused as exc:  # the worker refused the start (a prompt too long, a control out of range)
        raise CliError(str(exc).rstrip(".")) from None
    except WorkerLost as exc:
        error = f"{str(exc).rstrip('.')}; what arrived is kept"
    except Interrupted as exc:  # a second signal: leave at once; closing the connection stops the run there
        stopped = exc
        client.close()
    finally:
        guard.raising = False  # from here a signal waits until the results are written
        if stopped is None and guard.pending is not None:
            if received.finished is not None and received.finished.reason not in ("stop", "interrupted",
                                                                                  "terminated"):
                guard.late = guard.late or guard.pending  # the run had ended by itself: its results are whole
            else:
                stopped = guard.pending
        recorder = lazy.recorder
        if recorder is not None:
            recorder.close(ok=error is None and stopped is None,
                           reason=stopped.reason if stopped is not None else "error" if error else "")
    if received.started is None:
        if stopped is not None:
            raise nothing_decoded(stopped)
        raise CliError(f"{error or 'the worker sent no run'}; nothing was decoded", exit_code=1)
    result = client.result or {}
    token_ids = result.get("token_ids")
    if not isinstance(token_ids, list) or not all(isinstance(t, int) for t in token_ids):
        token_ids = received.token_ids()  # the worker was lost before its result: the tokens that arrived
    out_text = result.get("text")
    if not isinstance(out_text, str):
        out_text = received.token_text()
    outcome = RunOutcome(
        token_ids=token_ids, text=out_text,
        finish_reason=received.finished.reason if received.finished is not None else "error",
        records=received.records, events=received.events, drill_events=received.drill_events,
        prefill_ms=received.prefill_ms, estimate=received.estimate(), run=received,
        drafter_kind=str(args.drafter), residency=residency_from_data(result.get("residency")))
    return report_run(args, outcome, description, lazy.recorder, error=error, stopped=stopped,
                      late=guard.late)


def _note_context(client: WorkerClient, started: Any, quiet: bool) -> None:
    """The local run's note when the context window will stop the run before --max-new-tokens (the worker
    checked the prompt's length before it started)."""
    from specscope.core.prompts import context_note

    window = (client.worker_info.get("pair") or {}).get("context_window")
    note = context_note(max(1, started.prompt_tokens), started.max_new_tokens,
                        window if isinstance(window, int) else None)
    if note is not None and not quiet:
        print(f"note: {note}", file=sys.stderr)


def residency_from_data(data: Any) -> dict[str, Any]:
    """The worker's residency report (its ``result`` message) as ``Residency`` objects; a field of the wrong
    type drops that model's report (the summary then has no residency line for it)."""
    from specscope.core.memory.residency import Residency

    out: dict[str, Any] = {}
    if not isinstance(data, dict):
        return out
    defaults = Residency()
    for model in ("target", "draft"):
        values = data.get(model)
        if not isinstance(values, dict):
            continue
        kept: dict[str, Any] = {}
        for f in fields(Residency):
            if f.name not in values:
                continue
            value, default = values[f.name], getattr(defaults, f.name)
            if type(value) is not type(default) or not _plain(value):
                break
            kept[f.name] = value
        else:
            out[model] = Residency(**kept)
    return out


def _plain(value: Any) -> bool:
    """Numbers, text, and lists or string-keyed maps of them: what a residency report holds."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and isinstance(v, (int, str)) for k, v in value.items())
    if isinstance(value, list):
        return all(isinstance(v, str) for v in value)
    return isinstance(value, (int, str))

