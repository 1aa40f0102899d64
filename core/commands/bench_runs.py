"""The bench's runs: the methods compared (specscope's plain, fixed k, adaptive and heuristic rows; transformers'
assisted generation and prompt lookup), one timed run of each, interleaved rounds, and the checks that every
method gave plain decoding's tokens (near-ties explained).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from specscope.core.commands.bench_arguments import LookupVariant
from specscope.core.controls import K_MAX, Controls
from specscope.core.engine.drafters.base import Drafter
from specscope.core.engine.drafters.suffix import SuffixDrafter
from specscope.core.engine.pair import ModelPair
from specscope.core.engine.speculative import DecodeOptions, Decoder, KPolicy, synchronize
from specscope.core.measure.adaptive import CostModelKPolicy, HeuristicKPolicy
from specscope.core.measure.adaptive_lookup import LookupLengthPolicy
from specscope.core.measure.adaptive_suffix import SuffixLengthPolicy
from specscope.core.measure.run import Run
from specscope.core.measure.schedule import VerifyExploration
from specscope.core.measure.snapshot import Estimate
from specscope.core.measure.summary import run_summary
from specscope.core.records import ControlValues, IterationRecord

SPECSCOPE_KINDS = ("plain", "fixed", "adaptive", "heuristic")


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


def _policy(method: Method, drafter_kind: str, drafter: Drafter, run: Run) -> KPolicy | None:
    """The method's k policy, reading ``run``'s snapshots (None: a fixed k or plain decoding)."""
    if method.kind == "adaptive":
        # a lookup or suffix proposal is found whole at once: its policy trims it (suffix decoding's by the
        # draft's own count ratios, lookup's by acceptance measured per match length)
        if method.lookup is None and isinstance(drafter, SuffixDrafter):
            return SuffixLengthPolicy(run, drafter)
        matching = method.lookup is not None or drafter_kind == "lookup"
        return LookupLengthPolicy(run) if matching else CostModelKPolicy(run)
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
    # this runner is the session here: one run fed the loop's events, for the policy's numbers and the row's own
    run = Run(keep_snapshots=False)  # the row keeps the last one
    policy = _policy(method, pair.drafter_kind, drafter, run)
    # plain decoding gets no drafter: its prefill must not pay for the draft's
    decoder = Decoder(pair.target.model, pair.vocab_size, drafter=None if plain else drafter,
                      token_text=pair.token_text, k_policy=policy)
    adaptive = policy is not None
    controls = Controls(ControlValues(k=method.k if method.kind == "fixed" else 4, adaptive_k=adaptive))
    # The cost-model policy needs a plain step's cost and verify costs by pass length: a plain step now and
    # then, and an occasional iteration at an unmeasured length, all of them real (they commit their tokens, and
    # their time counts). Lookup's policy measures both from its own passes: no baselines.
    measured = method.kind == "adaptive" and not isinstance(policy, LookupLengthPolicy)
    opts = DecodeOptions(
        max_new_tokens=max_new_tokens, eos_token_ids=pair.eos_token_ids, record_tokens=False,
        baseline_every=32 if measured else 0, baseline_steps=1, baseline_first=measured,
        explore_k=VerifyExploration(run, min(8, K_MAX)) if measured else None,
    )
    for event in decoder.stream(prompt.ids, controls, opts, plain=plain):
        run.feed(event)
    result = decoder.result
    assert result is not None
    records = result.iterations
    decode_ms = sum(r.iteration_ms for r in records)
    row = RunRow(round=0, method=method.name, prompt_id=prompt.id, prompt_kind=prompt.kind,
                 tokens=len(result.token_ids), seconds=(decoder.prefill_ms + decode_ms) / 1000.0,
                 token_ids=list(result.token_ids), target_passes=len(records), decode_ms=decode_ms,
                 records=list(records), snapshot=run.estimate())
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
                         like.max_cached_requests, cache=cache, backoff=like.backoff)


def fill_acceptance(row: RunRow, records: Sequence[IterationRecord]) -> None:
    """α, acceptance rate and mean k of a run, from the run summary of its records and the snapshot its run
    ended on (``row.snapshot``), as the CLI prints them: the records are not fed again."""
    summary = run_summary(records, estimate=row.snapshot)
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
    fewer when the token budget runs out, which would round a fixed k = 6 down to 5. A stream of its own (the
    plain run's steps, then the speculative run's iterations), not the speculative run's: its plain step is
    another run's."""
    joined = Run()
    for r in plain:
        joined.feed(r)
    est = None
    for r in speculative:
        est = joined.feed(r)
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
