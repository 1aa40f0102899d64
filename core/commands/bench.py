"""``specscope bench``: one pair, one prompt set, every method in interleaved rounds, one report.

Methods: plain decoding, specscope at fixed k, adaptive k (cost model) and transformers' heuristic
schedule, transformers' assisted generation (assistant configured through its ``generation_config``) and
transformers' prompt lookup. Each round runs every prompt through every method back to back, in an order
that rotates from round to round, and each run's speed is compared with the plain run of the same prompt in
the same round: the machine drifts, so only adjacent runs are compared.

Speeds include the prefill (transformers' ``generate`` is timed as a whole, so specscope is timed the same
way: prefill plus the loop's iterations; baseline measurements between iterations are not counted).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import shlex
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import torch

from specscope.core.commands.cli_checks import (
    EXIT_FAILURE,
    CliError,
    Interrupted,
    SignalGuard,
    add_max_new_tokens,
    check_writable,
    emit,
    print_error,
    progress_line,
    whole_number,
)
from specscope.core.controls import K_MAX, Controls
from specscope.core.drafter_catalogue import DEMO_DRAFTER, DRAFTER_KINDS, default_drafter
from specscope.core.engine.drafters.base import Drafter
from specscope.core.engine.drafters.suffix import SuffixDrafter
from specscope.core.engine.pair import ModelPair
from specscope.core.engine.speculative import DecodeOptions, Decoder, KPolicy, synchronize
from specscope.core.measure.adaptive import CostModelKPolicy, HeuristicKPolicy
from specscope.core.measure.adaptive_lookup import LookupLengthPolicy
from specscope.core.measure.adaptive_suffix import SuffixLengthPolicy
from specscope.core.measure.measurement import Estimate, Measurement, RatioInterval, replay
from specscope.core.measure.schedule import VerifyExploration
from specscope.core.measure.statistics import paired_ratio
from specscope.core.measure.summary import run_summary
from specscope.core.prompts import Prompt
from specscope.core.records import ControlValues, IterationRecord
from specscope.core.trace.cells import spreadsheet_safe
from specscope.core.trace.errors import TraceError, TraceWriteError
from specscope.core.trace.files import atomic_text_files

SPECSCOPE_KINDS = ("plain", "fixed", "adaptive", "heuristic")
DEFAULT_GOALS = (1.25, 1.5)  # speed-ups the report says the needed α for, beside break-even
HF_KINDS = ("hf-assisted", "hf-lookup")


@dataclass(frozen=True)
class Method:
    name: str
    kind: str  # one of SPECSCOPE_KINDS + HF_KINDS
    k: int = 0  # fixed k, assistant tokens, or prompt-lookup tokens
    lookup: LookupVariant | None = None  # a prompt-lookup drafter other than the pair's (variant rows)
    # Suffix decoding: whether the run's cross-run cache holds the responses to the prompts run before it in
    # this round (never its own prompt's: that would be the answer it is verified against).
    suffix_cache: bool = True


@dataclass(frozen=True)
class LookupVariant:
    """How prompt lookup matches: which occurrence, and the n-gram sizes tried (longest first)."""

    match: str = "recent"  # or "earliest" (transformers' choice)
    max_ngram: int = 3
    min_ngram: int = 1

    @property
    def label(self) -> str:
        return f"{self.match} n={self.max_ngram}..{self.min_ngram}"

    @classmethod
    def parse(cls, text: str) -> LookupVariant:
        """``MATCH:MAX:MIN``, e.g. ``earliest:2:1``."""
        parts = text.strip().split(":")
        try:
            match, hi, lo = parts[0], int(parts[1]), int(parts[2])
        except (IndexError, ValueError):
            raise ValueError(f"a lookup variant is MATCH:MAX_N:MIN_N (e.g. earliest:2:1), got {text!r}") from None
        if match not in ("recent", "earliest") or not 1 <= lo <= hi <= 8:
            raise ValueError(f"a lookup variant needs recent or earliest and 1 <= MIN_N <= MAX_N <= 8, got {text!r}")
        return cls(match, hi, lo)


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    kind: str
    ids: list[int]


@dataclass
class RunRow:
    """One method on one prompt in one round."""

    round: int
    method: str
    prompt_id: str
    prompt_kind: str
    tokens: int
    seconds: float  # prefill + decode
    token_ids: list[int] = field(repr=False, default_factory=list)
    target_passes: int | None = None  # target forward passes after the prefill (iterations)
    alpha: float | None = None  # accepted / judged proposals (the cost model's alpha)
    acceptance_rate: float | None = None  # accepted / drafted
    mean_k: float | None = None
    decode_ms: float | None = None  # the loop's own time, without prefill (specscope runs)
    ratio_to_plain: float | None = None  # tokens/s over the adjacent plain run's
    measured_decode_speedup: float | None = None  # the same quantity measured against the adjacent plain run
    matches_plain: bool | None = None
    records: list[IterationRecord] = field(repr=False, default_factory=list)
    threads: int = 0  # torch CPU threads the run had
    ratio_to_hf_lookup: float | None = None  # tokens/s over the adjacent transformers prompt-lookup run's
    # The measurement's view of this run against the adjacent plain run, at ``cost_k`` (the run's typical k):
    # the costs the prediction used and the α it would need (speculative specscope runs only).
    estimate: Estimate | None = field(repr=False, default=None)
    cost_k: int = 0
    # The run's own snapshot (specscope runs, plain included): its decode rate (tokens over the time inside
    # iterations), its wall rate (tokens over the span from the first iteration's start to the last one's end)
    # and the measurement's own share of that wall time.
    snapshot: Estimate | None = field(repr=False, default=None)

    @property
    def decode_tokens_per_s(self) -> float | None:
        return self.snapshot.tokens_per_s if self.snapshot is not None else None

    @property
    def wall_tokens_per_s(self) -> float | None:
        return self.snapshot.wall_tokens_per_s if self.snapshot is not None else None

    @property
    def measurement_overhead(self) -> float | None:
        cost = self.snapshot.cost if self.snapshot is not None else None
        return cost.share if cost is not None else None

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    @property
    def tokens_per_pass(self) -> float | None:
        return self.tokens / self.target_passes if self.target_passes else None

    @property
    def predicted_speedup(self) -> float | None:
        """The measurement's cost model at ``cost_k``, decode only."""
        return self.estimate.speedup_at(self.cost_k) if self.estimate is not None else None

    @property
    def plain_step_ms(self) -> float | None:
        return self.estimate.costs.plain_step_ms if self.estimate is not None else None

    @property
    def _iteration_costs(self) -> tuple[float, float] | None:
        return self.estimate.iteration_costs(self.cost_k) if self.estimate is not None and self.cost_k else None

    @property
    def draft_ms(self) -> float | None:
        """Drafting per iteration at ``cost_k``."""
        costs = self._iteration_costs
        return costs[0] if costs else None

    @property
    def verify_ms(self) -> float | None:
        """One verify pass of ``cost_k`` + 1 tokens."""
        costs = self._iteration_costs
        return costs[1] if costs else None

    def alpha_needed(self, speedup: float) -> float | None:
        """The α at which this run's k and measured costs give ``speedup`` × plain (None: unreachable)."""
        if self.estimate is None or not self.cost_k:
            return None
        return self.estimate.alpha_for_speedup(self.cost_k, speedup)

    @property
    def break_even_alpha(self) -> float | None:
        return self.alpha_needed(1.0)


