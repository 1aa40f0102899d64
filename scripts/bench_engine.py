"""Engine speed benchmark (issue 2): instrumentation overhead, specscope vs transformers, rollback cost.

Interleaved rounds on the demo pair (or any pair): in each round, on the same prompt, run
  A  specscope with per-token recording on (p, q, top-5 per token: what the GUI shows),
  B  specscope with recording off (timing only),
  C  transformers' assisted generation with the same draft and k (configured on the assistant's
     generation_config),
in a rotating order, and report medians of tokens/s plus the ratios A/B and A/C per round. Ratios of
adjacent runs cancel the machine's drift; absolute numbers on a shared 2-core CPU do not mean much.

    .venv/bin/python scripts/bench_engine.py --rounds 5 --k 4 --max-new-tokens 96
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from specscope.core.commands.bench_runs import BenchPrompt, Method, run_transformers
from specscope.core.controls import Controls
from specscope.core.engine.models import load_pair
from specscope.core.engine.pair_spec import PairSpec
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.prompts import load_prompt_sets
from specscope.core.records import ControlValues


def run_loop(pair, prompt: BenchPrompt, k: int, n: int, record: bool) -> tuple[float, list[int], list[float]]:
    dec = Decoder(pair.target.model, pair.vocab_size, drafter=pair.drafter, token_text=pair.token_text)
    t0 = time.perf_counter()
    res = dec.run(prompt.ids, Controls(ControlValues(k=k)),
                  DecodeOptions(max_new_tokens=n, eos_token_ids=pair.eos_token_ids, record_tokens=record))
    seconds = time.perf_counter() - t0
    return len(res.token_ids) / seconds, res.token_ids, [r.rollback_ms for r in res.iterations]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="demo")
    ap.add_argument("--draft", default=None)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--kind", default="code", help="prompt kind from the bundled sets")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0 = default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    pair = load_pair(PairSpec(target=args.target, draft=args.draft, drafter="model"))
    text = load_prompt_sets()[args.kind][0]
    prompt = BenchPrompt(text.id, text.kind, pair.encode_prompt(text.text))
    n = args.max_new_tokens
    # warm-up: first calls allocate
    run_loop(pair, prompt, args.k, 8, True)
    run_transformers(pair, prompt, Method("hf", "hf-assisted", args.k), 8)

    rec_on: list[float] = []
    rec_off: list[float] = []
    hf: list[float] = []
    rollbacks: list[float] = []
    over, vs_hf = [], []
    same = True
    for rnd in range(args.rounds):
        order = ["on", "off", "hf"]
        order = order[rnd % 3:] + order[: rnd % 3]
        got: dict[str, float] = {}
        for m in order:
            if m == "hf":
                row = run_transformers(pair, prompt, Method("hf", "hf-assisted", args.k), n)
                got[m], hf_ids = row.tokens_per_s, row.token_ids
            else:
                tps, ids, rb = run_loop(pair, prompt, args.k, n, m == "on")
                got[m] = tps
                if m == "on":
                    rollbacks += rb
                    on_ids = ids
        same &= on_ids == hf_ids
        rec_on.append(got["on"])
        rec_off.append(got["off"])
        hf.append(got["hf"])
        over.append(got["off"] / got["on"] - 1.0)
        vs_hf.append(got["on"] / got["hf"])
        print(f"round {rnd + 1}: recording on {got['on']:.2f} tok/s, off {got['off']:.2f}, "
              f"transformers {got['hf']:.2f}", file=sys.stderr)
    med = statistics.median
    print(f"pair: {pair.description or pair.target.name}; k={args.k}; {n} new tokens; prompt {prompt.id}; "
          f"{args.rounds} interleaved rounds; torch threads {torch.get_num_threads()}")
    print("| measure | median | min | max |\n|---|---|---|---|")
    print(f"| specscope, recording on (tok/s) | {med(rec_on):.2f} | {min(rec_on):.2f} | {max(rec_on):.2f} |")
    print(f"| specscope, recording off (tok/s) | {med(rec_off):.2f} | {min(rec_off):.2f} | {max(rec_off):.2f} |")
    print(f"| transformers assisted (tok/s) | {med(hf):.2f} | {min(hf):.2f} | {max(hf):.2f} |")
    print(f"| instrumentation overhead (off/on − 1, per round) | {med(over) * 100:+.1f}% | "
          f"{min(over) * 100:+.1f}% | {max(over) * 100:+.1f}% |")
    print(f"| specscope / transformers (per round) | {med(vs_hf):.3f} | {min(vs_hf):.3f} | {max(vs_hf):.3f} |")
    print(f"| rollback per iteration (ms) | {med(rollbacks):.3f} | {min(rollbacks):.3f} | {max(rollbacks):.3f} |")
    print(f"greedy outputs identical to transformers': {same}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
