"""Small random causal LMs for tests: real transformers models, tiny enough for a 2-core CPU."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def tiny_config(vocab_size: int = 64, layers: int = 2, hidden: int = 32) -> LlamaConfig:
    return LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
        tie_word_embeddings=False,
    )


def tiny_model(seed: int, vocab_size: int = 64, layers: int = 2, hidden: int = 32,
               logit_scale: float = 1.0) -> LlamaForCausalLM:
    """A random model; ``logit_scale`` sharpens its distributions (random models are nearly uniform)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(vocab_size, layers, hidden)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.5)
        model.lm_head.weight.mul_(logit_scale)
    return model


def perturbed(model: LlamaForCausalLM, noise: float, seed: int = 123) -> LlamaForCausalLM:
    """A copy of ``model`` with gaussian noise on every weight: a draft that partly agrees."""
    clone = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in clone.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise)
    return clone


def word_tokenizer(size: int = 64, swap: tuple[int, int] | None = None) -> PreTrainedTokenizerFast:
    """A whitespace word-level tokenizer built offline: <unk>, <s>, </s>, then w3 .. w{size-1}."""
    names = ["<unk>", "<s>", "</s>"] + [f"w{i}" for i in range(3, size)]
    if swap is not None:
        a, b = swap
        names[a], names[b] = names[b], names[a]
    tok = Tokenizer(models.WordLevel({n: i for i, n in enumerate(names)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>")


def save_model_dir(path: Path, model: LlamaForCausalLM | None = None, tokenizer=None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    if model is not None:
        model.save_pretrained(path)
    if tokenizer is not None:
        tokenizer.save_pretrained(path)
    return path
