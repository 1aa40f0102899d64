"""How the command line refuses bad input and survives faults: one ``specscope: error:`` sentence, exit code 2
for bad input, checks done before any time is spent, and signals that keep the work decoded so far.

Shared by ``run``, ``bench`` and ``verify`` so that the three fail alike.
"""

from __future__ import annotations

import argparse
import math
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType
from typing import NoReturn

EXIT_USAGE = 2
EXIT_FAILURE = 1
ERROR_PREFIX = "specscope: error: "
MAX_NEW_TOKENS = 131_072  # the longest context windows of common models; the model's own window bounds it too
SEED_MAX = 2**63 - 1  # torch.Generator.manual_seed takes a signed 64-bit value


class CliError(Exception):
    """A user-facing error: printed as one sentence (a library's detail may follow on a second line)."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE):
        super().__init__(message)
        self.exit_code = exit_code


def print_error(message: str) -> None:
    first, _, rest = message.partition("\n")
    text = ERROR_PREFIX + first + "".join(f"\n  {line}" for line in rest.splitlines() if line.strip())
    with suppress(OSError):  # stderr gone too: nothing left to tell
        print(text, file=sys.stderr, flush=True)


class Parser(argparse.ArgumentParser):
    """argparse with the one error prefix (argparse's own is the program name, e.g. ``specscope run:``)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        print_error(message)
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
            span = f"{'above' if lo_open else 'from'} {lo:g}" + (f" to {hi:g}" if math.isfinite(hi) else "")
            raise argparse.ArgumentTypeError(f"must be a finite number {span}, got {text!r}")
        return value

    return parse


SEED = whole_number(0, SEED_MAX)
TEMPERATURE = finite_number(0.0, math.inf)
TOP_P = finite_number(0.0, 1.0, lo_open=True)
TOP_K = whole_number(0)
MAX_NEW = whole_number(1, MAX_NEW_TOKENS)


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
    """A UTF-8 text file, or a CliError naming it and saying why it cannot be used."""
    try:
        data = Path(path).read_bytes()
    except IsADirectoryError:
        raise CliError(f"{what} {path} is a folder, not a file") from None
    except OSError as e:
        raise CliError(f"cannot read {what} {path}: {e.strerror or e}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise CliError(f"{what} {path} is not UTF-8 text (invalid byte at offset {e.start})") from None


# --- output paths ---------------------------------------------------------------------------------------


def check_writable(path: Path, flag: str) -> None:
    """Refuse an output path that cannot be written, before any decoding is spent on it."""
    from .trace import TraceWriteError, probe_writable

    try:
        probe_writable(Path(path))
    except TraceWriteError as e:
        raise CliError(f"{flag} {path} cannot be written ({e.reason}); choose another path") from None


# --- standard output ------------------------------------------------------------------------------------


def stdout_failed() -> OSError | None:
    """The error flushing stdout gives (a full disk behind ``> file``, a closed pipe), or None."""
    try:
        sys.stdout.flush()
    except OSError as e:
        return e
    return None


def silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's exit-time flush does not fail a second time."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # a captured stdout (tests) has no file descriptor
        pass


# --- signals --------------------------------------------------------------------------------------------


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


@contextmanager
def signals_interrupt() -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise ``Interrupted`` (the caller keeps what was decoded and
    labels it); outside it they act as before. A second signal while handling the first is ignored."""

    def handler(signum: int, frame: FrameType | None) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            signal.signal(s, signal.SIG_IGN)
        raise Interrupted(signum)

    try:
        previous = {s: signal.signal(s, handler) for s in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
