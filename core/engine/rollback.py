"""Returning a transformers cache exactly to the committed prefix after a rejection, one rule per layer type.

A speculative pass feeds tokens that may be rejected; afterwards the target's cache (and a draft model's)
must hold exactly the committed prefix again. What that takes depends on the layer's cache:

* full attention (``DynamicLayer``, ``DynamicIndexedLayer``): drop the rejected rows (``crop``).
* sliding window (``DynamicSlidingWindowLayer``): the layer keeps only ``window - 1`` rows, so rows pushed out
  by the rejected tokens would be gone. Past recording (transformers' own switch, the one its assisted
  generation turns on) keeps every row until the next ``crop``; ``crop(-n)`` then drops the rejected rows and
  ``crop(0)`` trims back to the window when nothing was rejected (without it the recorded rows grow without
  bound). Recording starts at the first rollback point, after the prefill, as transformers does: recording
  during a long prompt would hold all of it at once.
* linear attention and SSM state (``LinearAttentionLayer``: Gated DeltaNet, Mamba, short convolutions; and the
  hybrid layers holding such a state next to attention): a recurrent state folds every token in and cannot be
  cropped. The rollback takes a copy of the conv and recurrent states at each rollback point (they are a few
  fixed-size tensors per layer), and of the layer's own token count where it keeps one (transformers 5.25 and
  later: ``cumulative_length_linear``, which ``get_seq_length`` reads and so sets the next pass's positions),
  and restores them. A draft model, fed one token at a time, marks a point after
  every step, so its rollback is a restore. The target marks one point before its verify pass; after a
  rejection it restores that point and runs the accepted tokens through the model again (one extra pass of
  1 + accepted tokens, none when every proposal was accepted): cheaper than copying per-token states out of
  kernels that do not expose them.
* MoE layers hold no cache of their own; ``DummyLayer`` (a layer without a cache) needs nothing.

An offloaded cache (``DynamicCache(offloading=True)``) crops and copies the same way on whichever device a
layer sits. Layer types not listed (quantized caches, compressed or sparse attention of a few families) cannot
be returned exactly: :func:`rollback_problem` names them, so the loader refuses such a model before loading.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers
from packaging.version import Version
from transformers import DynamicCache, PretrainedConfig
from transformers.cache_utils import (
    Cache,
    DummyLayer,
    DynamicIndexedLayer,
    DynamicLayer,
    DynamicSlidingWindowLayer,
    LinearAttentionAndFullAttentionLayer,
    LinearAttentionAndSlidingWindowAttentionLayer,
    LinearAttentionCacheLayerMixin,
    LinearAttentionLayer,
)

# Exact classes, not subclasses: a subclass may keep state these rules do not know about.
ROLLBACK_LAYER_TYPES: tuple[type, ...] = (
    DynamicLayer, DynamicSlidingWindowLayer, DynamicIndexedLayer, DummyLayer, LinearAttentionLayer,
    LinearAttentionAndFullAttentionLayer, LinearAttentionAndSlidingWindowAttentionLayer,
)

# Runs committed tokens ``start .. end - 1`` through the model on this cache (the recompute after a restore).
Refeed = Callable[[int, int], None]


# Layers only later transformers decode under the past recording their window needs: 5.24's hybrid sliding layer
# (Zaya, Inkling) reads every recorded conv column and fails at the first pass after a mark (docs/rollback.md).
NEWER_TRANSFORMERS_NEEDED: dict[type, str] = {LinearAttentionAndSlidingWindowAttentionLayer: "5.25"}


def installed_transformers() -> str:
    return str(transformers.__version__)


def unrollable_layers(cache: Cache) -> list[str]:
    """Class names of the cache's layers that cannot be returned exactly to a shorter prefix (with this
    transformers)."""
    return sorted({type(layer).__name__ for layer in cache.layers
                   if type(layer) not in ROLLBACK_LAYER_TYPES or _needs_newer(type(layer)) is not None})


def _needs_newer(layer_type: type) -> str | None:
    """The transformers version this layer type needs, when the installed one is older; else None."""
    needed = NEWER_TRANSFORMERS_NEEDED.get(layer_type)
    return needed if needed is not None and Version(installed_transformers()) < Version(needed) else None


def rollback_problem(config: PretrainedConfig) -> str | None:
    """A sentence if the cache a model with this config decodes with cannot roll back exactly; else None.

    Builds the (empty, lazily allocated) cache from the config alone, so it costs nothing before loading. The
    model's class is imported first: a family's own cache layers register themselves when its module loads."""
    from transformers import AutoModelForCausalLM

    with contextlib.suppress(Exception):  # no causal LM class: the loader says so in its own sentence
        AutoModelForCausalLM._model_mapping[type(config)]  # imports the modeling module
    try:
        cache = DynamicCache(config=config)
    except Exception:  # transformers cannot build this cache from the config alone: the load decides
        return None
    names = unrollable_layers(cache)
    if not names:
        return None
    newer = sorted({needed for layer in cache.layers if (needed := _needs_newer(type(layer))) is not None},
                   key=Version)
    if newer:
        return (f"its cache layers ({', '.join(names)}) decode under speculation only with transformers "
                f"{newer[-1]} or later (installed: {installed_transformers()}): upgrade transformers")
    return (f"its cache layers ({', '.join(names)}) cannot be returned to a shorter prefix after a rejected "
            "draft, so speculative decoding would not be exact")


def _tensor_bytes(t: torch.Tensor | None) -> int:
    return t.numel() * t.element_size() if isinstance(t, torch.Tensor) else 0


@dataclass
class _LinearState:
    """One linear-attention layer's conv and recurrent states at a rollback point (copies)."""

    conv: dict[int, torch.Tensor | None]
    recurrent: dict[int, torch.Tensor | None]
    has_previous: dict[int, bool]
    # the layer's token count (transformers >= 5.25; None before, when only attention layers counted tokens)
    length: torch.Tensor | None = None

    @property
    def nbytes(self) -> int:
        return sum(_tensor_bytes(t) for t in (*self.conv.values(), *self.recurrent.values()))


