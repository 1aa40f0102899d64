"""The family matrix: every drafter that applies decodes every family's tiny model exactly.

Built at test time from transformers' own config classes (tests/families.py): dense, sliding-window (windows of
8 tokens, left behind after a few iterations), MoE and hybrid (linear attention / Mamba / short convolutions
next to attention). Greedy: the tokens equal transformers' greedy ``generate()`` on the target. Sampling: the
loop's joint distribution of two tokens past a full window (sliding) and after a recurrent state (hybrid) is
the target's. The fast tier runs a few families; the full tier (``slow``) all of them.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
import torch

from specscope.core.controls import Controls
from specscope.core.engine.drafters.base import Drafter
from specscope.core.engine.drafters.early_exit import EarlyExitDrafter
from specscope.core.engine.drafters.lookup import PromptLookupDrafter
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.drafters.suffix import SuffixDrafter
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.records import ControlValues
from tests.families import FAMILIES, FAST, VOCAB, WINDOW, Family, family_model, greedy_reference, perturbed_copy
from tests.stats import chi_square_pvalue, exact_first_two

# Repeats, so prompt lookup and suffix decoding find matches; 7 + 32 tokens leave an 8-token window 4 times over.
PROMPT = [5, 9, 12, 5, 9, 30, 7]
NEW_TOKENS = 32
DRAFTERS = ("model", "lookup", "suffix", "early-exit")


@functools.cache
def _target(name: str) -> Any:
    return family_model(FAMILIES[name], seed=1)


@functools.cache
def _reference(name: str) -> tuple[int, ...]:
    with torch.inference_mode():
        return tuple(greedy_reference(_target(name), PROMPT, NEW_TOKENS))


def _drafter(family: Family, kind: str) -> Drafter:
    target = _target(family.name)
    if kind == "model":  # a second model of the family that agrees often, not always
        return ModelDrafter(perturbed_copy(target, noise=0.02), VOCAB)
    if kind == "lookup":
        return PromptLookupDrafter(max_ngram=3, num_tokens=4)
    if kind == "suffix":
        return SuffixDrafter()
    return EarlyExitDrafter(target, _early_exit_layers(family), VOCAB)


def _early_exit_layers(family: Family) -> int:
    """The fewest first layers that hold an attention layer (transformers cannot run linear layers alone)."""
    layer_types = list(getattr(family.config(), "layer_types", None) or ["full_attention"])
    return next(i + 1 for i, t in enumerate(layer_types) if "linear" not in t and t not in ("conv", "mamba"))


def _cases() -> list[Any]:
    cases = []
    for name, family in FAMILIES.items():
        for kind in DRAFTERS:
            fast = name in FAST and (kind == "model" or family.kind == "hybrid")
            cases.append(pytest.param(name, kind, id=f"{name}-{kind}", marks=() if fast else pytest.mark.slow))
    return cases


@pytest.mark.parametrize(("name", "kind"), _cases())
def test_every_drafter_decodes_the_family_exactly(name: str, kind: str) -> None:
    family = FAMILIES[name]
    decoder = Decoder(_target(name), VOCAB, drafter=_drafter(family, kind))
    result = decoder.run(PROMPT, Controls(ControlValues(k=4)), DecodeOptions(max_new_tokens=NEW_TOKENS))
    assert result.token_ids == list(_reference(name))
    records = result.iterations
    assert len(PROMPT) + NEW_TOKENS > 3 * WINDOW
    if kind == "model":  # both paths ran: rejections rolled the caches back, acceptances kept drafted rows
        assert any(r.n_accepted < r.n_drafted for r in records)
        assert any(r.n_accepted > 0 for r in records)
    assert all(r.rollback_ms >= 0.0 for r in records)


def test_the_matrix_covers_every_kind_of_cache() -> None:
    kinds = {f.kind for f in FAMILIES.values()}
    assert kinds == {"dense", "sliding", "moe", "hybrid"} and len(FAMILIES) >= 16
    assert {FAMILIES[n].kind for n in FAST} >= {"dense", "sliding", "hybrid"}


# ---- sampling: the loop keeps the target's joint distribution past a full window and a recurrent state ----
V8 = 8
SAMPLED_RUNS = 1000
SAMPLING = ControlValues(k=3, temperature=0.8)
LONG_PROMPT = [1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5]  # longer than the 8-token window


def _small_family(name: str, seed: int) -> Any:
    family = FAMILIES[name]
    small = Family(family.name, family.kind, {**family.options, "vocab_size": V8}, family.layers,
                   family.model_class)
    return family_model(small, seed, logit_scale=1.0)


# Power as in test_engine's sampled loop test (1,000 runs, chi-square at the 1e-3 level, seeds fixed). Here the
# second token is drawn after the first iteration's rollback, so a cache left wrong after a rejection (a window
# row lost, a recurrent state not restored) changes the joint distribution the test compares with.
@pytest.mark.slow
@pytest.mark.parametrize("name", ["Mistral", "Qwen3Next"])
def test_sampling_keeps_the_target_distribution_after_rollbacks(name: str) -> None:
    target = _small_family(name, seed=10)
    drafter = ModelDrafter(perturbed_copy(target, noise=0.3), V8)
    decoder = Decoder(target, V8, drafter=drafter)
    counts = np.zeros((V8, V8))
    controls = Controls(SAMPLING)
    rejected = 0
    for seed in range(SAMPLED_RUNS):
        result = decoder.run(LONG_PROMPT, controls, DecodeOptions(max_new_tokens=2, seed=seed, record_tokens=False))
        counts[result.token_ids[0], result.token_ids[1]] += 1
        rejected += result.iterations[0].n_accepted == 0
    assert rejected > SAMPLED_RUNS // 10  # the second token often came after a rollback
    with torch.inference_mode():
        exact = exact_first_two(target, LONG_PROMPT, SAMPLING, V8)
    assert chi_square_pvalue(counts, exact) > 1e-3


def test_a_pair_whose_caches_differ_decodes_exactly() -> None:
    """Each model rolls its own cache back by its own layers' rules: a sliding-window target with a hybrid
    (short-convolution) draft needs no agreement between the two, so such a pair is not refused."""
    draft = family_model(FAMILIES["Lfm2"], seed=5)
    decoder = Decoder(_target("Mistral"), VOCAB, drafter=ModelDrafter(draft, VOCAB))
    result = decoder.run(PROMPT, Controls(ControlValues(k=4)), DecodeOptions(max_new_tokens=NEW_TOKENS))
    assert result.token_ids == list(_reference("Mistral"))
    assert any(r.n_accepted < r.n_drafted for r in result.iterations)
