"""Suffix decoding's parameters, replayed on recorded greedy outputs against prompt lookup (no timing noise).

    .venv/bin/python scripts/suffix_replay.py --record bench-out/suffix-outputs.json \
        [--prompts prose,code,resources/prompts/repeated-task.json,resources/bench/suffix-structured.json]
        [--limit 2] [--max-new-tokens 64]
    .venv/bin/python scripts/suffix_replay.py --outputs bench-out/suffix-outputs.json [--pass-costs N:RATIO,...]
        [--methods ideas] [--first 64]
    .venv/bin/python scripts/suffix_replay.py --measure-pass-costs 11
    .venv/bin/python scripts/suffix_replay.py --outputs bench-out/suffix-outputs.json --branches 2,4 [--pass-costs ...]

Under greedy decoding every method's output is the target's greedy output, so what a drafter decides is only
what each verify pass holds; what the pass commits follows from the recorded output. ``--record`` decodes
each prompt once, plainly, on the demo target at one thread and saves prompt and output token ids (in prompt
order: the cross-run cache of a prompt holds the outputs of the prompts before it, as in the bench).
The replay charges each pass the cost of a pass of that many tokens, as a multiple of a plain step: by
default the one-thread CPU costs measured here (``MEASURED_PASS_COSTS``; ``--pass-costs later`` for a second
measurement, ``doc`` for the steeper ones of docs/bench-lookup-adaptive.md), or ``--pass-costs``
``N:RATIO,...``. A prefill of ``--prefill-steps`` plain steps is added to every method alike. ``--first 64``
replays only the first 64 tokens of each output (what the bench decodes); ``--methods ideas`` replays issue
30's candidate rules (scripts/suffix_variants.py) instead of the parameter table.

It prints, per prompt kind, each method's median speed-up over plain decoding, over transformers' prompt
lookup (its own candidate generator: earliest match of up to 2 tokens, 10 proposals) and tokens per pass.

``--measure-pass-costs ROUNDS`` measures the pass costs on this machine instead: the demo target as specscope
loads it, one thread, passes of n tokens on a 200-token cache, rounds interleaved, timed in CPU time of the
thread as well as wall time (on a machine shared with other work the CPU time is what the pass itself costs;
the wall time adds whatever ran in between). It prints a ``--pass-costs`` value from the CPU times.

``--branches B,...`` measures whether tree proposals could pay (issue 30, item 4): each pass of the shipped
drafter also verifies one second branch of B tokens (the sibling of a drafted token with the highest running
probability, continued along its most frequent children), as a tree attention mask would in one pass; the
branch commits its tokens when the main draft is rejected exactly where the branch starts and the branch's
first token is the target's. The pass is charged n + B + 1 tokens. It prints the time against the same
drafter without branches, the share of passes the branch saved, and the extra tokens.
Report: docs/bench-demo-suffix.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lookup_ceiling import common_prefix, replay, specscope_lookup, transformers_lookup
from suffix_variants import VariantDrafter, anywhere_ceiling

from specscope.core.engine.drafters.suffix import SuffixDrafter
from specscope.core.engine.drafters.suffix_tree import NO_NODE, SuffixDraft, SuffixTree
from specscope.core.measure.adaptive_lookup import LookupLengthPolicy
from specscope.core.measure.adaptive_suffix import SuffixLengthPolicy
from specscope.core.measure.measurement import Measurement

# Two cost curves, as multiples of a plain step: measured here on 2 December 2026 (--measure-pass-costs 11, CPU
# time; AMD EPYC with AVX-512, prepacked multi-token passes), and the one of docs/bench-lookup-adaptive.md.
MEASURED_PASS_COSTS = {1: 1.00, 2: 0.83, 3: 0.87, 4: 0.84, 5: 0.92, 7: 0.99, 9: 1.02, 11: 1.07, 13: 1.17, 17: 1.33,
                       25: 1.59}
# The same measurement at 16:44 the same day, on the other core (load average about 2):
LATER_PASS_COSTS = {1: 1.00, 2: 0.72, 3: 0.74, 4: 0.73, 5: 0.78, 7: 0.89, 9: 0.91, 11: 0.97, 13: 1.05, 17: 1.19,
                    25: 1.47}
DOC_PASS_COSTS = {1: 1.00, 2: 1.30, 3: 1.39, 4: 1.49, 5: 1.48, 7: 1.60, 9: 1.78, 11: 1.82, 13: 1.93, 17: 2.03}
Source = Callable[[list[int]], tuple[list[int], int]]
Method = Callable[[list[int], list[list[int]]], tuple[Source, LookupLengthPolicy | None]]


def record(path: Path, spec: str, limit: int, max_new_tokens: int) -> None:
    import torch

    from specscope.core.commands.bench import choose_bench_prompts
    from specscope.core.engine.models import load_pair
    from specscope.core.engine.pair_spec import PairSpec
    from specscope.core.engine.speculative import DecodeOptions, Decoder

    torch.set_num_threads(1)
    pair = load_pair(PairSpec(target="demo", drafter="suffix"))
    decoder = Decoder(pair.target.model, pair.vocab_size)
    runs = []
    for p in choose_bench_prompts(spec, limit):
        ids = pair.encode_prompt(p.text)
        opts = DecodeOptions(max_new_tokens=max_new_tokens, eos_token_ids=pair.eos_token_ids, record_tokens=False)
        out = decoder.run(ids, options=opts, plain=True).token_ids
        runs.append({"id": p.id, "kind": p.kind, "prompt": ids, "output": list(out)})
        print(f"{p.id}: {len(out)} tokens", file=sys.stderr, flush=True)
    path.write_text(json.dumps({"eos": sorted(pair.eos_token_ids), "runs": runs}), encoding="utf-8")


class ScoreRuleDrafter(SuffixDrafter):
    """The cross-tree choice before this change: the cache's draft whenever its expected accepted count is higher."""

    def speculate(self, context_ids: list[int], k: int) -> SuffixDraft:
        self._sync(context_ids)
        best = self._local.speculate_matches(self._local.suffix_nodes(0), k, self.max_spec_factor,
                                             self.min_token_prob)
        if len(self.cache):
            cached = self.cache.tree.speculate_matches(self._cache_nodes(), k, self.max_spec_factor,
                                                       self.min_token_prob)
            best = cached if cached.score > best.score else best
        self.last_draft = best
        return best


