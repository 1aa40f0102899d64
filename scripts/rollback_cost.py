"""What rollback costs per cache kind: its share of the iteration, and the memory it holds.

    .venv/bin/python scripts/rollback_cost.py [--rounds 3] [--max-new-tokens 48] [--threads 1] [--no-demo]

Pairs: tiny dense (Llama), sliding-window (Mistral, an 8-token window) and hybrid (Qwen3-Next: Gated DeltaNet
next to attention) targets built from transformers' configs as the family matrix builds them
(tests/families.py), each with a perturbed copy as the draft model; and the demo pair with its draft model.
Greedy, k = 4. Each round runs every pair once, in turn (interleaved, so a busy machine slows all alike); the
report gives per pair the median over rounds of

* rollback share: the sum of the records' ``rollback_ms`` over the sum of their ``iteration_ms`` (the target's
  rollback: crop, trim, or restore plus the recompute of the accepted tokens; the draft model's rollback: crop or
  restore), and ``rollback_ms`` per iteration;
* the share of iterations with a rejection (only those cost a hybrid target a recompute);
* memory: the most rollback held at one rollback (``held_bytes``: recorded sliding-window rows past the window
  and copies of recurrent/conv states), target and draft, next to the target's cache size at the end.

Report: docs/rollback.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from specscope.core.controls import Controls
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.memory.residency import kv_cache_bytes
from specscope.core.records import ControlValues, IterationRecord
from tests.families import FAMILIES, VOCAB, family_model, perturbed_copy

PROMPT = [5, 9, 12, 5, 9, 30, 7, 3, 44, 17, 8, 21]


@dataclass
class Pair:
    name: str
    target: Any
    drafter: ModelDrafter
    vocab: int
    prompt: list[int]


@dataclass
class Round:
    share: float
    rollback_ms: float
    rejected: float
    held_target: int
    held_draft: int
    cache_bytes: int


@dataclass
class Results:
    rounds: dict[str, list[Round]] = field(default_factory=dict)


def tiny_pair(name: str) -> Pair:
    target = family_model(FAMILIES[name], seed=1)
    return Pair(name, target, ModelDrafter(perturbed_copy(target, noise=0.02), VOCAB), VOCAB, PROMPT)


def demo_pair() -> Pair | None:
    from specscope.core.engine.models import load_pair
    from specscope.core.engine.pair_spec import ModelLoadError, PairSpec

    try:
        pair = load_pair(PairSpec("demo", drafter="model"))
    except ModelLoadError as e:
        print(f"demo left out: {e}", file=sys.stderr)
        return None
    assert isinstance(pair.drafter, ModelDrafter)
    prompt = pair.encode_prompt("Write a short story about a lighthouse keeper who finds a message in a bottle.",
                                chat=pair.use_chat_template)
    return Pair("demo", pair.target.model, pair.drafter, pair.vocab_size, prompt)


def run_once(pair: Pair, new_tokens: int) -> Round:
    decoder = Decoder(pair.target, pair.vocab, drafter=pair.drafter)
    records: list[IterationRecord] = []
    held_target = held_draft = 0
    controls = Controls(ControlValues(k=4))
    for item in decoder.stream(pair.prompt, controls, DecodeOptions(max_new_tokens=new_tokens)):
        if isinstance(item, IterationRecord):
            records.append(item)
            held_target = max(held_target, decoder.target.rollback.held_bytes)
            draft_rollback = pair.drafter.cache_rollback
            held_draft = max(held_draft, draft_rollback.held_bytes if draft_rollback is not None else 0)
    spec = [r for r in records if r.mode == "speculative"]
    total = sum(r.iteration_ms for r in spec)
    return Round(share=sum(r.rollback_ms for r in spec) / total,
                 rollback_ms=statistics.fmean(r.rollback_ms for r in spec),
                 rejected=sum(r.n_accepted < r.n_drafted for r in spec) / len(spec),
                 held_target=held_target, held_draft=held_draft, cache_bytes=kv_cache_bytes(decoder.target.cache))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--no-demo", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    pairs = [tiny_pair(name) for name in ("Llama", "Mistral", "Qwen3Next")]
    if not args.no_demo and (demo := demo_pair()) is not None:
        pairs.append(demo)
    results = Results()
    with torch.inference_mode():
        for pair in pairs:  # warm-up, not counted
            run_once(pair, 8)
        for i in range(args.rounds):
            for pair in pairs:
                results.rounds.setdefault(pair.name, []).append(run_once(pair, args.max_new_tokens))
            print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    print(f"threads {args.threads}, {args.rounds} rounds, {args.max_new_tokens} new tokens, k=4, greedy")
    print("| pair | rollback share of the iteration | rollback ms / iteration | iterations with a rejection "
          "| held by the target's rollback (max) | held by the draft's (max) | target cache at the end |")
    print("|---|---|---|---|---|---|---|")
    for name, rounds in results.rounds.items():
        def med(values: list[float]) -> float:
            return statistics.median(values)

        print(f"| {name} | {med([r.share for r in rounds]) * 100:.1f}% "
              f"({min(r.share for r in rounds) * 100:.1f}–{max(r.share for r in rounds) * 100:.1f}) "
              f"| {med([r.rollback_ms for r in rounds]):.2f} | {med([r.rejected for r in rounds]) * 100:.0f}% "
              f"| {max(r.held_target for r in rounds) / 1024:.1f} KiB "
              f"| {max(r.held_draft for r in rounds) / 1024:.1f} KiB "
              f"| {rounds[-1].cache_bytes / 1024:.1f} KiB |")


if __name__ == "__main__":
    main()
