"""Autosaved session folders as the window presents them: a one-line description for the crash-recovery
offer, and pruning to the last N so one folder per run does not pile up forever. No Qt here."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from specscope.core.trace.autosave import prune_sessions  # noqa: F401  (where the app finds it)
from specscope.core.trace.files import SESSION_FOLDER_TRACE, trace_paths

DEFAULT_KEEP_SESSIONS = 20
PROMPT_CHARS = 40


def _session_meta(folder: Path) -> dict[str, object]:
    try:
        meta = json.loads(trace_paths(folder / SESSION_FOLDER_TRACE).session.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return meta if isinstance(meta, dict) else {}


def describe_session(folder: Path) -> str:
    """'1 Dec 08:40 · "Copy these lines…" · demo with draft demo draft on cpu' (what is known of it)."""
    meta = _session_meta(folder)
    session = meta.get("session") if isinstance(meta.get("session"), dict) else {}
    assert isinstance(session, dict)
    parts: list[str] = []
    created = meta.get("created")
    try:
        when = datetime.fromisoformat(str(created)) if created else None
    except ValueError:
        when = None
    parts.append(when.strftime("%-d %b %H:%M") if when else folder.name)
    prompt = " ".join(str(session.get("prompt") or "").split())
    if prompt:
        parts.append("“" + (prompt if len(prompt) <= PROMPT_CHARS else prompt[: PROMPT_CHARS - 1] + "…") + "”")
    pair = session.get("pair_description") or ""
    if pair:
        parts.append(str(pair))
    return " · ".join(parts)
