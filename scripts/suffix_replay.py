"""Suffix decoding's parameters, replayed on recorded greedy outputs against prompt lookup (no timing noise).

    .venv/bin/python scripts/suffix_replay.py --record bench-out/suffix-outputs.json \
        [--prompts prose,code,resources/prompts/repeated-task.json,resources/bench/suffix-structured.json]
        [--limit 2] [--max-new-tokens 64]
    .venv/bin/python scripts/suffix_replay.py --outputs bench-out/suffix-outputs.json

Under greedy decoding every method's output is the target's greedy output, so what a drafter decides is only
what each verify pass holds; what the pass commits follows from the recorded output. ``--record`` decodes
each prompt once, plainly, on the demo target at one thread and saves prompt and output token ids (in prompt
order: the cross-run cache of a prompt holds the outputs of the prompts before it, as in the bench).
The replay charges each pass the cost of a pass of that many tokens, as a multiple of a plain step: by
default the one-thread costs measured in docs/bench-lookup-adaptive.md (1 token 1.00, 2 tokens 1.30, 3
1.39, … 17 tokens 2.03), or ``--pass-costs`` ``N:RATIO,...``. A prefill of ``--prefill-steps`` plain steps is
added to every method alike.

It prints, per prompt kind, each method's median speed-up over plain decoding, over transformers' prompt
lookup (its own candidate generator: earliest match of up to 2 tokens, 10 proposals) and tokens per pass.
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

from lookup_ceiling import replay, specscope_lookup, transformers_lookup

from specscope.core.engine.drafters.suffix import SuffixDrafter
from specscope.core.measure.adaptive_lookup import LookupLengthPolicy
from specscope.core.measure.measurement import Measurement

DOC_PASS_COSTS = {1: 1.00, 2: 1.30, 3: 1.39, 4: 1.49, 5: 1.48, 7: 1.60, 9: 1.78, 11: 1.82, 13: 1.93, 17: 2.03}
Source = Callable[[list[int]], tuple[list[int], int]]
Method = Callable[[list[int], list[list[int]]], tuple[Source, LookupLengthPolicy | None]]


def record(path: Path, spec: str, limit: int, max_new_tokens: int) -> None:
    import torch

    from specscope.core.commands.bench import choose_bench_prompts
    from specscope.core.engine.models import PairSpec, load_pair
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


def suffix_method(k: int, factor: float, min_prob: float, cache: bool = True, policy: bool = False) -> Method:
    def make(prompt: list[int], earlier: list[list[int]]) -> tuple[Source, LookupLengthPolicy | None]:
        drafter = SuffixDrafter(max_spec_factor=factor, min_token_prob=min_prob,
                                max_cached_requests=64 if cache else 0)
        for response in earlier:
            drafter.cache.add(response)
        drafter.reset(prompt)

        def propose(ctx: list[int]) -> tuple[list[int], int]:
            draft = drafter.speculate(ctx, k)
            return list(draft.tokens), draft.match_len
        return propose, LookupLengthPolicy(Measurement(window=64)) if policy else None
    return make


def methods(eos: frozenset[int]) -> dict[str, Method]:
    out: dict[str, Method] = {
        "transformers' prompt lookup (10)": lambda p, e: (transformers_lookup(eos), None),
        "specscope lookup, adaptive": lambda p, e: (specscope_lookup(), LookupLengthPolicy(Measurement(window=64))),
    }
    for factor, min_prob in ((1.0, 0.1), (1.0, 0.5), (2.0, 0.1), (2.0, 0.3), (2.0, 0.5), (3.0, 0.5)):
        name = f"suffix k=8, factor {factor:g}, min prob {min_prob:g}"
        out[name + (" (vLLM's defaults)" if (factor, min_prob) == (1.0, 0.1) else "")] = suffix_method(
            8, factor, min_prob)
    out["suffix k=16, factor 2, min prob 0.5"] = suffix_method(16, 2.0, 0.5)
    out["suffix k=8, factor 2, min prob 0.5, no cache"] = suffix_method(8, 2.0, 0.5, cache=False)
    out["suffix, factor 2, min prob 0.5, lookup's adaptive policy"] = suffix_method(16, 2.0, 0.5, policy=True)
    return out


def run_replay(data: dict[str, Any], costs: dict[int, float], prefill_steps: float) -> None:
    xs = sorted(costs)

    def pass_cost(n: int) -> float:
        return float(np.interp(n, xs, [costs[x] for x in xs]))

    runs = data["runs"]
    table = methods(frozenset(data["eos"]))
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
          + f"; prefill {prefill_steps:g} steps; {len(runs)} prompts")
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


def _pass_costs(text: str) -> dict[int, float]:
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
    ap.add_argument("--prompts", default="prose,code,resources/prompts/repeated-task.json,"
                                         "resources/bench/suffix-structured.json")
    ap.add_argument("--limit", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--pass-costs", type=_pass_costs, default=DOC_PASS_COSTS)
    ap.add_argument("--prefill-steps", type=float, default=2.4)
    args = ap.parse_args()
    if args.record:
        record(args.record, args.prompts, args.limit, args.max_new_tokens)
    else:
        run_replay(json.loads(args.outputs.read_text(encoding="utf-8")), args.pass_costs, args.prefill_steps)


if __name__ == "__main__":
    main()
