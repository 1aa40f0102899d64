"""Attach to a serving engine (vLLM, llama.cpp's server, SGLang) and read its speculation as records.

No Qt here. ``client.attach`` runs one request; ``baseline.interleaved_baseline`` measures the speed-up
against a plain endpoint; ``summary.summarize_attached`` reads the numbers through ``core.measure.metrics``.
The names below are loaded on first use (PEP 562): importing one submodule, as the CLI's ``--help`` does for
the option limits, does not load the HTTP client.
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {"AttachResult": "client", "attach": "client", "AttachError": "options", "AttachOptions": "options",
          "redact_url": "options", "CounterSnapshot": "prometheus", "Engine": "prometheus",
          "parse_counters": "prometheus"}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{home}"), name)
