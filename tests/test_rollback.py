"""core/engine/rollback.py: after a pass whose tail is rejected, a cache of each layer type continues exactly as a
cache that only ever saw the committed prefix, and what rollback holds stays bounded and counted."""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch
import transformers
from packaging.version import Version
from transformers import DynamicCache

from specscope.core.engine.rollback import CacheRollback, linear_state_bytes
from specscope.core.memory.residency import kv_cache_bytes
from tests.families import FAMILIES, WINDOW, Family, family_model

# Two checks need fixes of transformers 5.25 (the version packaging/constraints.txt pins); 5.24 skips them.
BEFORE_5_25 = Version(transformers.__version__) < Version("5.25")

SEQUENCE = [5, 9, 12, 5, 9, 30, 7, 3, 44, 17, 8, 21, 60, 2, 33, 14, 9, 27, 50, 11, 6, 38, 19, 4, 41, 12, 7, 55]


@functools.cache
def _model(name: str) -> Any:
    return family_model(FAMILIES[name], seed=3)


def _feed(model: Any, cache: DynamicCache, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([ids]), cache=cache, use_cache=True).logits[0, -1]


def _fresh_next(model: Any, ids: list[int]) -> torch.Tensor:
    """The next-token logits of a cache that saw ``ids[:-1]`` in one pass, then ``ids[-1]``."""
    cache = DynamicCache(config=model.config)
    _feed(model, cache, ids[:-1])
    return _feed(model, cache, ids[-1:])


def _layer_lengths(cache: DynamicCache) -> set[int]:
    """The token count each layer that keeps one reports. Since transformers 5.25 a linear-attention layer counts
    its own tokens, and the cache's ``get_seq_length`` (so the next pass's positions) reads the first layer's."""
    return {int(layer.get_seq_length()) for layer in cache.layers if hasattr(layer, "get_seq_length")}


# The three hybrids whose first layer is a linear-attention one (Qwen3Next, Lfm2, NemotronH) are those whose
# positions go wrong when a restore leaves that layer's count behind (CI's failure with transformers 5.25).
NEMOTRON_H = pytest.param("NemotronH", marks=pytest.mark.skipif(
    BEFORE_5_25, reason="transformers 5.24's Nemotron-H gives logits 0.02-0.04 apart for the same tokens fed in "
                        "passes of other lengths, rollback or not"))


@pytest.mark.parametrize("name", ["Mistral", "Gemma2", "Qwen3Next", "FalconH1", "Lfm2", NEMOTRON_H])
def test_a_rejected_tail_leaves_no_trace(name: str) -> None:
    """Verify-pass shaped: mark, feed 1 + 4 proposals, keep 1 + accepted, next pass; again and again past the
    window. The recompute of a hybrid's accepted tokens runs through ``refeed``; every layer's count of tokens
    comes back with its rows and states."""
    model = _model(name)
    cache = DynamicCache(config=model.config)
    rollback = CacheRollback(cache)
    committed = SEQUENCE[:10]
    _feed(model, cache, committed[:-1])
    wrong = [63, 62, 61, 60]
    for accepted in (0, 2, 4, 1, 3, 0, 4):
        rollback.mark(len(committed) - 1)
        proposals = SEQUENCE[len(committed):len(committed) + accepted] + wrong[: 4 - accepted]
        _feed(model, cache, [committed[-1], *proposals])
        committed = SEQUENCE[:len(committed) + accepted + 1]
        rollback.crop_to(len(committed) - 1, lambda a, b, ids=committed: _feed(model, cache, ids[a:b]))
        assert cache.get_seq_length() == len(committed) - 1
        assert _layer_lengths(cache) == {len(committed) - 1}
    assert len(committed) > 2 * WINDOW
    got = _feed(model, cache, committed[-1:])
    assert torch.allclose(got, _fresh_next(model, committed), atol=1e-4)
    assert (rollback.recomputed_tokens > 0) == rollback.restores_state


def test_recorded_window_rows_are_trimmed_when_everything_is_accepted() -> None:
    """Past recording keeps every row until a crop; crop(0) after an all-accepted pass keeps it at the window."""
    model = _model("Mistral")
    cache = DynamicCache(config=model.config)
    rollback = CacheRollback(cache)
    _feed(model, cache, SEQUENCE[:9])
    sliding = cache.layers[0]
    for start in range(9, 24, 5):
        rollback.mark(start)
        _feed(model, cache, SEQUENCE[start:start + 5])
        assert sliding.keys.shape[-2] == WINDOW - 1 + 5  # recorded: the rows a rejection would need
        rollback.crop_to(start + 5)
        assert sliding.keys.shape[-2] == WINDOW - 1
        row = (sliding.keys.numel() + sliding.values.numel()) * sliding.keys.element_size() // (WINDOW - 1)
        assert rollback.held_bytes == 5 * row * len(cache.layers)


def test_a_draft_marks_every_step_and_restores_without_recomputing() -> None:
    model = _model("Qwen3Next")
    cache = DynamicCache(config=model.config)
    rollback = CacheRollback(cache)
    _feed(model, cache, SEQUENCE[:12])
    rollback.mark(12)
    for i in range(12, 15):  # one token at a time, a mark after each
        _feed(model, cache, [SEQUENCE[i]])
        rollback.mark(i + 1)
    assert rollback.held_bytes == 0  # counted at the crop, not before
    rollback.crop_to(13)  # no refeed: a mark at 13 exists
    assert rollback.recomputed_tokens == 0 and rollback.held_bytes == 4 * linear_state_bytes(cache)
    assert cache.get_seq_length() == 13 and _layer_lengths(cache) == {13}
    got = _feed(model, cache, [SEQUENCE[13]])
    assert torch.allclose(got, _fresh_next(model, SEQUENCE[:14]), atol=1e-4)


