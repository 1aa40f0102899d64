"""Settings that persist between launches (QSettings): last pair, prompt, controls, window layout.

Every setting has one default, in :data:`DEFAULTS` (as MNELAB keeps its ``_DEFAULTS``), and is read through
one typed getter, :meth:`AppSettings.get`: a stored value that is missing, unreadable or of the wrong type
reads as the default, so a hand-edited or corrupted settings file never stops the app. Groups (the run
options, the controls, the token layout) are stored as one JSON object each and read field by field, each
field typed by its default.

Tests point the store at a file with ``SPECSCOPE_SETTINGS_FILE`` (or pass a path) so they never read or
write the user's real settings.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
from typing import Any, TypeVar

from PySide6.QtCore import QByteArray, QSettings

from specscope.app.pair_choice import PairChoice
from specscope.core.controls import DEFAULT_MAX_NEW_TOKENS, InvalidControl, validate
from specscope.core.drafter_catalogue import adaptive_k_default, default_k
from specscope.core.records import ControlValues

T = TypeVar("T")
_CONTROLS = ControlValues()

# One default per setting, and its type: what a missing or unreadable stored value reads as. A dict is a group
# stored as one JSON object, its fields typed by their defaults; an empty dict is kept as stored (the pair:
# PairChoice reads its own fields); the lists (splitter sizes, the screen's size) hold whole numbers.
DEFAULTS: dict[str, Any] = {
    "pair": {},
    "controls": {"k": _CONTROLS.k, "temperature": _CONTROLS.temperature, "top_k": _CONTROLS.top_k,
                 "top_p": _CONTROLS.top_p, "adaptive_k": _CONTROLS.adaptive_k},  # k, adaptive k: the drafter's
    "adaptive_k_chosen": False,  # the user ticked or unticked adaptive k: a drafter switch keeps their choice
    "prompt": "",
    "run": {"max_new_tokens": DEFAULT_MAX_NEW_TOKENS, "seed": 0},  # seed -1 = random
    "keep_sessions": 20,  # autosaved session folders kept (0 = all); older finished ones are pruned
    "last_dir": "",
    "window/geometry": QByteArray(),
    "window/state": QByteArray(),
    "window/screen": [],  # the available screen size [width, height] the geometry was saved on; empty: unknown
    # sizes: empty = the default split; kept only where "dragged" says the user chose them (a file written before
    # the flag holds sizes the window's own layout made, and reads as the default split)
    "window/tokens": {"beside": False, "sizes": [], "dragged": False},
}


def make_qsettings(path: str | None = None) -> QSettings:
    path = path or os.environ.get("SPECSCOPE_SETTINGS_FILE")
    if path:
        return QSettings(path, QSettings.Format.IniFormat)
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, "specscope", "specscope")


def typed(raw: Any, default: T) -> T:
    """``raw`` (as QSettings or JSON hands it back: often a string) as the type of ``default``; ValueError or
    TypeError when it is not one."""
    kind = type(default)
    value: Any
    if kind is bool:
        text = str(raw).strip().lower() if not isinstance(raw, bool) else str(raw).lower()
        if text not in ("true", "false"):
            raise ValueError(f"not a yes/no: {raw!r:.40}")
        value = text == "true"
    elif kind is int:
        if isinstance(raw, bool) or (isinstance(raw, float) and not raw.is_integer()):
            raise TypeError(f"not a whole number: {raw!r:.40}")
        value = int(raw) if isinstance(raw, (int, float)) else int(str(raw).strip())
    elif kind is float:
        if isinstance(raw, bool):
            raise TypeError(f"not a number: {raw!r:.40}")
        value = float(raw) if isinstance(raw, (int, float)) else float(str(raw).strip())
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {raw!r:.40}")
    elif kind is str:
        if not isinstance(raw, str):
            raise TypeError(f"not text: {raw!r:.40}")
        value = raw
    elif kind is list:
        if not isinstance(raw, list):
            raise TypeError(f"not a list: {raw!r:.40}")
        value = [typed(x, 0) for x in raw]
    elif kind is dict:
        value = _typed_group(json.loads(raw) if isinstance(raw, str) else raw, default)  # type: ignore[arg-type]
    elif isinstance(raw, kind):
        value = raw
    else:
        raise TypeError(f"not a {kind.__name__}: {raw!r:.40}")
    return value  # type: ignore[no-any-return]


def _typed_group(raw: Any, default: dict[str, Any]) -> dict[str, Any]:
    """A stored JSON object, field by field: a field that is missing or unreadable reads as its default."""
    if not isinstance(raw, dict):
        raise TypeError(f"not a JSON object: {raw!r:.40}")
    if not default:
        return dict(raw)
    out = copy.deepcopy(default)
    for name, field_default in default.items():
        if name in raw and raw[name] is not None:
            with contextlib.suppress(TypeError, ValueError):  # this field keeps its default, the others are read
                out[name] = typed(raw[name], field_default)
    return out


class AppSettings:
    def __init__(self, qsettings: QSettings | None = None) -> None:
        self.qs = qsettings or make_qsettings()

    # ---- the typed getter and setter ---------------------------------------------------------------------
    def get(self, key: str, kind: type[T], default: T | None = None) -> T:
        """The stored ``key`` as ``kind``; its default when none is stored or it is unreadable (a corrupted
        file, a hand edit, a value of another type). The default is the table's (:data:`DEFAULTS`) unless
        ``default`` gives one of the same shape where it depends on something else (the drafter's k)."""
        fallback = DEFAULTS[key] if default is None else default
        if not isinstance(fallback, kind) or not isinstance(DEFAULTS[key], kind):
            raise TypeError(f"setting {key} is a {type(DEFAULTS[key]).__name__}, not a {kind.__name__}")
        raw = self.qs.value(key)
        if raw is None or raw == "":
            return copy.deepcopy(fallback)
        try:
            return typed(raw, fallback)
        except (TypeError, ValueError, RecursionError):  # JSONDecodeError is a ValueError; too deep: Recursion
            return copy.deepcopy(fallback)

    def put(self, key: str, value: Any) -> None:
        """Store ``key`` (checked against its default's type); a group goes to disk as one JSON object."""
        default = DEFAULTS[key]
        if not isinstance(value, type(default)) or isinstance(value, bool) != isinstance(default, bool):
            raise TypeError(f"setting {key} takes a {type(default).__name__}, got {type(value).__name__}")
        if isinstance(value, dict):
            self.qs.setValue(key, json.dumps(value))
        elif isinstance(value, bool):
            self.qs.setValue(key, "true" if value else "false")
        else:
            self.qs.setValue(key, value)

    # ---- pair, prompt, controls ------------------------------------------------------------------------
    def pair_choice(self) -> PairChoice | None:
        d = self.get("pair", dict)
        return PairChoice.from_dict(d) if d else None

    def set_pair_choice(self, c: PairChoice) -> None:
        self.put("pair", c.to_dict())

    def controls(self, drafter: str) -> ControlValues:
        """The saved controls; the drafter's defaults (drafter_catalogue) for what was not saved or cannot be
        read, and all of them when the saved ones do not make valid controls together."""
        first = ControlValues(k=default_k(drafter), adaptive_k=adaptive_k_default(drafter))
        d = self.get("controls", dict, {**DEFAULTS["controls"], "k": first.k, "adaptive_k": first.adaptive_k})
        try:
            return validate(ControlValues(**d))
        except (InvalidControl, TypeError, ValueError):
            return first

    def set_controls(self, v: ControlValues) -> None:
        self.put("controls", {"k": v.k, "temperature": v.temperature, "top_k": v.top_k, "top_p": v.top_p,
                              "adaptive_k": v.adaptive_k})

    def adaptive_chosen(self) -> bool:
        """True once the user ticked or unticked adaptive k: a drafter switch then keeps their choice."""
        return self.get("adaptive_k_chosen", bool)

    def set_adaptive_chosen(self, chosen: bool) -> None:
        self.put("adaptive_k_chosen", chosen)

    def prompt(self) -> str | None:
        return self.get("prompt", str) or None

    def set_prompt(self, text: str) -> None:
        self.put("prompt", text)

    def run_options(self) -> tuple[int, int]:
        """(max new tokens, seed; -1 = random)."""
        d = self.get("run", dict)
        return d["max_new_tokens"], d["seed"]

    def set_run_options(self, max_new_tokens: int, seed: int) -> None:
        self.put("run", {"max_new_tokens": max_new_tokens, "seed": seed})

    def keep_sessions(self) -> int:
        """How many autosaved session folders to keep (0 = all); older finished ones are pruned."""
        return max(0, self.get("keep_sessions", int))

    def set_keep_sessions(self, n: int) -> None:
        self.put("keep_sessions", max(0, int(n)))

    def last_dir(self) -> str:
        return self.get("last_dir", str)

    def set_last_dir(self, path: str) -> None:
        self.put("last_dir", path)

    # ---- window layout ---------------------------------------------------------------------------------
    def geometry(self) -> QByteArray | None:
        return self.get("window/geometry", QByteArray) or None

    def state(self) -> QByteArray | None:
        return self.get("window/state", QByteArray) or None

    def screen_room(self) -> list[int]:
        """[width, height] of the screen room the geometry was saved on; empty when not known (an older file)."""
        room = self.get("window/screen", list)
        return room if len(room) == 2 and min(room) > 0 else []

    def set_layout(self, geometry: QByteArray, state: QByteArray, screen_room: list[int] | None = None) -> None:
        self.put("window/geometry", geometry)
        self.put("window/state", state)
        self.put("window/screen", list(screen_room or []))

    def token_layout(self) -> tuple[bool, list[int]]:
        """(tokens beside the plots?, splitter sizes; empty = the default split)."""
        d = self.get("window/tokens", dict)
        sizes: list[int] = d["sizes"]
        return d["beside"], sizes if d["dragged"] and len(sizes) == 2 and min(sizes) > 0 else []

    def set_token_layout(self, beside: bool, sizes: list[int]) -> None:
        """The wish, and the sizes of a split the user dragged (empty: none)."""
        self.put("window/tokens", {"beside": beside, "sizes": list(sizes), "dragged": bool(sizes)})

    def sync(self) -> None:
        self.qs.sync()