def _token_count(layer: LinearAttentionCacheLayerMixin) -> torch.Tensor | None:
    """The tokens a linear-attention layer has folded in, as the 0-d tensor its ``get_seq_length`` returns
    (transformers >= 5.25), or None where the layer keeps no count (5.24: attention layers alone counted).

    transformers' own way back, ``crop(-n)`` under past recording, lowers this count and takes each recurrent
    state from a history the model fills only for the last ``recurrent_states_to_keep`` tokens of a pass (a
    5.25 addition); the copies here work on every version, so the count is restored with them."""
    count = getattr(layer, "cumulative_length_linear", None)
    return count if isinstance(count, torch.Tensor) else None


def linear_state_bytes(cache: Cache) -> int:
    """Bytes of the conv and recurrent states the cache's linear-attention layers hold (not keys/values)."""
    total = 0
    for layer in cache.layers:
        if isinstance(layer, LinearAttentionCacheLayerMixin):
            for t in (*layer.conv_states.values(), *layer.recurrent_states.values()):
                total += _tensor_bytes(t)
    return total


class CacheRollback:
    """Keeps one cache able to return to a committed prefix (see the module's notes for the rule per layer).

    ``mark(n)`` before a pass that may be rejected, with ``n`` tokens in the cache; ``crop_to(n, refeed)`` after
    it returns the cache to its first ``n`` tokens. ``held_bytes`` is what rollback held at the last crop
    (state copies plus recorded sliding-window rows past the window), the extra memory it costs.
    """

    def __init__(self, cache: Cache):
        self.cache = cache
        self._linear = [layer for layer in cache.layers if isinstance(layer, LinearAttentionCacheLayerMixin)]
        self._marks: dict[int, list[_LinearState]] = {}
        self._recording = False
        self.held_bytes = 0
        self.recomputed_tokens = 0  # tokens run again after restores, over the cache's life

    @property
    def restores_state(self) -> bool:
        """True when the cache holds recurrent or conv state, rolled back by copies rather than crops."""
        return bool(self._linear)

    def mark(self, length: int) -> None:
        """A point the cache may have to return to: it holds ``length`` tokens and the next pass may be rejected."""
        if not self._recording:
            # only the sliding windows: a linear layer's conv states are copied at the mark instead
            for layer in self.cache.layers:
                if isinstance(layer, DynamicSlidingWindowLayer):
                    layer.activate_past_recording()
            self._recording = True
        if self._linear:
            self._marks[length] = [self._copy(layer) for layer in self._linear]

    def crop_to(self, length: int, refeed: Refeed | None = None) -> None:
        """Return the cache to its first ``length`` tokens. A restore from an earlier point than ``length``
        runs the committed tokens from that point to ``length`` again through ``refeed``."""
        current = int(self.cache.get_seq_length())
        if length > current:
            raise ValueError(f"cannot roll the cache forward: it holds {current} tokens, {length} were asked")
        self.held_bytes = self._recorded_bytes() + sum(s.nbytes for states in self._marks.values() for s in states)
        drop = current - length
        if drop == 0 or not self._linear:
            self._crop(drop)
        elif length in self._marks:
            self._crop(drop)
            self._restore(self._marks[length])
        else:
            earlier = [m for m in self._marks if m < length]
            if not earlier or refeed is None:
                raise RuntimeError(f"no rollback point at or before {length} tokens to restore the cache's "
                                   "recurrent state from")
            base = max(earlier)
            self._crop(current - base)
            self._restore(self._marks[base])
            self._marks.clear()
            refeed(base, length)
            self.recomputed_tokens += length - base
            self._crop(0)  # the recompute was recorded too: trim back to the window
        # every mark is now behind the committed prefix or was consumed (restored tensors are live again)
        self._marks.clear()

    # ---- per layer type --------------------------------------------------------------------------------
    def _crop(self, drop: int) -> None:
        """Crop every layer's attention rows by ``drop`` (0 trims recorded rows back to the window) and trim
        recorded conv states; recurrent states are left to ``_restore``."""
        for layer in self.cache.layers:
            recording = bool(getattr(layer, "record_past", False))
            if drop == 0 and not recording:  # nothing to trim (and crop(0) of a full window needs recording)
                continue
            if isinstance(layer, LinearAttentionCacheLayerMixin):  # its attention rows only, by their own rule
                if isinstance(layer, DynamicSlidingWindowLayer):
                    DynamicSlidingWindowLayer.crop(layer, -drop)
                elif isinstance(layer, DynamicLayer):
                    DynamicLayer.crop(layer, -drop)
                if recording:
                    # A hybrid sliding layer records its linear part too: conv columns, and since transformers 5.25
                    # a copy of the recurrent state per pass. crop(0) drops both (after a rejection the restore
                    # that follows sets conv and recurrent states from the mark); without it a draft, which only
                    # ever restores, would keep every copy.
                    LinearAttentionLayer.crop(layer, 0)
            else:
                layer.crop(-drop)  # type: ignore[union-attr]  # every layer type listed above has crop

    @staticmethod
    def _copy(layer: LinearAttentionCacheLayerMixin) -> _LinearState:
        def clone(states: dict[int, torch.Tensor | None]) -> dict[int, torch.Tensor | None]:
            return {i: t.clone() if isinstance(t, torch.Tensor) else None for i, t in states.items()}

        if layer.record_past:  # recorded conv states keep every column until the crop: copy only the kernel's
            conv = {i: t[..., -int(layer.conv_kernel_size[i] or 0):].clone() if isinstance(t, torch.Tensor)
                    else None for i, t in layer.conv_states.items()}
        else:
            conv = clone(layer.conv_states)
        length = _token_count(layer)
        return _LinearState(conv=conv, recurrent=clone(layer.recurrent_states),
                            has_previous=dict(layer.has_previous_state),
                            length=None if length is None else length.clone())

    def _restore(self, states: list[_LinearState]) -> None:
        for layer, state in zip(self._linear, states, strict=True):
            for saved_states, live in ((state.conv, layer.conv_states), (state.recurrent, layer.recurrent_states)):
                for i, saved in saved_states.items():
                    current = live[i]
                    if saved is not None:
                        live[i] = saved
                    elif current is not None:  # initialised after the mark: back to "no previous state"
                        current.zero_()
            layer.has_previous_state.update(state.has_previous)
            count = _token_count(layer)
            if count is not None and state.length is not None:
                count.copy_(state.length)  # in place: transformers marks the tensor's address static

    def _recorded_bytes(self) -> int:
        """Bytes of rows past recording holds beyond what the layers keep between passes."""
        total = 0
        for layer in self.cache.layers:
            keys = getattr(layer, "keys", None)
            if isinstance(layer, DynamicSlidingWindowLayer) and layer.record_past and keys is not None:
                rows = int(keys.shape[-2])
                extra = rows - (layer.sliding_window - 1)
                if extra > 0:
                    total += extra * (_tensor_bytes(keys) + _tensor_bytes(layer.values)) // rows
            if isinstance(layer, LinearAttentionCacheLayerMixin) and layer.record_past:
                for i, t in layer.conv_states.items():
                    size = layer.conv_kernel_size[i]
                    if isinstance(t, torch.Tensor) and size is not None and t.shape[-1] > size:
                        total += (t.shape[-1] - size) * _tensor_bytes(t) // t.shape[-1]
        return total
