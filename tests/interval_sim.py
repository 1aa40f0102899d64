"""Synthetic event streams with a known speed-up, for the measured speed-up's coverage (tests/test_measure_coverage.py,
scripts/bench_interval_coverage.py).

A stream is a run of speculative iterations with plain steps (baselines) at chosen places, timed by a model with
what a shared CPU does to a run: every pass (plain step, verify pass, draft) has lognormal noise, now and then a
spike (another program took the core for a moment), and the whole machine drifts slowly (a sine over a few run
lengths plus a random walk) so that neither the plain steps nor speculation run at one speed. A plain step costs
``plain_ms`` (at drift 1); a verify pass of length L costs ``verify_ms`` · (1 + 0.02 (L − k − 1)), so a plain step
can cost more than a short pass, as on this CPU. Acceptance is iid per proposal at ``alpha`` (or by phase).

The truth is the speed-up the generating process has at this run's settings: Σ E[T_j] · E[plain step] /
Σ E[m_j] over the iterations, every cost at drift 1 (drift scales all of them alike, so it cancels); the
iterations' own acceptance draws are not in it, so an interval must carry acceptance's sampling noise too.

``block_interval`` is the method this replaced (issue 25): blocks of speculative iterations between runs of
plain steps, each block's tokens/ms times the median of the plain steps on its sides, the Hodges-Lehmann
interval over 5 blocks or more; kept here to compare with.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import median

import numpy as np

from specscope.core.measure.busy import BUSY_PREFIX
from specscope.core.measure.snapshot import RatioInterval
from specscope.core.measure.speedup import SpeedupSamples, measured_speedup
from specscope.core.measure.statistics import paired_ratio
from specscope.core.records import PLAIN_MODE, SPECULATIVE_MODE, ControlValues, IterationRecord

SPIKE_FACTOR = (1.2, 1.6)  # a spike multiplies a pass by this much (uniform)


@dataclass(frozen=True)
class Scenario:
    name: str
    speculative: int  # speculative iterations
    plain_at: Sequence[int]  # record positions of the plain steps
    k: int = 3
    alpha: float = 0.6
    plain_ms: float = 100.0
    verify_ms: float = 80.0  # a pass of k + 1 tokens
    draft_ms: float = 12.0  # per iteration (0.1 for lookup-like drafters)
    sigma: float = 0.08  # lognormal noise of every pass
    plain_sigma: float | None = None  # the plain steps' own noise (None: sigma)
    spike: float = 0.03  # chance of a spike per pass
    drift: float = 0.15  # amplitude of the slow sine (log scale)
    walk: float = 0.01  # random walk step per record (log scale)
    nothing_proposed: float = 0.0  # chance an iteration proposes nothing (k = 0: a free plain sample)
    phases: Callable[[int, int], tuple[float, int]] | None = field(default=None, compare=False)  # (alpha, k) by i
    busy_every: int = 0  # flag every n-th record as machine-busy (and stall it 1.5x)


def _mean_noise(sigma: float, spike: float) -> float:
    return math.exp(sigma * sigma / 2.0) * (1.0 + spike * (sum(SPIKE_FACTOR) / 2.0 - 1.0))


def synthetic_run(rng: np.random.Generator, sc: Scenario) -> tuple[list[IterationRecord], float]:
    """The records of one run and its true speed-up."""
    plain_sigma = sc.sigma if sc.plain_sigma is None else sc.plain_sigma

    def noise(sigma: float) -> float:
        x = math.exp(rng.normal(0.0, sigma))
        return x * rng.uniform(*SPIKE_FACTOR) if rng.random() < sc.spike else x

    period = rng.uniform(1.0, 3.0) * (sc.speculative + len(sc.plain_at))
    phase = rng.uniform(0.0, 2.0 * math.pi)
    plain_at = set(sc.plain_at)
    records: list[IterationRecord] = []
    walk, t, done, tokens_sum, ms_sum = 0.0, 100.0, 0, 0.0, 0.0
    while done < sc.speculative:
        position = len(records)
        f = math.exp(sc.drift * math.sin(2.0 * math.pi * position / period + phase) + walk)
        walk += rng.normal(0.0, sc.walk)
        busy = bool(sc.busy_every) and position % sc.busy_every == sc.busy_every - 1
        stall = 1.5 if busy else 1.0
        if position in plain_at:
            verify = sc.plain_ms * f * noise(plain_sigma) * stall
            n_drafted = n_accepted = 0
            draft, mode = 0.0, PLAIN_MODE
        else:
            alpha, k = sc.phases(done, sc.speculative) if sc.phases is not None else (sc.alpha, sc.k)
            if rng.random() < sc.nothing_proposed:
                k = 0
            n_accepted = 0
            while n_accepted < k and rng.random() < alpha:
                n_accepted += 1
            n_drafted = k
            shape = 1.0 + 0.02 * (k - sc.k) if k else sc.plain_ms / sc.verify_ms
            verify = sc.verify_ms * shape * f * noise(sc.sigma) * stall
            draft = sc.draft_ms * f * noise(sc.sigma) if k else 0.1
            mode = SPECULATIVE_MODE
            tokens_sum += sum(alpha ** j for j in range(k + 1))  # E[accepted + 1], k proposals
            ms_sum += (sc.draft_ms * _mean_noise(sc.sigma, sc.spike) if k else 0.1) + \
                sc.verify_ms * shape * _mean_noise(sc.sigma, sc.spike) + 0.5
            done += 1
        ms = draft + verify + 0.5
        records.append(IterationRecord(
            iteration=position, mode=mode, drafter="model" if mode == SPECULATIVE_MODE else "none",
            controls=ControlValues(k=sc.k), tokens=[], n_drafted=n_drafted, n_accepted=n_accepted,
            n_emitted=n_accepted + 1, draft_ms=draft, verify_ms=verify, rollback_ms=0.2, iteration_ms=ms,
            context_len=0, generated_len=0, t_start_s=t, t_end_s=t + ms / 1000.0,
            flags=[f"{BUSY_PREFIX}: simulated"] if busy else []))
        t += ms / 1000.0
    truth = tokens_sum * sc.plain_ms * _mean_noise(plain_sigma, sc.spike) / ms_sum
    return records, truth


def new_interval(records: Sequence[IterationRecord]) -> RatioInterval | None:
    """The measured speed-up as the measurement computes it (core/measure/speedup.py)."""
    samples = SpeedupSamples()
    for position, r in enumerate(records):
        samples.add_record(position, r, any(f.startswith(BUSY_PREFIX) for f in r.flags))
    return measured_speedup(samples).interval


def block_interval(records: Sequence[IterationRecord], min_blocks: int = 5,
                   finished: bool = True) -> RatioInterval | None:
    """The previous method: a block is the speculative iterations between two runs of plain steps (the run's first
    and last blocks bracketed on one side), its ratio its tokens/ms times the median of the plain steps on its
    sides; blocks under 2 iterations are dropped; the Hodges-Lehmann interval over ``min_blocks`` or more. A run
    not ``finished`` has not closed its last block yet (nor a block whose plain steps are still going on)."""
    ratios: list[float] = []
    plain_runs: list[list[float]] = []  # runs of plain steps, in order
    blocks: list[tuple[int, float, int, int]] = []  # (tokens, ms, iterations, plain runs before it)
    tokens = iterations = 0
    ms = 0.0
    for r in records:
        if r.mode == PLAIN_MODE:
            if iterations or not plain_runs:
                if iterations:
                    blocks.append((tokens, ms, iterations, len(plain_runs)))
                tokens = iterations = 0
                ms = 0.0
                plain_runs.append([])
            plain_runs[-1].append(r.verify_ms)
        else:
            tokens, ms, iterations = tokens + r.n_emitted, ms + r.iteration_ms, iterations + 1
    if iterations and finished:
        blocks.append((tokens, ms, iterations, len(plain_runs)))
    if not finished and records and records[-1].mode == PLAIN_MODE and blocks:
        blocks.pop()  # the plain steps after it are still going on
    for tok, dur, its, before in blocks:
        sides = (plain_runs[before - 1] if before else []) + (plain_runs[before] if before < len(plain_runs) else [])
        if its >= 2 and sides and dur > 0:
            ratios.append(tok / dur * float(median(sides)))
    return paired_ratio(ratios, min_blocks)


@dataclass
class Coverage:
    shown: int  # runs that gave an interval
    runs: int
    covered: int
    widths: list[float]  # hi / lo of each interval shown
    errors: list[float]  # log(centre / truth)

    @property
    def rate(self) -> float:
        return self.covered / self.shown if self.shown else float("nan")

    @property
    def median_width(self) -> float:
        return float(np.median(self.widths)) if self.widths else float("nan")


def coverage(sc: Scenario, seeds: range,
             method: Callable[[Sequence[IterationRecord]], RatioInterval | None] = new_interval) -> Coverage:
    """How often the method's interval covers the truth over seeded runs of a scenario."""
    out = Coverage(0, 0, 0, [], [])
    for seed in seeds:
        records, truth = synthetic_run(np.random.default_rng(seed), sc)
        out.runs += 1
        ci = method(records)
        if ci is None:
            continue
        out.shown += 1
        out.covered += ci.covers(truth)
        out.widths.append(ci.spread)
        out.errors.append(math.log(ci.value / truth))
    return out


