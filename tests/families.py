"""Tiny random models of many transformers families, built from their own config classes (no downloads).

Each family's config keeps its defining cache: sliding windows of 8 tokens (so a 40-token run goes well past
them), linear-attention / Mamba layers next to attention, MoE routing. Weights are drawn wide and the LM head
is scaled, so greedy decoding is not decided by near-ties; a draft is a perturbed copy, so it agrees often but
not always and both the accept and the reject paths run.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch
import transformers

VOCAB = 64
WINDOW = 8  # sliding window, in tokens

_COMMON: dict[str, Any] = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_attention_heads=4,
                               num_key_value_heads=2, max_position_embeddings=512, bos_token_id=None,
                               eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
_MOE: dict[str, Any] = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)


@dataclass(frozen=True)
class Family:
    name: str  # transformers' class prefix: {name}Config, {name}ForCausalLM
    kind: str  # dense, sliding, moe, hybrid
    options: dict[str, Any]
    layers: int = 2
    model_class: str = ""  # when not {name}ForCausalLM

    def config(self) -> Any:
        return getattr(transformers, f"{self.name}Config")(**{**_COMMON, "num_hidden_layers": self.layers,
                                                               **self.options})


FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("Llama", "dense", {}),
    Family("Qwen2", "dense", {}),
    Family("Qwen3", "dense", {"head_dim": 8}),
    Family("Phi3", "dense", {}),
    Family("Olmo2", "dense", {}),
    Family("Granite", "dense", {}),
    Family("Mistral", "sliding", {"sliding_window": WINDOW}),
    Family("Gemma2", "sliding", {"sliding_window": WINDOW, "head_dim": 8, "query_pre_attn_scalar": 8}),
    Family("Gemma3Text", "sliding", {"sliding_window": WINDOW, "head_dim": 8, "query_pre_attn_scalar": 8,
                                     "layer_types": ["sliding_attention", "full_attention"]},
           model_class="Gemma3ForCausalLM"),
    Family("GptOss", "sliding", {"sliding_window": WINDOW, "head_dim": 8, "num_local_experts": 4,
                                 "num_experts_per_tok": 2}),
    Family("Qwen3Moe", "moe", {**_MOE, "head_dim": 8}),
    Family("Mixtral", "moe", {"num_local_experts": 4, "num_experts_per_tok": 2}),
    Family("DeepseekV3", "moe", {"num_key_value_heads": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
                                 "moe_intermediate_size": 16, "n_shared_experts": 1, "first_k_dense_replace": 1,
                                 "n_group": 1, "topk_group": 1, "kv_lora_rank": 16, "q_lora_rank": 16,
                                 "qk_rope_head_dim": 8, "qk_nope_head_dim": 8, "v_head_dim": 8}),
    Family("Qwen3Next", "hybrid", {**_MOE, "head_dim": 8, "linear_num_value_heads": 2, "linear_num_key_heads": 2,
                                   "linear_key_head_dim": 8, "linear_value_head_dim": 8,
                                   "shared_expert_intermediate_size": 16,
                                   "layer_types": ["linear_attention", "full_attention", "linear_attention"]},
           layers=3),
    Family("FalconH1", "hybrid", {"mamba_d_ssm": 32, "mamba_n_heads": 4, "mamba_d_head": 8, "mamba_d_state": 8,
                                  "mamba_n_groups": 1, "mamba_chunk_size": 8, "head_dim": 8}),
    Family("Lfm2", "hybrid", {"layer_types": ["conv", "full_attention", "conv"]}, layers=3),
    Family("NemotronH", "hybrid", {"hybrid_override_pattern": "M*-", "mamba_num_heads": 4, "mamba_head_dim": 8,
                                   "ssm_state_size": 8, "n_groups": 1, "chunk_size": 8, "head_dim": 8},
           layers=3),
)}

# The fast tier: one family of each cache kind that needs its own rollback rule, plus a dense one.
FAST = ("Llama", "Mistral", "Gemma3Text", "Qwen3Next")


def family_model(family: Family, seed: int, logit_scale: float = 4.0) -> Any:
    """A random model of the family with wide weights and a sharpened head."""
    torch.manual_seed(seed)
    model = getattr(transformers, family.model_class or f"{family.name}ForCausalLM")(family.config()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or "A_log" in name or "dt_bias" in name or name.endswith(".D"):
                continue  # norms, SSM decay and skip: their defaults keep the recurrence stable
            p.normal_(0.0, 0.5)
        model.get_output_embeddings().weight.mul_(logit_scale)
    return model


def perturbed_copy(model: Any, noise: float = 0.05, seed: int = 123) -> Any:
    """The model with gaussian noise on every weight: a draft of the same family that partly agrees."""
    clone = copy.deepcopy(model)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in clone.parameters():
            p.add_(torch.randn(p.shape, generator=g) * noise)
    return clone


def greedy_reference(model: Any, prompt: list[int], new_tokens: int) -> list[int]:
    """transformers' own greedy decoding of the target: what every drafter must reproduce."""
    out = model.generate(torch.tensor([prompt]), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                         do_sample=False, eos_token_id=None, pad_token_id=0)
    return [int(t) for t in out[0, len(prompt):]]
