"""Which numbers of an attached request are exact, which are estimates, and why: the records checked against the
engine's own counts, always.

Three sources can describe one request's speculation, best first:

1. the engine's **per-request report** (``request_metrics``: vLLM ``--per-request-spec-decode-metrics``,
   SGLang ``return_spec_tokens_details``): this request only, whatever else the server runs;
2. the **records** built from the stream (``passes``): exact where the chunks carry counters (llama.cpp), else
   an estimate (one chunk = one step, k drafted per step);
3. the engine's **Prometheus counters**, the delta between a scrape before and after the request: exact
   totals, per-position counts included, but for everything the engine did meanwhile.

``reconcile`` compares them (passes that drafted against ``num_drafts``, Σ drafted against
``num_draft_tokens``, Σ accepted and the per-position counts, a chunk longer than k + 1) and picks the
figures every surface shows: the report where there is one, else the counters where the records disagree
with them and nothing else ran, else the records. Its one ``line`` says what is exact and what is estimated,
naming the cause (merged chunks, variable drafts, other traffic seen by ``requests_running``) and, where
an engine flag would make everything exact, that flag.

This module owns the numbers derived from engine counts (``EngineFigures``); the numbers of the records
themselves stay with the measurement (``summary.summarize_attached``). Both definitions of acceptance sit
side by side: specscope's α (accepted / judged) and vLLM's draft acceptance rate (accepted / drafted), mean
acceptance length (1 + accepted / drafts) and per-position rate (accepted at i / drafts), as
``vllm/v1/spec_decode/metrics.py`` computes them for its log line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specscope.core.attach.passes import PROMPT_PASS_FLAG, SHARED_CHUNK_FLAG
from specscope.core.attach.prometheus import CounterDelta, CounterSnapshot, Engine
from specscope.core.attach.request_metrics import SGLANG_DETAILS, VLLM_SUMMARY, RequestSpecReport
from specscope.core.records import IterationRecord

RECORDS = "the stream"
COUNTERS = "the engine's counters"

VLLM_FLAG = "start vLLM with --per-request-spec-decode-metrics detailed for exact figures of every pass"
SGLANG_NOT_SENT = ("this SGLang sent no spec_tokens_details although the request asked for them "
                   "(return_spec_tokens_details)")


@dataclass
class EngineFigures:
    """A request's speculation in counts, from one source; the rates follow from the counts."""

    source: str
    drafts: int | None  # passes that drafted (vLLM num_drafts, SGLang spec_verify_ct)
    drafted: int | None
    accepted: int | None
    judged: int | None = None  # accepted + one rejected per pass that rejected; None: not known
    accepted_per_position: list[int] | None = None  # passes that accepted position i
    drafted_per_position: list[int] | None = None  # passes that drafted position i; None: not known
    judged_is_bound: bool = False  # judged counted every pass without all k accepted as rejected: α a lower bound

    @property
    def alpha(self) -> float | None:
        """specscope's α: accepted / judged."""
        return self.accepted / self.judged if self.accepted is not None and self.judged else None

    @property
    def draft_acceptance_rate(self) -> float | None:
        """vLLM's "draft acceptance rate": accepted / drafted."""
        return self.accepted / self.drafted if self.accepted is not None and self.drafted else None

    @property
    def mean_acceptance_length(self) -> float | None:
        """vLLM's "mean acceptance length": 1 + accepted / drafts (the bonus token counted)."""
        return 1.0 + self.accepted / self.drafts if self.accepted is not None and self.drafts else None

    @property
    def per_position_vllm(self) -> list[float] | None:
        """vLLM's per-position acceptance rate: passes accepting position i / drafts."""
        if self.accepted_per_position is None or not self.drafts:
            return None
        return [a / self.drafts for a in self.accepted_per_position]

    @property
    def per_position(self) -> list[float | None] | None:
        """specscope's per-position acceptance: passes accepting position i / passes that drafted it (equal to
        vLLM's while every pass drafts k)."""
        if self.accepted_per_position is None or self.drafted_per_position is None:
            return None
        return [a / d if d else None for a, d in zip(self.accepted_per_position, self.drafted_per_position,
                                                      strict=False)]

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "drafts": self.drafts, "drafted": self.drafted, "accepted": self.accepted,
                "judged": self.judged, "alpha": self.alpha, "alpha_is_lower_bound": self.judged_is_bound,
                "draft_acceptance_rate": self.draft_acceptance_rate,
                "mean_acceptance_length": self.mean_acceptance_length, "per_position": self.per_position,
                "per_position_vllm": self.per_position_vllm, "accepted_per_position": self.accepted_per_position,
                "drafted_per_position": self.drafted_per_position}


