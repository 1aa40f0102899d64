"""A model directory's config.json checked field by field before transformers reads it.

transformers reports a config field of the wrong type from deep inside a config class, after the engine's
imports (15–18 s in the app), in words that do not name the field. These checks read the file as JSON and
name the file and the field in one sentence. They import nothing heavy, so the app's model dialog runs them
when a directory is chosen, and the engine runs the same ones before ``AutoConfig`` (the CLI and the worker).
Only fields whose meaning is fixed across architectures are checked; the rest are transformers' to judge.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

CONFIG_NAME = "config.json"
MAX_CONFIG_BYTES = 16 * 1024 * 1024  # the largest real configs are tens of KiB

# Sizes and counts: a whole number of at least 1 (null means "use the default" in several architectures).
WHOLE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "head_dim", "max_position_embeddings")
NUMBER_FIELDS = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "rope_theta", "initializer_range")
SECTIONS = ("text_config",)  # where a multimodal config keeps its language model's fields


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def _field_problem(name: str, value: Any) -> str | None:
    if value is None:
        return None
    if name in WHOLE_FIELDS:
        whole = (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and math.isfinite(value) and value.is_integer())
        if not whole:
            return f"{_shown(name)} is {_shown(value)}, not a whole number"
        if value < 1:
            return f"{_shown(name)} is {_shown(value)}, not a whole number of at least 1"
    if name in NUMBER_FIELDS and (isinstance(value, bool) or not isinstance(value, (int, float))):
        return f"{_shown(name)} is {_shown(value)}, not a number"
    if name == "model_type" and not isinstance(value, str):
        return f"\"model_type\" is {_shown(value)}, not a name"
    if name == "architectures" and not (isinstance(value, list) and all(isinstance(a, str) for a in value)):
        return f"\"architectures\" is {_shown(value)}, not a list of names"
    return None


def _section_problem(section: dict[str, Any], prefix: str) -> str | None:
    for name, value in section.items():
        problem = _field_problem(name, value)
        if problem is not None:
            return problem.replace(f'"{name}"', f'"{prefix}{name}"', 1) if prefix else problem
    return None


def config_problem(directory: Path) -> str | None:
    """One sentence naming config.json and what is wrong in it, or None when the checked fields are sound."""
    path = directory / CONFIG_NAME
    if not path.is_file():
        return f"no {CONFIG_NAME} in {directory}: not a transformers model directory"
    try:
        if path.stat().st_size > MAX_CONFIG_BYTES:
            return f"{path}: over {MAX_CONFIG_BYTES // (1024 * 1024)} MiB, not a model config"
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return f"{path}: not UTF-8 text"
    except OSError as e:
        return f"{path} cannot be read ({e.strerror or type(e).__name__})"
    try:
        config = json.loads(text)
    except json.JSONDecodeError as e:
        return f"{path}: not JSON (line {e.lineno}, column {e.colno}: {e.msg})"
    except RecursionError:
        return f"{path}: nested too deeply to be a model config"
    if not isinstance(config, dict):
        return f"{path}: not a JSON object"
    problem = _section_problem(config, "")
    for name in SECTIONS:
        section = config.get(name)
        if problem is None and section is not None:
            problem = (_section_problem(section, f"{name}.") if isinstance(section, dict)
                       else f"\"{name}\" is {_shown(section)}, not an object")
    return None if problem is None else f"{path}: {problem}"


def local_directory(name: str) -> Path | None:
    """``name`` as an existing directory, or None (a hub id, or nothing there: the loader says which)."""
    path = Path(name).expanduser()
    try:
        return path if path.is_dir() else None
    except OSError:
        return None
