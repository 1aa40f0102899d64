"""Tiny random targets with multi-token-prediction (MTP) layers, written as real checkpoints: the main model's
weights and, after its last layer, the MTP layers under the names DeepSeek-V3 and GLM-4.5 ship them with
(``model.layers.{num_hidden_layers + i}.{enorm, hnorm, eh_proj, shared_head.norm, <decoder layer>}``)."""

from __future__ import annotations

import copy
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from transformers import (
    AutoModelForCausalLM,
    DeepseekV3Config,
    DeepseekV3ForCausalLM,
    Glm4MoeConfig,
    Glm4MoeForCausalLM,
    PreTrainedModel,
)

from tests.models import word_tokenizer

V = 64


def deepseek_v3_config(mtp_layers: int, vocab: int = V, layers: int = 2) -> DeepseekV3Config:
    return DeepseekV3Config(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
        v_head_dim=8, n_group=1, topk_group=1, max_position_embeddings=512, num_mtp_layers=mtp_layers,
        tie_word_embeddings=False, bos_token_id=None, eos_token_id=None, pad_token_id=None)


def glm4_moe_config(mtp_layers: int, vocab: int = V, layers: int = 2) -> Glm4MoeConfig:
    return Glm4MoeConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, moe_intermediate_size=16, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, n_routed_experts=4, num_experts_per_tok=2,
        n_shared_experts=1, first_k_dense_replace=1, n_group=1, topk_group=1, max_position_embeddings=512,
        num_mtp_layers=mtp_layers, tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
        pad_token_id=None)


FAMILIES = {"deepseek_v3": (deepseek_v3_config, DeepseekV3ForCausalLM),
            "glm4_moe": (glm4_moe_config, Glm4MoeForCausalLM)}


def _randomize(module: torch.nn.Module, generator: torch.Generator, scale: float, mix: float) -> None:
    """Gaussian weights; the outputs of attention and MLP (``o_proj``, ``down_proj``) scaled by ``mix``, so the
    residual stream keeps the token's embedding and the model is partly a bigram model an MTP layer can learn."""
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight"):
                p.fill_(1.0)  # RMSNorm gains: random signs would only make the model noisier
            else:
                p.copy_(torch.randn(p.shape, generator=generator) * scale)
                if "o_proj" in name or "down_proj" in name:
                    p.mul_(mix)


def mtp_target_dir(path: Path, family: str = "deepseek_v3", mtp_layers: int = 1, seed: int = 0,
                   vocab: int = V, logit_scale: float = 4.0, mix: float = 0.002, eh_noise: float = 0.1,
                   mtp_weights: bool = True) -> Path:
    """A folder with config, tokenizer and one safetensors file holding the main model and its MTP layers.

    Weights are gaussian (std 0.5) with the LM head scaled by ``logit_scale``, so greedy choices are far from
    ties, and attention and MLP outputs scaled by ``mix``: the target is mostly a bigram model. Each MTP layer's
    ``eh_proj`` passes the embedding of the token it reads (plus ``eh_noise``), so the layers predict the
    target's next token often but not always, and their attention (random, scaled by ``mix``) reads their
    cache. ``mtp_weights=False`` leaves them out of the file (a config declaring MTP layers it does not ship)."""
    make_config, model_cls = FAMILIES[family]
    config = make_config(mtp_layers, vocab)
    g = torch.Generator().manual_seed(seed)
    model = model_cls(config).eval()
    _randomize(model, g, 0.5, mix)
    with torch.no_grad():
        model.lm_head.weight.mul_(logit_scale)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    word_tokenizer(vocab).save_pretrained(path)
    if not mtp_weights or not mtp_layers:
        return path
    # The MTP layers in the checkpoint's own layout: a deeper model of the same family saves its decoder layers
    # under the names the family's loader expects (fused experts split back, etc.); its extra layers are the MTP
    # blocks, and the MTP-only modules join them.
    n = config.num_hidden_layers
    deeper_config = copy.deepcopy(config)
    deeper_config.num_hidden_layers = n + mtp_layers
    deeper = model_cls(deeper_config).eval()
    _randomize(deeper, g, 0.5, mix)
    deeper.save_pretrained(path / "deeper")
    deeper_weights = load_file(str(path / "deeper" / "model.safetensors"))
    weights = load_file(str(path / "model.safetensors"))
    hidden = config.hidden_size
    for i in range(mtp_layers):
        prefix = f"model.layers.{n + i}."
        weights.update({k: v for k, v in deeper_weights.items() if k.startswith(prefix)})
        weights[prefix + "enorm.weight"] = torch.ones(hidden)
        weights[prefix + "hnorm.weight"] = torch.ones(hidden)
        weights[prefix + "shared_head.norm.weight"] = torch.ones(hidden)
        # [embedding | hidden] -> hidden: the embedding passes, the target's hidden state adds noise
        eh = torch.randn(hidden, 2 * hidden, generator=g) * eh_noise
        eh[:, :hidden] += torch.eye(hidden)
        weights[prefix + "eh_proj.weight"] = eh
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    for f in (path / "deeper").iterdir():
        f.unlink()
    (path / "deeper").rmdir()
    return path


def load_target(path: Path) -> PreTrainedModel:
    model: PreTrainedModel = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32)
    return model.eval()
