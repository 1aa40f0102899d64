"""Does the matrix layout of the target's linears change what a multi-token verify pass costs on this CPU?

    .venv/bin/python scripts/bench_linear_layout.py

The demo target as loaded (F.linear, x·Wᵀ) against the same weights computed as W·xᵀ, passes of 1, 2, 3, 5
and 9 tokens on a 120-token cache, 6 interleaved rounds (order alternating, the first dropped), 1 thread.
Prints median ms per pass length, each as a multiple of the 1-token pass as loaded, and whether the arg-max
agreed in every pass. Result and reading: docs/bench-demo-eagle.md.
"""

from __future__ import annotations

import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LENGTHS = (1, 2, 3, 5, 9)
ROUNDS = 6


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


def main() -> int:
    from transformers import AutoModelForCausalLM, DynamicCache

    from specscope.core.demo import ensure_demo_target

    torch.set_num_threads(1)
    loaded = AutoModelForCausalLM.from_pretrained(ensure_demo_target(), dtype=torch.float32).eval()
    swapped = copy.deepcopy(loaded)
    for module in list(swapped.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, torch.nn.Linear):
                setattr(module, name, WeightTimesInput(child))
    models = {"x·Wᵀ (as loaded)": loaded, "W·xᵀ": swapped}
    times: dict[str, dict[int, list[float]]] = {m: {n: [] for n in LENGTHS} for m in models}
    same = True
    context = torch.randint(100, 20000, (1, 120))
    with torch.inference_mode():
        caches = {}
        for label, model in models.items():
            caches[label] = DynamicCache(config=model.config)
            model(context, cache=caches[label], use_cache=True, logits_to_keep=1)
        for round_ in range(ROUNDS):
            order = list(models) if round_ % 2 == 0 else list(reversed(models))
            for n in LENGTHS:
                ids = torch.randint(100, 20000, (1, n))
                argmax = []
                for label in order:
                    t0 = time.perf_counter()
                    logits = models[label](ids, cache=caches[label], use_cache=True, logits_to_keep=n).logits
                    times[label][n].append((time.perf_counter() - t0) * 1000)
                    caches[label].crop(-n)
                    argmax.append(logits.argmax(-1))
                same &= bool((argmax[0] == argmax[1]).all())
    one = statistics.median(times["x·Wᵀ (as loaded)"][1][1:])
    for label, by_len in times.items():
        cells = [f"{n}: {statistics.median(v[1:]):.0f} ms ({statistics.median(v[1:]) / one:.2f})"
                 for n, v in by_len.items()]
        print(f"{label:18} " + "  ".join(cells))
    print("arg-max identical in every pass:", same)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
