"""Early-exit self-draft: the target's own first N decoder layers, then its final norm and LM head.

No extra weights: :func:`truncated_view` builds a thin copy of the target's module tree whose layer list
holds the first N of the target's layer modules (shared, not copied) and whose config says N layers, so the
model's own forward (embeddings, rotary tables, masks, norm, head) runs unchanged on the shorter stack and
a ``DynamicCache`` built from that config has exactly N layers. Drafting then works exactly like a draft
model (:class:`ModelDrafter`): its own cache, and q is the processed softmax of the early-exit logits, so
the loop's acceptance rule stays exact.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn
from transformers import PreTrainedModel

from specscope.core.engine.drafters.model import ModelDrafter


def _decoder_stack(model: PreTrainedModel) -> tuple[nn.Module, nn.ModuleList]:
    """The model's decoder (``model.model`` for Llama-family LMs) and its list of layers."""
    base = getattr(model, getattr(model, "base_model_prefix", "model"), None)
    layers = getattr(base, "layers", None)
    if not isinstance(base, nn.Module) or not isinstance(layers, nn.ModuleList):
        raise ValueError(f"early exit needs a decoder with a `layers` list ({type(model).__name__} has none)")
    return base, layers


def _shallow(module: nn.Module) -> Any:
    """A new module object sharing every submodule, parameter and buffer, with its own child table."""
    clone = copy.copy(module)
    clone._modules = dict(module._modules)
    return clone


def _holds_attention(config: Any) -> bool:
    """Whether a cache for this config has a layer with attention rows (transformers counts positions there)."""
    from transformers import DynamicCache
    from transformers.cache_utils import CacheLayerMixin

    return any(isinstance(layer, CacheLayerMixin) for layer in DynamicCache(config=config).layers)


def truncated_view(model: PreTrainedModel, n_layers: int) -> PreTrainedModel:
    """The causal LM ``model`` with only its first ``n_layers`` decoder layers; no weights are copied."""
    base, layers = _decoder_stack(model)
    total = len(layers)
    if not 1 <= n_layers <= total:
        raise ValueError(f"early exit needs between 1 and {total} layers, got {n_layers}")
    config = copy.deepcopy(model.config)
    text_config = config.get_text_config()
    layer_types = getattr(text_config, "layer_types", None)
    text_config.num_hidden_layers = n_layers
    # sliding/full/linear attention per layer: keep the first N (unless the config derives the list from the
    # layer count, as Falcon-H1's does)
    if isinstance(layer_types, list) and len(getattr(text_config, "layer_types", None) or ()) != n_layers:
        text_config.layer_types = layer_types[:n_layers]
    if not _holds_attention(config):
        raise ValueError(f"early exit after {n_layers} layer{'s' if n_layers > 1 else ''} keeps no attention layer of "
                         f"{type(model).__name__} (only linear-attention or SSM layers, which transformers cannot "
                         "run alone); choose more layers with --early-exit-layers")
    short_base = _shallow(base)
    short_base.layers = nn.ModuleList(list(layers)[:n_layers])
    short_base.config = text_config
    view = _shallow(model)
    setattr(view, model.base_model_prefix, short_base)
    view.config = config
    return view


class EarlyExitDrafter(ModelDrafter):
    name = "early-exit"

    def __init__(self, target_model: PreTrainedModel, n_layers: int, vocab_size: int | None = None,
                 device: torch.device | str | None = None):
        view = truncated_view(target_model, n_layers)
        width = vocab_size if vocab_size is not None else int(view.config.get_text_config().vocab_size)
        super().__init__(view, width, device)
        self.n_layers = n_layers
        self.total_layers = len(_decoder_stack(target_model)[1])
