"""What an engine reports about one request's speculation in the response itself: exact, and unaffected by other
requests on the server (unlike its Prometheus counters).

- **vLLM** (``--per-request-spec-decode-metrics summary|detailed``, 0.34): the final usage chunk of a stream
  (``choices: []``, sent when ``stream_options.include_usage`` is true) carries ``metrics.speculative_decoding``,
  the ``SpeculativeDecodingMetrics`` of ``vllm/entrypoints/generate/base/protocol.py``, built by
  ``RequestSpecDecodeMetrics.to_dict`` (``vllm/v1/metrics/stats.py``): ``num_spec_steps``,
  ``num_draft_tokens``, ``num_accepted_draft_tokens``, ``num_spec_tokens`` (k), ``acceptance_histogram``
  (index j = steps that accepted exactly j drafts), ``mean_acceptance_length`` and ``draft_acceptance_rate``;
  at ``detailed`` also ``per_step_accepted`` / ``per_step_drafted`` (one entry per verify step, in order). The
  scheduler counts a step when its drafts are verified, before ``max_tokens`` or a stop string trims what the
  step sends, and steps that drafted nothing are not steps here (n-gram with no match).
- **SGLang** (request field ``return_spec_tokens_details: true``, 0.5.23): a chunk before the usage chunk
  (``choices: []``) carries ``sglext.spec_tokens_details`` (``SpecTokensDetails`` of
  ``sglang/srt/entrypoints/openai/protocol.py``): ``spec_verify_ct`` (verify passes),
  ``spec_num_correct_drafts`` (accepted drafts), ``spec_num_proposed_drafts`` (= passes x
  (``speculative_num_draft_tokens`` - 1): SGLang's k per pass), ``spec_correct_drafts_histogram`` (index j =
  passes accepting j), ``spec_accept_length`` (completion tokens / passes) and ``spec_accept_rate``.
- **llama.cpp** needs nothing here: with ``timings_per_token`` every chunk carries the request's cumulative
  ``draft_n`` / ``draft_n_accepted`` (``chunks``), so each pass is exact as it streams. It reports no
  per-position figure per request (only its ``/metrics`` counters do, summed over requests).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

VLLM_DETAILED = "vLLM's per-request metrics (detailed)"
VLLM_SUMMARY = "vLLM's per-request metrics (summary)"
SGLANG_DETAILS = "SGLang's spec_tokens_details"

MAX_STEPS = 1 << 22  # verify steps of one request: more than any max_tokens allows


class RequestMetricsError(ValueError):
    """A per-request report whose numbers cannot be counts (one sentence)."""


@dataclass
class RequestSpecReport:
    """One request's speculation as the engine reported it in the response."""

    source: str  # VLLM_DETAILED, VLLM_SUMMARY or SGLANG_DETAILS
    steps: int  # verify passes that drafted (vLLM's num_spec_steps, SGLang's spec_verify_ct)
    draft_tokens: int
    accepted: int
    k: int | None  # the configured draft length (vLLM num_spec_tokens; SGLang draft tokens - 1)
    histogram: list[int] | None = None  # index j: passes that accepted exactly j drafted tokens
    per_step_accepted: list[int] | None = None
    per_step_drafted: list[int] | None = None

    @property
    def detailed(self) -> bool:
        return self.per_step_accepted is not None and self.per_step_drafted is not None

    @property
    def uniform_drafts(self) -> bool:
        """Every pass drafted k (then α and the per-position rates follow from the histogram alone)."""
        if self.per_step_drafted is not None:
            return bool(self.k) and all(d == self.k for d in self.per_step_drafted)
        return bool(self.k) and self.draft_tokens == self.steps * (self.k or 0)

    def accepted_per_position(self) -> list[int] | None:
        """Passes that accepted position i (0-based): the prefix rule makes it Σ over j > i of histogram[j]."""
        hist = self.histogram
        if self.detailed:
            assert self.per_step_accepted is not None
            depth = max([self.k or 0, *self.per_step_accepted])
            return [sum(1 for a in self.per_step_accepted if a > i) for i in range(depth)]
        if not hist:
            return None
        return [sum(hist[i + 1:]) for i in range(len(hist) - 1)]

    def drafted_per_position(self) -> list[int] | None:
        """Passes that drafted position i: known per step (detailed), or = passes when every pass drafts k."""
        if self.per_step_drafted is not None:
            depth = max([self.k or 0, *self.per_step_drafted])
            return [sum(1 for d in self.per_step_drafted if d > i) for i in range(depth)]
        if self.uniform_drafts and self.k:
            return [self.steps] * self.k
        return None

    def judged(self) -> int | None:
        """Accepted + one rejected proposal per pass that did not accept all it drafted (specscope's α basis);
        None where the drafts per pass are not known (variable drafts, summary only)."""
        if self.detailed:
            assert self.per_step_accepted is not None and self.per_step_drafted is not None
            return sum(a + (1 if a < d else 0) for a, d in zip(self.per_step_accepted, self.per_step_drafted,
                                                                strict=True))
        if self.uniform_drafts and self.histogram:
            full = self.histogram[self.k] if self.k is not None and self.k < len(self.histogram) else 0
            return self.accepted + self.steps - full
        return None


