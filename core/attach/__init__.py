"""Attach to a serving engine (vLLM, llama.cpp's server, SGLang) and read its speculation as records.

No Qt here. ``client.attach`` runs one request; ``baseline.interleaved_baseline`` measures the speed-up
against a plain endpoint; ``summary.summarize_attached`` reads the numbers through ``core.measure.metrics``.
"""

from specscope.core.attach.client import AttachResult, attach
from specscope.core.attach.options import AttachError, AttachOptions, redact_url
from specscope.core.attach.prometheus import CounterSnapshot, Engine, parse_counters

__all__ = ["AttachError", "AttachOptions", "AttachResult", "CounterSnapshot", "Engine", "attach", "parse_counters",
           "redact_url"]
