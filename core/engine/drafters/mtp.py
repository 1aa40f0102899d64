"""Multi-token prediction (MTP): the target's own MTP layers draft (DeepSeek-V3, GLM-4.5 and the other families
whose config declares ``num_mtp_layers``; vLLM's ``method: mtp``, SGLang's NEXTN, transformers'
``generate(use_mtp=True)``).

transformers builds the layers (``modeling_layers.MtpModel``: per layer ``enorm``, ``hnorm``, ``eh_proj``, one
decoder layer of the family, ``post_norm``; the embeddings, head and rotary tables are the target's) and
loads their weights from the target's checkpoint. This module drives them, as ``MTPCandidateGenerator`` does:

- Depth i (MTP layer i) at row p reads the hidden state h^i_p and the token x_{p+1+i} at position p+1+i and
  predicts x_{p+2+i}. h^0_p is the target's last hidden state at p (``hidden_states[-1]``, after the final
  norm: what transformers hands the MTP layers), h^{i+1}_p is depth i's output at p. Each depth has its own
  KV cache over its rows (``MtpCache``).
- With the committed sequence x_0..x_{N-1} (the target's cache holds x_0..x_{N-2}, whose last hidden states
  arrived through ``observe_target_features``) every depth runs its rows up to N-2: depth 0's last row predicts
  x_N, depth i's reads the tokens depth 0..i-1 drafted and predicts x_{N+i}. So k <= num_mtp_layers drafts
  are exactly transformers' drafts.
- k > num_mtp_layers: the last MTP layer drafts the rest on its own, fed back its own output and the token it
  just drafted at the next position, as vLLM's MTP proposer chains its layer (an EAGLE-style chain). Those
  chained rows are dropped after each call; they never enter a depth's cache.
- After verification a depth keeps the rows whose drafted tokens were accepted (depth i's last i rows read
  drafted tokens); the rest are cropped and recomputed next call from the kept inputs, so every cache row is
  what a from-scratch pass over the committed sequence would compute.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from specscope.core.engine.drafters.base import Drafter, Proposal, append_feature_rows
from specscope.core.engine.sampling import processed_probs, sample_from
from specscope.core.records import ControlValues

# ``hidden_states[-1]`` of a transformers forward with ``output_hidden_states``: the last hidden state after the
# final norm, the tensor transformers' MTP candidate generator reads (``output_hidden_states=-1``).
LAST_HIDDEN_STATE = -1


def declared_mtp_layers(config: Any) -> int:
    """The number of MTP layers a config declares (0 = none): ``num_mtp_layers`` of its text config."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    value = getattr(text, "num_mtp_layers", None)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def mtp_weight_patterns(model_cls: type, n_layers: int, n_mtp: int) -> list[str]:
    """Regexes for the checkpoint keys of the MTP layers: the ones the family names (transformers reads the
    model class's ``_keys_to_ignore_on_load_unexpected``, where DeepSeek-V3 and GLM-4.5 hard-code the layer
    numbers of their released sizes) and the layers right after the last decoder layer, where the DeepSeek
    layout puts them at any depth."""
    patterns: list[str] = []
    named = getattr(model_cls, "_keys_to_ignore_on_load_unexpected", None)
    if isinstance(named, (list, tuple, set)):
        patterns.extend(str(p) for p in named)
    if any(re.match(r"\^?model\\\.layers\\\.\d", p) for p in patterns):
        patterns.extend(rf"model\.layers\.{n_layers + i}\." for i in range(n_mtp))
    return list(dict.fromkeys(patterns))


def checkpoint_keys(directory: Path) -> list[str] | None:
    """The tensor names of a safetensors checkpoint, from its index or the files' headers (no tensor is
    read); None when the folder holds no safetensors."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        weight_map = json.loads(index.read_text()).get("weight_map")
        return list(weight_map) if isinstance(weight_map, dict) else None
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    keys: list[str] = []
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            keys.extend(handle.keys())
    return keys


def missing_mtp_weights(directory: Path, config: Any) -> bool:
    """True when the family names where its MTP weights live and the checkpoint has none there (a config that
    declares MTP layers its checkpoint does not ship). False when that cannot be told without loading."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    try:
        model_cls: Any = MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]
    except KeyError:  # remote code, or a family transformers does not map to a causal LM
        return False
    if not isinstance(model_cls, type):
        return False
    text = config.get_text_config()
    patterns = mtp_weight_patterns(model_cls, int(text.num_hidden_layers), declared_mtp_layers(config))
    try:
        keys = checkpoint_keys(directory)
    except (OSError, ValueError):
        return False
    if not patterns or keys is None:
        return False
    regex = re.compile("|".join(f"({p})" for p in patterns))
    return not any(regex.search(k) for k in keys)


