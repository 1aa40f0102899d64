"""Trace cells: how one value is written to a CSV cell and parsed back.

Floats are written with ``repr`` so that writing and reading back gives equal records. Text cells that a
spreadsheet would run as a formula are written with a leading ``'``, which the reader removes; text with
control characters is escaped. Every parser raises ValueError with what it expected: cells are data, parsed
with ``json`` under a bound, never evaluated.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from specscope.core.records import TokenStatus
from specscope.core.trace.errors import (
    JsonLimitError,
    bounded_json,
)
from specscope.core.trace.errors import (
    TraceReadError as TraceReadError,  # re-exported: callers catch it from here
)


def fmt_num(x: float | int | None) -> str:
    """'' for None; ints exactly; floats with repr (round-trips exactly, 'nan'/'inf' included)."""
    if x is None:
        return ""
    if isinstance(x, bool):
        return "1" if x else "0"
    if isinstance(x, int):
        return str(x)
    return repr(float(x))


def fmt_bool(b: bool) -> str:
    return "true" if b else "false"


def compact_json(obj: Any) -> str:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, default=str)


# Characters that would break a row onto several lines, confuse a spreadsheet, or not encode as UTF-8
# (lone surrogates from byte-level tokenizers) are written as backslash escapes.
_ESCAPE_RE = re.compile("[\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
_ESCAPE_NAMED = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNESCAPE_RE = re.compile(r"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)
_UNESCAPE_NAMED = {"\\": "\\", "n": "\n", "r": "\r", "t": "\t"}


def escape_text(text: str) -> str:
    return _ESCAPE_RE.sub(lambda m: _ESCAPE_NAMED.get(m.group(), f"\\u{ord(m.group()):04x}"), text)


def unescape_text(text: str) -> str:
    if "\\" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        s = m.group(1)
        if len(s) == 5:
            return chr(int(s[1:], 16))
        if s in _UNESCAPE_NAMED:
            return _UNESCAPE_NAMED[s]
        raise ValueError(f"unknown escape \\{s}")

    return _UNESCAPE_RE.sub(one, text)


# A spreadsheet runs a cell that starts with one of these as a formula (``=cmd|' /C calc'!A0``). As
# spreadsheet-safe CSV writers do (OWASP "CSV injection"), such text cells get a leading apostrophe, which
# spreadsheets hide. So that every text still round-trips, a cell whose text after its leading apostrophes
# starts with a trigger gets one more apostrophe, and the reader removes exactly one from such cells.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _looks_like_formula(cell: str) -> bool:
    return cell.lstrip("'").startswith(FORMULA_TRIGGERS)


def spreadsheet_safe(cell: str) -> str:
    """``cell`` with a leading ``'`` when a spreadsheet would run it as a formula (undone by
    ``spreadsheet_restore``)."""
    return "'" + cell if _looks_like_formula(cell) else cell


def spreadsheet_restore(cell: str) -> str:
    return cell[1:] if cell.startswith("'") and _looks_like_formula(cell) else cell


FLAG_SEPARATOR = " | "


def join_flags(flags: Sequence[str]) -> str:
    return FLAG_SEPARATOR.join(f.replace("\\", "\\\\").replace("|", "\\|") for f in flags)


def split_flags(cell: str) -> list[str]:
    flags: list[str] = []
    current: list[str] = []
    i, n = 0, len(cell)
    while i < n:
        ch = cell[i]
        if ch == "\\" and i + 1 < n:
            current.append(cell[i + 1])
            i += 2
        elif cell.startswith(FLAG_SEPARATOR, i):
            flags.append("".join(current))
            current = []
            i += len(FLAG_SEPARATOR)
        else:
            current.append(ch)
            i += 1
    if current or flags:
        flags.append("".join(current))
    return flags


# --- cell types -----------------------------------------------------------------------------------------


class _Unparsable(ValueError):
    """A cell that does not hold its column's type; the message says what was expected."""


@dataclass(frozen=True)
class CellType:
    """How one kind of value is written to a cell and parsed back (``parse`` raises ValueError)."""

    name: str  # for the docs and error messages: "an integer"
    format: Callable[[Any], str]
    parse: Callable[[str], Any]


def _parse_int(cell: str) -> int:
    try:
        return int(cell)
    except ValueError:
        raise _Unparsable("an integer") from None


