"""Trace errors and the one bounded JSON parser every trace reader uses (a leaf: no other project import)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any


class TraceError(Exception):
    """Base of the trace errors; ``str(e)`` is a one-line message for the user."""


class TraceWriteError(TraceError):
    def __init__(self, path: Path, reason: str):
        self.path = path
        self.reason = reason
        super().__init__(f"cannot write {path}: {reason}")


class TraceReadError(TraceError):
    """The file could not be read at all (missing, permission)."""


class TraceFormatError(TraceError):
    """The file is not a specscope trace, or is corrupt."""


class JsonLimitError(ValueError):
    """JSON deeper or longer than a trace file may hold; ``line`` is 1-based within the text."""

    def __init__(self, message: str, line: int = 1):
        super().__init__(message)
        self.line = line


# The characters that matter for nesting: quotes and backslashes (strings) and brackets. The scan jumps from one
# to the next, so it is linear in the text's length whatever the text holds (an unterminated string included).
_JSON_SPECIAL_RE = re.compile(r'[\\"\[\]{}]')


def bounded_json(text: str, *, max_depth: int, max_chars: int) -> Any:
    """``json.loads`` for untrusted text, refusing more than ``max_chars`` characters or ``max_depth`` levels
    of nesting before parsing (a deep file would otherwise end in RecursionError). Raises ValueError."""
    if len(text) > max_chars:
        raise JsonLimitError(f"JSON of {len(text):,} characters, more than the {max_chars:,} allowed")
    depth = 0
    in_string = False
    skip_to = -1  # the character after a backslash inside a string is escaped
    for m in _JSON_SPECIAL_RE.finditer(text):
        i = m.start()
        if i < skip_to:
            continue
        c = m.group()
        if in_string:
            if c == "\\":
                skip_to = i + 2
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            if depth > max_depth:
                line = text.count("\n", 0, i) + 1
                raise JsonLimitError(f"JSON nested deeper than {max_depth} levels", line)
        elif c in "]}":
            depth -= 1
    return json.loads(text)


def read_trace_text(path: Path, what: str) -> str:
    """A trace file's text, or one sentence: missing, a folder, unreadable, binary, not UTF-8."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise TraceReadError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceReadError(f"{path}: is a folder, not a trace file") from None
    except OSError as e:
        raise TraceReadError(f"cannot read {path}: {e.strerror or e}") from None
    if b"\x00" in data:
        raise TraceFormatError(f"{path.name}: not a specscope {what} (binary data)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path.name}: not a specscope {what} (not UTF-8 at byte {e.start})") from None