class MtpLoadError(ValueError):
    """The target's MTP layers could not be loaded; the message is one sentence."""


def load_mtp_layers(target: Any) -> Any:
    """transformers' ``MtpModel`` for ``target`` with its weights read from the target's checkpoint, on the
    device of the target's last layer (as transformers places it)."""
    from transformers.modeling_layers import MtpModel

    n_mtp = declared_mtp_layers(target.config)
    n_layers = int(target.config.get_text_config().num_hidden_layers)
    patterns = mtp_weight_patterns(type(target), n_layers, n_mtp)
    device = next(target.get_decoder().layers[-1].parameters()).device
    had = "_keys_to_ignore_on_load_unexpected" in vars(target)
    saved = vars(target).get("_keys_to_ignore_on_load_unexpected")
    target._keys_to_ignore_on_load_unexpected = patterns  # what MtpModel.from_pretrained reads them through
    try:
        model = MtpModel.from_pretrained(target, device_map={"": device})
    except Exception as exc:  # transformers raises RuntimeError/ValueError/OSError with multi-line detail
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise MtpLoadError(f"could not load the target's {n_mtp} MTP layer{'s' if n_mtp != 1 else ''} from "
                           f"its checkpoint ({detail[:300]})") from None
    finally:
        if had:
            target._keys_to_ignore_on_load_unexpected = saved
        else:
            del target._keys_to_ignore_on_load_unexpected
    return model.eval()


@dataclass
class _Depth:
    """One MTP layer's drafting state: its cache rows and the inputs the next depth has not consumed yet."""

    rows: int = 0  # rows 0..rows-1 are in the layer's cache
    # (row, token) of the rows that read a drafted token (depth i's last i rows): kept only if accepted
    drafted: list[tuple[int, int]] = field(default_factory=list)
    outputs: torch.Tensor | None = None  # (T, H) this depth's outputs at rows out_start.. (the next depth's input)
    out_start: int = 0


