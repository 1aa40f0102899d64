"""How the command line refuses bad input and survives faults: one ``specscope: error:`` sentence, exit code 2
for bad input, checks done before any time is spent, and signals that keep the work decoded so far.

Shared by ``run``, ``bench`` and ``verify`` so that the three fail alike.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn, Protocol

from specscope.core.bounds import MAX_NEW_TOKENS as MAX_NEW_TOKENS  # re-exported: commands name it from here
from specscope.core.bounds import SEED_MAX as SEED_MAX
from specscope.core.bounds import TOP_K_MAX, TOP_P_MIN, temperature_problem

EXIT_USAGE = 2
EXIT_FAILURE = 1
ERROR_PREFIX = "specscope: error: "


class CliError(Exception):
    """A user-facing error: printed as one sentence (a library's detail may follow on a second line)."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code


def progress_line(text: str) -> None:
    """One progress line on stderr in a single write: a signal handler that raises can run between print's
    writes of the text and of its newline, which left the closing error sentence on the progress line."""
    with suppress(OSError, AttributeError):  # AttributeError: stderr was closed before start (2>&-), it is None
        sys.stderr.write(text + "\n")
        sys.stderr.flush()


def print_error(message: str) -> None:
    first, _, rest = message.partition("\n")
    text = ERROR_PREFIX + first + "".join(f"\n  {line}" for line in rest.splitlines() if line.strip())
    with suppress(OSError):  # stderr gone too: nothing left to tell
        progress_line(text)


class Parser(argparse.ArgumentParser):
    """argparse that refuses bad arguments as every other check does: one ``specscope: error:`` line naming the
    flag (argparse's message does) and where the options are listed, at once. argparse's own error prints the
    usage block first: 20 to 30 lines above the one that says what is wrong."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}  # a subcommand's parser, by name (cli.py)

    def error(self, message: str) -> NoReturn:
        print_error(f"{message} (the options: {self.prog} --help)")
        sys.exit(EXIT_USAGE)


# --- argument types -------------------------------------------------------------------------------------


def whole_number(lo: int, hi: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
        if value < lo or (hi is not None and value > hi):
            span = f"at least {lo:,}" if hi is None else f"from {lo:,} to {hi:,}"
            raise argparse.ArgumentTypeError(f"must be {span}, got {value:,}")
        return value

    return parse


def finite_number(lo: float, hi: float, *, lo_open: bool = False) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        low_ok = value > lo if lo_open else value >= lo
        if not math.isfinite(value) or not low_ok or value > hi:
            if math.isfinite(hi):
                span = f"above {lo:g} and at most {hi:g}" if lo_open else f"from {lo:g} to {hi:g}"
            else:
                span = f"above {lo:g}" if lo_open else f"of {lo:g} or more"
            raise argparse.ArgumentTypeError(f"must be a finite number {span}, got {text!r}")
        return value

    return parse


def file_path(text: str) -> Path:
    """A path typed on the command line: not empty (``Path('')`` would silently mean the current folder) and
    without a NUL (which no file name can hold)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("needs a file path, got an empty one")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a file path cannot hold a NUL character")
    return Path(text)


def temperature(text: str) -> float:
    """A sampling temperature: 0 (greedy) or one sampling can divide the logits by (``core.bounds``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    problem = temperature_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


# The bounds of core.bounds, which the controls, the worker and the trace writer and reader check too.
SEED = whole_number(0, SEED_MAX)
TEMPERATURE = temperature
TOP_P = finite_number(TOP_P_MIN, 1.0)
TOP_K = whole_number(0, TOP_K_MAX)
MAX_NEW = whole_number(1, MAX_NEW_TOKENS)


def add_max_new_tokens(group: argparse._ActionsContainer, default: int, help_text: str | None = None) -> None:
    """``--max-new-tokens`` (documented), and ``--max-tokens`` (the OpenAI API's name) accepted as the same
    option, so that run, bench, verify and attach all take both spellings."""
    group.add_argument("--max-new-tokens", type=MAX_NEW, default=default, help=help_text or
                       f"stop after this many new tokens (1 to {MAX_NEW_TOKENS:,}; --max-tokens is the same)")
    group.add_argument("--max-tokens", dest="max_new_tokens", type=MAX_NEW, default=argparse.SUPPRESS,
                       help=argparse.SUPPRESS)


# --- prompts --------------------------------------------------------------------------------------------


def checked_prompt(text: str, origin: str) -> str:
    """``text`` if it can be decoded from; a CliError naming ``origin`` otherwise."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:  # bytes that were not UTF-8 arrive as lone surrogates (surrogateescape)
        raise CliError(f"{origin} is not valid UTF-8 text (at character {e.start})") from None
    if not text.strip():
        raise CliError(f"{origin} is empty: give some text to continue")
    return text


def read_text_file(path: Path, what: str) -> str:
    """A UTF-8 text file, or a CliError naming it and saying why it cannot be used (a device, a FIFO or a
    folder is refused before it is opened; so is a file over ``MAX_PROMPT_FILE_BYTES``)."""
    from specscope.core.user_files import MAX_PROMPT_FILE_BYTES, UserFileError, read_regular_text

    try:
        return read_regular_text(path, what, MAX_PROMPT_FILE_BYTES)
    except UserFileError as e:
        raise CliError(str(e)) from None


# --- output paths ---------------------------------------------------------------------------------------


def check_writable(path: Path, flag: str, *, trace: bool = False) -> None:
    """Refuse an output path that cannot be written, before any decoding is spent on it: one that exists and
    is not a regular file (a device, a FIFO, a socket, a folder: the final rename would replace it), or one
    where no file can be created. ``trace``: ``path`` is a trace's iteration CSV, and its tokens, baselines and
    session files beside it are checked too."""
    from specscope.core.trace.errors import TraceWriteError
    from specscope.core.trace.files import probe_writable
    from specscope.core.trace.layout import trace_paths
    from specscope.core.user_files import non_regular_kind

    if not str(path).strip():
        raise CliError(f"{flag} needs a file path, got an empty one")
    targets = trace_paths(Path(path)).all() if trace else (Path(path),)
    for target in targets:
        kind = non_regular_kind(target)
        if kind is not None:
            named = f"{flag} {path}" if target == Path(path) else f"{target}, a file of the {flag} {path} trace,"
            raise CliError(f"{named} is {kind}, not a regular file: choose a file path (it was left as it is)")
    try:
        probe_writable(Path(path))
    except TraceWriteError as e:
        raise CliError(f"{flag} {path} cannot be written ({e.reason}); choose another path") from None


# --- standard output ------------------------------------------------------------------------------------


class StdoutError(CliError):
    """Standard output cannot be written (``> /dev/full``, a closed pipe): the results did not get out."""

    def __init__(self, error: OSError):
        super().__init__(f"cannot write to standard output: {error.strerror or error}", exit_code=EXIT_FAILURE)


def _closed_stdout() -> OSError:
    return OSError(errno.EBADF, "it was closed when specscope started")


def emit(text: str) -> None:
    """Print a result to stdout now (flushed, so a full disk or closed pipe surfaces here as StdoutError)."""
    if sys.stdout is None:  # started with stdout closed (>&-): Python sets it to None, print would drop the text
        raise StdoutError(_closed_stdout())
    try:
        print(text, flush=True)
    except OSError as e:
        raise StdoutError(e) from None


def stdout_failed() -> OSError | None:
    """The error flushing stdout gives (a full disk behind ``> file``, a closed pipe, a closed descriptor),
    or None."""
    if sys.stdout is None:
        return _closed_stdout()
    try:
        sys.stdout.flush()
    except OSError as e:
        return e
    return None


def hold_closed_standard_descriptors() -> None:
    """Point a standard descriptor (0, 1, 2) that was closed at start (``>&-``) at /dev/null. Otherwise the
    next file opened (the autosave's) takes its number, and whatever a library writes to "stdout" lands in
    it. ``sys.stdout`` stays None, so results still fail with one sentence (``emit``)."""
    for fd, stream in ((0, sys.stdin), (1, sys.stdout), (2, sys.stderr)):
        if stream is not None:  # open at start: a write to it fails with its own error (EBADF), as it should
            continue
        try:
            os.fstat(fd)
        except OSError:
            with suppress(OSError):
                opened = os.open(os.devnull, os.O_RDWR)  # the lowest free number: this one
                if opened != fd:
                    os.close(opened)


def silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's exit-time flush does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a captured stdout (tests) has no file descriptor
        pass


# --- signals --------------------------------------------------------------------------------------------


_STARTUP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _stop_while_starting(signum: int, frame: FrameType | None) -> None:
    with suppress(OSError):
        os.write(2, f"{ERROR_PREFIX}{signal.Signals(signum).name} received while starting; nothing was "
                    "done\n".encode())
    os._exit(128 + signum)  # nothing is open or written yet: no cleanup to run


def quiet_signals_while_starting() -> None:
    """Until ``starting_done``: SIGINT or SIGTERM ends the command with one line and exit 130 or 143. Starting
    imports torch and transformers (seconds); KeyboardInterrupt raised inside an import surfaced as a traceback,
    or as transformers' ModuleNotFoundError. A signal the shell ignores (a background job) stays ignored."""
    for s in _STARTUP_SIGNALS:
        with suppress(ValueError):  # not the main thread
            if signal.getsignal(s) in (signal.default_int_handler, signal.SIG_DFL):
                signal.signal(s, _stop_while_starting)


def starting_done() -> None:
    """Signals act as before ``quiet_signals_while_starting``: Ctrl-C raises KeyboardInterrupt again."""
    for s in _STARTUP_SIGNALS:
        with suppress(ValueError):
            if signal.getsignal(s) is _stop_while_starting:
                signal.signal(s, signal.default_int_handler if s == signal.SIGINT else signal.SIG_DFL)


@contextmanager
def terminate_raises() -> Iterator[None]:
    """While active, SIGTERM raises ``Interrupted`` (as Ctrl-C raises KeyboardInterrupt), so that one arriving
    while a model loads ends the command with one sentence and exit 143, not silently; a decode loop's
    ``SignalGuard`` takes it over while it runs. A SIGTERM the shell ignores stays ignored."""
    def raise_terminated(signum: int, frame: FrameType | None) -> None:
        raise Interrupted(signum)

    previous = None
    with suppress(ValueError):  # not the main thread
        if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    finally:
        if previous is not None:
            with suppress(ValueError):
                signal.signal(signal.SIGTERM, previous)


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived during a run. A BaseException, like KeyboardInterrupt, so that no
    ``except Exception`` on the way swallows it."""

    def __init__(self, signum: int):
        self.signum = signum
        self.reason = "interrupted" if signum == signal.SIGINT else "terminated"
        self.exit_code = 128 + signum
        super().__init__(self.reason)

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


class StopsSoon(Protocol):
    """What the first signal asks to stop at its next boundary (``Controls``, or an attach's cancel)."""

    def stop_soon(self, reason: str) -> None: ...


class SignalGuard:
    """SIGINT and SIGTERM while it is active.

    During decoding (``raising``) the first signal asks the loop to stop at its next iteration boundary
    (``Controls.stop_soon``) and is kept in ``pending``: the iteration under way ends whole, so the records,
    the tokens and the autosave agree. A second signal raises ``Interrupted`` at once, for a step too long to
    wait for. Without controls, the first signal raises. Afterwards, while the results are written (a second
    or two), a signal is only noted in ``late`` so that the writing finishes, and the caller exits with the
    signal's code. Outside the ``with`` block signals act as before. ``waits_for`` ends the sentence the
    first signal prints: what the stop waits for.

    Exit codes: 128 + the signal (130 for SIGINT, 143 for SIGTERM), as a shell reports a process a signal
    ended, for ``run``, ``bench``, ``verify`` and ``attach`` alike; what was done before it is kept."""

    def __init__(self, controls: StopsSoon | None = None,
                 waits_for: str = "the iteration under way ends") -> None:
        self.controls = controls
        self.waits_for = waits_for
        self.raising = True
        self.pending: Interrupted | None = None
        self.late: Interrupted | None = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if not self.raising:
            if self.late is None:
                self.late = Interrupted(signum)
            return
        if self.pending is None and self.controls is not None:
            self.pending = Interrupted(signum)
            self.controls.stop_soon(self.pending.reason)
            # os.write, not print: this handler may run while this thread is inside sys.stderr's own write.
            again = "press Ctrl-C again" if signum == signal.SIGINT else "send it again"
            with suppress(OSError):
                os.write(2, f"specscope: {self.pending.signal_name} received: stopping when {self.waits_for} "
                            f"({again} to stop at once)\n".encode())
            return
        self.raising = False  # a further signal while this one is handled must not cut the cleanup
        raise Interrupted(signum)

    @contextmanager
    def installed(self) -> Iterator[SignalGuard]:
        try:
            previous = {s: signal.signal(s, self._handle) for s in (signal.SIGINT, signal.SIGTERM)}
        except ValueError:  # not the main thread: leave signals alone
            yield self
            return
        previous_hook = sys.unraisablehook
        sys.unraisablehook = self._unraisable(previous_hook)
        try:
            yield self
        finally:
            sys.unraisablehook = previous_hook
            for s, h in previous.items():
                signal.signal(s, h)

    def _unraisable(self, previous: Callable[[sys.UnraisableHookArgs], object]
                    ) -> Callable[[sys.UnraisableHookArgs], None]:
        """A raise that lands in a finalizer (a generator being closed, a ``__del__``) cannot propagate: Python
        prints "Exception ignored" and a traceback, and nothing stops. Said nothing of, and the next signal
        raises again, so a stall it was meant to cut still ends at the next Ctrl-C."""
        def hook(args: sys.UnraisableHookArgs) -> None:
            if isinstance(args.exc_value, Interrupted):
                self.raising = True
                return
            previous(args)
        return hook
