"""How fast can prompt lookup get on this machine? A replay with perfect foresight, against transformers'.

    .venv/bin/python scripts/lookup_ceiling.py [--prompts resources/bench/lookup-structured.json,structured,prose,code]
        [--max-new-tokens 64] [--threads 1,2] [--rounds 7]

Under greedy decoding every method's output is the target's greedy output (the bench checks it), so the
only thing a lookup method decides is what it sends to each verify pass, and what that pass commits follows
from the greedy output alone. This script therefore

1. decodes each prompt once, plainly, and keeps the greedy output;
2. measures, on the demo target as specscope loads it, what a pass of n tokens costs (n = 1 … 17, rounds
   interleaved, on a cache of the prompts' typical length) and what each prompt's prefill costs;
3. replays, on the recorded outputs and the measured costs, with no timing noise:
   - transformers' prompt lookup (its own ``PromptLookupCandidateGenerator``: earliest match of up to a
     2-gram, 10 tokens, cut at an end token);
   - specscope's adaptive lookup policy as shipped (``core/adaptive_lookup``, fed the replayed passes);
   - the ceiling: each iteration sends exactly the proposals that will be accepted, no more (a policy that
     knows the future), with specscope's lookup and with transformers' matching, up to 10 and up to 16.

The ceiling bounds every proposal-length policy over that lookup: none can send fewer tokens to a pass and
still commit as many. Ratios include the prefill, as the bench's speeds do. Report: docs/bench-lookup-adaptive.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specscope.core.engine.drafters.lookup import PromptLookupDrafter
from specscope.core.measure.adaptive_lookup import LookupLengthPolicy
from specscope.core.measure.measurement import Measurement
from specscope.core.records import ControlValues, IterationRecord

LENGTHS = (1, 2, 3, 4, 5, 7, 9, 11, 13, 17)
Source = Callable[[list[int]], tuple[list[int], int]]


def transformers_lookup(eos: frozenset[int], ngram: int = 2, num: int = 10) -> Source:
    """transformers' own ``PromptLookupCandidateGenerator`` (earliest match of up to an ``ngram``, ``num``
    tokens, cut before an end token), called on the replayed context."""
    from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

    generator = PromptLookupCandidateGenerator(eos_token_id=torch.tensor(sorted(eos)), num_output_tokens=num,
                                               max_matching_ngram_size=ngram, max_length=1 << 30)

    def propose(ctx: list[int]) -> tuple[list[int], int]:
        candidates, _ = generator.get_candidates(torch.tensor([ctx]))
        return candidates[0, len(ctx):].tolist(), ngram  # the match size is not reported; nothing reads it
    return propose


def specscope_lookup(num: int = 10, match: str = "recent", max_ngram: int = 3) -> Source:
    drafter = PromptLookupDrafter(max_ngram=max_ngram, num_tokens=num, match=match)

    def propose(ctx: list[int]) -> tuple[list[int], int]:
        return drafter.lookup(ctx, num), drafter.last_match_ngram
    return propose


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _record(drafted: int, accepted: int, verify_ms: float) -> IterationRecord:
    return IterationRecord(
        iteration=0, mode="speculative", drafter="lookup", controls=ControlValues(k=max(drafted, 1), adaptive_k=True),
        tokens=[], n_drafted=drafted, n_accepted=accepted, n_emitted=accepted + 1, draft_ms=0.0,
        verify_ms=verify_ms, rollback_ms=0.0, iteration_ms=verify_ms, context_len=0, generated_len=0,
        t_start_s=0.0, t_end_s=0.0,
    )


def replay(prompt: list[int], output: list[int], source: Source, pass_ms: Callable[[int], float],
           choose: Callable[[list[int], int, list[int]], int] | None = None,
           policy: LookupLengthPolicy | None = None) -> tuple[float, int]:
    """Decode time (ms, prefill excluded) and passes of one method on one recorded greedy output."""
    ctx, pos, total, passes = list(prompt), 0, 0.0, 0
    while pos < len(output):
        future = output[pos:]
        proposal, match = source(ctx)
        proposal = proposal[: len(future)]
        if policy is not None:
            proposal = proposal[: policy.proposal_length(match, len(proposal)) if proposal else 0]
        elif choose is not None:
            proposal = proposal[: choose(proposal, match, future)]
        accepted = common_prefix(proposal, future)
        ms = pass_ms(len(proposal) + 1)
        if policy is not None:  # as a run hands it over: the measurement fed, then the policy shown
            record = _record(len(proposal), accepted, ms)
            policy.measurement.feed(record)
            policy.observe(record)
        total += ms
        passes += 1
        step = min(accepted + 1, len(future))
        ctx += future[:step]
        pos += step
    return total, passes


def foresight(proposal: list[int], match: int, future: list[int]) -> int:
    return common_prefix(proposal, future)


def measure_costs(model: torch.nn.Module, context: int, rounds: int) -> dict[int, float]:
    """Median ms of a verify pass of n tokens after a ``context``-token cache, rounds interleaved."""
    from transformers import DynamicCache

    times: dict[int, list[float]] = {n: [] for n in LENGTHS}
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(torch.randint(100, 20000, (1, context)), cache=cache, use_cache=True, logits_to_keep=1)
        for round_ in range(rounds):
            order = LENGTHS[round_ % len(LENGTHS):] + LENGTHS[: round_ % len(LENGTHS)]
            for n in order:
                ids = torch.randint(100, 20000, (1, n))
                t0 = time.perf_counter()
                model(ids, cache=cache, use_cache=True, logits_to_keep=n)
                times[n].append((time.perf_counter() - t0) * 1000)
                cache.crop(-n)
    return {n: statistics.median(v[1:]) for n, v in times.items()}


def prefill_ms(model: torch.nn.Module, prompt: list[int], rounds: int = 3) -> float:
    out = []
    with torch.inference_mode():
        for _ in range(rounds):
            t0 = time.perf_counter()
            model(torch.tensor([prompt]), use_cache=True, logits_to_keep=1)
            out.append((time.perf_counter() - t0) * 1000)
    return statistics.median(out)


def report(model: torch.nn.Module, eos: frozenset[int], recorded: list[tuple[Any, list[int], list[int]]],
           threads: int, max_new_tokens: int, rounds: int) -> None:
    """Measure the pass costs at this thread count, replay every method and print the tables."""
    context = int(statistics.median(len(ids) for _, ids, _ in recorded)) + max_new_tokens // 2
    costs = measure_costs(model, context, rounds)
    prefill = {p.id + str(len(ids)): prefill_ms(model, ids) for p, ids, _ in recorded}
    xs = sorted(costs)

    def pass_ms(n: int) -> float:
        return float(np.interp(n, xs, [costs[x] for x in xs]))

    methods: dict[str, Callable[[list[int], list[int]], tuple[float, int]]] = {
        "transformers' prompt lookup (10)": lambda ids, out: replay(ids, out, transformers_lookup(eos), pass_ms),
        "specscope adaptive (shipped policy)": lambda ids, out: replay(
            ids, out, specscope_lookup(), pass_ms, policy=LookupLengthPolicy(Measurement(window=64))),
        "ceiling: specscope lookup, ≤ 10": lambda ids, out: replay(ids, out, specscope_lookup(), pass_ms, foresight),
        "ceiling: specscope lookup, ≤ 16": lambda ids, out: replay(ids, out, specscope_lookup(16), pass_ms,
                                                                   foresight),
        "ceiling: transformers' matching, ≤ 10": lambda ids, out: replay(ids, out, transformers_lookup(eos),
                                                                         pass_ms, foresight),
    }
    print(f"\n## {threads} thread(s)\n")
    print("Pass cost, ms (× one-token step): " + ", ".join(
        f"{n}: {costs[n]:.0f} ({costs[n] / costs[1]:.2f})" for n in xs) + f"; cache {context} tokens")
    rows: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
    plain_rows: dict[str, dict[str, list[float]]] = {m: {} for m in methods}
    for p, ids, out in recorded:
        pre = prefill[p.id + str(len(ids))]
        plain = pre + len(out) * costs[1]
        hf = pre + methods["transformers' prompt lookup (10)"](ids, out)[0]
        for name, method in methods.items():
            t = pre + method(ids, out)[0]
            rows[name].setdefault(p.kind, []).append(hf / t)
            plain_rows[name].setdefault(p.kind, []).append(plain / t)
    kinds = sorted({p.kind for p, _, _ in recorded}, key=["structured", "prose", "code"].index)
    print("\n| method | " + " | ".join(f"{k}: × transformers (× plain)" for k in kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for name in methods:
        cells = [f"{statistics.median(rows[name][k]):.2f} ({statistics.median(plain_rows[name][k]):.2f})"
                 for k in kinds]
        print(f"| {name} | " + " | ".join(cells) + " |")
    print("\nMedians over prompts; per prompt, × transformers (structured): " + "; ".join(
        f"{p.id}: {rows['ceiling: specscope lookup, ≤ 10'][p.kind][i]:.2f}"
        for i, (p, _, _) in enumerate(r for r in recorded if r[0].kind == "structured")))


def _thread_counts(text: str) -> list[int]:
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"expected thread counts of 1 or more separated by commas, got {text!r}")
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="resources/bench/lookup-structured.json,structured,prose,code")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=_thread_counts, default=[1, 2], help="torch thread counts, e.g. 1,2")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()

    from specscope.core.commands.bench import choose_bench_prompts
    from specscope.core.engine.models import PairSpec, load_pair

    pair = load_pair(PairSpec(target="demo", drafter="lookup"))
    model = pair.target.model
    eos = frozenset(pair.eos_token_ids)
    torch.set_num_threads(2)
    recorded = []
    seen = set()
    for p in choose_bench_prompts(args.prompts, args.limit):
        if p.text in seen:
            continue
        seen.add(p.text)
        ids = pair.encode_prompt(p.text)
        with torch.inference_mode():
            gen = model.generate(input_ids=torch.tensor([ids]),
                                 attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=args.max_new_tokens, do_sample=False, eos_token_id=sorted(eos),
                                 pad_token_id=int(min(eos)))
        recorded.append((p, ids, gen[0, len(ids):].tolist()))
    print(f"- Prompts: {args.prompts} ({len(recorded)} distinct), up to {args.max_new_tokens} new tokens, greedy")
    print(f"- Machine: torch {torch.__version__}, demo target as specscope loads it (prepacked multi-token passes)")

    for threads in args.threads:
        torch.set_num_threads(threads)
        report(model, eos, recorded, threads, args.max_new_tokens, args.rounds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