def suffix_method(k: int, factor: float, min_prob: float, cache: bool = True, policy: str = "",
                  score_rule: bool = False, backoff: bool = True, **variant: Any) -> Method:
    def make(prompt: list[int], earlier: list[list[int]]) -> tuple[Source, LookupLengthPolicy | None]:
        drafter: SuffixDrafter
        if variant:
            drafter = VariantDrafter(max_spec_factor=factor, min_token_prob=min_prob,
                                     max_cached_requests=64 if cache else 0, backoff=backoff, **variant)
        else:
            kind = ScoreRuleDrafter if score_rule else SuffixDrafter
            drafter = kind(max_spec_factor=factor, min_token_prob=min_prob, max_cached_requests=64 if cache else 0,
                           backoff=backoff)
        for response in earlier:
            drafter.cache.add(response)
        drafter.reset(prompt)

        def propose(ctx: list[int]) -> tuple[list[int], int]:
            draft = drafter.speculate(ctx, k)
            return list(draft.tokens), draft.match_len
        chosen: LookupLengthPolicy | None = None
        if policy == "lookup":
            chosen = LookupLengthPolicy(Measurement(window=64))
        elif policy == "suffix":
            chosen = SuffixLengthPolicy(Measurement(window=64), drafter)
        return propose, chosen
    return make


