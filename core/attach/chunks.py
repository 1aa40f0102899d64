"""One streamed completion chunk, as an OpenAI-compatible server sends it, reduced to what attach needs.

Two engines put speculative counters on the chunks themselves:
- llama.cpp's server, asked with ``timings_per_token: true``, adds ``timings`` to every chunk: cumulative
  ``predicted_n`` (tokens generated so far), ``draft_n`` and ``draft_n_accepted`` (present once something was
  drafted), ``predicted_ms`` and ``predicted_per_second``.
- vLLM, asked with ``stream_options: {include_usage, continuous_usage_stats}``, adds cumulative
  ``usage.completion_tokens`` to every chunk.
Either gives the number of tokens each chunk carries; without them a chunk counts as one token. vLLM's usage
and llama.cpp's ``timings.prompt_n`` also give the prompt's length in tokens.

The engines' per-request speculation reports (vLLM's ``metrics.speculative_decoding`` on the final usage
chunk, SGLang's ``sglext.spec_tokens_details``) are read by ``request_metrics`` into ``Chunk.spec_report``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from specscope.core.attach.request_metrics import (
    RequestMetricsError,
    RequestSpecReport,
    sglang_report,
    vllm_report,
)


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
    prompt_tokens: int | None = None  # usage.prompt_tokens (vLLM, SGLang) or timings.prompt_n (llama.cpp)
    spec_report: RequestSpecReport | None = None  # the engine's per-request speculation report, where sent
    report_problem: str | None = None  # a report that could not be read (one sentence; the stream goes on)


class ChunkError(ValueError):
    """A ``data:`` line that is not a completion chunk."""


MAX_COUNT = 1 << 40  # a cumulative token count beyond this is not a count


def _count(obj: dict[str, Any], key: str, where: str) -> int | None:
    """A cumulative count the server sent: None when absent; ChunkError when it is not a whole number of 0 or
    more (NaN, a string, a negative number), so that no nonsense reaches the records."""
    value = obj.get(key)
    if value is None:
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_COUNT:
        raise ChunkError(f"the stream sent {where}.{key} = {value!r:.40} where a count of tokens belongs")
    return value


def _text(value: Any, where: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ChunkError(f"the stream sent {where} = {value!r:.40} where text belongs")
    return value


def parse_sse_data(data: str, t_s: float) -> Chunk | None:
    """One SSE ``data:`` payload → Chunk; None for ``[DONE]``; ChunkError (one sentence) for anything else the
    chunk cannot be read from, valid JSON of an unexpected shape included."""
    if data.strip() == "[DONE]":
        return None
    try:
        obj = json.loads(data)
    except RecursionError:
        raise ChunkError("the stream sent JSON nested too deeply to be a completion chunk") from None
    except json.JSONDecodeError as exc:
        raise ChunkError(f"the stream sent a line that is not JSON: {data[:80]!r}") from exc
    if not isinstance(obj, dict):
        raise ChunkError("the stream sent JSON that is not an object")
    if "error" in obj:
        err = obj["error"]
        message = err.get("message") if isinstance(err, dict) else err
        raise ChunkError(f"the server reported an error mid-stream: {str(message)[:200]}")
    text = ""
    finish: str | None = None
    choices = obj.get("choices") or []
    if not isinstance(choices, list):
        raise ChunkError(f"the stream sent choices = {choices!r:.40} where a list belongs")
    if choices:
        choice = choices[0]
        if not isinstance(choice, dict):
            raise ChunkError(f"the stream sent choices[0] = {choice!r:.40} where an object belongs")
        delta = choice.get("delta")
        if delta is not None and not isinstance(delta, dict):
            raise ChunkError(f"the stream sent choices[0].delta = {delta!r:.40} where an object belongs")
        text = _text(choice.get("text"), "choices[0].text") or \
            _text((delta or {}).get("content"), "choices[0].delta.content")
        reason = choice.get("finish_reason")
        finish = _text(reason, "choices[0].finish_reason") or None
    fingerprint = obj.get("system_fingerprint")
    chunk = Chunk(t_s=t_s, text=text, finish_reason=finish,
                  fingerprint=fingerprint if isinstance(fingerprint, str) else None)
    usage = obj.get("usage")
    if isinstance(usage, dict):
        chunk.completion_tokens = _count(usage, "completion_tokens", "usage")
        chunk.prompt_tokens = _count(usage, "prompt_tokens", "usage")
    try:
        chunk.spec_report = vllm_report(obj) or sglang_report(obj, None)
    except RequestMetricsError as exc:
        chunk.report_problem = f"{exc}: the per-request figures are not used"
    timings = obj.get("timings")
    if isinstance(timings, dict):
        chunk.timings = timings
        predicted = _count(timings, "predicted_n", "timings")
        chunk.prompt_tokens = _count(timings, "prompt_n", "timings")
        if predicted is not None:
            chunk.completion_tokens = predicted
        # llama.cpp leaves draft_n out until something was drafted: absent means 0 so far.
        chunk.draft_n = _count(timings, "draft_n", "timings") or 0
        chunk.draft_n_accepted = _count(timings, "draft_n_accepted", "timings") or 0
    return chunk


class StreamSanity:
    """Checks across chunks that a single chunk cannot show: cumulative counts that go backwards, more
    accepted than drafted, or more tokens than were asked for (a server sending 10^12 would otherwise make
    the records grow without bound)."""

    MAX_DRAFT_STEP = 4_096  # drafted tokens between two chunks; engines draft at most tens per pass

    def __init__(self, max_tokens: int):
        self.token_limit = max_tokens + max(1_024, max_tokens)  # engines overshoot by a pass at most
        self._drafted = 0
        self._accepted = 0
        self._tokens = 0

    def check(self, chunk: Chunk) -> None:
        if chunk.completion_tokens is not None:
            if chunk.completion_tokens > self.token_limit:
                raise ChunkError(f"the stream counted {chunk.completion_tokens:,} tokens generated where at most "
                                 f"{self.token_limit:,} can be")
            self._tokens = chunk.completion_tokens
        if chunk.draft_n is None or chunk.draft_n_accepted is None:
            return
        if chunk.draft_n < self._drafted or chunk.draft_n_accepted < self._accepted:
            raise ChunkError("the stream's cumulative draft counters went backwards")
        if chunk.draft_n_accepted > chunk.draft_n:
            raise ChunkError(f"the stream counted {chunk.draft_n_accepted:,} drafted tokens accepted of only "
                             f"{chunk.draft_n:,} drafted")
        if chunk.draft_n - self._drafted > self.MAX_DRAFT_STEP:
            raise ChunkError(f"the stream counted {chunk.draft_n - self._drafted:,} tokens drafted in one step")
        self._drafted, self._accepted = chunk.draft_n, chunk.draft_n_accepted