def every(gap: int, first: int, count: int) -> tuple[int, ...]:
    """Positions of ``count`` single plain steps, the first at ``first``, then one per ``gap`` speculative ones."""
    return tuple(first + i * (gap + 1) for i in range(count))


SCENARIOS: tuple[Scenario, ...] = (
    # EAGLE-like at 128 tokens (x2.4): 50 iterations, plain steps as the default schedule spaces them
    Scenario("eagle, 2 plain steps", 30, every(13, 6, 2)),
    Scenario("eagle, 3 plain steps", 50, every(19, 6, 3)),
    Scenario("eagle, 4 plain steps", 50, (6, 17, 36, 51)),
    Scenario("eagle, 7 plain steps (384 tokens)", 120, every(19, 6, 7)),
    # the schedule before issue 25 at 128 tokens: 2-step baselines first and every 6 until 5 blocks (12 steps)
    Scenario("eagle, 2-step baselines every 6 (old schedule)", 48,
             tuple(p for i in range(6) for p in (8 * i, 8 * i + 1))),
    Scenario("eagle, no drift", 50, every(19, 6, 3), drift=0.0, walk=0.0),
    Scenario("eagle, strong drift", 50, every(19, 6, 3), drift=0.3, walk=0.03),
    Scenario("eagle, plain steps 1.75x as noisy", 50, every(19, 6, 3), plain_sigma=0.14),
    Scenario("eagle, plain steps 3x as noisy", 50, every(19, 6, 3), plain_sigma=0.25),
    Scenario("eagle, heavy spikes", 50, every(19, 6, 3), sigma=0.12, spike=0.1),
    Scenario("eagle, plain step = verify pass", 50, every(19, 6, 3), verify_ms=100.0),
    Scenario("eagle, busy records", 50, every(19, 6, 3), busy_every=9),
    # a draft model that loses (x0.6): plain steps cost nothing, 6 apart
    Scenario("draft model, loses", 92, every(6, 6, 14), k=4, alpha=0.25, draft_ms=100.0),
    # prompt lookup: an answer that starts in prose (mostly proposing nothing) and then copies
    Scenario("lookup, prose then copying, 1 baseline", 18, (6,), draft_ms=0.1, verify_ms=90.0,
             phases=lambda i, n: (0.3, 0 if i < 8 and i % 4 != 3 else 1) if i < 8 else (0.92, 8)),
    Scenario("lookup, prose then copying, no baseline", 18, (), draft_ms=0.1, verify_ms=90.0,
             phases=lambda i, n: (0.3, 0 if i < 8 and i % 4 != 3 else 1) if i < 8 else (0.92, 8)),
    Scenario("lookup, a quarter proposing nothing, 1 baseline", 40, (6,), k=6, alpha=0.8, draft_ms=0.1,
             verify_ms=90.0, nothing_proposed=0.25),
)