@dataclass
class Check:
    """One comparison of the records with the engine's counters."""

    name: str
    records: Any
    engine: Any

    @property
    def agrees(self) -> bool:
        return bool(self.records == self.engine)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "records": self.records, "engine": self.engine, "agrees": self.agrees}


@dataclass
class Reconciliation:
    figures: EngineFigures
    exact: list[str]
    estimated: list[str]
    causes: list[str] = field(default_factory=list)
    advice: str | None = None
    checks: list[Check] = field(default_factory=list)
    other_requests: bool = False
    records_are_estimates: bool = False

    @property
    def all_exact(self) -> bool:
        return not self.estimated

    @property
    def line(self) -> str:
        """One line: what is exact (and from where), what is estimated, why, and how to get it exact."""
        if self.all_exact:
            text = f"exact: {', '.join(self.exact)} (from {self.figures.source})"
        else:
            exact = f"exact: {', '.join(self.exact)} (from {self.figures.source}); " if self.exact else ""
            text = f"{exact}estimates: {', '.join(self.estimated)}"
        if self.causes:
            text += f" — {'; '.join(self.causes)}"
        if self.advice:
            text += f"; {self.advice}"
        return text

    def figures_line(self) -> str:
        """The chosen figures with both definitions, for a surface that shows records as they streamed (the
        window): "α 0.52 (specscope), draft acceptance rate 0.75 and mean acceptance length 2.44 (vLLM's)"."""
        f = self.figures

        def num(v: float | None, spec: str) -> str:
            return "n/a" if v is None else format(v, spec)

        bound = " (a lower bound)" if f.judged_is_bound else ""
        return (f"α {num(f.alpha, '.3f')}{bound} (specscope's), draft acceptance rate "
                f"{num(f.draft_acceptance_rate, '.3f')} and mean acceptance length "
                f"{num(f.mean_acceptance_length, '.2f')} (vLLM's) from {f.source}")

    def to_dict(self) -> dict[str, Any]:
        return {"line": self.line, "exact": self.exact, "estimated": self.estimated, "causes": self.causes,
                "advice": self.advice, "other_requests": self.other_requests,
                "records_are_estimates": self.records_are_estimates, "figures": self.figures.to_dict(),
                "checks": [c.to_dict() for c in self.checks]}


def decode_passes(records: Sequence[IterationRecord]) -> list[IterationRecord]:
    return [r for r in records if PROMPT_PASS_FLAG not in r.flags]


def record_figures(records: Sequence[IterationRecord]) -> EngineFigures:
    decode = decode_passes(records)
    depth = max((r.n_drafted for r in decode), default=0)
    return EngineFigures(
        source=RECORDS,
        drafts=sum(1 for r in decode if r.n_drafted),
        drafted=sum(r.n_drafted for r in decode),
        accepted=sum(r.n_accepted for r in decode),
        judged=sum(r.n_accepted + (1 if r.n_accepted < r.n_drafted else 0) for r in decode),
        accepted_per_position=[sum(1 for r in decode if r.n_accepted > i) for i in range(depth)],
        drafted_per_position=[sum(1 for r in decode if r.n_drafted > i) for i in range(depth)],
    )


def report_figures(report: RequestSpecReport) -> EngineFigures:
    return EngineFigures(source=report.source, drafts=report.steps, drafted=report.draft_tokens,
                         accepted=report.accepted, judged=report.judged(),
                         accepted_per_position=report.accepted_per_position(),
                         drafted_per_position=report.drafted_per_position())


