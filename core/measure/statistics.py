"""The small statistics the measurement uses: Student's t quantile (for the measured speed-up's interval, from
scipy), the Wilcoxon signed-rank distribution and the Hodges-Lehmann interval of a median ratio from paired rounds
(the bench, attach), and a monotone (isotonic) fit.

scipy has the t quantile (``scipy.special.stdtrit``, real degrees of freedom). It has no public exact signed-rank
null distribution nor a Hodges-Lehmann interval, so those two are here. It has an isotonic fit, but in
``scipy.optimize``, whose import costs a quarter of a second of CPU at every start of the window and the CLI
(measured: 0.26-0.38 s on the shared development machine), for a dozen lines of pool-adjacent-violators;
``tests/test_adaptive.py`` checks ``monotone_fit`` against it. ``scipy.special`` is imported here, at import
time, so that its first use never lands between two iterations of a run (where it would count as bookkeeping).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import stdtrit

from specscope.core.measure.snapshot import (
    CONFIDENCE,
    RatioInterval,
)

MIN_BLOCKS = 5  # paired rounds before ``paired_ratio`` gives an interval (94% at most)


def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile (0 < p < 1) of Student's t with ``df`` > 0 degrees of freedom, real df allowed (the
    Welch-Satterthwaite df of a sum of variance estimates)."""
    if not 0.0 < p < 1.0 or not df > 0:
        raise ValueError("need 0 < p < 1 and df > 0")
    return float(stdtrit(df, p))


def signed_rank_cdf(n: int) -> np.ndarray:
    """P(T <= t), t = 0..n(n+1)/2, for the Wilcoxon signed-rank statistic of n pairs (exact, by counting)."""
    m = n * (n + 1) // 2
    counts = np.zeros(m + 1)
    counts[0] = 1.0
    for rank in range(1, n + 1):  # each rank is in the positive set or not
        counts[rank:] = counts[rank:] + counts[: m + 1 - rank].copy()
    return np.cumsum(counts) / counts.sum()


def hodges_lehmann_interval(x: Sequence[float] | np.ndarray,
                            confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """(centre, lo, hi, achieved confidence): the Hodges-Lehmann centre and its distribution-free interval.

    The interval runs between order statistics of the Walsh averages chosen from the exact signed-rank
    distribution (Tukey's interval, the one ``wilcoxon`` inverts): its coverage is at least ``confidence``
    for any distribution symmetric about the centre, however few pairs there are — a bootstrap over 4-8
    blocks under-covers. With n pairs the highest confidence available is 1 - 2 / 2^n (94% at n = 5).
    """
    v = np.sort(np.asarray(x, dtype=float))
    n = len(v)
    i, j = np.triu_indices(n)
    walsh = np.sort((v[i] + v[j]) / 2.0)
    centre = float(np.median(walsh))
    cdf = signed_rank_cdf(n)
    tail = (1.0 - confidence) / 2.0
    below = np.nonzero(cdf <= tail)[0]
    # [W_(k), W_(M+1-k)] covers with 1 - 2 P(T <= k-1): cut k-1 = the largest t with P(T <= t) <= tail from
    # each end; with too few pairs for the confidence asked, the whole range is all there is.
    cut = int(below[-1]) if len(below) else 0
    achieved = 1.0 - 2.0 * float(cdf[cut])
    return centre, float(walsh[cut]), float(walsh[len(walsh) - 1 - cut]), achieved


def paired_ratio(ratios: Sequence[float], min_pairs: int = MIN_BLOCKS) -> RatioInterval | None:
    """The centre and interval of paired ratios (speculative over plain, per block or per bench round).

    Works on logs (a ratio of 2 and of 1/2 are equally far from 1): the Hodges-Lehmann centre, which one
    outlying pair barely moves, with its distribution-free interval. None with fewer than ``min_pairs``.
    """
    logs = np.log([r for r in ratios if r > 0 and math.isfinite(r)])
    n = len(logs)
    if n < max(1, min_pairs):
        return None
    centre, lo, hi, achieved = hodges_lehmann_interval(logs)
    return RatioInterval(math.exp(centre), math.exp(lo), math.exp(hi), n, achieved)


def monotone_fit(values_by_length: dict[int, float], weights: dict[int, float] | None = None) -> dict[int, float]:
    """Values made non-decreasing in length: pool-adjacent-violators, weighted (a longer pass never costs less)."""
    lengths = sorted(values_by_length)
    blocks: list[list[float]] = []  # [weighted sum, weight, number of lengths]
    for n in lengths:
        w = float(weights.get(n, 1.0)) if weights else 1.0
        blocks.append([values_by_length[n] * w, w, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, w2, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += w2
            blocks[-1][2] += c
    fitted = [b[0] / b[1] for b in blocks for _ in range(int(b[2]))]
    return dict(zip(lengths, fitted, strict=True))