def _parse_float(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        raise _Unparsable("a number") from None


def _parse_opt_float(cell: str) -> float | None:
    return None if cell == "" else _parse_float(cell)


def _parse_opt_int(cell: str) -> int | None:
    if cell == "":
        return None
    try:
        return int(cell)
    except ValueError:  # 0.1.0-era writers and spreadsheets may write a count as a float
        value = _parse_float(cell)
        if not value.is_integer():
            raise _Unparsable("a whole number") from None
        return int(value)


def _parse_bool(cell: str) -> bool:
    v = cell.strip().lower()
    if v in ("true", "1", "yes"):
        return True
    if v in ("false", "0", "no", ""):
        return False
    raise _Unparsable("true or false")


def _parse_escaped(cell: str) -> str:
    try:
        return unescape_text(spreadsheet_restore(cell))
    except ValueError as e:
        raise _Unparsable(f"escaped text ({e})") from None


def _parse_steps(cell: str) -> list[float]:
    try:
        return [float(s) for s in cell.split(";")] if cell else []
    except ValueError:
        raise _Unparsable("numbers joined with ';'") from None


TOP5_MAX_CHARS = 4096
MEMORY_JSON_MAX_CHARS = 65536


def _parse_top5(cell: str) -> list[tuple[int, float]]:
    if cell == "":
        return []
    expected = "a JSON list of up to 64 [token id, probability] pairs"
    try:
        obj = bounded_json(cell, max_depth=2, max_chars=TOP5_MAX_CHARS)
    except JsonLimitError as e:
        raise _Unparsable(f"{expected} ({e})") from None
    except ValueError:
        raise _Unparsable(expected) from None
    if not isinstance(obj, list) or len(obj) > 64:
        raise _Unparsable(expected)
    pairs = []
    for pair in obj:
        # JSON reads 1e400 and Infinity as float infinities: int() of one raised OverflowError in 0.1.0
        if (not isinstance(pair, list) or len(pair) != 2 or not _is_whole(pair[0])
                or not _is_number(pair[1]) or not 0.0 <= pair[1] <= 1.0 + 1e-6):
            raise _Unparsable(f"{expected}, each a whole id and a probability from 0 to 1")
        pairs.append((int(pair[0]), float(pair[1])))
    return pairs


def _is_number(x: Any) -> bool:
    """A finite JSON number (not a bool, NaN or an infinity)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _is_whole(x: Any) -> bool:
    return _is_number(x) and float(x).is_integer() and abs(x) < 2**53


def _format_top5(top5: list[tuple[int, float]]) -> str:
    return compact_json([[int(i), float(p)] for i, p in top5]) if top5 else ""


def _parse_texts(cell: str) -> list[str]:
    if cell == "":
        return []
    expected = "a JSON list of up to 64 texts"
    try:
        obj = bounded_json(cell, max_depth=1, max_chars=TOP5_MAX_CHARS * 16)
    except JsonLimitError as e:
        raise _Unparsable(f"{expected} ({e})") from None
    except ValueError:
        raise _Unparsable(expected) from None
    if not isinstance(obj, list) or len(obj) > 64 or not all(isinstance(t, str) for t in obj):
        raise _Unparsable(expected)
    return obj


def _parse_memory_json(cell: str) -> dict[str, float]:
    if cell == "":
        return {}
    try:
        obj = bounded_json(cell, max_depth=1, max_chars=MEMORY_JSON_MAX_CHARS)
    except JsonLimitError as e:
        raise _Unparsable(f"a JSON object of numbers ({e})") from None
    except ValueError:
        raise _Unparsable("a JSON object of numbers") from None
    if not isinstance(obj, dict) or not all(type(v) in (int, float) for v in obj.values()):
        raise _Unparsable("a JSON object of numbers")
    return {str(k): v for k, v in obj.items()}


def _parse_status(cell: str) -> TokenStatus:
    try:
        return TokenStatus(cell)
    except ValueError:
        raise _Unparsable("a token status") from None


INT = CellType("integer", str, _parse_int)
FLOAT = CellType("number", fmt_num, _parse_float)
OPT_FLOAT = CellType("number or empty", fmt_num, _parse_opt_float)
OPT_INT = CellType("whole number or empty", fmt_num, _parse_opt_int)
BOOL = CellType("true/false", fmt_bool, _parse_bool)
TEXT = CellType("text", spreadsheet_safe, spreadsheet_restore)
ESCAPED_TEXT = CellType("escaped text", lambda s: spreadsheet_safe(escape_text(s)), _parse_escaped)
FLAGS = CellType("sentences joined with ' | '", lambda f: spreadsheet_safe(join_flags(f)),
                 lambda s: split_flags(spreadsheet_restore(s)))
STEPS = CellType("numbers joined with ';'", lambda xs: ";".join(fmt_num(x) for x in xs), _parse_steps)
TOP5 = CellType("JSON [[id, prob], ...]", _format_top5, _parse_top5)
TEXTS = CellType("JSON [text, ...]", lambda texts: compact_json(texts) if texts else "", _parse_texts)
STATUS = CellType("token status", lambda s: s.value, _parse_status)
MEMORY_JSON = CellType("JSON object of numbers", lambda m: compact_json(m) if m else "", _parse_memory_json)