@dataclass
class Mismatch:
    method: str
    prompt_id: str
    round: int
    position: int  # first differing index in the generated tokens
    detail: str = ""
    threads: int = 0


def default_methods(ks: Sequence[int], pair: ModelPair, adaptive: bool = True, heuristic: bool = True,
                    transformers: bool = True, lookup_tokens: int = 10,
                    lookup_variants: Sequence[LookupVariant] = ()) -> list[Method]:
    """Plain, each fixed k, adaptive, heuristic, and transformers' methods the pair supports; with prompt
    lookup, one adaptive row per lookup variant asked for. With suffix decoding, its peers too: the largest
    k without the cross-run cache, and specscope's own prompt lookup (its default: adaptive)."""
    suffix = pair.drafter_kind == "suffix"
    methods = [Method("plain", "plain")]
    prefix = "suffix " if suffix else ""
    methods += [Method(f"{prefix}k={k}", "fixed", k) for k in ks]
    if suffix and ks:
        methods.append(Method(f"suffix k={max(ks)} no cache", "fixed", max(ks), suffix_cache=False))
    if adaptive:
        name = ("adaptive (lookup policy)" if pair.drafter_kind == "lookup" else
                "suffix adaptive" if suffix else "adaptive")
        methods.append(Method(name, "adaptive"))
        if pair.drafter_kind == "lookup":
            methods += [Method(f"adaptive {v.label}", "adaptive", lookup=v) for v in lookup_variants]
    if suffix:
        methods.append(Method("lookup adaptive (lookup policy)", "adaptive", lookup=LookupVariant()))
    if heuristic:
        methods.append(Method(f"{prefix}heuristic", "heuristic"))
    if transformers:
        if pair.draft is not None and pair.drafter_kind == "model":  # an EAGLE head is not an assistant LM
            methods += [Method(f"hf-assisted k={k}", "hf-assisted", k) for k in ks]
        methods.append(Method(f"hf-lookup n={lookup_tokens}", "hf-lookup", lookup_tokens))
    return methods


# ---- running one method ---------------------------------------------------------------------------
def _policy(method: Method, drafter_kind: str, drafter: Drafter) -> KPolicy | None:
    if method.kind == "adaptive":
        # a lookup or suffix proposal is found whole at once: its policy trims it (suffix decoding's by the
        # draft's own count ratios, lookup's by acceptance measured per match length)
        if method.lookup is None and isinstance(drafter, SuffixDrafter):
            return SuffixLengthPolicy(Measurement(), drafter)
        matching = method.lookup is not None or drafter_kind == "lookup"
        return LookupLengthPolicy(Measurement()) if matching else CostModelKPolicy(Measurement())
    if method.kind == "heuristic":
        return HeuristicKPolicy()
    return None


def run_specscope(pair: ModelPair, prompt: BenchPrompt, method: Method, max_new_tokens: int,
                  earlier: Sequence[Sequence[int]] = ()) -> RunRow:
    """A specscope run (plain or speculative) timed as prefill + the loop's iterations. ``earlier``: the
    responses to the prompts run before this one in the round (suffix decoding's cross-run cache)."""
    plain = method.kind == "plain"
    drafter = pair.drafter
    if pair.drafter_kind == "suffix" and method.lookup is None and not plain:
        drafter = fresh_suffix_drafter(pair.drafter, earlier if method.suffix_cache else ())
    if method.lookup is not None:
        from specscope.core.engine.drafters.lookup import PromptLookupDrafter

        v = method.lookup
        drafter = PromptLookupDrafter(max_ngram=v.max_ngram, min_ngram=v.min_ngram, match=v.match,
                                      num_tokens=getattr(pair.drafter, "num_tokens", 10))
    policy = _policy(method, pair.drafter_kind, drafter)
    # plain decoding gets no drafter: its prefill must not pay for the draft's
    decoder = Decoder(pair.target.model, pair.vocab_size, drafter=None if plain else drafter,
                      token_text=pair.token_text, k_policy=policy)
    adaptive = policy is not None
    controls = Controls(ControlValues(k=method.k if method.kind == "fixed" else 4, adaptive_k=adaptive))
    # The cost-model policy needs a plain step's cost and verify costs by pass length: a plain step now and
    # then, and an occasional iteration at an unmeasured length, all of them real (they commit their tokens, and
    # their time counts). Lookup's policy measures both from its own passes: no baselines.
    measured = method.kind == "adaptive" and not isinstance(policy, LookupLengthPolicy)
    # this runner is the session here: the measurement's one feeder, for the policy's numbers and the row's own
    measurement: Measurement = getattr(policy, "measurement", None) or Measurement()
    opts = DecodeOptions(
        max_new_tokens=max_new_tokens, eos_token_ids=pair.eos_token_ids, record_tokens=False,
        baseline_every=32 if measured else 0, baseline_steps=1, baseline_first=measured,
        explore_k=VerifyExploration(measurement, min(8, K_MAX)) if measured else None,
    )
    for event in decoder.stream(prompt.ids, controls, opts, plain=plain):
        measurement.feed(event)
    result = decoder.result
    assert result is not None
    records = result.iterations
    decode_ms = sum(r.iteration_ms for r in records)
    row = RunRow(round=0, method=method.name, prompt_id=prompt.id, prompt_kind=prompt.kind,
                 tokens=len(result.token_ids), seconds=(decoder.prefill_ms + decode_ms) / 1000.0,
                 token_ids=list(result.token_ids), target_passes=len(records), decode_ms=decode_ms,
                 records=list(records), snapshot=measurement.estimate())
    if not plain:
        fill_acceptance(row, records)
    return row


