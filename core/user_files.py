"""Files the user names: read only regular files of a bounded size; never write over anything but a regular file.

A path on the command line can name a device (``/dev/zero`` never ends, a copy of ``/dev/null`` made with
``mknod`` swallows everything), a FIFO (opening it waits for a writer forever), a socket or a folder. Reading
one hangs or exhausts memory; renaming a finished file over one replaces the device with a regular file. So
every user file is looked at (``os.stat``, which follows links: a link to ``/dev/zero`` is a device too)
before it is opened, and a read takes at most ``max_bytes`` + 1 bytes however large the file claims to be.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from specscope.core.units import MIB

# A prompt file or a prompts set: 4 MiB of text is about a million tokens, far beyond any context window
# (131,072 new tokens is the CLI's bound); a 60 MB prompts file took 7.4 GB of memory to tokenize.
MAX_PROMPT_FILE_BYTES = 4 * MIB
MAX_CONFIG_FILE_BYTES = 4 * MIB  # a model's or an EAGLE head's config.json (real ones are a few kB)


class UserFileError(ValueError):
    """A user's file that cannot be used; ``str(e)`` is one sentence naming it."""


_KINDS = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a named pipe"),
    (stat.S_ISSOCK, "a socket"),
)


def kind_of_mode(mode: int) -> str | None:
    """What a non-regular file is, in words ("a character device"), or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    for test, words in _KINDS:
        if test(mode):
            return words
    return "not a regular file"


def non_regular_kind(path: Path | str) -> str | None:
    """What ``path`` is when it exists and is not a regular file (following links); None when it is a regular
    file or does not exist (a missing target is created; a missing input is reported by the read)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a dangling link, a NUL in the name: the open says why
        return None
    return kind_of_mode(mode)


def read_regular_bytes(path: Path | str, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``max_bytes``; UserFileError naming ``what`` and ``path``
    otherwise (a device, FIFO, socket or folder is refused before it is opened, so nothing blocks)."""
    path = Path(path)
    kind = non_regular_kind(path)
    if kind is not None:
        raise UserFileError(f"{what} {path} is {kind}, not a regular file")
    try:
        # O_NONBLOCK: should the path become a FIFO between the look and the open, the open does not wait.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except (OSError, ValueError) as e:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UserFileError(f"cannot read {what} {path}: {reason}") from None
    try:
        kind = kind_of_mode(os.fstat(fd).st_mode)  # what was opened, not what was looked at
        if kind is not None:
            raise UserFileError(f"{what} {path} is {kind}, not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(max_bytes + 1)
    except OSError as e:
        raise UserFileError(f"cannot read {what} {path}: {e.strerror or e}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise UserFileError(f"{what} {path} is larger than the {max_bytes // MIB:,} MiB a {what} may be")
    return data


def read_regular_text(path: Path | str, what: str, max_bytes: int = MAX_PROMPT_FILE_BYTES) -> str:
    """A UTF-8 text file (a BOM is dropped) read as :func:`read_regular_bytes` reads it."""
    data = read_regular_bytes(path, what, max_bytes)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise UserFileError(f"{what} {path} is not UTF-8 text (invalid byte at offset {e.start})") from None


def parse_user_json(text: str, origin: str) -> Any:
    """``json.loads`` whose every failure is one sentence naming ``origin`` (too deep a nesting included:
    json's C parser raises RecursionError there, which is caught here and nowhere else)."""
    try:
        return json.loads(text)
    except RecursionError:
        raise UserFileError(f"{origin} nests its JSON too deeply to be read (thousands of levels)") from None
    except ValueError as e:
        raise UserFileError(f"{origin} is not valid JSON ({e})") from None


def check_output_target(path: Path | str) -> str | None:
    """Why a file may not be written at ``path`` (it exists and is not a regular file), or None."""
    kind = non_regular_kind(path)
    return None if kind is None else f"it is {kind}, not a regular file"