def _count(obj: dict[str, Any], key: str, where: str, default: int | None = None) -> int:
    value = obj.get(key, default)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STEPS * 64:
        raise RequestMetricsError(f"the stream sent {where}.{key} = {value!r:.40} where a count belongs")
    return value


def _counts(obj: dict[str, Any], key: str, where: str) -> list[int] | None:
    value = obj.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_STEPS:
        raise RequestMetricsError(f"the stream sent {where}.{key} of an unexpected shape: a list of counts belongs")
    return [_count({key: v}, key, where) for v in value]


def vllm_report(obj: dict[str, Any]) -> RequestSpecReport | None:
    """``metrics.speculative_decoding`` of a vLLM chunk, or None when the chunk has none."""
    metrics = obj.get("metrics")
    spec = metrics.get("speculative_decoding") if isinstance(metrics, dict) else None
    if spec is None:
        return None
    where = "metrics.speculative_decoding"
    if not isinstance(spec, dict):
        raise RequestMetricsError(f"the stream sent {where} = {spec!r:.40} where an object belongs")
    accepted_steps = _counts(spec, "per_step_accepted", where)
    drafted_steps = _counts(spec, "per_step_drafted", where)
    if (accepted_steps is None) != (drafted_steps is None) or (
            accepted_steps is not None and drafted_steps is not None and len(accepted_steps) != len(drafted_steps)):
        raise RequestMetricsError(f"the stream sent {where} with per_step_accepted and per_step_drafted of "
                                  "different lengths")
    report = RequestSpecReport(
        source=VLLM_DETAILED if accepted_steps is not None else VLLM_SUMMARY,
        steps=_count(spec, "num_spec_steps", where),
        draft_tokens=_count(spec, "num_draft_tokens", where),
        accepted=_count(spec, "num_accepted_draft_tokens", where),
        k=_count(spec, "num_spec_tokens", where),
        histogram=_counts(spec, "acceptance_histogram", where),
        per_step_accepted=accepted_steps,
        per_step_drafted=drafted_steps,
    )
    _check(report, where)
    return report


def sglang_report(obj: dict[str, Any], k: int | None) -> RequestSpecReport | None:
    """``sglext.spec_tokens_details`` of an SGLang chunk (the first choice's, for n > 1), or None."""
    ext = obj.get("sglext")
    details = ext.get("spec_tokens_details") if isinstance(ext, dict) else None
    if isinstance(details, list):
        details = details[0] if details else None
    if details is None:
        return None
    where = "sglext.spec_tokens_details"
    if not isinstance(details, dict):
        raise RequestMetricsError(f"the stream sent {where} = {details!r:.40} where an object belongs")
    steps = _count(details, "spec_verify_ct", where, 0)
    proposed = _count(details, "spec_num_proposed_drafts", where, 0)
    if k is None and steps:
        k = proposed // steps  # SGLang proposes draft tokens - 1 per pass, every pass
    report = RequestSpecReport(source=SGLANG_DETAILS, steps=steps, draft_tokens=proposed,
                               accepted=_count(details, "spec_num_correct_drafts", where, 0), k=k,
                               histogram=_counts(details, "spec_correct_drafts_histogram", where) or None)
    _check(report, where)
    return report


def _check(report: RequestSpecReport, where: str) -> None:
    if report.accepted > report.draft_tokens:
        raise RequestMetricsError(f"the stream's {where} counts {report.accepted:,} accepted of only "
                                  f"{report.draft_tokens:,} drafted tokens")
    if report.detailed:
        assert report.per_step_accepted is not None and report.per_step_drafted is not None
        if any(a > d for a, d in zip(report.per_step_accepted, report.per_step_drafted, strict=True)):
            raise RequestMetricsError(f"the stream's {where} has a step that accepted more than it drafted")
        if (sum(report.per_step_accepted), sum(report.per_step_drafted), len(report.per_step_accepted)) != (
                report.accepted, report.draft_tokens, report.steps):
            raise RequestMetricsError(f"the stream's {where} per-step lists do not add up to its totals")