def methods(eos: frozenset[int], which: str = "defaults") -> dict[str, Method]:
    out: dict[str, Method] = {
        "transformers' prompt lookup (10)": lambda p, e: (transformers_lookup(eos), None),
        "specscope lookup, adaptive": lambda p, e: (specscope_lookup(), LookupLengthPolicy(Measurement(window=64))),
    }
    if which == "ideas":  # issue 30's candidate rules, each against the shipped drafter
        out.update({
            "**suffix defaults (k=8, factor 3, min prob 0.1, backoff)**": suffix_method(8, 3.0, 0.1),
            "suffix defaults, no backoff (the previous defaults)": suffix_method(8, 3.0, 0.1, backoff=False),
            "(a) no backoff, capped drafts extended along the tree to k": suffix_method(
                8, 3.0, 0.1, backoff=False, extend="tree"),
            "(a) no backoff, drafts extended by the most recent occurrence to k": suffix_method(
                8, 3.0, 0.1, backoff=False, extend="recent"),
            "(a) defaults, drafts extended by the most recent occurrence to k": suffix_method(
                8, 3.0, 0.1, extend="recent"),
            "(b) no backoff, match lengths scored by the shrunk ratios": suffix_method(
                8, 3.0, 0.1, backoff=False, score="shrunk"),
            "(b) no backoff, the longest match wins": suffix_method(8, 3.0, 0.1, backoff=False, score="longest"),
            "(c) no backoff, factor 4": suffix_method(8, 4.0, 0.1, backoff=False),
            "(c) no backoff, k=16, factor 5": suffix_method(16, 5.0, 0.1, backoff=False),
            "defaults, the last token taken as substituted before the guess": suffix_method(
                8, 3.0, 0.1, substitute=True),
            "defaults + suffix adaptive policy": suffix_method(16, 3.0, 0.1, policy="suffix"),
            "no backoff + suffix adaptive policy": suffix_method(16, 3.0, 0.1, policy="suffix", backoff=False),
        })
        return out
    out.update({
        "suffix k=8, factor 1, min prob 0.1 (vLLM's defaults)": suffix_method(8, 1.0, 0.1, backoff=False),
        "suffix k=8, factor 2, min prob 0.5 (before issue 30's first round)": suffix_method(8, 2.0, 0.5, backoff=False),
        "suffix k=8, factor 2, min prob 0.1": suffix_method(8, 2.0, 0.1, backoff=False),
        "suffix k=8, factor 3, min prob 0.1 (the previous defaults: no backoff)": suffix_method(8, 3.0, 0.1,
                                                                                              backoff=False),
        "**suffix k=8, factor 3, min prob 0.1, backoff (specscope's defaults)**": suffix_method(8, 3.0, 0.1),
        "suffix k=8, factor 3, min prob 0.3": suffix_method(8, 3.0, 0.3, backoff=False),
        "suffix k=8, factor 4, min prob 0.1": suffix_method(8, 4.0, 0.1, backoff=False),
        "suffix k=16, factor 3, min prob 0.1": suffix_method(16, 3.0, 0.1, backoff=False),
        "suffix, cache draft by score (before issue 30's first round)": suffix_method(8, 3.0, 0.1, score_rule=True,
                                                                                     backoff=False),
        "suffix defaults, no cache": suffix_method(8, 3.0, 0.1, cache=False),
        "suffix defaults + lookup's adaptive policy": suffix_method(16, 3.0, 0.1, policy="lookup"),
        "suffix defaults + suffix adaptive policy": suffix_method(16, 3.0, 0.1, policy="suffix"),
        "suffix factor 2, min prob 0.5 + suffix adaptive policy": suffix_method(16, 2.0, 0.5, policy="suffix",
                                                                               backoff=False),
    })
    return out


