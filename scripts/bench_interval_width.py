"""What the cheaper baselines cost the measured speed-up's interval: the default schedule against the one before
issue 25's last round, on the same demo prompt, interleaved, in one process (one model load).

- ``new``: the default session (core/measure/schedule.py): one plain step a baseline, none before the first block,
  spaced by what a plain step costs at the recent speed-up;
- ``old``: the previous schedule, emulated with the same loop: a baseline of 2 plain steps before the first
  speculative iteration and every 6 speculative iterations until 5 blocks give the measured speed-up, then
  spaced by the 3% budget at that speed-up; exploration within 2% of the wall time on its own.

Per run: iterations, plain steps, the overhead share the run reports, the interval at the end, the first
iteration with an interval, and the interval at the same number of iterations for both (the shorter run's).

    .venv/bin/python scripts/bench_interval_width.py eagle [--max-new-tokens 384] [--rounds 2]
"""

from __future__ import annotations

import argparse
import sys
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
from specscope.core.records import ControlValues, IterationRecord
from specscope.core.session import Session, SessionOptions


def old_gap(m: Measurement, steps: int = 2, min_gap: int = 6, max_gap: int = 48, budget: float = 0.03) -> int:
    """The previous schedule: dense until the measured speed-up exists, then the budget's spacing at it."""
    est = m.estimate()
    if est is None or est.run_measured is None or est.mean_acceptance_length is None:
        return min_gap
    s = est.run_measured.value
    if s <= 1.0:
        return min_gap
    c = est.mean_acceptance_length / s
    return int(min(max_gap, max(min_gap, round(steps * ((1.0 - 1.0 / s) / budget - 1.0) / c))))


def run(pair: object, ids: list[int], drafter: str, kind: str, max_new: int) -> tuple[Session, dict[int, object]]:
    controls = Controls(ControlValues(k=default_k(drafter), adaptive_k=adaptive_k_default(drafter)))
    seen: list[tuple[object, object]] = []
    s = Session(pair, controls, SessionOptions(max_new_tokens=max_new),  # type: ignore[arg-type]
                sinks=[lambda e, est: seen.append((e, est))])
    if kind == "old":
        base = s.decode_options

        def opts() -> object:
            return replace(base(), baseline_first=True, baseline_steps=2,
                           baseline_due=lambda since, rem: since >= old_gap(s.measurement),
                           explore_k=VerifyExploration(s.measurement, 16, joint_budget=1.0))

        s.decode_options = opts  # type: ignore[method-assign,assignment]
    with loaded_objects_frozen():
        s.run(ids)
    by_iteration: dict[int, object] = {}
    for e, snap in seen:
        if isinstance(e, IterationRecord) and snap is not None:
            by_iteration[len(by_iteration) + 1] = snap
    return s, by_iteration


def spread(m: object) -> str:
    return f"{m.spread:.2f}" if m is not None else "—"  # type: ignore[attr-defined]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("drafter", choices=sorted(PROMPTS))
    ap.add_argument("--max-new-tokens", type=int, default=384)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    pair = load_pair(PairSpec(target="demo", drafter=args.drafter))
    ids = pair.encode_prompt(PROMPTS[args.drafter])
    for r in range(args.rounds):
        order = ("new", "old") if r % 2 == 0 else ("old", "new")
        got = {k: run(pair, ids, args.drafter, k, args.max_new_tokens) for k in order}
        common = min(len(got["new"][1]), len(got["old"][1]))
        for kind in ("old", "new"):
            s, by_it = got[kind]
            est = s.measurement.estimate()
            assert est is not None and est.cost is not None
            m = est.measured
            modes = "".join("P" if x.mode == "plain" else "x" if x.explore else "." for x in s.records)
            first = next((i for i, sn in by_it.items() if sn.measured is not None), None)  # type: ignore[attr-defined]
            at = by_it[common]
            span = (s.records[-1].t_end_s - s.records[0].t_start_s) * 1000
            cpu = sum(x.cpu_ms or 0.0 for x in s.records)
            print(f"round {r} {kind}: {len(s.records)} iterations ({modes.count('P')} plain, {modes.count('x')} "
                  f"explored), span {span:.0f} ms, decode CPU {cpu:.0f} ms, overhead {est.cost.share:.3f} "
                  f"(baselines {est.cost.baseline_ms:.0f} ms); end: {est.measured_text} hi/lo {spread(m)} over "
                  f"{est.blocks} blocks; first interval at iteration {first}; at iteration {common}: "
                  f"{at.measured_text} hi/lo {spread(at.measured)} ({at.blocks} blocks)",  # type: ignore[attr-defined]
                  flush=True)
            print("   ", modes, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