# A layer with a sliding window and a linear part (the "hybrid_sliding" layers of Zaya, Inkling): past recording,
# which its window needs, records its linear part too.
ZAYA = Family("Zaya", "hybrid", {"sliding_window": WINDOW, "head_dim": 8, "num_experts": 4, "num_experts_per_tok": 1,
                                 "moe_intermediate_size": 16, "router_hidden_size": 16,
                                 "layer_types": ["hybrid_sliding", "hybrid"]})


def test_a_hybrid_sliding_model_is_refused_before_loading_where_transformers_is_too_old(monkeypatch) -> None:
    """5.24 cannot decode Zaya under past recording: the loader's check says so and names the version to
    install; on 5.25 and later the same config passes. (One transformers is installed: the older one is the
    version the check reads, set by hand.)"""
    import specscope.core.engine.rollback as rollback
    config = ZAYA.config()
    monkeypatch.setattr(rollback, "installed_transformers", lambda: "5.24.0")
    problem = rollback.rollback_problem(config)
    assert problem is not None
    assert "LinearAttentionAndSlidingWindowAttentionLayer" in problem
    assert "transformers 5.25 or later (installed: 5.24.0)" in problem
    monkeypatch.setattr(rollback, "installed_transformers", lambda: "5.25.0")
    assert rollback.rollback_problem(config) is None


def _recorded_states(cache: DynamicCache) -> int:
    """Recurrent-state copies the cache's layers hold for transformers' own crop (5.25 and later; none before)."""
    return sum(len(states) for layer in cache.layers
               for states in (getattr(layer, "recurrent_states_history", None) or {}).values())


@pytest.mark.skipif(BEFORE_5_25, reason="transformers 5.24's Zaya fails under past recording (it reads every "
                                        "recorded conv column)")
def test_a_hybrid_sliding_draft_restores_exactly_and_keeps_no_recorded_states() -> None:
    """Draft-shaped on a hybrid sliding layer past its window: a mark after each one-token step, then a restore
    to the kept prefix. Each recording pass leaves a copy of the recurrent state in the layer (5.25); the crops
    drop them, so they do not pile up over the run."""
    model = family_model(ZAYA, seed=3)
    cache = DynamicCache(config=model.config)
    assert type(cache.layers[0]).__name__ == "LinearAttentionAndSlidingWindowAttentionLayer"
    rollback = CacheRollback(cache)
    length = 6
    _feed(model, cache, SEQUENCE[:length])
    for _ in range(6):
        rollback.mark(length)
        for step in range(4):
            _feed(model, cache, [SEQUENCE[length + step]])
            rollback.mark(length + step + 1)
        length += 1  # the first proposal kept
        rollback.crop_to(length)
        assert cache.get_seq_length() == length and _recorded_states(cache) == 0
    assert length > WINDOW
    got = _feed(model, cache, [SEQUENCE[length]])
    assert torch.allclose(got, _fresh_next(model, SEQUENCE[:length + 1]), atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="transformers offloads a cache only from a CUDA device")
def test_an_offloaded_cache_rolls_back_the_same_way() -> None:
    """DynamicCache(offloading=True) keeps layers on the host between their uses; crops and copies work on
    whichever device a layer sits."""
    model = _model("Mistral").to("cuda")
    cache = DynamicCache(config=model.config, offloading=True)
    rollback = CacheRollback(cache)

    def feed(ids: list[int]) -> torch.Tensor:
        with torch.inference_mode():
            return model(torch.tensor([ids], device="cuda"), cache=cache, use_cache=True).logits[0, -1]

    feed(SEQUENCE[:12])
    for start in (12, 15, 18):
        rollback.mark(start)
        feed([*SEQUENCE[start:start + 3], 63, 62])
        rollback.crop_to(start + 3)
    got = feed([SEQUENCE[21]])
    fresh = DynamicCache(config=model.config)
    with torch.inference_mode():
        model(torch.tensor([SEQUENCE[:21]], device="cuda"), cache=fresh, use_cache=True)
        want = model(torch.tensor([SEQUENCE[21:22]], device="cuda"), cache=fresh, use_cache=True).logits[0, -1]
    model.to("cpu")
    assert torch.allclose(got, want, atol=1e-4)


def test_a_restore_needs_a_point_to_restore_from() -> None:
    model = _model("Lfm2")
    cache = DynamicCache(config=model.config)
    rollback = CacheRollback(cache)
    _feed(model, cache, SEQUENCE[:12])
    with pytest.raises(RuntimeError, match="no rollback point"):
        rollback.crop_to(10)
    with pytest.raises(ValueError, match="roll the cache forward"):
        rollback.crop_to(20)


def test_the_memory_reading_counts_recurrent_and_conv_states() -> None:
    model = _model("Qwen3Next")
    cache = DynamicCache(config=model.config)
    _feed(model, cache, SEQUENCE[:12])
    attention = sum(layer.keys.numel() * layer.keys.element_size() * 2 for layer in cache.layers
                    if getattr(layer, "keys", None) is not None)
    assert linear_state_bytes(cache) > 0
    assert kv_cache_bytes(cache) == attention + linear_state_bytes(cache)