def fresh_suffix_drafter(like: Drafter, earlier: Sequence[Sequence[int]]) -> Drafter:
    """A suffix drafter with ``like``'s parameters whose cache holds exactly ``earlier`` (the newest
    ``max_cached_requests`` of them): filled before the run, as a session fills it between runs, so the time
    it takes is not part of the run's."""
    from specscope.core.engine.drafters.suffix import ResponseCache

    if not isinstance(like, SuffixDrafter):
        raise TypeError(f"a suffix pair needs a SuffixDrafter, got {type(like).__name__}")
    cache = ResponseCache(like.max_tree_depth, like.max_cached_requests)
    for response in earlier:
        cache.add(response)
    return SuffixDrafter(like.max_tree_depth, like.max_spec_factor, like.min_token_prob,
                         like.max_cached_requests, cache=cache)


def fill_acceptance(row: RunRow, records: Sequence[IterationRecord]) -> None:
    """α, acceptance rate and mean k of a run, from the measurement's run summary (as the CLI prints them)."""
    summary = run_summary(records, estimate=replay(records).estimate())
    row.alpha, row.acceptance_rate, row.mean_k = summary["alpha"], summary["acceptance_rate"], summary["mean_k"]


class _PassCounter:
    """Counts a module's forward calls (transformers' iterations = target passes after the first)."""

    def __init__(self, module: torch.nn.Module):
        self.calls = 0
        self._handle = module.register_forward_hook(self._hook)

    def _hook(self, *_: object) -> None:
        self.calls += 1

    def close(self) -> None:
        self._handle.remove()


def run_transformers(pair: ModelPair, prompt: BenchPrompt, method: Method, max_new_tokens: int) -> RunRow:
    """transformers' assisted generation or prompt lookup, greedy, timed around ``generate``."""
    model = pair.target.model
    device = pair.target.device
    inputs = torch.tensor([prompt.ids], dtype=torch.long, device=device)
    eos = sorted(pair.eos_token_ids)
    kwargs: dict[str, Any] = {
        "max_new_tokens": max_new_tokens, "do_sample": False, "temperature": None, "top_p": None,
        "top_k": None, "eos_token_id": eos or None, "pad_token_id": eos[0] if eos else 0,
        "attention_mask": torch.ones_like(inputs),
    }
    saved: dict[str, Any] = {}
    assistant_config: Any = None
    if method.kind == "hf-assisted":
        if pair.draft is None:
            raise ValueError("transformers' assisted generation needs a draft model")
        # generate() ignores these as arguments; they are read from the assistant's generation_config.
        assistant_config = pair.draft.model.generation_config
        wanted = {"num_assistant_tokens": method.k, "num_assistant_tokens_schedule": "constant",
                  "assistant_confidence_threshold": 0.0}
        saved = {a: getattr(assistant_config, a, None) for a in wanted}
        for a, v in wanted.items():
            setattr(assistant_config, a, v)
        kwargs["assistant_model"] = pair.draft.model
    elif method.kind == "hf-lookup":
        kwargs["prompt_lookup_num_tokens"] = method.k
    else:
        raise ValueError(f"not a transformers method: {method.kind}")
    counter = _PassCounter(model)
    try:
        with torch.inference_mode():
            synchronize(device)
            t0 = time.perf_counter()
            out = model.generate(inputs, **kwargs)
            synchronize(device)
            seconds = time.perf_counter() - t0
    finally:
        counter.close()
        for a, v in saved.items():
            setattr(assistant_config, a, v)
    new = [int(t) for t in out[0, len(prompt.ids):].tolist()]
    return RunRow(round=0, method=method.name, prompt_id=prompt.id, prompt_kind=prompt.kind,
                  tokens=len(new), seconds=seconds, token_ids=new, target_passes=max(1, counter.calls))


def run_method(pair: ModelPair, prompt: BenchPrompt, method: Method, max_new_tokens: int,
               earlier: Sequence[Sequence[int]] = ()) -> RunRow:
    if method.kind in HF_KINDS:
        return run_transformers(pair, prompt, method, max_new_tokens)
    if method.kind in SPECSCOPE_KINDS:
        return run_specscope(pair, prompt, method, max_new_tokens, earlier)
    raise ValueError(f"unknown method kind {method.kind!r}")


# ---- the bench ------------------------------------------------------------------------------------
def run_bench(pair: ModelPair, prompts: Sequence[BenchPrompt], methods: Sequence[Method], rounds: int,
              max_new_tokens: int, warmup: bool = True,
              progress: Callable[[str], None] | None = None, rows: list[RunRow] | None = None) -> list[RunRow]:
    """Every method on every prompt, ``rounds`` times, the method order rotating each round. Each run's row is
    appended to ``rows`` (a new list if None) as it ends, and compared with plain even when an exception (a
    signal) ends the bench early: the caller keeps the runs that finished."""
    if rounds < 1 or not prompts or not methods:
        raise ValueError("the bench needs at least one round, one prompt and one method")
    if warmup:  # first calls allocate and pick kernels: keep that out of the timings
        for m in methods:
            run_method(pair, prompts[0], m, min(8, max_new_tokens))
    rows = [] if rows is None else rows
    first = len(rows)
    try:
        for rnd in range(rounds):
            earlier: list[list[int]] = []  # this round's responses so far, as a session would have seen them
            for prompt in prompts:
                shift = rnd % len(methods)
                for m in list(methods[shift:]) + list(methods[:shift]):
                    row = run_method(pair, prompt, m, max_new_tokens, earlier)
                    row.round = rnd
                    rows.append(row)
                    if progress is not None:
                        progress(f"round {rnd + 1}/{rounds} {prompt.id} {m.name}: {row.tokens_per_s:.1f} tok/s")
                this_prompt = rows[-len(methods):]
                earlier.append(next((r for r in this_prompt if r.method == "plain"), this_prompt[0]).token_ids)
    finally:
        compare_with_plain(rows[first:])
    return rows