def counter_figures(delta: CounterDelta, k: int | None) -> EngineFigures:
    """Figures from the counters. α needs the passes that accepted all they drafted: with every pass drafting
    k (num_draft_tokens = k x num_drafts) that is the count at position k - 1, exact; with shorter drafts the
    same count leaves out passes that accepted all of a shorter draft, so α is a lower bound."""
    per_pos = delta.accepted_per_pos
    uniform = bool(k) and delta.drafts is not None and delta.draft_tokens == delta.drafts * (k or 0)
    judged = None
    if delta.accepted_tokens is not None and delta.drafts is not None and per_pos and k and len(per_pos) >= k:
        judged = delta.accepted_tokens + delta.drafts - per_pos[k - 1]
    drafted_per_pos = [delta.drafts] * len(per_pos) if uniform and per_pos and delta.drafts is not None else None
    return EngineFigures(source=COUNTERS, drafts=delta.drafts, drafted=delta.draft_tokens,
                         accepted=delta.accepted_tokens, judged=judged, accepted_per_position=per_pos,
                         drafted_per_position=drafted_per_pos, judged_is_bound=judged is not None and not uniform)


def other_traffic(scrapes: Sequence[CounterSnapshot]) -> float:
    """The most requests besides ours the server reported running: during the request our own counts 1 (scrapes
    between the first and the last), after it none (the last)."""
    if len(scrapes) < 2:
        return 0.0
    during = [s.requests_running - 1 for s in scrapes[1:-1] if s.requests_running is not None]
    after = [scrapes[-1].requests_running] if scrapes[-1].requests_running is not None else []
    return max([0.0, *during, *after])


ALL_FIGURES = ["drafted", "accepted", "passes", "α", "per-position rates"]


def reconcile(records: Sequence[IterationRecord], scrapes: Sequence[CounterSnapshot], engine: Engine,
              k: int | None, report: RequestSpecReport | None, max_chunk_tokens: int,
              records_exact: bool, placement_certain: bool = True) -> Reconciliation:
    """Pick the figures and say how exact they are (see the module docstring). ``records_exact``: the records
    came from per-pass counters on the chunks (llama.cpp) or were rebuilt from the engine's per-step report."""
    from_records = record_figures(records)
    others = other_traffic(scrapes)
    delta = scrapes[-1].minus(scrapes[0]) if len(scrapes) >= 2 and scrapes[0].drafts is not None else None
    checks = _checks(from_records, delta) if delta is not None else []
    merged = bool(k) and max_chunk_tokens > (k or 0) + 1
    others_cause = (f"other requests ran on the server during this one (requests_running reached "
                    f"{others + 1:.0f}): its counters include them")
    shared = any(SHARED_CHUNK_FLAG in r.flags for r in records)

    if report is not None:
        figures = report_figures(report)
        result = Reconciliation(figures=figures, exact=[], estimated=[], other_requests=others > 0, checks=checks)
        if records_exact:  # rebuilt from the per-step lists
            result.exact = [*ALL_FIGURES, "every pass"]
            if not placement_certain:  # one-token steps that drafted nothing could sit in more than one place
                result.exact[-1] = "every pass's counts"
                result.estimated.append("where the steps that drafted nothing fall among the others")
                result.causes.append("the chunks fit more than one order of those one-token steps")
            if shared:
                result.estimated.append("the times of steps streamed together in one chunk")
                result.causes.append(f"the server merged engine steps into one chunk (up to {max_chunk_tokens} "
                                     f"tokens for k = {k})")
            return result
        result.exact = ["drafted", "accepted", "passes"]
        if figures.judged is not None:
            result.exact += ["α", "per-position rates"]
        else:
            result.estimated += ["α", "per-position rates"]
            result.causes.append("drafts were shorter than k on some passes and the report gives only totals")
        result.estimated.append("which pass accepted what")
        result.records_are_estimates = True
        if merged:
            result.causes.append(f"the server merged engine steps into one chunk (up to {max_chunk_tokens} tokens "
                                 f"for k = {k})")
        result.advice = VLLM_FLAG if report.source == VLLM_SUMMARY else None
        if report.source == SGLANG_DETAILS:
            result.causes.append("SGLang reports totals and a histogram, not each pass")
        return result

    if records_exact:  # llama.cpp: the chunks' own cumulative counters, this request only
        result = Reconciliation(figures=from_records, exact=[*ALL_FIGURES, "every pass"], estimated=[],
                                checks=checks, other_requests=others > 0)
        if others > 0:
            result.causes.append(f"the server's counters also counted {others:.0f} other request(s); the figures "
                                 "are this request's own, from its chunks")
        elif checks and not all(c.agrees for c in checks):
            result.causes.append("the engine's counters disagree with the chunks: " + _disagreement(checks))
        return result

    advice = VLLM_FLAG if engine is Engine.VLLM else SGLANG_NOT_SENT if engine is Engine.SGLANG else None
    if delta is not None and others == 0 and delta.drafts is not None:
        counted = counter_figures(delta, k)
        trimmed = _only_trimmed(from_records, counted, k)
        if all(c.agrees for c in checks) or trimmed:
            exact = [*ALL_FIGURES, "every pass"]
            result = Reconciliation(figures=counted if trimmed else from_records, exact=exact, estimated=[],
                                    checks=checks)
            if trimmed:
                cut = (counted.accepted or 0) - (from_records.accepted or 0)
                result.causes.append(f"the last pass's {cut} accepted token(s) past max_tokens were counted by the "
                                     "engine but not sent")
            return result
        result = Reconciliation(figures=counted, exact=["drafted", "accepted", "passes",
                                                        "per-position rates (vLLM's: per draft)"],
                                estimated=["which pass accepted what"], checks=checks, advice=advice,
                                records_are_estimates=True)
        if counted.judged is None or counted.judged_is_bound:
            result.estimated.insert(0, "α (a lower bound)" if counted.judged_is_bound else "α")
        else:
            result.exact.insert(3, "α")
        result.causes.extend(_causes(from_records, counted, merged, max_chunk_tokens, k))
        return result

    result = Reconciliation(figures=from_records, exact=[], estimated=list(ALL_FIGURES), checks=checks,
                            advice=advice, other_requests=others > 0, records_are_estimates=True)
    if others > 0:
        result.causes.append(others_cause + ", so they cannot check the stream, which does not say what each pass "
                             "drafted")
    elif delta is None:
        result.causes.append("the stream does not say what each pass drafted and no counters were read to check it")
    if merged:
        result.causes.append(f"the server merged engine steps into one chunk (up to {max_chunk_tokens} tokens for "
                             f"k = {k})")
    return result


