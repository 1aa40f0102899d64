"""The EAGLE-3 head: its config and its network, in the layout the serving engines load.

The head (Li et al. 2025, "EAGLE-3") fuses three of the target's hidden states (a low, a middle and a high
layer) with ``fc`` (3*H -> H), concatenates the result, normed, with the normed embedding of the next
token (2*H: the attention's input width), runs one decoder layer, a final norm and a head over a reduced
draft vocabulary. Draft ids map to target ids by offset (``target = draft + d2t[draft]``); ``t2d`` marks
the target ids the head can propose. Names, shapes and config keys are those vLLM
(``vllm/model_executor/models/llama_eagle3.py``) and SGLang (``python/sglang/srt/models/llama_eagle3.py``)
load: ``fc.weight``, ``midlayer.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, input_layernorm,
hidden_norm, post_attention_layernorm}.weight``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``, and
optionally ``embed_tokens.weight`` (absent: the target's embeddings are used). Reading and writing those
files is ``eagle_files``; drafting with the head is ``eagle``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

ARCHITECTURE = "LlamaForCausalLMEagle3"
WEIGHTS_FILE = "model.safetensors"


class EagleLoadError(ValueError):
    """An EAGLE-3 head could not be read or does not fit its target; the message is one sentence."""


MAX_CONFIG_WIDTH = 1 << 20  # hidden sizes of the largest models are ~16 k; beyond this a config is wrong
MAX_CONFIG_VOCAB = 1 << 24
MAX_CONFIG_LAYERS = 4_096
_REQUIRED = object()


def _config_int(d: dict[str, Any], key: str, lo: int, hi: int, default: Any = _REQUIRED) -> Any:
    """``d[key]`` as a whole number from ``lo`` to ``hi``; ``default`` when the key is absent or null."""
    value = d.get(key)
    if value is None and default is not _REQUIRED:
        return default
    if isinstance(value, float) and value.is_integer():  # 576.0 from a config written by another tool
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise EagleLoadError(f"the EAGLE-3 config's {key} must be a whole number from {lo:,} to {hi:,}, "
                             f"got {value!r:.60}")
    return value


def _config_float(d: dict[str, Any], key: str, default: float) -> float:
    """``d[key]`` as a finite positive number (``default`` when absent or null)."""
    value = d.get(key)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise EagleLoadError(f"the EAGLE-3 config's {key} must be a finite number above 0, got {value!r:.60}")
    return float(value)


def default_aux_layer_ids(n_layers: int) -> list[int]:
    """The layers vLLM and SGLang read when a head's config names none: low, middle, high."""
    return [2, n_layers // 2, n_layers - 3]


@dataclass
class Eagle3Config:
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    intermediate_size: int
    vocab_size: int  # the target's vocabulary (width of t2d)
    draft_vocab_size: int
    aux_layer_ids: list[int] | None = None  # None: the engines' default for the target's depth
    target_hidden_size: int | None = None  # None: the head's own hidden size
    head_dim: int | None = None
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 8192
    hidden_act: str = "silu"
    norm_before_residual: bool = False
    extra: dict[str, Any] = field(default_factory=dict)  # other keys of config.json, written back unchanged

    @property
    def dim_per_head(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads

    @property
    def feature_size(self) -> int:
        return self.target_hidden_size or self.hidden_size

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Eagle3Config:
        """The config, every field checked: one sentence naming the field that is missing or out of range."""
        required = ("hidden_size", "num_attention_heads", "intermediate_size", "vocab_size")
        missing = [k for k in required if d.get(k) is None]
        if missing:
            raise EagleLoadError(f"the EAGLE-3 config lacks {', '.join(missing)}")
        layers = _config_int(d, "num_hidden_layers", 1, 1_000, default=1)
        if layers != 1:
            raise EagleLoadError(f"specscope reads one-layer EAGLE-3 heads; this config has {layers} layers")
        rope = d.get("rope_parameters") or d.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default")) if isinstance(rope, dict) else "default"
        if rope_type not in ("default", None):
            raise EagleLoadError(f"the EAGLE-3 head uses rope scaling {rope_type!r}, which specscope does not "
                                 "implement")
        theta = d.get("rope_theta") or (rope.get("rope_theta") if isinstance(rope, dict) else None) or 10000.0
        eagle = d.get("eagle_config") or {}
        if not isinstance(eagle, dict):
            raise EagleLoadError(f"the EAGLE-3 config's eagle_config must be an object, got {eagle!r:.60}")
        if eagle.get("use_aux_hidden_state", True) is False:
            raise EagleLoadError("the head does not use auxiliary hidden states (an EAGLE-1/2 head, not EAGLE-3)")
        layer_ids = eagle.get("eagle_aux_hidden_state_layer_ids")
        if layer_ids is not None and (not isinstance(layer_ids, list) or len(layer_ids) > 64 or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_CONFIG_LAYERS for i in layer_ids)):
            raise EagleLoadError("the EAGLE-3 config's eagle_aux_hidden_state_layer_ids must be a list of layer "
                                 f"numbers from 0 to {MAX_CONFIG_LAYERS:,}, got {layer_ids!r:.60}")
        hidden = _config_int(d, "hidden_size", 1, MAX_CONFIG_WIDTH)
        heads = _config_int(d, "num_attention_heads", 1, 4_096)
        kv_heads = _config_int(d, "num_key_value_heads", 1, heads, default=heads)
        if heads % kv_heads:
            raise EagleLoadError(f"the EAGLE-3 config's num_attention_heads ({heads}) is not a multiple of its "
                                 f"num_key_value_heads ({kv_heads})")
        vocab = _config_int(d, "vocab_size", 1, MAX_CONFIG_VOCAB)
        head_dim = _config_int(d, "head_dim", 1, MAX_CONFIG_WIDTH, default=None)
        if head_dim is None and hidden < heads:
            raise EagleLoadError(f"the EAGLE-3 config's hidden_size ({hidden}) is smaller than its "
                                 f"num_attention_heads ({heads}) and it names no head_dim")
        known = {"hidden_size", "num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size",
                 "draft_vocab_size", "target_hidden_size", "head_dim", "rms_norm_eps", "rope_theta",
                 "max_position_embeddings", "hidden_act", "norm_before_residual", "eagle_config"}
        return cls(
            hidden_size=hidden, num_attention_heads=heads, num_key_value_heads=kv_heads,
            intermediate_size=_config_int(d, "intermediate_size", 1, 16 * MAX_CONFIG_WIDTH), vocab_size=vocab,
            draft_vocab_size=_config_int(d, "draft_vocab_size", 1, vocab, default=vocab),
            aux_layer_ids=list(layer_ids) if layer_ids else None,
            target_hidden_size=_config_int(d, "target_hidden_size", 1, MAX_CONFIG_WIDTH, default=None),
            head_dim=head_dim,
            rms_norm_eps=_config_float(d, "rms_norm_eps", 1e-6), rope_theta=_config_float(d, "rope_theta", theta),
            max_position_embeddings=_config_int(d, "max_position_embeddings", 1, 1 << 30, default=8192),
            hidden_act=str(d.get("hidden_act", "silu")), norm_before_residual=bool(d.get("norm_before_residual")),
            extra={k: v for k, v in d.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"architectures": [ARCHITECTURE], "model_type": "llama", "num_hidden_layers": 1}
        d.update(self.extra)
        d.update({
            "hidden_size": self.hidden_size, "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads, "intermediate_size": self.intermediate_size,
            "vocab_size": self.vocab_size, "draft_vocab_size": self.draft_vocab_size,
            "head_dim": self.dim_per_head, "rms_norm_eps": self.rms_norm_eps, "rope_theta": self.rope_theta,
            "max_position_embeddings": self.max_position_embeddings, "hidden_act": self.hidden_act,
            "tie_word_embeddings": False,
        })
        if self.target_hidden_size:
            d["target_hidden_size"] = self.target_hidden_size
        if self.norm_before_residual:
            d["norm_before_residual"] = True
        eagle: dict[str, Any] = {"use_aux_hidden_state": True}
        if self.aux_layer_ids is not None:
            eagle["eagle_aux_hidden_state_layer_ids"] = list(self.aux_layer_ids)
        d["eagle_config"] = eagle
        return d


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(dtype)


class _Attention(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        d, nh, nkv = cfg.dim_per_head, cfg.num_attention_heads, cfg.num_key_value_heads
        self.q_proj = nn.Linear(2 * cfg.hidden_size, nh * d, bias=False)
        self.k_proj = nn.Linear(2 * cfg.hidden_size, nkv * d, bias=False)
        self.v_proj = nn.Linear(2 * cfg.hidden_size, nkv * d, bias=False)
        self.o_proj = nn.Linear(nh * d, cfg.hidden_size, bias=False)


class _MLP(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        if cfg.hidden_act != "silu":
            raise EagleLoadError(f"the EAGLE-3 head uses activation {cfg.hidden_act!r}; specscope supports silu")
        self.gate_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.up_proj = nn.Linear(cfg.hidden_size, cfg.intermediate_size, bias=False)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class _MidLayer(nn.Module):
    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.self_attn = _Attention(cfg)
        self.mlp = _MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.hidden_norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Eagle3Head(nn.Module):
    """The head's weights and its forward in pieces: projections (q, k, v), then the rest of the layer.

    Attention itself is left to the caller, because drafting (a KV cache) and training (EAGLE-3's
    training-time test, unrolled steps attending to earlier steps' keys) arrange keys differently.
    Tensors carry a leading batch dimension: (B, T, ...).
    """

    d2t: torch.Tensor
    t2d: torch.Tensor
    inv_freq: torch.Tensor

    def __init__(self, cfg: Eagle3Config):
        super().__init__()
        self.cfg = cfg
        self.fc = nn.Linear(3 * cfg.feature_size, cfg.hidden_size, bias=False)
        self.midlayer = _MidLayer(cfg)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.draft_vocab_size, bias=False)
        self.register_buffer("d2t", torch.zeros(cfg.draft_vocab_size, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(cfg.vocab_size, dtype=torch.bool))
        d = cfg.dim_per_head
        inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.use_embeddings(None)

    def use_embeddings(self, embeddings: nn.Module | None) -> None:
        """The token embeddings the head reads: the target's (shared) or the checkpoint's own. Kept out of
        the head's submodules so its parameters, size and state dict are its own weights only."""
        self.__dict__["embed_tokens"] = embeddings

    # ---- vocabulary maps --------------------------------------------------------------------------
    def target_ids(self) -> torch.Tensor:
        """Target id of each draft id."""
        return torch.arange(self.cfg.draft_vocab_size, device=self.d2t.device) + self.d2t

    def set_draft_vocab(self, target_ids: torch.Tensor) -> None:
        """Store d2t (offsets) and t2d (mask) for a sorted list of target ids."""
        ids = target_ids.to(torch.long).sort().values
        self.d2t.copy_(ids - torch.arange(len(ids)))
        self.t2d.zero_()
        self.t2d[ids] = True

    # ---- the forward in pieces --------------------------------------------------------------------
    def rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.to(torch.float32).unsqueeze(-1) * self.inv_freq
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos(), emb.sin()

    def embed(self, token_ids: torch.Tensor) -> torch.Tensor:
        embeddings = self.__dict__["embed_tokens"]
        assert embeddings is not None, "the head needs embeddings (the target's or its own)"
        out: torch.Tensor = embeddings(token_ids)
        return out

    def project(
        self, embeds: torch.Tensor, hidden: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(q, k, v, residual): q (B, nh, T, d), k and v (B, nkv, T, d) with rotary applied to q and k."""
        layer = self.midlayer
        e = layer.input_layernorm(embeds)
        if self.cfg.norm_before_residual:
            hidden = layer.hidden_norm(hidden)
            residual, h = hidden, hidden
        else:
            residual, h = hidden, layer.hidden_norm(hidden)
        x = torch.cat([e, h], dim=-1)
        b, t, _ = x.shape
        d = self.cfg.dim_per_head
        attn = layer.self_attn
        q = attn.q_proj(x).view(b, t, -1, d).transpose(1, 2)
        k = attn.k_proj(x).view(b, t, -1, d).transpose(1, 2)
        v = attn.v_proj(x).view(b, t, -1, d).transpose(1, 2)
        cos, sin = self.rope(positions)  # (B, T, d)
        cos, sin = cos.unsqueeze(1).to(q.dtype), sin.unsqueeze(1).to(q.dtype)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        return q, k, v, residual

    def finish(self, attn_out: torch.Tensor, residual: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """attn_out (B, nh, T, d) -> (normed for the head, pre-norm hidden fed back at the next step)."""
        b, _, t, _ = attn_out.shape
        layer = self.midlayer
        h = layer.self_attn.o_proj(attn_out.transpose(1, 2).reshape(b, t, -1))
        residual = h + residual
        h = layer.mlp(layer.post_attention_layernorm(residual))
        prenorm = h + residual
        return self.norm(prenorm), prenorm

    def draft_logits(self, normed: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.lm_head(normed)
        return out


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Grouped-query attention; ``mask`` is boolean (True = may attend), broadcastable to (B, nh, Tq, Tk)."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k = k.repeat_interleave(groups, dim=1)
        v = v.repeat_interleave(groups, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(q.shape[-1]))

