"""Settings that persist between launches (QSettings): last pair, prompt, controls, window layout.

Tests point the store at a file with ``SPECSCOPE_SETTINGS_FILE`` (or pass a path) so they never read or
write the user's real settings.
"""

from __future__ import annotations

import json
import os
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from specscope.app.pair_choice import PairChoice
from specscope.core.controls import InvalidControl, validate
from specscope.core.drafter_catalogue import adaptive_k_default, default_k
from specscope.core.records import ControlValues


def make_qsettings(path: str | None = None) -> QSettings:
    path = path or os.environ.get("SPECSCOPE_SETTINGS_FILE")
    if path:
        return QSettings(path, QSettings.Format.IniFormat)
    return QSettings(QSettings.Format.IniFormat, QSettings.Scope.UserScope, "specscope", "specscope")


class AppSettings:
    def __init__(self, qsettings: QSettings | None = None) -> None:
        self.qs = qsettings or make_qsettings()

    def _json(self, key: str) -> Any:
        raw = self.qs.value(key)
        if not raw:
            return None
        try:
            return json.loads(str(raw))
        except ValueError:
            return None

    def _set_json(self, key: str, value: Any) -> None:
        self.qs.setValue(key, json.dumps(value))

    # ---- pair, prompt, controls ------------------------------------------------------------------------
    def pair_choice(self) -> PairChoice | None:
        d = self._json("pair")
        return PairChoice.from_dict(d) if isinstance(d, dict) else None

    def set_pair_choice(self, c: PairChoice) -> None:
        self._set_json("pair", c.to_dict())

    def controls(self, drafter: str) -> ControlValues:
        """The saved controls; the drafter's defaults (kinds.py) where none were saved or they are unreadable."""
        first = ControlValues(k=default_k(drafter), adaptive_k=adaptive_k_default(drafter))
        d = self._json("controls")
        if not isinstance(d, dict):
            return first
        try:
            return validate(ControlValues(k=int(d.get("k", first.k)), temperature=float(d.get("temperature", 0.0)),
                                          top_k=int(d.get("top_k", 0)), top_p=float(d.get("top_p", 1.0)),
                                          adaptive_k=bool(d.get("adaptive_k", first.adaptive_k))))
        except (InvalidControl, TypeError, ValueError):
            return first

    def set_controls(self, v: ControlValues) -> None:
        self._set_json("controls", {"k": v.k, "temperature": v.temperature, "top_k": v.top_k,
                                    "top_p": v.top_p, "adaptive_k": v.adaptive_k})

    def adaptive_chosen(self) -> bool:
        """True once the user ticked or unticked adaptive k: a drafter switch then keeps their choice."""
        return str(self.qs.value("adaptive_k_chosen", "false")).lower() == "true"

    def set_adaptive_chosen(self, chosen: bool) -> None:
        self.qs.setValue("adaptive_k_chosen", "true" if chosen else "false")

    def prompt(self) -> str | None:
        v = self.qs.value("prompt")
        return str(v) if v else None

    def set_prompt(self, text: str) -> None:
        self.qs.setValue("prompt", text)

    def run_options(self) -> tuple[int, int]:
        """(max new tokens, seed; -1 = random)."""
        d = self._json("run") or {}
        try:
            return int(d.get("max_new_tokens", 256)), int(d.get("seed", 0))
        except (TypeError, ValueError):
            return 256, 0

    def set_run_options(self, max_new_tokens: int, seed: int) -> None:
        self._set_json("run", {"max_new_tokens": max_new_tokens, "seed": seed})

    def keep_sessions(self) -> int:
        """How many autosaved session folders to keep (0 = all); older finished ones are pruned."""
        from specscope.app.session_folders import DEFAULT_KEEP_SESSIONS

        try:
            return max(0, int(str(self.qs.value("keep_sessions", DEFAULT_KEEP_SESSIONS))))
        except (TypeError, ValueError):
            return DEFAULT_KEEP_SESSIONS

    def set_keep_sessions(self, n: int) -> None:
        self.qs.setValue("keep_sessions", max(0, int(n)))

    def last_dir(self) -> str:
        return str(self.qs.value("last_dir") or "")

    def set_last_dir(self, path: str) -> None:
        self.qs.setValue("last_dir", path)

    # ---- window layout ---------------------------------------------------------------------------------
    def geometry(self) -> QByteArray | None:
        v = self.qs.value("window/geometry")
        return v if isinstance(v, QByteArray) else None

    def state(self) -> QByteArray | None:
        v = self.qs.value("window/state")
        return v if isinstance(v, QByteArray) else None

    def set_layout(self, geometry: QByteArray, state: QByteArray) -> None:
        self.qs.setValue("window/geometry", geometry)
        self.qs.setValue("window/state", state)

    def token_layout(self) -> tuple[bool, list[int]]:
        """(tokens beside the plots?, splitter sizes; empty = the default split)."""
        d = self._json("window/tokens") or {}
        try:
            sizes = [int(x) for x in d.get("sizes", [])]
            return bool(d.get("beside", False)), sizes if len(sizes) == 2 and min(sizes) > 0 else []
        except (TypeError, ValueError, AttributeError):
            return False, []

    def set_token_layout(self, beside: bool, sizes: list[int]) -> None:
        self._set_json("window/tokens", {"beside": beside, "sizes": list(sizes)})

    def sync(self) -> None:
        self.qs.sync()
