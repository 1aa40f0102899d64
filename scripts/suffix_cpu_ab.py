"""Suffix decoding with and without its backoff, against transformers' prompt lookup and plain decoding, timed
in the CPU time of the decoding thread (interleaved; what a shared machine's other work cannot inflate).

    taskset -c 1 .venv/bin/python scripts/suffix_cpu_ab.py \
        [--prompts prose,code,resources/bench/suffix-structured.json] [--limit 1] [--rounds 3] [--max-new-tokens 64]

The bench (``specscope bench``) times wall clock, which on a machine shared with other work swings by a factor
of two between neighbouring runs. Here each run is the bench's own (``run_specscope``, ``run_transformers``, one
torch thread, the cross-run cache holding the plain answers to the prompts before it in the round), the method
order rotates each round, and each run is charged ``time.thread_time()`` around it: the work it did, not the
time it waited for a core. Per prompt kind it prints the median and geometric mean, over (prompt, round)
pairs, of each ratio, the tokens per target pass, and whether every output equals plain decoding's.
Report: docs/bench-demo-suffix.md §1.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

METHODS = ("plain", "suffix k=8", "suffix k=8 no backoff", "hf-lookup n=10")
PAIRS = (("suffix k=8", "hf-lookup n=10"), ("suffix k=8 no backoff", "hf-lookup n=10"),
         ("suffix k=8", "suffix k=8 no backoff"), ("suffix k=8", "plain"), ("suffix k=8 no backoff", "plain"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", default="prose,code,resources/bench/suffix-structured.json")
    ap.add_argument("--limit", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    args = ap.parse_args()

    import torch

    from specscope.core.commands.bench import choose_bench_prompts
    from specscope.core.commands.bench_runs import BenchPrompt, Method, RunRow, run_specscope, run_transformers
    from specscope.core.engine.drafters.suffix import SuffixDrafter
    from specscope.core.engine.models import load_pair
    from specscope.core.engine.pair_spec import PairSpec

    torch.set_num_threads(1)
    pair = load_pair(PairSpec(target="demo", drafter="suffix"))
    drafter = pair.drafter
    assert isinstance(drafter, SuffixDrafter)
    prompts = [BenchPrompt(p.id, p.kind, pair.encode_prompt(p.text))
               for p in choose_bench_prompts(args.prompts, args.limit)]
    methods = {"plain": Method("plain", "plain"), "suffix k=8": Method("suffix k=8", "fixed", 8),
               "suffix k=8 no backoff": Method("suffix k=8", "fixed", 8),
               "hf-lookup n=10": Method("hf-lookup n=10", "hf-lookup", 10)}

    def run(name: str, prompt: BenchPrompt, tokens: int, earlier: list[list[int]]) -> RunRow:
        drafter.backoff = name != "suffix k=8 no backoff"  # the bench copies the pair's drafter for each run
        if name.startswith("hf-"):
            return run_transformers(pair, prompt, methods[name], tokens)
        return run_specscope(pair, prompt, methods[name], tokens, earlier)

    for name in METHODS:  # first calls allocate and pick kernels
        run(name, prompts[0], 8, [])
    cpu: dict[tuple[str, str], list[float]] = {}
    rows: dict[tuple[str, str], list[RunRow]] = {}
    for rnd in range(args.rounds):
        earlier: list[list[int]] = []
        for prompt in prompts:
            order = METHODS[rnd % len(METHODS):] + METHODS[: rnd % len(METHODS)]
            for name in order:
                t0 = time.thread_time()
                row = run(name, prompt, args.max_new_tokens, earlier)
                cpu.setdefault((prompt.id, name), []).append(time.thread_time() - t0)
                rows.setdefault((prompt.id, name), []).append(row)
            earlier.append(rows[(prompt.id, "plain")][-1].token_ids)
    kinds: dict[str, list[str]] = {}
    for p in prompts:
        kinds.setdefault(p.kind, []).append(p.id)
    print(f"CPU time ratios (the second method's over the first's), {args.rounds} rounds, "
          f"{args.max_new_tokens} new tokens; median / geometric mean over (prompt, round) pairs\n")
    print("| kind | " + " | ".join(f"{a} × {b}" for a, b in PAIRS) + " | tokens per pass: "
          + " / ".join(METHODS) + " |")
    print("|---|" + "---|" * (len(PAIRS) + 1))
    for kind, ids in kinds.items():
        cells = []
        for a, b in PAIRS:
            ratios = [cpu[(i, b)][r] / cpu[(i, a)][r] for i in ids for r in range(args.rounds)]
            geo = math.exp(statistics.fmean(math.log(x) for x in ratios))
            cells.append(f"{statistics.median(ratios):.2f} / {geo:.2f} (n = {len(ratios)})")
        tpp = [statistics.median(row.tokens / max(1, row.target_passes or 1) for i in ids for row in rows[(i, m)])
               for m in METHODS]
        print(f"| {kind} | " + " | ".join(cells) + " | " + " / ".join(f"{x:.2f}" for x in tpp) + " |")
    same = all(row.token_ids == plain.token_ids for (pid, name), runs in rows.items()
               for row, plain in zip(runs, rows[(pid, "plain")], strict=True))
    print(f"\nEvery output identical to plain decoding: {same}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