def run_replay(data: dict[str, Any], costs: dict[int, float], prefill_steps: float, which: str = "defaults",
               first: int = 0) -> None:
    xs = sorted(costs)
    pass_cost = interpolated(costs)
    runs = [dict(r, output=r["output"][:first]) if first else r for r in data["runs"]]
    table = methods(frozenset(data["eos"]), which)
    kinds = list(dict.fromkeys(r["kind"] for r in runs))
    results: dict[str, list[tuple[str, float, float]]] = {}  # method -> (kind, time, tokens per pass)
    for name, make in table.items():
        earlier: list[list[int]] = []
        rows = results.setdefault(name, [])
        for r in runs:
            source, policy = make(r["prompt"], earlier)
            t, passes = replay(r["prompt"], r["output"], source, pass_cost, policy=policy)
            rows.append((r["kind"], prefill_steps + t, len(r["output"]) / max(1, passes)))
            earlier.append(r["output"])
    plain = [prefill_steps + len(r["output"]) for r in runs]
    hf = results["transformers' prompt lookup (10)"]
    print("Pass cost (× plain step): " + ", ".join(f"{n}: {costs[n]:.2f}" for n in xs)
          + f"; prefill {prefill_steps:g} steps; {len(runs)} prompts"
          + (f", their first {first} tokens" if first else ""))
    print("\n| method | " + " | ".join(f"{k}: × plain / × transformers / tokens per pass" for k in kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for name, rows in results.items():
        cells = []
        for kind in kinds:
            idx = [i for i, r in enumerate(runs) if r["kind"] == kind]
            x_plain = statistics.median(plain[i] / rows[i][1] for i in idx)
            x_hf = statistics.median(hf[i][1] / rows[i][1] for i in idx)
            cells.append(f"{x_plain:.2f} / {x_hf:.2f} / {statistics.median(rows[i][2] for i in idx):.2f}")
        print(f"| {name} | " + " | ".join(cells) + " |")
    if which == "ideas":  # what no rule that copies one draft per pass can beat
        per_pass: dict[str, list[float]] = {}
        for i, r in enumerate(runs):
            passes = anywhere_ceiling(r["prompt"], r["output"], [e["output"] for e in runs[:i]])
            per_pass.setdefault(r["kind"], []).append(len(r["output"]) / passes)
        print("\nCeiling, tokens per pass (median): copying the best 8 tokens from anywhere in the run or the "
              "earlier answers, with foresight: "
              + "; ".join(f"{kind} {statistics.median(v):.2f}" for kind, v in per_pass.items()))


def interpolated(costs: dict[int, float]) -> Callable[[int], float]:
    xs = sorted(costs)
    return lambda n: float(np.interp(n, xs, [costs[x] for x in xs]))


def measure_pass_costs(rounds: int, context: int = 200) -> None:
    """CPU (thread) and wall ms of a pass of n tokens on the demo target at one thread, rounds interleaved."""
    import time

    import torch
    from transformers import DynamicCache

    from specscope.core.engine.models import PairSpec, load_pair

    torch.set_num_threads(1)
    model = load_pair(PairSpec(target="demo", drafter="suffix")).target.model
    lengths = (1, 2, 3, 4, 5, 7, 9, 11, 13, 17, 25)
    wall: dict[int, list[float]] = {n: [] for n in lengths}
    cpu: dict[int, list[float]] = {n: [] for n in lengths}
    with torch.inference_mode():
        cache = DynamicCache(config=model.config)
        model(torch.randint(100, 20000, (1, context)), past_key_values=cache, use_cache=True, logits_to_keep=1)
        for round_ in range(rounds):
            for n in lengths[round_ % len(lengths):] + lengths[: round_ % len(lengths)]:
                ids = torch.randint(100, 20000, (1, n))
                c0, t0 = time.thread_time(), time.perf_counter()
                model(ids, past_key_values=cache, use_cache=True, logits_to_keep=n)
                wall[n].append((time.perf_counter() - t0) * 1000)
                cpu[n].append((time.thread_time() - c0) * 1000)
                cache.crop(-n)
    for label, times in (("wall", wall), ("CPU", cpu)):
        med = {n: statistics.median(v[1:]) for n, v in times.items()}
        print(f"{label} ms (× 1 token): " + ", ".join(f"{n}: {med[n]:.0f} ({med[n] / med[1]:.2f})" for n in lengths))
    med = {n: statistics.median(v[1:]) for n, v in cpu.items()}
    print("--pass-costs " + ",".join(f"{n}:{med[n] / med[1]:.2f}" for n in lengths))


def second_branch(tree: SuffixTree, context: list[int], draft: SuffixDraft, size: int) -> tuple[int, list[int]]:
    """The branch a tree proposal would add to ``draft``: (position it starts at, its tokens). Of the drafted
    tokens' siblings, the one with the highest running probability, then its most frequent children."""
    node = tree.match(context[len(context) - draft.match_len:])
    best: tuple[float, int, int] = (0.0, -1, NO_NODE)  # (probability, position, sibling's node)
    prob = 1.0
    for position, token in enumerate(draft.tokens):
        if node == NO_NODE:
            break
        parent_count = tree.count(node)
        for sibling, child in tree.children(node):
            p = prob * tree.count(child) / parent_count
            if sibling != token and p > best[0]:
                best = (p, position, child)
        main = tree.child(node, token)
        prob *= tree.count(main) / parent_count
        node = main
    if best[2] == NO_NODE:
        return -1, []
    first = next(t for t, c in tree.children(tree.match(context[len(context) - draft.match_len:] +
                                                         draft.tokens[: best[1]])) if c == best[2])
    return best[1], [first, *tree.best_path(best[2], size - 1, 0.0).tokens]


def run_branches(data: dict[str, Any], costs: dict[int, float], prefill_steps: float, sizes: list[int]) -> None:
    pass_cost = interpolated(costs)
    runs = data["runs"]
    kinds = list(dict.fromkeys(r["kind"] for r in runs))
    print(f"Tree proposals replayed: shipped drafter (k=8), one second branch of B tokens per pass; "
          f"{len(runs)} prompts")
    print("\n| branch B | " + " | ".join(f"{k}: time × no branch / passes saved / tokens from branches"
                                        for k in kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for size in [0, *sizes]:
        cells: dict[str, list[tuple[float, float, int]]] = {}
        earlier: list[list[int]] = []
        for r in runs:
            times = []
            for b in (0, size):
                drafter = SuffixDrafter(backoff=False)  # as measured before the backoff (§4)
                for response in earlier:
                    drafter.cache.add(response)
                drafter.reset(r["prompt"])
                ctx, pos, total, passes, gained = list(r["prompt"]), 0, 0.0, 0, 0
                out = r["output"]
                while pos < len(out):
                    future = out[pos:]
                    draft = drafter.speculate(ctx, 8)
                    tokens = list(draft.tokens)[: len(future)]
                    accepted = common_prefix(tokens, future)
                    branch: list[int] = []
                    if b and tokens:
                        tree = drafter.cache.tree if drafter.last_source == "cache" else drafter._local
                        start, branch = second_branch(tree, ctx, draft, b)
                        if start == accepted and accepted < len(future) and branch:
                            extra = common_prefix(branch, future[accepted:])
                            accepted += extra
                            gained += extra
                    total += pass_cost(len(tokens) + len(branch) + 1)
                    passes += 1
                    step = min(accepted + 1, len(future))
                    ctx += future[:step]
                    pos += step
                times.append((prefill_steps + total, passes, gained))
            cells.setdefault(r["kind"], []).append((times[1][0] / times[0][0], 1 - times[1][1] / times[0][1],
                                                    times[1][2]))
            earlier.append(r["output"])
        row = [f"{statistics.median(c[0] for c in cells[k]):.3f} / {statistics.median(c[1] for c in cells[k]):.1%}"
               f" / {sum(c[2] for c in cells[k])}" for k in kinds]
        print(f"| {size} | " + " | ".join(row) + " |")


def _pass_costs(text: str) -> dict[int, float]:
    named = {"measured": MEASURED_PASS_COSTS, "later": LATER_PASS_COSTS, "doc": DOC_PASS_COSTS}
    if text in named:
        return named[text]
    try:
        costs = {int(n): float(r) for n, r in (part.split(":") for part in text.split(","))}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N:RATIO pairs separated by commas, got {text!r}") from None
    if 1 not in costs or any(n < 1 or not 0 < r < 100 for n, r in costs.items()):
        raise argparse.ArgumentTypeError(f"need 1:1.0 and ratios above 0 for lengths of 1 or more, got {text!r}")
    return costs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    what = ap.add_mutually_exclusive_group(required=True)
    what.add_argument("--record", type=Path, help="decode the prompts plainly and save the outputs here")
    what.add_argument("--outputs", type=Path, help="replay the outputs saved by --record")
    what.add_argument("--measure-pass-costs", type=int, metavar="ROUNDS", help="measure pass costs here")
    ap.add_argument("--prompts", default="prose,code,resources/prompts/repeated-task.json,"
                                         "resources/bench/suffix-structured.json")
    ap.add_argument("--limit", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--pass-costs", type=_pass_costs, default=MEASURED_PASS_COSTS,
                    help="N:RATIO,... or a name: 'measured' (the default: here, 13:22), 'later' (here, 16:44), "
                         "'doc' (docs/bench-lookup-adaptive.md's)")
    ap.add_argument("--methods", choices=("defaults", "ideas"), default="defaults",
                    help="the parameter table, or issue 30's candidate rules (scripts/suffix_variants.py)")
    ap.add_argument("--first", type=int, default=0, help="replay only each output's first N tokens (the bench: 64)")
    ap.add_argument("--prefill-steps", type=float, default=2.4)
    ap.add_argument("--branches", default="", help="tree proposals: second-branch sizes to replay, e.g. 2,4")
    args = ap.parse_args()
    if args.record:
        record(args.record, args.prompts, args.limit, args.max_new_tokens)
    elif args.measure_pass_costs:
        measure_pass_costs(args.measure_pass_costs)
    elif args.branches:
        sizes = [int(b) for b in args.branches.split(",")]
        run_branches(json.loads(args.outputs.read_text(encoding="utf-8")), args.pass_costs, args.prefill_steps,
                     sizes)
    else:
        run_replay(json.loads(args.outputs.read_text(encoding="utf-8")), args.pass_costs, args.prefill_steps,
                   args.methods, args.first)


if __name__ == "__main__":
    main()