def compare_with_plain(rows: list[RunRow]) -> None:
    """Ratio to the plain run of the same prompt and round (and to transformers' prompt lookup's, when it
    ran); predicted vs measured decode speed-up."""
    plain = {(r.round, r.prompt_id): r for r in rows if r.method == "plain"}
    hf_lookup = {(r.round, r.prompt_id): r for r in rows if r.method.startswith("hf-lookup")}
    for r in rows:
        h = hf_lookup.get((r.round, r.prompt_id))
        if h is not None and h.tokens_per_s > 0 and not r.method.startswith("hf-lookup"):
            r.ratio_to_hf_lookup = r.tokens_per_s / h.tokens_per_s
        p = plain.get((r.round, r.prompt_id))
        if p is None or p.tokens_per_s <= 0:
            continue
        r.ratio_to_plain = r.tokens_per_s / p.tokens_per_s
        r.matches_plain = r.token_ids == p.token_ids
        if r.method == "plain" or not r.decode_ms or not p.decode_ms or not p.tokens:
            continue
        plain_ms_per_token = p.decode_ms / p.tokens
        r.measured_decode_speedup = r.tokens * plain_ms_per_token / r.decode_ms
        if r.records and p.records:
            found = estimate_against(p.records, r.records)
            if found is not None:
                r.estimate, r.cost_k = found


def estimate_against(plain: Sequence[IterationRecord],
                     speculative: Sequence[IterationRecord]) -> tuple[Estimate, int] | None:
    """The measurement's estimate after a speculative run, its plain step taken from the adjacent plain run
    (each plain step is a verify pass of length 1 in the one cost fit), and the run's typical k: the number of
    proposals most of its iterations drafted (the larger on a tie). Not the mean: the last iterations draft
    fewer when the token budget runs out, which would round a fixed k = 6 down to 5."""
    m = Measurement()
    for r in plain:
        m.feed(r)
    est = None
    for r in speculative:
        est = m.feed(r)
    if est is None:
        return None
    counts = Counter(r.n_drafted for r in speculative if r.mode == "speculative" and r.n_drafted)
    return est, max(counts, key=lambda k: (counts[k], k)) if counts else 0


def find_mismatches(rows: Sequence[RunRow], pair: ModelPair | None = None,
                    prompts: Sequence[BenchPrompt] = ()) -> list[Mismatch]:
    """Every run whose greedy output differs from plain decoding's, with the first differing position."""
    plain = {(r.threads, r.round, r.prompt_id): r for r in rows if r.method == "plain"}
    by_id = {p.id: p for p in prompts}
    out: list[Mismatch] = []
    for r in rows:
        p = plain.get((r.threads, r.round, r.prompt_id))
        if p is None or r.method == "plain" or r.token_ids == p.token_ids:
            continue
        a, b = p.token_ids, r.token_ids
        pos = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        detail = _near_tie(pair, by_id.get(r.prompt_id), a, b)
        out.append(Mismatch(r.method, r.prompt_id, r.round, pos, detail, r.threads))
    return out


def _near_tie(pair: ModelPair | None, prompt: BenchPrompt | None, a: list[int], b: list[int]) -> str:
    if pair is None or prompt is None:
        return ""
    try:
        from specscope.core.engine.neartie import near_tie_report  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        return ""
    try:
        return str(near_tie_report(pair.target.model, prompt.ids, a, b))
    except Exception as e:  # a diagnostic must not sink the report
        return f"(near-tie check failed: {e})"


# ---- summaries and reports ------------------------------------------------------------------------
@dataclass
class MethodSummary:
    method: str
    runs: int
    tps_median: float
    tps_min: float
    tps_max: float
    ratio: RatioInterval | None  # paired ratio over (prompt, round) pairs with its interval
    alpha: float | None
    tokens_per_pass: float | None
    mean_k: float | None
    predicted_median: float | None
    measured_decode: RatioInterval | None
    identical: str  # "yes", "no (n of m)" or "—"


def _median(values: Sequence[float | None]) -> float | None:
    vs = [v for v in values if v is not None]
    return float(statistics.median(vs)) if vs else None


def summarize_methods(rows: Sequence[RunRow], kind: str | None = None) -> list[MethodSummary]:
    """One line per method (in first-seen order), optionally only over one prompt kind."""
    selected = [r for r in rows if kind is None or r.prompt_kind == kind]
    order = list(dict.fromkeys(r.method for r in selected))
    out = []
    for name in order:
        rs = [r for r in selected if r.method == name]
        tps = [r.tokens_per_s for r in rs]
        ratios = [r.ratio_to_plain for r in rs if r.ratio_to_plain is not None]
        checked = [r.matches_plain for r in rs if r.matches_plain is not None]
        differ = sum(1 for c in checked if not c)
        identical = "—" if name == "plain" or not checked else ("yes" if not differ else
                                                                 f"no ({differ} of {len(checked)})")
        passes = sum(r.target_passes or 0 for r in rs)
        out.append(MethodSummary(
            method=name, runs=len(rs), tps_median=float(statistics.median(tps)), tps_min=min(tps),
            tps_max=max(tps), ratio=paired_ratio(ratios, min_pairs=1), alpha=_median([r.alpha for r in rs]),
            tokens_per_pass=sum(r.tokens for r in rs) / passes if passes else None,
            mean_k=_median([r.mean_k for r in rs]),
            predicted_median=_median([r.predicted_speedup for r in rs]),
            measured_decode=paired_ratio([r.measured_decode_speedup for r in rs
                                          if r.measured_decode_speedup is not None], min_pairs=1),
            identical=identical,
        ))
    return out


