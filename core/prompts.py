"""The prompt sets shipped in ``resources/prompts``: prose, code, structured/repetitive text, and repeated tasks
(the same task on new data, in turn, as in agentic loops: where suffix decoding's cross-run cache pays)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

PROMPT_KINDS = ("prose", "code", "structured", "repeated-task")
_FIELDS = ("id", "title", "text")


@dataclass(frozen=True)
class Prompt:
    id: str
    kind: str
    title: str
    text: str


EXPECTED_SHAPE = '{"kind": "prose", "prompts": [{"id": "...", "title": "...", "text": "..."}, ...]}'


def parse_prompt_file(data: Any, origin: str) -> list[Prompt]:
    """Prompts from one file's JSON: {"kind": ..., "prompts": [{"id", "title", "text"}, ...]}."""
    if not isinstance(data, dict):
        raise ValueError(f"{origin}: expected a JSON object shaped {EXPECTED_SHAPE}, not a {type(data).__name__}")
    kind = data.get("kind")
    items = data.get("prompts")
    if not isinstance(kind, str) or not isinstance(items, list):
        raise ValueError(f"{origin}: expected a JSON object shaped {EXPECTED_SHAPE}")
    out: list[Prompt] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict) or not all(isinstance(item.get(f), str) for f in _FIELDS):
            raise ValueError(f"{origin}: prompt {i} needs 'id', 'title' and 'text' strings")
        out.append(Prompt(id=item["id"], kind=kind, title=item["title"], text=item["text"]))
    return out


def load_prompt_sets() -> dict[str, list[Prompt]]:
    """Every shipped set, keyed by kind, in file order."""
    folder = files("specscope.resources").joinpath("prompts")
    sets: dict[str, list[Prompt]] = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".json"):
            prompts = parse_prompt_file(json.loads(entry.read_text(encoding="utf-8")), entry.name)
            if prompts:
                sets.setdefault(prompts[0].kind, []).extend(prompts)
    return sets


def load_prompt_file(path: str | Path) -> list[Prompt]:
    """A user's own set in the same format, or a plain text file (one prompt, kind "custom"). ValueError
    (one sentence naming the file) for anything else: not a regular file, over ``MAX_PROMPT_FILE_BYTES``, not
    UTF-8, not JSON, JSON nested too deeply, or the wrong shape."""
    from specscope.core.user_files import MAX_PROMPT_FILE_BYTES, parse_user_json, read_regular_text

    p = Path(path)
    text = read_regular_text(p, "prompt file", MAX_PROMPT_FILE_BYTES)
    if p.suffix.lower() == ".json":
        return parse_prompt_file(parse_user_json(text, f"prompt file {p}"), f"prompt file {p}")
    if not text.strip():
        raise ValueError(f"prompt file {p} is empty")
    return [Prompt(id=p.stem, kind="custom", title=p.stem, text=text.strip())]
