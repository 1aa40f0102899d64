"""The exact output distribution of one speculative step, by enumeration instead of sampling.

An acceptance rule (core/engine/acceptance.py) takes its randomness from ``torch.rand`` (one uniform per proposal)
and ``torch.multinomial`` (the correction or the bonus). ``ScriptedDraws`` stands in for ``torch`` in the
rule's module: ``rand`` hands out uniforms the caller chooses, and ``multinomial`` records the distribution it
was asked to draw from instead of drawing. Then, for every tuple of proposals (weighted by the draft's exact
probabilities), the probability that each position is accepted is found by bisection on its uniform, and the
rejection's distribution is read off the recorded draw. Nothing is sampled, so the result is exact up to the
rule's float32 arithmetic, and a wrong rule is caught with certainty rather than with a test's power.

After the step has emitted its tokens the sequence continues with the target's own distribution, so the
result is the joint distribution of the first k + 1 output tokens; a correct rule gives exactly the target's
joint distribution of k + 1 tokens.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator, Sequence
from types import ModuleType
from typing import Any

import numpy as np
import torch

DRAWN = -1  # the token a scripted multinomial returns: "drawn from the recorded distribution"
BISECTIONS = 60  # halvings of [0, 1): a threshold to 2**-60, far below float32's spacing

Rows = Callable[[tuple[int, ...]], np.ndarray]  # a prefix of the step's tokens -> a distribution over V


class ScriptedDraws:
    """``torch`` with ``rand`` and ``multinomial`` scripted; every other attribute is torch's own."""

    def __init__(self) -> None:
        self.uniforms: list[float] = []
        self.drawn_from: list[np.ndarray] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(torch, name)

    def rand(self, *size: Any, generator: Any = None, device: Any = None, dtype: Any = None) -> torch.Tensor:
        n = int(size[0]) if size and not isinstance(size[0], (tuple, list)) else int(np.prod(size[0]))
        assert n <= len(self.uniforms), f"the rule asked for {n} uniforms, {len(self.uniforms)} were scripted"
        return torch.tensor(self.uniforms[:n], dtype=torch.float64)

    def multinomial(self, probs: torch.Tensor, num_samples: int, *args: Any, **kwargs: Any) -> torch.Tensor:
        assert num_samples == 1
        self.drawn_from.append(probs.detach().double().numpy().copy())
        return torch.tensor([DRAWN])


@contextlib.contextmanager
def scripted(module: ModuleType) -> Iterator[ScriptedDraws]:
    """Replace ``module.torch`` with a ScriptedDraws while the block runs."""
    draws = ScriptedDraws()
    real = module.torch
    module.torch = draws  # type: ignore[attr-defined]
    try:
        yield draws
    finally:
        module.torch = real  # type: ignore[attr-defined]


def _call(rule: Callable[..., tuple[int, int]], draws: ScriptedDraws, uniforms: Sequence[float],
          proposals: list[int], q_rows: torch.Tensor | None, p_rows: torch.Tensor) -> tuple[int, np.ndarray | None]:
    """One call of the rule with these uniforms: (proposals accepted, distribution of the token it adds)."""
    draws.uniforms = list(uniforms)
    draws.drawn_from = []
    n_accepted, token = rule(proposals, q_rows, p_rows, None)
    if token == DRAWN:
        assert len(draws.drawn_from) == 1, "a drawn token must come from exactly one draw"
        return n_accepted, draws.drawn_from[0]
    assert not draws.drawn_from, "the rule drew a token and then returned another"
    return n_accepted, np.eye(p_rows.shape[1])[token]


def _threshold(accepts: Callable[[float], bool]) -> float:
    """t such that the rule accepts exactly when the uniform is below t (checked on a grid, not assumed)."""
    lo, hi = 0.0, 1.0
    if not accepts(0.0):
        lo = hi = 0.0
    else:
        for _ in range(BISECTIONS):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if accepts(mid) else (lo, mid)
    for u in np.linspace(0.0, 1.0, 33)[:-1]:
        if abs(u - hi) > 1e-9:
            assert accepts(float(u)) == (u < hi), f"acceptance is not 'uniform below a threshold' at u={u}"
    return hi