CSV_FIELDS = ("threads", "round", "prompt_id", "prompt_kind", "method", "tokens", "seconds", "tokens_per_s",
              "decode_tokens_per_s", "wall_tokens_per_s", "measurement_overhead", "ratio_to_plain", "target_passes",
              "tokens_per_pass", "alpha", "acceptance_rate", "mean_k", "predicted_speedup",
              "measured_decode_speedup", "matches_plain", "ratio_to_hf_lookup", "plain_step_ms", "draft_ms",
              "verify_ms", "break_even_alpha")


def write_csv(rows: Sequence[RunRow], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        write_csv_rows(rows, f)


def write_csv_rows(rows: Sequence[RunRow], f: IO[str]) -> None:
    w = csv.writer(f)
    w.writerow(CSV_FIELDS)
    for r in rows:
        w.writerow([_cell(getattr(r, name)) for name in CSV_FIELDS])


def _cell(v: object) -> object:
    if isinstance(v, float):
        return f"{v:.4f}"
    if isinstance(v, str):
        return spreadsheet_safe(v)  # a prompt id or method name must not run as a spreadsheet formula
    return "" if v is None else v


def _f(v: float | None, digits: int = 2) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


def _ratio_cell(s: MethodSummary | None) -> str:
    """The centre with its interval; from fewer than 6 pairs the interval is their range and says so."""
    if s is None or s.ratio is None:
        return "—"
    r = s.ratio
    if r.n == 1:
        return f"{r.value:.2f} (one pair)"
    if r.confidence < 0.95:
        return f"{r.value:.2f} (range {r.lo:.2f}–{r.hi:.2f}, n={r.n})"
    return f"{r.value:.2f} ({r.lo:.2f}–{r.hi:.2f})"


def markdown_report(rows: Sequence[RunRow], mismatches: Sequence[Mismatch], pair_description: str,
                    command: str, rounds: int, max_new_tokens: int,
                    goals: Sequence[float] = DEFAULT_GOALS, note: str = "") -> str:
    """The whole report; with runs at more than one thread count, one section per thread count. ``note``, when
    given, is the first bullet (a bench a signal stopped says so)."""
    kinds = list(dict.fromkeys(r.prompt_kind for r in rows))
    n_prompts = len({r.prompt_id for r in rows})
    thread_counts = list(dict.fromkeys(r.threads for r in rows))
    threads_text = ", ".join(str(t) for t in thread_counts if t) or str(torch.get_num_threads())
    lines = [
        "# specscope bench",
        "",
        *([f"- **{note}.**"] if note else []),
        f"- Command: `{command}`",
        f"- Pair: {pair_description}",
        f"- Machine: {platform.machine()} {platform.system()}, Python {platform.python_version()}, "
        f"torch {torch.__version__}, torch threads: {threads_text}",
        f"- {n_prompts} prompts ({', '.join(kinds)}), {rounds} rounds, up to {max_new_tokens} new tokens, "
        "greedy",
        "- Methods run back to back per prompt, order rotating per round; ratios are to the plain run of the "
        "same prompt in the same round. Speeds include the prefill.",
        "- × plain: the paired ratio over (prompt, round) pairs, Hodges-Lehmann centre with its 95% distribution-free "
        "interval (specscope.core.measure.measurement.paired_ratio).",
        "- α = accepted / judged proposals (the cost model's α); predicted = the measurement's cost model at the "
        "k most of the run's iterations drafted, its plain step from the adjacent plain run, decode only; "
        "measured = the same ratio measured, paired like × plain.",
    ]
    if len(thread_counts) == 1:
        lines += _method_sections(rows, mismatches, kinds, "##")
        lines += _cost_section(rows, kinds, "##", goals)
    else:
        for t in thread_counts:
            lines += ["", f"## {t} thread{'s' if t != 1 else ''}"]
            lines += _method_sections([r for r in rows if r.threads == t],
                                      [m for m in mismatches if m.threads == t], kinds, "###")
            lines += _cost_section([r for r in rows if r.threads == t], kinds, "###", goals)
    return "\n".join(lines) + "\n"


def _method_sections(rows: Sequence[RunRow], mismatches: Sequence[Mismatch], kinds: Sequence[str],
                     heading: str) -> list[str]:
    lines = [
        "",
        "| method | tok/s median (min–max) | × plain (95% interval) | α | tokens/pass | mean k "
        "| predicted | measured | identical to plain |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for s in summarize_methods(rows):
        ratio = "—" if s.method == "plain" else _ratio_cell(s)
        lines.append(
            f"| {s.method} | {s.tps_median:.1f} ({s.tps_min:.1f}–{s.tps_max:.1f}) | {ratio} | {_f(s.alpha)} "
            f"| {_f(s.tokens_per_pass)} | {_f(s.mean_k, 1)} | {_f(s.predicted_median)} "
            f"| {_f(s.measured_decode.value if s.measured_decode else None)} | {s.identical} |"
        )
    lines += _rate_lines(rows, heading)
    if len(kinds) > 1:
        lines += ["", f"{heading} × plain (paired ratio) by prompt kind", "",
                  "| method | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        per_kind = {k: {s.method: s for s in summarize_methods(rows, k)} for k in kinds}
        for name in dict.fromkeys(r.method for r in rows):
            cells = [_ratio_cell(per_kind[k].get(name)) for k in kinds]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if any(r.ratio_to_hf_lookup is not None for r in rows):
        lines += ["", f"{heading} × transformers' prompt lookup (paired ratio over prompts and rounds) by prompt kind",
                  "", "| method | " + " | ".join(kinds) + " |", "|---|" + "---|" * len(kinds)]
        for name in dict.fromkeys(r.method for r in rows if r.ratio_to_hf_lookup is not None):
            cells = []
            for k in kinds:
                hf = paired_ratio([r.ratio_to_hf_lookup for r in rows if r.method == name and r.prompt_kind == k
                                      and r.ratio_to_hf_lookup is not None], min_pairs=1)
                cells.append("—" if hf is None else f"{hf.value:.2f} ({hf.lo:.2f}–{hf.hi:.2f})")
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    lines += ["", f"{heading} Greedy outputs", ""]
    if not mismatches:
        lines.append("Every run's output is identical to plain decoding's.")
    for m in mismatches:
        detail = f": {m.detail}" if m.detail else ""
        lines.append(f"- {m.method}, {m.prompt_id}, round {m.round + 1}: first difference at token "
                     f"{m.position}{detail}")
    return lines


def _rate_lines(rows: Sequence[RunRow], heading: str) -> list[str]:
    """Per specscope method, from each run's own snapshot: tokens/s as the decode rate and as the wall rate, and
    the measurement's own share of the wall time (medians over runs)."""
    measured = [r for r in rows if r.snapshot is not None]
    if not measured:
        return []
    lines = ["", f"{heading} Decode rate, wall rate and the measurement's own cost", "",
             "Decode rate = tokens over the time inside iterations; wall rate = tokens over the span from the first "
             "iteration's start to the last one's end (what the user waits); measurement overhead = the share of "
             "that wall time spent between iterations and on plain baseline steps and exploration beyond what "
             "speculation would have taken (the run's own snapshot, as `specscope run` reports it). Medians over "
             "runs; the prefill is in neither.", "",
             "| method | decode tok/s | wall tok/s | measurement overhead |", "|---|---|---|---|"]
    for name in dict.fromkeys(r.method for r in measured):
        rs = [r for r in measured if r.method == name]
        share = _median([r.measurement_overhead for r in rs])
        lines.append(f"| {name} | {_f(_median([r.decode_tokens_per_s for r in rs]), 1)} "
                     f"| {_f(_median([r.wall_tokens_per_s for r in rs]), 1)} "
                     f"| {'—' if share is None else f'{100 * share:.1f}%'} |")
    return lines


def _cost_section(rows: Sequence[RunRow], kinds: Sequence[str], heading: str, goals: Sequence[float]) -> list[str]:
    """Per speculative method: the measured costs the prediction used and the α its k would need to break
    even and to reach each goal, beside the α measured per prompt kind (medians over runs)."""
    measured = [r for r in rows if r.estimate is not None and r.cost_k]
    if not measured:
        return []
    speedups = [1.0, *(g for g in goals if g != 1.0)]
    lines = [
        "", f"{heading} Costs, and the α each k would need", "",
        "Medians over the runs; the plain step comes from the adjacent plain run, draft and verify times are at "
        "the k most of the run's iterations drafted (verify: one pass of k + 1 tokens). α needed = the cost "
        "model's α at which those costs give that speed-up (— : no α reaches it).", "",
        "| method | plain step ms | draft ms / iteration | verify ms | "
        + " | ".join(f"α {k}" for k in kinds) + " | "
        + " | ".join(f"α for ×{g:.2f}" for g in speedups) + " |",
        "|---|---|---|---|" + "---|" * (len(kinds) + len(speedups)),
    ]
    for name in dict.fromkeys(r.method for r in measured):
        rs = [r for r in measured if r.method == name]
        alphas = [_f(_median([r.alpha for r in rs if r.prompt_kind == k])) for k in kinds]
        needed = []
        for g in speedups:
            values = [r.alpha_needed(g) for r in rs]
            # an unreachable goal in most runs reads as unreachable, not as the median of the rest
            reachable = [v for v in values if v is not None]
            needed.append(_f(_median(reachable)) if len(reachable) * 2 > len(values) else "—")
        lines.append(f"| {name} | {_f(_median([r.plain_step_ms for r in rs]), 1)} "
                     f"| {_f(_median([r.draft_ms for r in rs]), 1)} | {_f(_median([r.verify_ms for r in rs]), 1)} "
                     f"| " + " | ".join(alphas) + " | " + " | ".join(needed) + " |")
    return lines


# ---- command line ---------------------------------------------------------------------------------
def _numbers(text: str, convert: Callable[[str], Any], what: str) -> list[Any]:
    """Comma-separated numbers, or one argparse sentence naming what was expected."""
    try:
        return [convert(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated {what}, got {text!r}") from None


def _goal_list(text: str) -> list[float]:
    values = _numbers(text, float, "speed-ups such as 1.15,1.3")
    if not values or any(not 0.0 < v <= 100.0 for v in values):
        raise argparse.ArgumentTypeError(f"each speed-up goal must be above 0 and at most 100, got {text!r}")
    return list(dict.fromkeys(values))


def _int_list(text: str) -> list[int]:
    if text.strip() == "none":
        return []
    values = _numbers(text, int, "integers")
    if not values or any(not 1 <= v <= K_MAX for v in values):
        raise argparse.ArgumentTypeError(f"each k must be between 1 and {K_MAX}, got {text!r}")
    return values


MAX_THREADS = 1024  # more than any CPU here has cores; torch refuses absurd counts with a RuntimeError


def _thread_list(text: str) -> list[int]:
    values = _numbers(text, int, "thread counts")
    if not values or any(not 0 <= v <= MAX_THREADS for v in values):
        raise argparse.ArgumentTypeError(f"thread counts must be from 0 (torch's default) to {MAX_THREADS:,}, "
                                         f"got {text!r}")
    return list(dict.fromkeys(values))


def _out_stem(text: str) -> str:
    """``--out``: a path stem whose last part names the report (``DIR/report`` writes report.md and .csv)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("needs a path stem such as bench-out/report, got an empty one")
    if "\0" in text:
        raise argparse.ArgumentTypeError("a file path cannot hold a NUL character")
    name = Path(text).name
    if text.endswith(("/", os.sep)) or name in ("", ".", ".."):
        raise argparse.ArgumentTypeError(f"{text!r} names a folder: give a path stem such as "
                                         f"{(Path(text) / 'report').as_posix()} (writes report.md and report.csv)")
    return text


def _variant_list(text: str) -> list[LookupVariant]:
    try:
        return [LookupVariant.parse(x) for x in text.split(",") if x.strip()]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--target", default="demo", help="target model directory or hub id, or 'demo'")
    parser.add_argument("--draft", default=None,
                        help="draft model directory or hub id (drafter 'model'), EAGLE-3 head directory ('eagle')")
    parser.add_argument("--drafter", default=None, choices=DRAFTER_KINDS,
                        help=f"how proposals are made (default: {DEMO_DRAFTER} for the demo, else model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--prompts", default="all",
                        help="comma-separated prompt kinds (prose,code,structured,repeated-task; KIND:N for its "
                             "first N, beyond --limit) and/or prompts files, or 'all'")
    parser.add_argument("--limit", type=whole_number(0, 100_000), default=0,
                        help="at most this many prompts per kind (0 = all)")
    parser.add_argument("--k", type=_int_list, default=[1, 2, 4, 6],
                        help="fixed k values, e.g. 1,2,4,6 ('none': no fixed k rows)")
    parser.add_argument("--rounds", type=whole_number(1, 1_000), default=3)
    add_max_new_tokens(parser, 64)
    parser.add_argument("--no-adaptive", action="store_true", help="skip adaptive k and the heuristic")
    parser.add_argument("--no-heuristic", action="store_true", help="skip transformers' heuristic k schedule")
    parser.add_argument("--no-transformers", action="store_true", help="skip transformers' own methods")
    parser.add_argument("--lookup-tokens", type=whole_number(1, 1_024), default=10,
                        help="transformers' prompt_lookup_num_tokens")
    parser.add_argument("--threads", type=_thread_list, default=[0],
                        help="torch CPU threads, one bench per value, e.g. 1,2 (0 = torch's default)")
    parser.add_argument("--lookup-variants", type=_variant_list, default=[],
                        help="with --drafter lookup, extra adaptive rows with other matching: MATCH:MAX_N:MIN_N, "
                             "comma-separated, e.g. earliest:2:1,recent:4:2")
    from specscope.core.commands.pair_arguments import add_suffix_arguments

    add_suffix_arguments(parser)
    parser.add_argument("--no-prepack", dest="prepack_cpu", action="store_false",
                        help="on CPU, PyTorch's default kernels for multi-token passes (see specscope run --help)")
    parser.add_argument("--goals", type=_goal_list, default=list(DEFAULT_GOALS),
                        help="speed-ups (× plain) for which the report gives the α each k would need, e.g. "
                             "1.15,1.3 (break-even is always given)")
    parser.add_argument("--out", type=_out_stem, default="bench-report",
                        help="report path stem: writes STEM.md and STEM.csv")


def load_bench_prompts(pair: ModelPair, spec: str, limit: int = 0) -> list[BenchPrompt]:
    return [BenchPrompt(p.id, p.kind, pair.encode_prompt(p.text)) for p in choose_bench_prompts(spec, limit)]


def choose_bench_prompts(spec: str, limit: int = 0) -> list[Prompt]:
    """The prompts ``--prompts`` names; ValueError naming the file (and the shape it needs) otherwise."""
    from specscope.core.prompts import load_prompt_file, load_prompt_sets

    sets = load_prompt_sets()
    items = list(sets) if spec == "all" else [k.strip() for k in spec.split(",") if k.strip()]
    chosen: list[Prompt] = []
    for item in items:  # a shipped kind (KIND:N: its first N), or a prompts file (JSON or text)
        kind, _, count = item.partition(":")
        if kind in sets and count.isdigit() and int(count) > 0:
            chosen += sets[kind][: int(count)]
        elif item in sets:
            chosen += sets[item][:limit] if limit else sets[item]
        elif item.endswith(".json") or Path(item).is_file():
            chosen += load_prompt_file(item)
        else:
            raise ValueError(f"unknown prompt kind or file {item!r}: choose from {', '.join(sets)} or give a "
                             "prompts file")
    return chosen


def command_line(args: argparse.Namespace) -> str:
    """The full command that reproduces this bench (every option spelled out, defaults included)."""
    parts = ["specscope", "bench", "--target", args.target]
    if args.draft:
        parts += ["--draft", args.draft]
    parts += ["--drafter", resolved_drafter(args), "--device", args.device, "--prompts", args.prompts]
    if args.limit:
        parts += ["--limit", str(args.limit)]
    parts += ["--k", ",".join(str(k) for k in args.k) or "none", "--rounds", str(args.rounds),
              "--max-new-tokens", str(args.max_new_tokens)]
    parts += ["--no-adaptive"] if args.no_adaptive else []
    parts += ["--no-heuristic"] if args.no_heuristic else []
    parts += ["--no-transformers"] if args.no_transformers else []
    parts += ["--lookup-tokens", str(args.lookup_tokens)]
    if args.lookup_variants:
        parts += ["--lookup-variants", ",".join(f"{v.match}:{v.max_ngram}:{v.min_ngram}"
                                                for v in args.lookup_variants)]
    parts += ["--threads", ",".join(str(t) for t in args.threads)] if any(args.threads) else []
    if resolved_drafter(args) == "suffix":
        parts += ["--suffix-max-tree-depth", str(args.suffix_max_tree_depth),
                  "--suffix-max-spec-factor", f"{args.suffix_max_spec_factor:g}",
                  "--suffix-min-token-prob", f"{args.suffix_min_token_prob:g}",
                  "--suffix-max-cached-requests", str(args.suffix_max_cached_requests)]
    parts += [] if getattr(args, "prepack_cpu", True) else ["--no-prepack"]
    parts += ["--goals", ",".join(f"{g:g}" for g in args.goals)]
    parts += ["--out", args.out]
    return " ".join(shlex.quote(p) for p in parts)


def _pair_line(pair: ModelPair) -> str:
    """The pair, and which CPU kernels its multi-token passes ran on (they change what a verify pass costs)."""
    from specscope.core.memory.residency import prepacked_bytes

    line = pair.description or pair.target.name
    if pair.target.device.type == "cpu":
        line += ("; multi-token passes on oneDNN weights prepacked at load" if prepacked_bytes(pair.target.model)
                 else "; PyTorch's default CPU kernels for every pass")
    return line


def resolved_drafter(args: argparse.Namespace) -> str:
    """--drafter as given, else the demo's default for the demo and the draft model for anything else."""
    if args.drafter:
        return str(args.drafter)
    return default_drafter(args.target)


def main(args: argparse.Namespace) -> int:
    args.drafter = resolved_drafter(args)
    from specscope.core.commands.pair_arguments import suffix_fields
    from specscope.core.engine.models import load_pair
    from specscope.core.engine.pair_spec import ModelLoadError, PairSpec

    try:
        chosen = choose_bench_prompts(args.prompts, args.limit)
    except ValueError as e:
        raise CliError(str(e)) from None
    if not chosen:
        raise CliError(f"--prompts {args.prompts} holds no prompts: give a set or a file with at least one")
    stem = Path(args.out)
    md, csv_path = report_paths(stem)
    try:
        stem.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise CliError(f"--out {args.out}: cannot make the folder {stem.parent} ({e.strerror or e})") from None
    for path in (md, csv_path):  # before the bench, not after it
        check_writable(path, "--out")
    try:
        pair = load_pair(PairSpec(target=args.target, draft=args.draft, drafter=args.drafter,
                                  target_device=args.device, prepack_cpu=args.prepack_cpu,
                                  **suffix_fields(args)))
    except ModelLoadError as e:
        raise CliError(str(e)) from None
    prompts = [BenchPrompt(p.id, p.kind, pair.encode_prompt(p.text)) for p in chosen]
    methods = default_methods(args.k, pair, adaptive=not args.no_adaptive,
                              heuristic=not (args.no_adaptive or args.no_heuristic),
                              transformers=not args.no_transformers, lookup_tokens=args.lookup_tokens,
                              lookup_variants=args.lookup_variants)
    rows: list[RunRow] = []
    total = len(args.threads) * args.rounds * len(prompts) * len(methods)
    with SignalGuard().installed() as guard:  # the first SIGINT or SIGTERM stops the bench at once
        stopped: Interrupted | None = None
        try:
            _measure(args, pair, prompts, methods, rows)
        except Interrupted as exc:  # the run under way is left out: its timing was cut
            stopped = exc
        finally:
            guard.raising = False  # from here a signal is only noted: the runs that finished are written first
        if stopped is not None and not rows:
            raise CliError(f"stopped by {stopped.signal_name} before the first run was measured; nothing to report",
                           exit_code=stopped.exit_code)
        note = (f"Stopped by {stopped.signal_name} after {len(rows)} of {total} runs: the tables hold the runs "
                "that finished" if stopped is not None else "")
        _report(args, pair, prompts, rows, md, csv_path, stem, note)
        if stopped is not None:
            print_error(f"stopped by {stopped.signal_name} after {len(rows)} of {total} runs; the runs that "
                        f"finished are in {md} and {csv_path}")
            return stopped.exit_code
        if guard.late is not None:
            print_error(f"{guard.late.signal_name} received after the bench ended; its report is complete")
            return guard.late.exit_code
    return 0


def _measure(args: argparse.Namespace, pair: ModelPair, prompts: Sequence[BenchPrompt],
             methods: Sequence[Method], rows: list[RunRow]) -> None:
    """The bench at each thread count; every finished run's row lands in ``rows`` at once."""
    from specscope.core.gc_freeze import loaded_objects_frozen

    default_threads = torch.get_num_threads()
    for threads in args.threads:
        torch.set_num_threads(threads or default_threads)
        label = f"[{threads or default_threads} threads]"

        def progress(message: str, label: str = label) -> None:
            progress_line(f"{label} {message}")

        part: list[RunRow] = []
        try:
            with loaded_objects_frozen():  # no full collection inside a timed step (core/gc_freeze.py)
                run_bench(pair, prompts, methods, args.rounds, args.max_new_tokens, progress=progress, rows=part)
        finally:
            for r in part:
                r.threads = threads or default_threads
            rows += part


def _report(args: argparse.Namespace, pair: ModelPair, prompts: Sequence[BenchPrompt], rows: list[RunRow],
            md: Path, csv_path: Path, stem: Path, note: str) -> None:
    """The report on stdout first, then its files (or, on a late write failure, a copy in the data folder)."""
    mismatches = find_mismatches(rows, pair, prompts)
    command = command_line(args)
    report = markdown_report(rows, mismatches, _pair_line(pair), command, args.rounds,
                             args.max_new_tokens, args.goals, note=note)
    emit(report)  # first: whatever happens to the files, the results are on stdout
    try:
        write_report_files(report, rows, md, csv_path)
    except (OSError, TraceError) as e:
        fallback = _save_elsewhere(report, rows, stem.name)
        where = (f"; saved them to {fallback} instead" if fallback
                 else "; the report above on standard output is the only copy")
        reason = e.reason if isinstance(e, TraceWriteError) else getattr(e, "strerror", None) or str(e)
        raise CliError(f"could not write {md} and {csv_path}: {reason}{where}", exit_code=EXIT_FAILURE) from None
    print(f"wrote {md} and {csv_path}", file=sys.stderr)


def write_report_files(report: str, rows: Sequence[RunRow], md: Path, csv_path: Path) -> None:
    with atomic_text_files([md]) as (f,):
        f.write(report)
    with atomic_text_files([csv_path]) as (f,):
        write_csv_rows(rows, f)


def _save_elsewhere(report: str, rows: Sequence[RunRow], name: str) -> Path | None:
    """The report files in the data folder's ``bench`` folder, when ``--out`` failed late (disk full)."""
    from datetime import datetime

    from specscope.core.trace.autosave import default_data_dir

    folder = default_data_dir() / "bench"
    stem = folder / f"{datetime.now().strftime('%Y%m%d-%H%M%S')}-{name}"
    md, csv_path = report_paths(stem)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        write_report_files(report, rows, md, csv_path)
    except (OSError, TraceError):
        return None
    return md


def report_paths(stem: Path) -> tuple[Path, Path]:
    """STEM.md and STEM.csv (a suffix the stem has is replaced: ``--out report.md`` writes report.md)."""
    return stem.with_suffix(".md"), stem.with_suffix(".csv")
