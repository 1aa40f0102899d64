"""One streamed completion chunk, as an OpenAI-compatible server sends it, reduced to what attach needs.

Two engines put speculative counters on the chunks themselves:
- llama.cpp's server, asked with ``timings_per_token: true``, adds ``timings`` to every chunk: cumulative
  ``predicted_n`` (tokens generated so far), ``draft_n`` and ``draft_n_accepted`` (present once something was
  drafted), ``predicted_ms`` and ``predicted_per_second``.
- vLLM, asked with ``stream_options: {include_usage, continuous_usage_stats}``, adds cumulative
  ``usage.completion_tokens`` to every chunk.
Either gives the number of tokens each chunk carries; without them a chunk counts as one token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any


@dataclass
class Chunk:
    t_s: float  # time.monotonic() at arrival
    text: str
    finish_reason: str | None = None
    completion_tokens: int | None = None  # cumulative, from usage or llama.cpp's predicted_n
    draft_n: int | None = None  # cumulative drafted tokens (llama.cpp timings)
    draft_n_accepted: int | None = None  # cumulative accepted drafted tokens (llama.cpp timings)
    timings: dict[str, Any] | None = None  # the chunk's llama.cpp timings object, as sent
    fingerprint: str | None = None  # system_fingerprint (llama.cpp: its build info)


class ChunkError(ValueError):
    """A ``data:`` line that is not a completion chunk."""


def _int_or_none(value: Any) -> int | None:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def parse_sse_data(data: str, t_s: float) -> Chunk | None:
    """One SSE ``data:`` payload → Chunk; None for ``[DONE]``; ChunkError for anything else unreadable."""
    if data.strip() == "[DONE]":
        return None
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ChunkError(f"the stream sent a line that is not JSON: {data[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise ChunkError("the stream sent JSON that is not an object")
    if "error" in obj:
        err = obj["error"]
        message = err.get("message") if isinstance(err, dict) else err
        raise ChunkError(f"the server reported an error mid-stream: {message}")
    text = ""
    finish: str | None = None
    choices = obj.get("choices") or []
    if choices and isinstance(choices[0], dict):
        choice = choices[0]
        text = choice.get("text") or (choice.get("delta") or {}).get("content") or ""
        finish = choice.get("finish_reason")
    chunk = Chunk(t_s=t_s, text=text, finish_reason=finish, fingerprint=obj.get("system_fingerprint"))
    usage = obj.get("usage")
    if isinstance(usage, dict):
        chunk.completion_tokens = _int_or_none(usage.get("completion_tokens"))
    timings = obj.get("timings")
    if isinstance(timings, dict):
        chunk.timings = timings
        predicted = _int_or_none(timings.get("predicted_n"))
        if predicted is not None:
            chunk.completion_tokens = predicted
        # llama.cpp leaves draft_n out until something was drafted: absent means 0 so far.
        chunk.draft_n = _int_or_none(timings.get("draft_n")) or 0
        chunk.draft_n_accepted = _int_or_none(timings.get("draft_n_accepted")) or 0
    return chunk
