"""Prompt lookup and early exit: their proposals, and that the loop stays exact with them."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from transformers import DynamicCache

from specscope.core.controls import Controls
from specscope.core.engine.drafters.early_exit import EarlyExitDrafter, truncated_view
from specscope.core.engine.drafters.lookup import PromptLookupDrafter
from specscope.core.engine.sampling import processed_probs
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.records import ControlValues, TokenStatus
from tests.models import tiny_model
from tests.stats import chi_square_pvalue


# ---- prompt lookup ----------------------------------------------------------------------------------
def naive_lookup(context: list[int], k: int, max_n: int, min_n: int) -> list[int]:
    """Reference: scan backwards for the most recent earlier occurrence, longest n-gram first."""
    size = len(context)
    for n in range(min(max_n, size), min_n - 1, -1):
        suffix = context[size - n :]
        for end in range(size - 2, n - 2, -1):
            if context[end - n + 1 : end + 1] == suffix:
                out: list[int] = []
                for i in range(k):
                    src = end + 1 + i
                    out.append(context[src] if src < size else out[src - size])
                return out
    return []


def test_lookup_proposes_what_followed_the_last_occurrence() -> None:
    d = PromptLookupDrafter(max_ngram=3, num_tokens=10)
    assert d.lookup([1, 2, 3, 4, 1, 2], 4) == [3, 4, 1, 2]
    # (2, 3) occurred twice; the most recent occurrence wins, and the longer (8, 2, 3) has no earlier match
    assert PromptLookupDrafter(3, 10).lookup([1, 2, 3, 9, 2, 3, 8, 2, 3], 3) == [8, 2, 3]
    # longest n first: the 1-gram (3,) last occurred before 7, but the 2-gram (2, 3) before 5
    assert PromptLookupDrafter(3, 10).lookup([2, 3, 5, 0, 3, 7, 2, 3], 1) == [5]
    assert PromptLookupDrafter(3, 10).lookup([4, 5, 6], 3) == []  # nothing repeats: no proposal


def test_lookup_continues_periodic_text_and_respects_limits() -> None:
    assert PromptLookupDrafter(2, 10).lookup([5, 6, 5, 6, 5], 6) == [6, 5, 6, 5, 6, 5]
    assert PromptLookupDrafter(2, 3).lookup([5, 6, 5, 6, 5], 6) == [6, 5, 6]  # num_tokens caps k
    proposal = PromptLookupDrafter(2, 10).propose([1, 2, 1], 2, ControlValues(temperature=1.0), None)
    assert proposal.tokens == [2, 1] and proposal.q_probs is None and proposal.q_token_probs == [1.0, 1.0]


def test_lookup_index_matches_a_full_rescan_as_the_context_grows() -> None:
    rng = random.Random(0)
    for max_n, min_n in ((3, 1), (4, 2)):
        d = PromptLookupDrafter(max_ngram=max_n, num_tokens=8, min_ngram=min_n)
        context = [rng.randrange(4) for _ in range(5)]
        d.reset(context)
        for step in range(300):
            assert d.lookup(context, 8) == naive_lookup(context, 8, max_n, min_n), step
            context = context + [rng.randrange(4) for _ in range(rng.randrange(1, 4))]
            if step % 97 == 96:  # a different sequence: the drafter must notice and rebuild
                context = [rng.randrange(4) for _ in range(6)]


# ---- early exit -------------------------------------------------------------------------------------
def test_early_exit_is_the_targets_first_layers_norm_and_head() -> None:
    model = tiny_model(3, layers=3)
    view = truncated_view(model, 2)
    ids = torch.tensor([[3, 1, 4, 1, 5, 9]])
    with torch.no_grad():
        hidden = model(ids, output_hidden_states=True).hidden_states[2]  # after 2 decoder layers
        expected = model.lm_head(model.model.norm(hidden))
        assert torch.allclose(view(ids).logits, expected, atol=1e-6)
    target_storage = {p.data_ptr() for p in model.parameters()}
    assert {p.data_ptr() for p in view.parameters()} <= target_storage  # no weights of its own
    assert len(model.model.layers) == 3 and model.config.num_hidden_layers == 3  # target untouched
    cache = DynamicCache(config=view.config)
    with torch.no_grad():
        view(ids, cache=cache, use_cache=True)
    assert len(cache.layers) == 2
    with pytest.raises(ValueError, match="between 1 and 3 layers"):
        EarlyExitDrafter(model, 4)


# ---- greedy equality through the loop ---------------------------------------------------------------
PROMPTS = [[3, 1, 4, 1, 5, 9, 2, 6], [7, 7, 8, 7, 7, 8, 7]]


@pytest.fixture(scope="module")
def target():
    return tiny_model(21, vocab_size=64, layers=3, logit_scale=3.0)


@pytest.mark.parametrize("kind", ["lookup", "early-exit"])
@pytest.mark.parametrize("k", [1, 3, 6])
def test_greedy_output_equals_plain_decoding(target, kind: str, k: int) -> None:
    drafter = PromptLookupDrafter(3, 10) if kind == "lookup" else EarlyExitDrafter(target, 2)
    dec = Decoder(target, 64, drafter=drafter)
    accepted = 0
    for prompt in PROMPTS:
        opts = DecodeOptions(max_new_tokens=30)
        spec = dec.run(prompt, Controls(ControlValues(k=k)), opts)
        assert spec.token_ids == dec.run(prompt, options=opts, plain=True).token_ids
        accepted += sum(t.status is TokenStatus.ACCEPTED for r in spec.iterations for t in r.tokens)
    assert accepted > 0  # the drafter was really exercised, not just proposing nothing


# ---- sampling exactness at loop level ---------------------------------------------------------------
V8 = 8
RUNS = 3000


def exact_first_two(model, prompt: list[int], controls: ControlValues) -> np.ndarray:
    with torch.no_grad():
        p1 = processed_probs(model(torch.tensor([prompt])).logits[0, -1], controls)[0]
        joint = np.zeros((V8, V8))
        for a in range(V8):
            p2 = processed_probs(model(torch.tensor([[*prompt, a]])).logits[0, -1], controls)[0]
            joint[a] = float(p1[a]) * p2.numpy()
    return joint


def loop_counts(model, drafter, prompt: list[int], controls: ControlValues) -> np.ndarray:
    dec = Decoder(model, V8, drafter=drafter)
    counts = np.zeros((V8, V8))
    for seed in range(RUNS):
        ids = dec.run(prompt, Controls(controls),
                      DecodeOptions(max_new_tokens=2, seed=seed, record_tokens=False)).token_ids
        counts[ids[0], ids[1]] += 1
    return counts


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["lookup", "early-exit"])
def test_sampling_stays_exact_through_the_loop(kind: str) -> None:
    model = tiny_model(10, vocab_size=V8, logit_scale=1.5)
    controls = ControlValues(k=2, temperature=0.9, top_p=0.95)
    prompt = [2, 5, 7, 2, 5]  # lookup proposes 7 here (what followed the earlier "2 5")
    if kind == "lookup":
        drafter = PromptLookupDrafter(3, 10)
        assert drafter.lookup(prompt, 1) == [7]
        with torch.no_grad():
            p7 = float(processed_probs(model(torch.tensor([prompt])).logits[0, -1], controls)[0, 7])
        assert 0.05 < p7 < 0.95  # the proposal is accepted only sometimes: the rule is really tested
    else:
        drafter = EarlyExitDrafter(model, 1)
    counts = loop_counts(model, drafter, prompt, controls)
    assert chi_square_pvalue(counts, exact_first_two(model, prompt, controls)) > 1e-3
