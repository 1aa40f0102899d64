"""A loaded target + drafter pair: what a session runs. Loading lives in ``models``; this is the shape."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from specscope.core.engine.drafters.base import Drafter


@dataclass
class LoadedModel:
    model: Any  # transformers PreTrainedModel (typed loosely: no import cost for consumers)
    name: str  # what the user chose: a path, a hub id, or "demo"
    device: torch.device
    dtype: torch.dtype
    source: str = ""  # resolved local directory
    n_params: int = 0
    warnings: list[str] = field(default_factory=list)
    # thread count -> which kernel one-token steps use there and the timing that chose it (engine/cpu_linear.py)
    one_token_kernels: dict[int, str] = field(default_factory=dict)


@dataclass
class ModelPair:
    """Target, tokenizer and drafter, checked compatible and ready to run."""

    target: LoadedModel
    tokenizer: Any  # transformers PreTrainedTokenizerBase
    drafter: Drafter
    drafter_kind: str  # "model", "lookup", "early-exit"
    draft: LoadedModel | None = None  # the draft model, for drafter_kind == "model"
    vocab_size: int = 0  # logits are cut to this width (the tokenizer's size): padded rows never win
    eos_token_ids: frozenset[int] = frozenset()
    use_chat_template: bool = True
    description: str = ""
    one_token_kernel: str = "auto"  # PairSpec.one_token_kernel: auto (timed), default or packed

    def encode_prompt(self, text: str, chat: bool | None = None) -> list[int]:
        """Token ids for a user prompt, through the chat template for instruct models."""
        use_chat = self.use_chat_template if chat is None else chat
        if use_chat and getattr(self.tokenizer, "chat_template", None):
            ids = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
            )
            if isinstance(ids, dict) or hasattr(ids, "input_ids"):
                ids = ids["input_ids"]
            return [int(i) for i in ids]
        return [int(i) for i in self.tokenizer(text)["input_ids"]]

    @property
    def context_window(self) -> int | None:
        """Positions the pair can attend over: the smaller of the target's and the draft's, from their
        configs (None when a config does not say). Past it a model fails or produces garbage."""
        windows = [_config_window(m.model) for m in (self.target, self.draft) if m is not None]
        known = [w for w in windows if w is not None]
        return min(known) if known else None

    def token_text(self, token_id: int) -> str:
        return str(self.tokenizer.decode([token_id], skip_special_tokens=False))

    def release(self) -> None:
        """Drop model references so their memory can be freed."""
        self.drafter.release()
        self.draft = None


_WINDOW_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")


def _config_window(model: Any) -> int | None:
    config = getattr(model, "config", None)
    for key in _WINDOW_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None