def step_distribution(rule: Callable[..., tuple[int, int]], module: ModuleType, k: int, p: Rows, q: Rows,
                      one_hot_q: bool = False, reported_q: Rows | None = None) -> np.ndarray:
    """The exact joint distribution of the first k + 1 tokens out of one step of ``rule`` with k proposals.

    ``p(prefix)`` is the target's distribution after the step's first tokens ``prefix``; ``q(prefix)`` the
    draft's. ``one_hot_q``: a deterministic drafter; each q row must be one-hot and the rule gets None for it.
    ``reported_q``: a buggy drafter that samples from ``q`` but hands the rule these rows instead.
    """
    vocab = len(p(()))
    out = np.zeros((vocab,) * (k + 1))

    def add(prefix: tuple[int, ...], mass: float) -> None:
        """Add ``mass`` for an emitted prefix, continued to k + 1 tokens by the target itself."""
        if len(prefix) == k + 1:
            out[prefix] += mass
            return
        row = p(prefix)
        for token in np.flatnonzero(row):
            add((*prefix, int(token)), mass * float(row[token]))

    told = reported_q or q
    with scripted(module) as draws:
        for proposals in itertools.product(range(vocab), repeat=k):
            weight = float(np.prod([q(proposals[:i])[x] for i, x in enumerate(proposals)]))
            if weight == 0.0:
                continue
            q_rows = None if one_hot_q else torch.tensor(np.array([told(proposals[:i]) for i in range(k)]),
                                                         dtype=torch.float32).reshape(k, vocab)
            p_rows = torch.tensor(np.array([p(proposals[:i]) for i in range(k + 1)]), dtype=torch.float32)
            for emitted, mass in _outcomes(rule, draws, list(proposals), q_rows, p_rows):
                add(emitted, weight * mass)
    return out


def _outcomes(rule: Callable[..., tuple[int, int]], draws: ScriptedDraws, proposals: list[int],
              q_rows: torch.Tensor | None, p_rows: torch.Tensor) -> Iterator[tuple[tuple[int, ...], float]]:
    """Every token sequence one call can emit for these proposals, with its probability over the uniforms."""
    k = len(proposals)

    def with_uniform_at(i: int, u: float) -> tuple[int, np.ndarray | None]:
        # Earlier positions get 0 (accepted whenever they can be), later ones 0 too (they are not reached).
        return _call(rule, draws, [0.0] * i + [u] + [0.0] * (k - i - 1), proposals, q_rows, p_rows)

    reach = 1.0  # probability that every position before i was accepted
    for i in range(k):
        t = _threshold(lambda u, i=i: with_uniform_at(i, u)[0] > i)
        if t < 1.0:
            n_accepted, drawn = with_uniform_at(i, (t + 1.0) / 2)
            assert n_accepted == i and drawn is not None
            for y in np.flatnonzero(drawn):
                yield (*proposals[:i], int(y)), reach * (1.0 - t) * float(drawn[y])
        reach *= t
        if reach == 0.0:
            return
    n_accepted, drawn = _call(rule, draws, [0.0] * k, proposals, q_rows, p_rows)
    assert n_accepted == k and drawn is not None
    for y in np.flatnonzero(drawn):
        yield (*proposals, int(y)), reach * float(drawn[y])


def target_joint(p: Rows, length: int) -> np.ndarray:
    """The target's own joint distribution of ``length`` tokens."""
    vocab = len(p(()))
    out = np.zeros((vocab,) * length)
    for seq in itertools.product(range(vocab), repeat=length):
        out[seq] = np.prod([p(seq[:i])[x] for i, x in enumerate(seq)])
    return out


def random_rows(seed: int, vocab: int, zeros: int = 0) -> Rows:
    """A random conditional distribution: a fixed random row per prefix, with ``zeros`` tokens given no
    mass in each row (as top-k / top-p leave them), never all of them."""
    rng = np.random.default_rng(seed)
    cache: dict[tuple[int, ...], np.ndarray] = {}

    def rows(prefix: tuple[int, ...]) -> np.ndarray:
        if prefix not in cache:
            row = rng.dirichlet(np.full(vocab, 0.7))
            row[rng.choice(vocab, size=zeros, replace=False)] = 0.0
            # float32 like the rule's tensors, so the expected values are built from the same numbers
            cache[prefix] = (row / row.sum()).astype(np.float32).astype(np.float64)
        return cache[prefix]

    return rows
