"""What a verify pass of n tokens costs on CPU with PyTorch's default linears and with prepacked ones.

    .venv/bin/python scripts/bench_cpu_linear.py [--threads 1,2] [--rounds 9] [--weight-left]

The demo target three ways, each its own copy of the same weights: as loaded (``F.linear``, MKL), prepacked as
specscope loads it (``core/cpu_linear``: oneDNN for passes of 2+ tokens, the default kernel for one token) and
prepacked for every pass including one-token steps. Passes of 1, 2, 3, 5 and 9 tokens on a 120-token cache,
rounds interleaved with the order rotating, the first round dropped. Prints the median ms per pass length and
each as a multiple of the one-token step as loaded, and whether every pass's arg-max agreed with the as-loaded
pass. Report: docs/bench-cpu-linear.md. ``--weight-left`` adds the arm of an earlier lead that did not hold, every
linear computed as W·xᵀ instead of x·Wᵀ (docs/bench-demo-eagle.md).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specscope.core.engine import cpu_linear

LENGTHS = (1, 2, 3, 5, 9)


class PackedForEveryPass(cpu_linear.PrepackedLinear):
    """The packed weight for one-token steps too (the arm specscope does not ship)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        rows = x.numel() // x.shape[-1]
        out = torch.ops.mkldnn._linear_pointwise(x.reshape(rows, x.shape[-1]), self.packed_weight, self.bias,
                                                 "none", [], "")
        return out.reshape(*x.shape[:-1], out.shape[-1])


class WeightTimesInput(torch.nn.Module):
    """A Linear computed as W·xᵀ (the weight as the left operand)."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        self.weight = linear.weight
        self.bias = linear.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = (self.weight @ x.reshape(-1, shape[-1]).t()).t()
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*shape[:-1], y.shape[-1])


def _arms(weight_left: bool) -> dict[str, torch.nn.Module]:
    from transformers import AutoModelForCausalLM

    from specscope.core.engine.demo import ensure_demo_target

    loaded = AutoModelForCausalLM.from_pretrained(ensure_demo_target(), dtype=torch.float32).eval()
    shipped = copy.deepcopy(loaded)
    assert cpu_linear.prepack_linears(shipped) is None
    every = copy.deepcopy(loaded)
    assert cpu_linear.prepack_linears(every) is None
    for module in every.modules():
        if type(module) is cpu_linear.PrepackedLinear:
            module.__class__ = PackedForEveryPass
    arms = {"as loaded (MKL)": loaded, "prepacked, 2+ tokens (shipped until 2026-12-03)": shipped,
            "prepacked, every pass (one-token steps where timed faster)": every}
    if weight_left:
        swapped = copy.deepcopy(loaded)
        for module in list(swapped.modules()):
            for name, child in list(module.named_children()):
                if isinstance(child, torch.nn.Linear):
                    setattr(module, name, WeightTimesInput(child))
        arms["W·xᵀ"] = swapped
    return arms


def _measure(models: dict[str, torch.nn.Module], rounds: int) -> tuple[dict[str, dict[int, list[float]]], int]:
    from transformers import DynamicCache

    times: dict[str, dict[int, list[float]]] = {m: {n: [] for n in LENGTHS} for m in models}
    disagreements = 0
    context = torch.randint(100, 20000, (1, 120))
    labels = list(models)
    with torch.inference_mode():
        caches = {}
        for label, model in models.items():
            caches[label] = DynamicCache(config=model.config)
            model(context, cache=caches[label], use_cache=True, logits_to_keep=1)
        for round_ in range(rounds):
            order = labels[round_ % len(labels):] + labels[:round_ % len(labels)]
            for n in LENGTHS:
                ids = torch.randint(100, 20000, (1, n))
                argmax = {}
                for label in order:
                    t0 = time.perf_counter()
                    logits = models[label](ids, cache=caches[label], use_cache=True, logits_to_keep=n).logits
                    times[label][n].append((time.perf_counter() - t0) * 1000)
                    caches[label].crop(-n)
                    argmax[label] = logits.argmax(-1)
                disagreements += sum(int((argmax[label] != argmax[labels[0]]).sum()) for label in labels[1:])
    return times, disagreements


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", default="1,2", help="torch thread counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--weight-left", action="store_true", help="add the W·xᵀ arm")
    args = parser.parse_args()
    models = _arms(args.weight_left)
    for threads in (int(t) for t in args.threads.split(",")):
        torch.set_num_threads(threads)
        times, disagreements = _measure(models, args.rounds)
        one = statistics.median(next(iter(times.values()))[1][1:])
        print(f"\n{threads} thread(s), {args.rounds - 1} rounds kept; ms per pass (× one-token step as loaded)")
        print("| kernels | " + " | ".join(f"{n} token{'s' if n > 1 else ''}" for n in LENGTHS) + " |")
        print("|---|" + "---|" * len(LENGTHS))
        for label, by_len in times.items():
            cells = [f"{statistics.median(v[1:]):.0f} ({statistics.median(v[1:]) / one:.2f})"
                     for v in by_len.values()]
            print(f"| {label} | " + " | ".join(cells) + " |")
        print(f"arg-max positions differing from as loaded: {disagreements}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
