"""What the measured speed-up's interval costs and gives, on the same demo prompt, interleaved, in one process (one
model load): the default schedule and measurement against the schedule of before issue 25 with the block method.

- ``new``: the default session: one plain step a baseline, none before the first speculative iteration, spaced
  by what a plain step costs at the recent speed-up (core/measure/schedule.py); the measured speed-up from the
  plain samples paired with the verify passes around them (core/measure/speedup.py);
- ``old``: the schedule before issue 25, emulated with the same loop: a baseline of 2 plain steps before the
  first speculative iteration and every 6 speculative iterations until 5 blocks give a measured speed-up, then
  spaced by the 3% budget; exploration within 2% of the wall time on its own; its intervals are the block
  method's (tests/interval_sim.block_interval: Hodges-Lehmann over blocks between baselines).

For the ``new`` run the block method is computed on the same records too (``blocks`` columns): what the interval
was before this change with these plain steps. Per run: iterations, plain steps, the overhead share, the first
iteration with an interval, the interval at the end and at the same number of iterations for all (the shorter
run's).

    .venv/bin/python scripts/bench_interval_width.py eagle [--max-new-tokens 128] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch

from scripts.bench_overhead import PROMPTS
from specscope.core.controls import Controls
from specscope.core.drafter_catalogue import adaptive_k_default, default_k
from specscope.core.engine.models import PairSpec, load_pair
from specscope.core.gc_freeze import loaded_objects_frozen
from specscope.core.measure.measurement import Measurement
from specscope.core.measure.schedule import VerifyExploration
from specscope.core.measure.snapshot import Estimate, RatioInterval
from specscope.core.records import ControlValues, IterationRecord
from specscope.core.session import Session, SessionOptions
from tests.interval_sim import block_interval


class OldExploration(VerifyExploration):
    """Exploration before issue 25's one budget: within 2% of the wall time on its own, whatever the baselines
    spent, and not waiting for the measured speed-up."""

    def affordable(self, k: int, other: int) -> bool:
        est = self.measurement.estimate()
        if est is None or est.cost is None:
            return True
        return est.cost.exploration_ms + self.predicted_ms(k, other, est.costs) <= 0.02 * est.cost.wall_ms


def old_gap(m: Measurement, records: list[IterationRecord], steps: int = 2, min_gap: int = 6, max_gap: int = 48,
            budget: float = 0.03) -> int:
    """The schedule before issue 25: dense until the block method's interval exists, then the budget's spacing."""
    est = m.estimate()
    ci = block_interval(records, finished=False)
    if est is None or ci is None or est.mean_acceptance_length is None:
        return min_gap
    s = ci.value
    if s <= 1.0:
        return min_gap
    c = est.mean_acceptance_length / s
    return int(min(max_gap, max(min_gap, round(steps * ((1.0 - 1.0 / s) / budget - 1.0) / c))))


def run(pair: object, ids: list[int], drafter: str, kind: str, max_new: int) -> tuple[Session, list[Estimate]]:
    controls = Controls(ControlValues(k=default_k(drafter), adaptive_k=adaptive_k_default(drafter)))
    snapshots: list[Estimate] = []

    def sink(event: object, est: Estimate | None) -> None:
        if isinstance(event, IterationRecord) and est is not None:
            snapshots.append(est)

    s = Session(pair, controls, SessionOptions(max_new_tokens=max_new), sinks=[sink])  # type: ignore[arg-type]
    if kind == "old":
        base = s.decode_options

        def opts() -> object:
            return replace(base(), baseline_first=True, baseline_steps=2,
                           baseline_due=lambda since, rem: since >= old_gap(s.measurement, s.records),
                           explore_k=OldExploration(s.measurement, 16))

        s.decode_options = opts  # type: ignore[method-assign,assignment]
    with loaded_objects_frozen():
        s.run(ids)
    return s, snapshots


def text(ci: RatioInterval | None) -> str:
    return f"{ci.text()} hi/lo {ci.spread:.2f}" if ci is not None else "—"


def first(n: int, interval_at: Callable[[int], RatioInterval | None]) -> int | None:
    return next((i for i in range(1, n + 1) if interval_at(i) is not None), None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafter", choices=sorted(PROMPTS))
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    pair = load_pair(PairSpec(target="demo", drafter=args.drafter))
    ids = pair.encode_prompt(PROMPTS[args.drafter])
    for r in range(args.rounds):
        order = ("new", "old") if r % 2 == 0 else ("old", "new")
        got = {k: run(pair, ids, args.drafter, k, args.max_new_tokens) for k in order}
        common = min(len(got["new"][0].records), len(got["old"][0].records))
        for kind in ("old", "new"):
            s, snaps = got[kind]
            records = s.records
            est = s.measurement.estimate()
            assert est is not None and est.cost is not None
            modes = "".join("P" if x.mode == "plain" else "x" if x.explore else "0" if x.n_drafted == 0 else "."
                            for x in records)
            span = (records[-1].t_end_s - records[0].t_start_s) * 1000
            cpu = sum(x.cpu_ms or 0.0 for x in records)
            print(f"round {r} {kind}: {len(records)} iterations ({modes.count('P')} plain, {modes.count('0')} "
                  f"proposing nothing, {modes.count('x')} explored), span {span:.0f} ms, decode CPU {cpu:.0f} ms, "
                  f"overhead {est.cost.share:.3f} (baselines {est.cost.baseline_ms:.0f} ms)", flush=True)
            print("   ", modes, flush=True)

            def blocks(i: int, records: list[IterationRecord] = records) -> RatioInterval | None:
                return block_interval(records[:i], finished=i == len(records))

            def paired(i: int, snaps: list[Estimate] = snaps, final: Estimate = est) -> RatioInterval | None:
                """The measurement's own, after the i-th iteration (after the run's end for the last)."""
                return snaps[i - 1].run_measured if i < len(snaps) else final.run_measured

            estimators: list[tuple[str, Callable[[int], RatioInterval | None]]] = [("blocks", blocks)]
            if kind == "new":
                estimators.insert(0, ("paired", paired))
            for name, at in estimators:
                print(f"    {name:7s} first interval at iteration {first(len(records), at)}; end: "
                      f"{text(at(len(records)))}; at iteration {common}: {text(at(common))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