class MtpDrafter(Drafter):
    """Drafts with the target's MTP layers, fed by the target's last hidden states from the loop's passes."""

    name = "mtp"
    feature_layers = (LAST_HIDDEN_STATE,)

    def __init__(self, mtp_model: Any, vocab_size: int, device: torch.device | str | None = None):
        self.mtp = mtp_model
        self.n_layers = int(mtp_model.num_mtp_layers)
        self.vocab_size = vocab_size
        self.device = torch.device(device) if device is not None else next(mtp_model.parameters()).device
        self.release()

    # ---- state --------------------------------------------------------------------------------------
    def reset(self, prompt_ids: list[int]) -> None:
        self.release()

    def release(self) -> None:
        from transformers.cache_utils import MtpCache

        self._cache = MtpCache(config=self.mtp.config)
        # A sliding-window MTP layer (Mellum's) keeps the rows past its window until the next crop, so drafted
        # rows can be dropped after it filled; each rollback's crop restricts it to the window again.
        self._cache.activate_past_recording()
        self._depths = [_Depth() for _ in range(self.n_layers)]
        self._pending: list[torch.Tensor] = []  # the target's last hidden states (T, H) for depth 0's next rows
        self._pending_start = 0

    def observe_target_features(self, first_position: int, features: torch.Tensor) -> None:
        self._pending_start = append_feature_rows(self._pending, self._pending_start, first_position, features)

    def _drop_rows(self, depth: int, drop: int) -> None:
        """Drop the last ``drop`` rows of MTP layer ``depth``'s cache (a layer of a kind without ``crop``, a
        linear-attention state, cannot go back: none of the families with MTP layers has one)."""
        crop = getattr(self._cache.layers[depth], "crop", None)
        if crop is None and drop == 0:
            return
        if crop is None:
            raise RuntimeError(f"MTP layer {depth}'s cache ({type(self._cache.layers[depth]).__name__}) cannot "
                               "drop rows")
        crop(-drop)

    def _crop(self, depth: int, rows: int) -> None:
        drop = self._depths[depth].rows - rows
        self._drop_rows(depth, max(0, drop))  # crop(0) too: a recording sliding layer goes back to its window
        self._depths[depth].rows = min(rows, self._depths[depth].rows)

    def rollback(self, committed_ids: list[int]) -> None:
        """Keep each depth's rows whose drafted tokens were committed; crop the rest."""
        for i, depth in enumerate(self._depths):
            keep = depth.rows
            for row, token in depth.drafted:
                position = row + 1 + i
                if position >= len(committed_ids) or committed_ids[position] != token:
                    keep = row
                    break
            self._crop(i, keep)
            depth.drafted = []  # every row left reads committed tokens only
        # A depth's outputs are needed from the next depth's first missing row to its own last valid row.
        for i, depth in enumerate(self._depths[:-1]):
            self._trim_outputs(depth, self._depths[i + 1].rows, depth.rows)
        self._depths[-1].outputs = None

    @staticmethod
    def _trim_outputs(depth: _Depth, start: int, end: int) -> None:
        if depth.outputs is None:
            return
        lo, hi = max(0, start - depth.out_start), max(0, end - depth.out_start)
        depth.outputs = depth.outputs[lo:hi] if hi > lo else None
        depth.out_start = start if depth.outputs is not None else 0

    # ---- drafting -----------------------------------------------------------------------------------
    def _run(self, depth: int, hidden: torch.Tensor, tokens: list[int], first_row: int) -> torch.Tensor:
        """Rows first_row.. of MTP layer ``depth`` (tokens at positions row+1+depth); its outputs (T, H)."""
        ids = torch.tensor([tokens], dtype=torch.long, device=self.device)
        start = first_row + 1 + depth
        positions = torch.arange(start, start + len(tokens), device=self.device).unsqueeze(0)
        out: torch.Tensor = self.mtp.forward_layer(depth, hidden.unsqueeze(0), positions, self._cache, input_ids=ids)
        return out[0]

    def _logits(self, last_output: torch.Tensor) -> torch.Tensor:
        logits: torch.Tensor = self.mtp._project_to_logits(last_output.view(1, 1, -1))
        return logits[0, -1, : self.vocab_size]

    def _inputs(self, depth: int, first_row: int, last_row: int) -> torch.Tensor:
        """The hidden states depth ``depth`` reads at rows first_row..last_row."""
        if depth == 0:
            feats = torch.cat(self._pending) if len(self._pending) > 1 else self._pending[0]
            lo = first_row - self._pending_start
            return feats[lo : last_row + 1 - self._pending_start].to(self.device)
        below = self._depths[depth - 1]
        assert below.outputs is not None and below.out_start <= first_row
        return below.outputs[first_row - below.out_start : last_row + 1 - below.out_start]

    @torch.inference_mode()
    def propose(
        self,
        context_ids: list[int],
        k: int,
        controls: ControlValues,
        generator: torch.Generator | None,
    ) -> Proposal:
        n = len(context_ids)
        last_row = n - 2  # the target's hidden state at x_{N-2} is the last one the loop has handed over
        have = self._pending_start + sum(int(f.shape[0]) for f in self._pending) if self._pending else \
            self._depths[0].rows
        if n < 2 or k < 1 or have < n - 1:
            return Proposal(tokens=[], q_probs=None, q_token_probs=[])  # no hidden state to draft from yet
        tokens: list[int] = []
        q_rows: list[torch.Tensor] = []
        q_token: list[float | None] = []

        def choose(logits: torch.Tensor) -> None:
            if controls.greedy:
                x = int(torch.argmax(logits).item())
                q_token.append(float(torch.softmax(logits.float(), -1)[x]))
            else:
                probs = processed_probs(logits.unsqueeze(0), controls)[0]
                x = sample_from(probs, generator)
                q_rows.append(probs)
                q_token.append(float(probs[x]))
            tokens.append(x)
            seq.append(x)

        last_output = torch.empty(0)
        seq = [*context_ids]  # committed, then the tokens drafted so far
        for i in range(min(k, self.n_layers)):
            depth = self._depths[i]
            first = depth.rows
            if first > last_row:  # the loop calls once per iteration, after a target pass: never
                raise RuntimeError(f"MTP layer {i} already holds row {last_row}")
            hidden = self._inputs(i, first, last_row)
            # depth i at row p reads x_{p+1+i}: committed up to x_{N-1}, then the tokens drafted so far
            fed = seq[first + 1 + i : last_row + 2 + i]
            out = self._run(i, hidden, fed, first)
            depth.rows = last_row + 1
            depth.drafted.extend((row, seq[row + 1 + i]) for row in range(max(first, n - 1 - i), last_row + 1))
            if i + 1 < self.n_layers:
                depth.outputs = out if depth.outputs is None else torch.cat([depth.outputs, out])
                if depth.outputs is out:
                    depth.out_start = first
            last_output = out[-1]
            if i == 0:
                self._pending = []
            choose(self._logits(last_output))
        # Past the MTP layers: the last layer chains on its own output (rows dropped afterwards).
        chained = 0
        layer = self.n_layers - 1
        while len(tokens) < k:
            out = self._run(layer, last_output.unsqueeze(0), [tokens[-1]], last_row + 1 + chained)
            chained += 1
            last_output = out[-1]
            choose(self._logits(last_output))
        if chained:
            self._drop_rows(layer, chained)
        q = torch.stack(q_rows) if q_rows else None
        return Proposal(tokens=tokens, q_probs=q, q_token_probs=q_token)
