"""Engine counters from a serving engine's Prometheus ``/metrics`` text, and which engine wrote them.

Metric names, as the engines' sources spell them (checked against the source, not only the docs):

- vLLM (``vllm/v1/spec_decode/metrics.py``): counters ``vllm:spec_decode_num_drafts``,
  ``vllm:spec_decode_num_draft_tokens``, ``vllm:spec_decode_num_accepted_tokens`` and
  ``vllm:spec_decode_num_accepted_tokens_per_pos`` (label ``position``), one series per engine.
- llama.cpp's server (``tools/server/server-task.cpp``, with ``--metrics``): ``llamacpp:spec_decode_num_drafts_total``,
  ``…num_draft_tokens_total``, ``…num_accepted_tokens_total`` and ``…num_accepted_tokens_per_pos_total{position}``.
  They are folded in when a request's slot is released, so they move only between requests, never mid-stream.
- SGLang (``python/sglang/srt/observability/metrics_collector.py``, 0.5.23): gauges ``sglang:spec_accept_length``
  (mean tokens per verify pass over the engine's last logging window) and ``sglang:spec_accept_rate``, and
  ``sglang:num_running_reqs``, labelled by ``tp_rank`` (and ``dp_rank``). Labelled gauges have no sample until
  the scheduler first logs, so a fresh server lists the families empty: their absence says nothing about
  whether speculation is on (``/server_info`` does).

Requests running: vLLM ``vllm:num_requests_running``, llama.cpp ``llamacpp:requests_processing``, SGLang
``sglang:num_running_reqs`` (the same requests seen by every tensor-parallel rank: the most over the ranks of
one data-parallel rank, summed over those).

Parsing is prometheus_client's own (``text_string_to_metric_families``); series of one family are summed
across engines/ranks (data-parallel vLLM exposes one per engine).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum

from prometheus_client.parser import text_string_to_metric_families


class Engine(str, Enum):
    VLLM = "vLLM"
    LLAMA_CPP = "llama.cpp"
    SGLANG = "SGLang"
    UNKNOWN = "unknown"


_PREFIX = {Engine.VLLM: "vllm:", Engine.LLAMA_CPP: "llamacpp:", Engine.SGLANG: "sglang:"}

# Counter names without the engine prefix and without the ``_total`` suffix.
DRAFTS = "spec_decode_num_drafts"
DRAFT_TOKENS = "spec_decode_num_draft_tokens"
ACCEPTED_TOKENS = "spec_decode_num_accepted_tokens"
ACCEPTED_PER_POS = "spec_decode_num_accepted_tokens_per_pos"
SGLANG_ACCEPT_LENGTH = "spec_accept_length"
SGLANG_ACCEPT_RATE = "spec_accept_rate"


MAX_POSITIONS = 4_096  # draft positions in a per-position counter family


class MetricsError(ValueError):
    """The text is not Prometheus exposition format."""


@dataclass
class CounterSnapshot:
    """The speculative-decoding counters of one scrape. None: the engine does not expose that counter."""

    t_s: float  # time.monotonic() when the scrape's response arrived
    engine: Engine
    drafts: int | None = None
    draft_tokens: int | None = None
    accepted_tokens: int | None = None
    accepted_per_pos: list[int] | None = None  # index = draft position (0-based)
    accept_length: float | None = None  # SGLang's gauge (already a mean, not a counter)
    accept_rate: float | None = None  # SGLang's gauge
    # Requests the engine is working on now (llama.cpp's requests_processing, vLLM's num_requests_running):
    # counters move only when they finish, so totals are clean only from a scrape taken while it is 0.
    requests_running: float | None = None
    families: list[str] = field(default_factory=list)  # every family name seen (for diagnostics)

    @property
    def has_speculation_counters(self) -> bool:
        return self.draft_tokens is not None or self.drafts is not None or self.accept_length is not None

    def minus(self, before: CounterSnapshot) -> CounterDelta:
        """What happened between ``before`` and this scrape (None where either side lacks the counter)."""

        def diff(a: int | None, b: int | None) -> int | None:
            return a - b if a is not None and b is not None else None

        per_pos: list[int] | None = None
        if self.accepted_per_pos is not None:
            old = before.accepted_per_pos or []
            per_pos = [v - (old[i] if i < len(old) else 0) for i, v in enumerate(self.accepted_per_pos)]
        return CounterDelta(
            t_start_s=before.t_s,
            t_end_s=self.t_s,
            drafts=diff(self.drafts, before.drafts),
            draft_tokens=diff(self.draft_tokens, before.draft_tokens),
            accepted_tokens=diff(self.accepted_tokens, before.accepted_tokens),
            accepted_per_pos=per_pos,
        )


@dataclass
class CounterDelta:
    """Counter increments over one interval between scrapes."""

    t_start_s: float
    t_end_s: float
    drafts: int | None
    draft_tokens: int | None
    accepted_tokens: int | None
    accepted_per_pos: list[int] | None

    @property
    def empty(self) -> bool:
        return not (self.drafts or self.draft_tokens or self.accepted_tokens)

    def to_dict(self) -> dict[str, object]:
        return {
            "t_start_s": self.t_start_s, "t_end_s": self.t_end_s, "drafts": self.drafts,
            "draft_tokens": self.draft_tokens, "accepted_tokens": self.accepted_tokens,
            "accepted_per_pos": self.accepted_per_pos,
        }


def detect_engine(family_names: list[str]) -> Engine:
    """The engine whose prefix the metric families carry (vLLM, llama.cpp, SGLang), else UNKNOWN."""
    for engine, prefix in _PREFIX.items():
        if any(name.startswith(prefix) for name in family_names):
            return engine
    return Engine.UNKNOWN


def _strip_total(name: str) -> str:
    return name[: -len("_total")] if name.endswith("_total") else name


def parse_counters(text: str, t_s: float) -> CounterSnapshot:
    """Parse one ``/metrics`` body; MetricsError if prometheus_client cannot read it."""
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsError(f"the /metrics response is not Prometheus text ({exc})") from exc
    names = [f.name for f in families]
    engine = detect_engine(names)
    snap = CounterSnapshot(t_s=t_s, engine=engine, families=names)
    prefix = _PREFIX.get(engine)
    if prefix is None:
        return snap
    per_pos: dict[int, float] = {}
    totals: dict[str, float] = {}
    gauges: dict[str, list[float]] = {}
    running_by_dp: dict[str, float] = {}  # SGLang: per data-parallel rank, the most any tensor rank reports
    for family in families:
        if not family.name.startswith(prefix):
            continue
        short = _strip_total(family.name[len(prefix):])
        for sample in family.samples:
            if sample.name.endswith(("_created", "_bucket", "_count", "_sum")):
                continue
            if short == ACCEPTED_PER_POS:
                pos = sample.labels.get("position")
                if pos is not None and pos.isdigit():
                    per_pos[int(pos)] = per_pos.get(int(pos), 0.0) + sample.value
            elif short == "num_running_reqs" and math.isfinite(sample.value):
                dp = sample.labels.get("dp_rank", "")
                running_by_dp[dp] = max(running_by_dp.get(dp, 0.0), sample.value)
            elif family.type == "gauge":
                gauges.setdefault(short, []).append(sample.value)
            else:
                totals[short] = totals.get(short, 0.0) + sample.value

    def whole(name: str, value: float) -> int:
        if not math.isfinite(value) or value < 0:  # NaN, ±Inf or negative: not a count
            raise MetricsError(f"the /metrics response gives {prefix}{name} = {value}, which is not a count")
        return round(value)

    def count(name: str) -> int | None:
        return whole(name, totals[name]) if name in totals else None

    snap.drafts = count(DRAFTS)
    snap.draft_tokens = count(DRAFT_TOKENS)
    snap.accepted_tokens = count(ACCEPTED_TOKENS)
    if per_pos:
        if max(per_pos) >= MAX_POSITIONS:
            raise MetricsError(f"the /metrics response names draft position {max(per_pos):,}; no engine drafts "
                               f"{MAX_POSITIONS:,} tokens at once")
        snap.accepted_per_pos = [whole(ACCEPTED_PER_POS, per_pos.get(i, 0.0)) for i in range(max(per_pos) + 1)]
    running = [v for v in gauges.get("requests_processing") or gauges.get("num_requests_running") or []
               if math.isfinite(v)]
    snap.requests_running = sum(running) if running else sum(running_by_dp.values()) if running_by_dp else None
    if engine is Engine.SGLANG:  # gauges per rank: their mean, not their sum
        length = [v for v in gauges.get(SGLANG_ACCEPT_LENGTH, []) if math.isfinite(v)]
        rate = [v for v in gauges.get(SGLANG_ACCEPT_RATE, []) if math.isfinite(v)]
        snap.accept_length = sum(length) / len(length) if length else None
        snap.accept_rate = sum(rate) / len(rate) if rate else None
    return snap