def _checks(records: EngineFigures, delta: CounterDelta) -> list[Check]:
    out = [Check("passes that drafted vs num_drafts", records.drafts, delta.drafts),
           Check("drafted vs num_draft_tokens", records.drafted, delta.draft_tokens),
           Check("accepted vs num_accepted_tokens", records.accepted, delta.accepted_tokens)]
    if delta.accepted_per_pos is not None:
        width = len(delta.accepted_per_pos)
        mine = (records.accepted_per_position or []) + [0] * width
        out.append(Check("accepted per position vs num_accepted_tokens_per_pos", mine[:width],
                         delta.accepted_per_pos))
    return [c for c in out if c.engine is not None]


def _only_trimmed(records: EngineFigures, counted: EngineFigures, k: int | None) -> bool:
    """The records agree with the counters but for the last pass's accepted tokens that max_tokens cut off: the
    engine counts a step's accepted tokens before the trim (vLLM's scheduler), so up to k more."""
    if not k or counted.accepted is None or records.accepted is None:
        return False
    cut = counted.accepted - records.accepted
    return (0 < cut <= k and records.drafts == counted.drafts and records.drafted == counted.drafted)


def _causes(records: EngineFigures, counted: EngineFigures, merged: bool, max_chunk: int, k: int | None) -> list[str]:
    causes = []
    if merged or (counted.drafts or 0) > (records.drafts or 0):
        causes.append(f"the server merged engine steps into one chunk ({counted.drafts} drafting steps counted, "
                      f"{records.drafts} chunks seen" + (f", up to {max_chunk} tokens for k = {k})" if merged
                                                         else ")"))
    if (records.drafts or 0) > (counted.drafts or 0) and not merged:
        causes.append(f"{(records.drafts or 0) - (counted.drafts or 0)} step(s) drafted nothing (the engine counts "
                      "only steps that drafted; the stream does not say which)")
    if k and counted.drafts and counted.drafted is not None and counted.drafted < counted.drafts * k:
        causes.append(f"drafts were shorter than k = {k} on some passes ({counted.drafted} drafted over "
                      f"{counted.drafts} passes; the stream does not say which)")
    if not causes:
        causes.append("the engine's counters disagree with the stream: the counters are used")
    return causes


def _disagreement(checks: Sequence[Check]) -> str:
    return "; ".join(f"{c.name}: {c.records} vs {c.engine}" for c in checks if not c.agrees)


