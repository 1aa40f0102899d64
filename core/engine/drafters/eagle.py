"""EAGLE-3 drafting: a one-layer head that reads the target's own hidden states.

The head (Li et al. 2025, "EAGLE-3") fuses three of the target's hidden states (a low, a middle and a high
layer) with ``fc`` (3*H -> H), concatenates the result, normed, with the normed embedding of the next
token (2*H: the attention's input width), runs one decoder layer, a final norm and a head over a reduced
draft vocabulary. Draft ids map to target ids by offset (``target = draft + d2t[draft]``); ``t2d`` marks
the target ids the head can propose. Names, shapes and config keys are those vLLM
(``vllm/model_executor/models/llama_eagle3.py``) and SGLang (``python/sglang/srt/models/llama_eagle3.py``)
load: ``fc.weight``, ``midlayer.{self_attn.{q,k,v,o}_proj, mlp.{gate,up,down}_proj, input_layernorm,
hidden_norm, post_attention_layernorm}.weight``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``, and
optionally ``embed_tokens.weight`` (absent: the target's embeddings are used).

Drafting, with the committed sequence x_0..x_{N-1} (the target's cache holds x_0..x_{N-2}): head position
p reads the target's feature at p and the token x_{p+1} and predicts x_{p+2}. The first draft step runs
every position whose feature arrived since the last call (up to N-2) and predicts x_N; each later step
feeds back the head's own pre-norm hidden state with the token it just drafted. Only positions fed by the
target's features stay in the head's KV cache; the drafted ones are dropped after each call, as the
engines do, because the next verify pass supplies real features for whatever was accepted.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from specscope.core.engine.drafters.base import Drafter, Proposal
from specscope.core.engine.sampling import processed_probs, sample_from
from specscope.core.records import ControlValues

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


# ---- files: the engines' layout ------------------------------------------------------------------------
def read_head_config(directory: Path) -> Eagle3Config:
    from specscope.core.user_files import MAX_CONFIG_FILE_BYTES, UserFileError, parse_user_json, read_regular_text

    path = directory / "config.json"
    if not path.exists():
        raise EagleLoadError(f"no config.json in {directory}: not an EAGLE-3 head directory")
    try:
        raw = parse_user_json(read_regular_text(path, "EAGLE-3 config", MAX_CONFIG_FILE_BYTES), str(path))
    except UserFileError as exc:
        raise EagleLoadError(str(exc)) from None
    if not isinstance(raw, dict):
        raise EagleLoadError(f"{path} is not a JSON object")
    try:
        return Eagle3Config.from_dict(raw)
    except EagleLoadError as exc:
        raise EagleLoadError(f"{exc} (in {path})") from None


def _read_weights(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise EagleLoadError(f"no safetensors weights in {directory}")
    state: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            state.update(load_file(str(f)))
        except (SafetensorError, OSError) as exc:
            raise EagleLoadError(f"cannot read {f.name}: {str(exc).splitlines()[0]}") from None
    out: dict[str, torch.Tensor] = {}
    for name, tensor in state.items():
        name = name.removeprefix("model.")
        if name.startswith("layers.0."):  # some checkpoints name the one layer like a decoder stack
            name = "midlayer." + name.removeprefix("layers.0.")
        out[name] = tensor
    return out


def check_fits_target(cfg: Eagle3Config, target_config: Any, width: int, source: str = "the head") -> None:
    """One sentence naming every way the head and the target disagree, or nothing."""
    tc = target_config.get_text_config() if hasattr(target_config, "get_text_config") else target_config
    n_layers, hidden, vocab = int(tc.num_hidden_layers), int(tc.hidden_size), int(tc.vocab_size)
    problems: list[str] = []
    if cfg.feature_size != hidden:
        problems.append(f"it reads hidden states of size {cfg.feature_size} but the target's are {hidden}")
    if cfg.vocab_size != vocab:
        problems.append(f"its vocabulary has {cfg.vocab_size:,} ids but the target's has {vocab:,}")
    layer_ids = cfg.aux_layer_ids if cfg.aux_layer_ids is not None else default_aux_layer_ids(n_layers)
    bad = [i for i in layer_ids if not 0 <= i < n_layers]
    if len(layer_ids) != 3:
        problems.append(f"it names {len(layer_ids)} feature layers ({layer_ids}) where EAGLE-3 fuses 3")
    elif bad:
        problems.append(f"its feature layers {layer_ids} do not exist in the target's {n_layers} layers")
    if not problems and cfg.draft_vocab_size > width:
        problems.append(f"its draft vocabulary ({cfg.draft_vocab_size:,}) is larger than the tokenizer's "
                        f"{width:,} ids")
    if problems:
        raise EagleLoadError(f"{source} does not fit the target: " + "; ".join(problems))


def load_head(directory: Path, target: Any, width: int, device: torch.device | str | None = None,
              dtype: torch.dtype | None = None) -> Eagle3Head:
    """Read config.json + safetensors, check them against the target, and build the head on its device."""
    directory = Path(directory)
    cfg = read_head_config(directory)
    check_fits_target(cfg, target.config, width, f"the EAGLE-3 head in {directory}")
    state = _read_weights(directory)
    param = next(target.parameters())
    device = torch.device(device) if device is not None else param.device
    dtype = dtype or param.dtype
    with torch.device("meta"):
        head = Eagle3Head(cfg)
    own_embed = state.pop("embed_tokens.weight", None)
    expected = dict(head.state_dict())
    missing = sorted(set(expected) - set(state) - {"t2d"})
    unexpected = sorted(set(state) - set(expected))
    if missing or unexpected:
        parts = ([f"missing {', '.join(missing[:4])}"] if missing else []) + \
                ([f"unexpected {', '.join(unexpected[:4])}"] if unexpected else [])
        raise EagleLoadError(f"the EAGLE-3 weights in {directory} do not match its config: " + "; ".join(parts))
    for name, tensor in state.items():
        if tuple(tensor.shape) != tuple(expected[name].shape):
            raise EagleLoadError(f"the EAGLE-3 weight {name} in {directory} has shape {tuple(tensor.shape)}, "
                                 f"its config implies {tuple(expected[name].shape)}")
    loaded = {n: (t.to(device) if t.dtype in (torch.long, torch.int64, torch.bool) else
                  t.to(device=device, dtype=dtype)) for n, t in state.items()}
    loaded["d2t"] = loaded["d2t"].to(torch.long)
    targets = torch.arange(cfg.draft_vocab_size, device=device) + loaded["d2t"]
    if int(targets.min()) < 0 or int(targets.max()) >= min(width, cfg.vocab_size):  # before t2d is indexed by them
        raise EagleLoadError(f"the EAGLE-3 head in {directory} maps draft ids outside the target's "
                             f"{min(width, cfg.vocab_size):,} ids (its d2t holds offsets out of range)")
    if "t2d" not in loaded:
        loaded["t2d"] = torch.zeros(cfg.vocab_size, dtype=torch.bool, device=device)
        loaded["t2d"][torch.arange(cfg.draft_vocab_size, device=device) + loaded["d2t"]] = True
    head.load_state_dict(loaded, strict=True, assign=True)
    head.inv_freq = head.inv_freq.to(device) if not head.inv_freq.is_meta else \
        1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.dim_per_head, 2, dtype=torch.float32, device=device)
                                  / cfg.dim_per_head))
    targets = head.target_ids()
    if int(targets.min()) < 0 or int(targets.max()) >= width:
        raise EagleLoadError(f"the EAGLE-3 head in {directory} maps draft ids outside the target's {width:,} ids")
    if own_embed is not None:
        if tuple(own_embed.shape) != (cfg.vocab_size, cfg.hidden_size):
            raise EagleLoadError(f"the EAGLE-3 head's embed_tokens has shape {tuple(own_embed.shape)}, "
                                 f"expected {(cfg.vocab_size, cfg.hidden_size)}")
        head.use_embeddings(nn.Embedding.from_pretrained(own_embed.to(device=device, dtype=dtype), freeze=True))
    else:
        embed = target.get_input_embeddings()
        if int(embed.embedding_dim) != cfg.hidden_size:
            raise EagleLoadError(f"the EAGLE-3 head in {directory} has no embeddings of its own and its hidden "
                                 f"size {cfg.hidden_size} differs from the target's embeddings "
                                 f"({embed.embedding_dim})")
        head.use_embeddings(embed)
    head.eval()
    for p in head.parameters():
        p.requires_grad_(False)
    return head


def save_head(head: Eagle3Head, directory: Path, dtype: torch.dtype = torch.float16) -> None:
    """Write config.json + model.safetensors in the engines' layout (no embeddings: the target's are used)."""
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    state = {n: (t.detach().to(dtype) if t.is_floating_point() else t.detach()).contiguous().cpu()
             for n, t in head.state_dict().items() if not n.startswith("embed_tokens")}
    save_file(state, str(directory / WEIGHTS_FILE))
    (directory / WEIGHTS_FILE).chmod(0o644)  # safetensors writes 0600; the file is shipped as package data
    (directory / "config.json").write_text(json.dumps(head.cfg.to_dict(), indent=2) + "\n")


# ---- the drafter -----------------------------------------------------------------------------------
class EagleDrafter(Drafter):
    """Drafts with an EAGLE-3 head fed by the target's hidden states from the loop's verify passes."""

    name = "eagle"

    def __init__(self, head: Eagle3Head, target_config: Any, vocab_size: int,
                 device: torch.device | str | None = None):
        self.head = head
        tc = target_config.get_text_config() if hasattr(target_config, "get_text_config") else target_config
        n_layers = int(tc.num_hidden_layers)
        ids = head.cfg.aux_layer_ids if head.cfg.aux_layer_ids is not None else default_aux_layer_ids(n_layers)
        self.feature_layers = tuple(ids)
        self.vocab_size = vocab_size
        self.device = torch.device(device) if device is not None else head.fc.weight.device
        self._targets = head.target_ids().to(self.device)
        self.release()

    # ---- state --------------------------------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.release()

    def release(self) -> None:
        self._k: torch.Tensor | None = None  # (1, nkv, L, d): positions 0..L-1, all fed by target features
        self._v: torch.Tensor | None = None
        self._pending: list[torch.Tensor] = []  # target features (T, 3H) not yet run through the head
        self._pending_start = 0  # position of the first pending row

    @property
    def cache_len(self) -> int:
        return 0 if self._k is None else int(self._k.shape[2])

    def observe_target_features(self, first_position: int, features: torch.Tensor) -> None:
        """The target's fused-layer inputs (T, 3H) at committed positions first_position.. (from verify)."""
        if features.shape[0] == 0:
            return
        have = self._pending_start + sum(int(f.shape[0]) for f in self._pending)
        if not self._pending:
            self._pending_start = first_position
        elif first_position != have:
            raise RuntimeError(f"target features arrived for position {first_position}, expected {have}")
        self._pending.append(features)

    def rollback(self, committed_ids: list[int]) -> None:
        # The cache only ever holds positions fed by the target's features for committed tokens: nothing
        # to undo. Drafted positions were dropped at the end of propose.
        return

    # ---- drafting -----------------------------------------------------------------------------------
    def _step(self, tokens: list[int], hidden: torch.Tensor, start: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Run positions start.. through the head with the cache; return (draft logits, pre-norm) of the last."""
        head = self.head
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        positions = torch.arange(start, start + len(tokens), device=self.device).unsqueeze(0)
        q, k, v, residual = head.project(head.embed(ids), hidden, positions)
        if self._k is not None:
            k = torch.cat([self._k, k], dim=2)
            v = torch.cat([self._v, v], dim=2) if self._v is not None else v
        self._k, self._v = k, v
        t_new, t_all = q.shape[2], k.shape[2]
        mask = None
        if t_new > 1:  # causal among the new rows; every cached row is visible
            mask = torch.ones(t_new, t_all, dtype=torch.bool, device=self.device).tril(t_all - t_new)
        normed, prenorm = head.finish(attend(q, k, v, mask), residual)
        return head.draft_logits(normed[:, -1])[0], prenorm[:, -1:]

    def _full_row(self, draft_logits: torch.Tensor) -> torch.Tensor:
        """Draft-vocabulary logits spread over the target's ids; -inf (q = 0) outside the draft vocabulary."""
        row = draft_logits.new_full((self.vocab_size,), float("-inf"))
        row[self._targets] = draft_logits
        return row

    @torch.inference_mode()
    def propose(
        self,
        context_ids: list[int],
        k: int,
        controls: ControlValues,
        generator: torch.Generator | None,
    ) -> Proposal:
        n = len(context_ids)
        empty = Proposal(tokens=[], q_probs=None, q_token_probs=[])
        start = self.cache_len
        n_pending = sum(int(f.shape[0]) for f in self._pending)
        if self._pending and self._pending_start != start:
            raise RuntimeError(f"the head's cache ends at {start} but features start at {self._pending_start}")
        if start + n_pending < n - 1 or n < 2:
            return empty  # no feature for position n-2 yet (a one-token prompt): nothing to draft from
        feats = torch.cat(self._pending)[: n - 1 - start].to(self.device)
        self._pending = []
        real_len = n - 1
        hidden = self.head.fc(feats.to(self.head.fc.weight.dtype)).unsqueeze(0)
        tokens_in = context_ids[start + 1 : n]
        tokens: list[int] = []
        q_rows: list[torch.Tensor] = []
        q_token: list[float | None] = []
        logits, prenorm = self._step(tokens_in, hidden, start)
        for i in range(k):
            if controls.greedy:
                j = int(torch.argmax(logits).item())
                x = int(self._targets[j])
                q_token.append(float(torch.softmax(logits.float(), -1)[j]))
            else:
                probs = processed_probs(self._full_row(logits).unsqueeze(0), controls)[0]
                x = sample_from(probs, generator)
                q_rows.append(probs)
                q_token.append(float(probs[x]))
            tokens.append(x)
            if i + 1 < k:  # the last proposal is never fed back: the target checks it
                logits, prenorm = self._step([x], prenorm, real_len + i)
        # Keep only the positions fed by the target's features; the drafted ones are recomputed next time.
        if self._k is not None and self._v is not None:
            self._k, self._v = self._k[:, :, :real_len], self._v[:, :, :real_len]
        q = torch.stack(q_rows) if q_rows else None
        return Proposal(tokens=tokens, q_probs=q, q_token_probs=q_token)
