"""An EAGLE-3 head on disk: ``config.json`` + safetensors in the engines' layout (see ``eagle_head``), read
with every field and shape checked against its config and its target, and written back for shipping."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from specscope.core.engine.drafters.eagle_head import (
    WEIGHTS_FILE,
    Eagle3Config,
    Eagle3Head,
    EagleLoadError,
    default_aux_layer_ids,
)


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

