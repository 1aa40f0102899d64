"""The power of tests/test_engine.py's sampled end-to-end test, from exact distributions (no sampling).

    .venv/bin/python scripts/sampled_loop_power.py [--runs 1000,6000]

The test runs the loop ``runs`` times for two tokens (k = 3 asked, so one proposal fits before the second
token), counts the 64 (first, second) pairs and fails when a chi-square test against the target's exact joint
distribution gives p < 1e-3. Against a bug the counts follow another distribution; the chi-square statistic
then follows a noncentral chi-square with noncentrality n * sum((bug - exact)^2 / exact) over the pooled cells,
which gives the probability that the test fails (its power). The two bugs are the ones the test file plants:
temperature/top-p reaching q but not p (the loop then emits the raw target's joint distribution), and a drafter
that samples from the processed q but reports its raw q (its one-step distribution is enumerated exactly with
tests/exact_step.py; the second token after a rejection comes from a plain step, which samples p correctly).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specscope.core.engine import acceptance
from specscope.core.engine.sampling import processed_probs
from specscope.core.records import ControlValues
from tests.exact_step import step_distribution
from tests.test_engine import PROCESSED_SAMPLING, V8, _exact_first_two, _pair8

ALPHA = 1e-3
PROMPT = [1, 2, 3]


def rows_of(model, controls: ControlValues):
    cache: dict[tuple[int, ...], np.ndarray] = {}

    def rows(prefix: tuple[int, ...]) -> np.ndarray:
        if prefix not in cache:
            with torch.no_grad():
                logits = model(torch.tensor([[*PROMPT, *prefix]])).logits[0, -1]
            cache[prefix] = processed_probs(logits, controls)[0].numpy().astype(np.float64)
        return cache[prefix]

    return rows


def pooled(exact: np.ndarray, bug: np.ndarray, runs: int) -> tuple[np.ndarray, np.ndarray]:
    """The cells tests/stats.py keeps (expected count >= 5) plus one pooled cell for the rest."""
    exact, bug = exact.ravel() / exact.sum(), bug.ravel() / bug.sum()
    big = exact * runs >= 5.0
    e, b = list(exact[big]), list(bug[big])
    if (~big).any():
        e.append(exact[~big].sum())
        b.append(bug[~big].sum())
    return np.array(e), np.array(b)


def power(exact: np.ndarray, bug: np.ndarray, runs: int) -> float:
    e, b = pooled(exact, bug, runs)
    # A cell the exact distribution gives no mass fails the test outright when any run lands there.
    impossible = e == 0.0
    e, b, stray = e[~impossible], b[~impossible], float(b[impossible].sum())
    df = len(e) - 1
    noncentrality = runs * float(((b - e) ** 2 / e).sum())
    chi_square = float(stats.ncx2.sf(stats.chi2.isf(ALPHA, df), df, noncentrality))
    return 1.0 - (1.0 - chi_square) * (1.0 - stray) ** runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="1000,6000")
    args = ap.parse_args()
    torch.set_num_threads(1)
    target, draft = _pair8()
    controls = PROCESSED_SAMPLING
    exact = _exact_first_two(target, PROMPT, controls)
    target_bug = _exact_first_two(target, PROMPT, ControlValues())
    draft_bug = step_distribution(acceptance.accept_sample, acceptance, 1, rows_of(target, controls),
                                  rows_of(draft, controls), reported_q=rows_of(draft, ControlValues()))
    assert draft_bug.shape == (V8, V8)
    for runs in (int(r) for r in args.runs.split(",")):
        print(f"{runs:>6} runs: power {power(exact, target_bug, runs):.3f} against p unprocessed, "
              f"{power(exact, draft_bug, runs):.3f} against q reported raw (test level {ALPHA:g})")


if __name__ == "__main__":
    main()
