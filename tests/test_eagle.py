"""EAGLE-3 drafting on tiny random models: the engines' file layout, exactness in the loop, mismatches."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from specscope.core.controls import Controls
from specscope.core.engine.drafters.eagle import (
    Eagle3Config,
    Eagle3Head,
    EagleDrafter,
    EagleLoadError,
    load_head,
    save_head,
)
from specscope.core.engine.models import ModelLoadError, PairSpec, load_pair
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.records import ControlValues
from tests.models import save_model_dir, tiny_model, word_tokenizer
from tests.stats import chi_square_pvalue, exact_first_two

V = 64
LAYERS = 4
AUX = [1, 2, 3]
PROMPTS = [[1, 2, 3], [5], [7, 8, 9, 10, 11, 12], [40, 41, 40, 41]]


def head_config(vocab: int = V, draft_vocab: int = 40, hidden: int = 32, **kw) -> Eagle3Config:
    return Eagle3Config(hidden_size=hidden, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
                        vocab_size=vocab, draft_vocab_size=draft_vocab, aux_layer_ids=list(AUX),
                        rms_norm_eps=1e-6, rope_theta=10000.0, **kw)


def random_head(target, cfg: Eagle3Config, seed: int, scale: float = 0.4) -> Eagle3Head:
    torch.manual_seed(seed)
    head = Eagle3Head(cfg)
    with torch.no_grad():
        for name, p in head.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0.0, scale)
        ids = torch.randperm(cfg.vocab_size)[: cfg.draft_vocab_size]
        head.set_draft_vocab(ids)
    head.use_embeddings(target.get_input_embeddings())
    return head.eval()


@pytest.fixture(scope="module")
def target():
    return tiny_model(0, vocab_size=V, layers=LAYERS, logit_scale=3.0)


# ---- an independent reference forward, from the saved tensors only ------------------------------------
def _rms(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return w * (x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps))


def _rotary(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate (T, heads, d) by position; pairs (i, i + d/2), the neox / Llama convention."""
    d = x.shape[-1]
    half = d // 2
    angles = positions[:, None].double() * (theta ** (-torch.arange(half).double() * 2 / d))[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    a, b = x[..., :half].double(), x[..., half:].double()
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).to(x.dtype)


def reference_draft(w: dict[str, torch.Tensor], cfg: dict, embed: torch.Tensor, tokens: list[int],
                    hidden_in: list[torch.Tensor], first_fused: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-sequence EAGLE-3 forward: rows < first_fused get fc(features), later rows a fed-back hidden.

    ``hidden_in[i]`` is row i's hidden input (3H target features or an H pre-norm hidden); all rows attend
    causally. Returns (target-vocabulary logits with -inf outside the draft vocabulary, pre-norm rows).
    """
    nh, nkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg["head_dim"]
    rows = [(w["fc.weight"] @ h) if i < first_fused else h for i, h in enumerate(hidden_in)]
    hid = torch.stack(rows)
    e = embed[torch.tensor(tokens, dtype=torch.long)]
    x = torch.cat([_rms(e, w["midlayer.input_layernorm.weight"]), _rms(hid, w["midlayer.hidden_norm.weight"])], -1)
    t = len(tokens)
    q = (x @ w["midlayer.self_attn.q_proj.weight"].T).view(t, nh, d)
    k = (x @ w["midlayer.self_attn.k_proj.weight"].T).view(t, nkv, d)
    v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(t, nkv, d)
    pos = torch.arange(t)
    q, k = _rotary(q, pos, cfg["rope_theta"]), _rotary(k, pos, cfg["rope_theta"])
    out = torch.zeros(t, nh, d)
    for head in range(nh):
        kv = head // (nh // nkv)
        scores = (q[:, head] @ k[:, kv].T) / math.sqrt(d)
        scores = scores.masked_fill(torch.ones(t, t).triu(1).bool(), float("-inf"))
        out[:, head] = torch.softmax(scores, -1) @ v[:, kv]
    resid = out.reshape(t, nh * d) @ w["midlayer.self_attn.o_proj.weight"].T + hid
    m = _rms(resid, w["midlayer.post_attention_layernorm.weight"])
    mlp = torch.nn.functional.silu(m @ w["midlayer.mlp.gate_proj.weight"].T) * (m @ w["midlayer.mlp.up_proj.weight"].T)
    prenorm = mlp @ w["midlayer.mlp.down_proj.weight"].T + resid
    draft = _rms(prenorm, w["norm.weight"]) @ w["lm_head.weight"].T
    full = torch.full((t, cfg["vocab_size"]), float("-inf"))
    target_ids = torch.arange(cfg["draft_vocab_size"]) + w["d2t"]
    full[:, target_ids] = draft
    return full, prenorm


def target_features(target, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        hs = target(torch.tensor([ids]), output_hidden_states=True).hidden_states
    return torch.cat([hs[i][0] for i in AUX], -1)


def check_against_reference(target, head_dir, context: list[int], proposals: list[int],
                            drafter_logits: list[torch.Tensor]) -> None:
    """The drafter's logits at each proposal equal the reference computed from scratch on ``context``."""
    if not drafter_logits:  # nothing drafted (a one-token context has no feature to draft from)
        assert not proposals and len(context) < 2
        return
    saved = load_file(str(head_dir / "model.safetensors"))
    w = {n: t.float() if t.is_floating_point() else t for n, t in saved.items()}
    cfg = json.loads((head_dir / "config.json").read_text())
    embed = target.get_input_embeddings().weight.detach()
    feats = target_features(target, context[:-1])  # the target's cache holds context[:-1]
    n = len(context)
    tokens = context[1:n]
    hidden_in = list(feats)
    for i, logits in enumerate(drafter_logits):
        ref, prenorm = reference_draft(w, cfg, embed, tokens, hidden_in, first_fused=n - 1)
        torch.testing.assert_close(logits, ref[-1], rtol=1e-4, atol=1e-4)
        tokens = [*tokens, proposals[i]]
        hidden_in = [*hidden_in, prenorm[-1]]


class RecordingDrafter(EagleDrafter):
    """Records each call's context, proposals and full-vocabulary logits (greedy: the logits are q's source)."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls: list[tuple[list[int], list[int], list[torch.Tensor]]] = []
        self._logits: list[torch.Tensor] = []

    def _step(self, tokens, hidden, start):
        logits, prenorm = super()._step(tokens, hidden, start)
        self._logits.append(self._full_row(logits).clone())
        return logits, prenorm

    def propose(self, context_ids, k, controls, generator):
        self._logits = []
        prop = super().propose(context_ids, k, controls, generator)
        self.calls.append((list(context_ids), list(prop.tokens), list(self._logits)))
        return prop


# ---- files ----------------------------------------------------------------------------------------------
def test_saved_head_has_the_engines_names_and_shapes(target, tmp_path) -> None:
    cfg = head_config()
    save_head(random_head(target, cfg, 1), tmp_path, dtype=torch.float32)
    w = load_file(str(tmp_path / "model.safetensors"))
    h, d = 32, 8
    assert tuple(w["fc.weight"].shape) == (h, 3 * h)
    assert tuple(w["midlayer.self_attn.q_proj.weight"].shape) == (4 * d, 2 * h)
    assert tuple(w["midlayer.self_attn.k_proj.weight"].shape) == (2 * d, 2 * h)
    assert tuple(w["midlayer.hidden_norm.weight"].shape) == (h,)
    assert tuple(w["lm_head.weight"].shape) == (40, h)
    assert w["d2t"].dtype == torch.int64 and w["t2d"].dtype == torch.bool and int(w["t2d"].sum()) == 40
    assert not any(n.startswith("embed_tokens") for n in w)
    # d2t holds offsets: draft id i is target id i + d2t[i], and those are exactly the ids t2d marks.
    targets = torch.arange(40) + w["d2t"]
    assert torch.equal(torch.zeros(V, dtype=torch.bool).index_fill(0, targets, True), w["t2d"])
    raw = json.loads((tmp_path / "config.json").read_text())
    assert raw["architectures"] == ["LlamaForCausalLMEagle3"] and raw["draft_vocab_size"] == 40
    assert raw["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == AUX


def test_loaded_head_reproduces_a_reference_forward(target, tmp_path) -> None:
    save_head(random_head(target, head_config(), 2), tmp_path, dtype=torch.float32)
    head = load_head(tmp_path, target, V)
    # The target's embeddings are used, not owned: the head's parameters are its own weights only.
    assert head.embed_tokens is target.get_input_embeddings()
    assert not any(n.startswith("embed") for n, _ in head.named_parameters())
    drafter = RecordingDrafter(head, target.config, V)
    context = [3, 9, 14, 15, 22, 8]
    drafter.reset(context)
    drafter.observe_target_features(0, target_features(target, context[:-1]))
    drafter.propose(context, 4, ControlValues(k=4), None)
    ctx, props, logits = drafter.calls[0]
    assert len(props) == 4
    check_against_reference(target, tmp_path, ctx, props, logits)


def test_engines_alternative_names_load(target, tmp_path) -> None:
    """``layers.0.`` for ``midlayer.``, a ``model.`` prefix, no t2d: all read as the engines read them."""
    save_head(random_head(target, head_config(), 3), tmp_path, dtype=torch.float32)
    w = load_file(str(tmp_path / "model.safetensors"))
    renamed = {("model." + n.replace("midlayer.", "layers.0.")): t for n, t in w.items() if n != "t2d"}
    other = tmp_path / "renamed"
    other.mkdir()
    save_file(renamed, str(other / "model.safetensors"))
    (other / "config.json").write_text((tmp_path / "config.json").read_text())
    a, b = load_head(tmp_path, target, V), load_head(other, target, V)
    assert torch.equal(a.t2d, b.t2d)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


# ---- the loop ---------------------------------------------------------------------------------------
def _plain(target, prompt, n=30):
    return Decoder(target, V).run(prompt, options=DecodeOptions(max_new_tokens=n), plain=True).token_ids


@pytest.mark.parametrize("k", [1, 3, 5])
def test_greedy_speculation_equals_plain_and_every_call_matches_the_reference(target, tmp_path, k) -> None:
    save_head(random_head(target, head_config(), 4), tmp_path, dtype=torch.float32)
    for prompt in PROMPTS:
        drafter = RecordingDrafter(load_head(tmp_path, target, V), target.config, V)
        res = Decoder(target, V, drafter=drafter).run(prompt, Controls(ControlValues(k=k)),
                                                       DecodeOptions(max_new_tokens=30))
        assert res.token_ids == _plain(target, prompt)
        assert all(drafter.head.t2d[x] for _, props, _ in drafter.calls for x in props)
        # The head's cache after every mix of acceptances equals a from-scratch forward (spot-check calls).
        for ctx, props, logits in drafter.calls[:: max(1, len(drafter.calls) // 4)]:
            check_against_reference(target, tmp_path, ctx, props, logits)


def test_drafter_with_forced_acceptance_patterns_matches_the_reference(target, tmp_path) -> None:
    """Drive the drafter as the loop would, committing 0..k proposals, and check every call."""
    save_head(random_head(target, head_config(), 5), tmp_path, dtype=torch.float32)
    drafter = RecordingDrafter(load_head(tmp_path, target, V), target.config, V)
    ids = [4, 17, 29, 33]
    drafter.reset(ids)
    drafter.observe_target_features(0, target_features(target, ids[:-1]))
    cache_len = len(ids) - 1
    for n_acc in [0, 3, 1, 3, 2, 0, 3]:
        prop = drafter.propose(ids, 3, ControlValues(k=3), None)
        committed = [*prop.tokens[:n_acc], (ids[-1] * 7 + n_acc) % V]
        ids = ids + committed
        feats = target_features(target, ids[:-1])
        drafter.observe_target_features(cache_len, feats[cache_len:])
        drafter.rollback(ids)
        cache_len = len(ids) - 1
    for ctx, props, logits in drafter.calls:
        check_against_reference(target, tmp_path, ctx, props, logits)


def test_k_zero_iterations_keep_features_flowing(target, tmp_path) -> None:
    """Iterations that draft nothing still pass their features on: the next draft is still correct."""
    save_head(random_head(target, head_config(), 6), tmp_path, dtype=torch.float32)
    drafter = RecordingDrafter(load_head(tmp_path, target, V), target.config, V)


    class ZeroThenThree:  # adaptive k that declines to draft for the first iterations
        def __init__(self) -> None:
            self.n = 0

        def choose_k(self, k_max: int) -> int:
            self.n += 1
            return 0 if self.n <= 4 or self.n == 7 else 3

        def observe(self, record) -> None:
            pass

    dec = Decoder(target, V, drafter=drafter, k_policy=ZeroThenThree())
    dec.run([1, 2, 3], Controls(ControlValues(k=3, adaptive_k=True)), DecodeOptions(max_new_tokens=12))
    assert dec.result is not None and dec.result.token_ids == _plain(target, [1, 2, 3], 12)
    assert drafter.calls
    for ctx, props, logits in drafter.calls:
        check_against_reference(target, tmp_path, ctx, props, logits)


# ---- sampling ------------------------------------------------------------------------------------
V8 = 8
RUNS = 6000


def _exact_first_two(target, prompt, controls: ControlValues) -> np.ndarray:
    return exact_first_two(target, prompt, controls, V8)


def test_q_is_zero_outside_the_draft_vocabulary(tmp_path) -> None:
    target = tiny_model(10, vocab_size=V8, layers=LAYERS, logit_scale=1.0)
    head = random_head(target, head_config(vocab=V8, draft_vocab=5), 11, scale=0.3)
    drafter = EagleDrafter(head, target.config, V8)
    ids = [1, 2, 3]
    drafter.reset(ids)
    drafter.observe_target_features(0, target_features(target, ids[:-1]))
    prop = drafter.propose(ids, 3, ControlValues(k=3, temperature=0.8, top_p=0.95),
                           torch.Generator().manual_seed(0))
    assert prop.q_probs is not None and prop.q_probs.shape == (3, V8)
    outside = ~head.t2d
    assert float(prop.q_probs[:, outside].abs().sum()) == 0.0
    torch.testing.assert_close(prop.q_probs.sum(-1), torch.ones(3))


@pytest.mark.slow
def test_sampling_loop_keeps_target_joint_distribution() -> None:
    controls = ControlValues(k=3, temperature=0.8, top_p=0.95)
    target = tiny_model(10, vocab_size=V8, layers=LAYERS, logit_scale=1.0)
    # Five of the eight ids in the draft vocabulary: three tokens always have q = 0.
    drafter = EagleDrafter(random_head(target, head_config(vocab=V8, draft_vocab=5), 11, scale=0.3),
                           target.config, V8)
    prompt = [1, 2, 3]
    dec = Decoder(target, V8, drafter=drafter)
    counts = np.zeros((V8, V8))
    accepted = 0
    for seed in range(RUNS):
        res = dec.run(prompt, Controls(controls), DecodeOptions(max_new_tokens=2, seed=seed, record_tokens=False))
        counts[res.token_ids[0], res.token_ids[1]] += 1
        accepted += res.n_accepted
    assert accepted > RUNS // 10  # the draft really was used
    assert chi_square_pvalue(counts, _exact_first_two(target, prompt, controls)) > 1e-3


# ---- mismatches -------------------------------------------------------------------------------------
def _target_dir(tmp_path, target):
    return save_model_dir(tmp_path / "target", target, word_tokenizer(V))


def test_mismatch_names_everything_that_differs_in_one_sentence(target, tmp_path) -> None:
    cfg = head_config(vocab=100, hidden=48)
    cfg.aux_layer_ids = [1, 2, 9]
    torch.manual_seed(0)
    head = Eagle3Head(cfg)
    save_head(head, tmp_path / "head")
    with pytest.raises(ModelLoadError) as err:
        load_pair(PairSpec(target=str(_target_dir(tmp_path, target)), draft=str(tmp_path / "head"),
                           drafter="eagle"))
    msg = str(err.value)
    assert "\n" not in msg and msg.count(". ") == 0
    assert "hidden states of size 48 but the target's are 32" in msg
    assert "vocabulary has 100 ids but the target's has 64" in msg
    assert "feature layers [1, 2, 9] do not exist in the target's 4 layers" in msg


def test_head_without_weights_or_config_is_one_sentence(target, tmp_path) -> None:
    (tmp_path / "head").mkdir()
    with pytest.raises(EagleLoadError, match=r"no config\.json"):
        load_head(tmp_path / "head", target, V)
    (tmp_path / "head" / "config.json").write_text(json.dumps(head_config().to_dict()))
    with pytest.raises(EagleLoadError, match="no safetensors"):
        load_head(tmp_path / "head", target, V)


def test_eagle_drafter_loads_through_load_pair_and_runs(target, tmp_path) -> None:
    save_head(random_head(target, head_config(), 7), tmp_path / "head")
    pair = load_pair(PairSpec(target=str(_target_dir(tmp_path, target)), draft=str(tmp_path / "head"),
                              drafter="eagle", target_dtype="float32"))
    assert pair.drafter_kind == "eagle" and isinstance(pair.drafter, EagleDrafter)
    assert pair.drafter.feature_layers == tuple(AUX)
    res = Decoder(pair.target.model, pair.vocab_size, drafter=pair.drafter).run(
        [1, 2, 3], Controls(ControlValues(k=3)), DecodeOptions(max_new_tokens=20))
    assert res.token_ids == _plain(target, [1, 2, 3], 20)
    with pytest.raises(ModelLoadError, match="needs an EAGLE-3 head directory"):
        load_pair(PairSpec(target=str(_target_dir(tmp_path, target)), drafter="eagle"))


# ---- training-time test in the training script matches drafting -------------------------------------------
def _training_script():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "scripts" / "train_eagle_head.py"
    spec = importlib.util.spec_from_file_location("train_eagle_head", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_training_unroll_equals_what_the_drafter_computes(target) -> None:
    """Step j of the script's training-time test at base p gives the logits the drafter gives at its j-th
    proposal, when the drafted tokens are the sequence's own (the only case a later step matters)."""
    script = _training_script()
    head = random_head(target, head_config(), 8)
    drafter = EagleDrafter(head, target.config, V)
    prompt = [3, 9, 14, 15, 22]
    drafter.reset(prompt)
    drafter.observe_target_features(0, target_features(target, prompt[:-1]))
    steps = 3
    with torch.no_grad():
        # Let the drafter choose the continuation greedily, so its fed-back tokens are the sequence's own.
        prop = drafter.propose(prompt, steps, ControlValues(k=steps), None)
        drafter.reset(prompt)
        drafter.observe_target_features(0, target_features(target, prompt[:-1]))
        recorder = RecordingDrafter(head, target.config, V)
        recorder.reset(prompt)
        recorder.observe_target_features(0, target_features(target, prompt[:-1]))
        recorder.propose(prompt, steps, ControlValues(k=steps), None)
        seq = [*prompt, *prop.tokens]
        example = {"ids": seq, "prompt_len": len(prompt), "features": target_features(target, seq[:-1]),
                   "labels": torch.tensor(seq[len(prompt):])}
        t2d_index = torch.full((V,), -1, dtype=torch.long)
        t2d_index[head.target_ids()] = torch.arange(head.cfg.draft_vocab_size)
        batch = script.make_batch([example], t2d_index, steps)
        logits = script.unrolled_logits(head, batch, steps)
    base = len(prompt) - 2  # the head position that reads the last prompt feature
    for j in range(steps):
        full = recorder._full_row(logits[j][0, base])
        torch.testing.assert_close(full, recorder.calls[0][2][j], rtol=1e-4, atol=1e-4)


def test_specscope_verify_probes_the_eagle_drafter(target, tmp_path) -> None:
    """verify's first-token check sees the head's real q (it feeds the target's features first)."""
    from specscope.core.commands.verify import sampling_check

    save_head(random_head(target, head_config(), 9), tmp_path / "head")
    pair = load_pair(PairSpec(target=str(_target_dir(tmp_path, target)), draft=str(tmp_path / "head"),
                              drafter="eagle", target_dtype="float32"))
    check = sampling_check(pair, "p", [1, 2, 3, 4], ControlValues(temperature=0.8), 20_000, 20, 0)
    assert check.draws == 20_000 and check.pvalues["correct"] > 1e-3


def test_training_soft_labels_are_the_targets_top_tokens_inside_the_draft_vocabulary() -> None:
    """The distillation target at each labelled position is the target's recorded top tokens that the draft
    vocabulary holds, renormalised; a position without recorded soft labels gets its one-hot hard label."""
    script = _training_script()
    vocab, draft_ids = 12, torch.tensor([1, 4, 5, 7])
    t2d_index = torch.full((vocab,), -1, dtype=torch.long)
    t2d_index[draft_ids] = torch.arange(len(draft_ids))
    top = script.SOFT_TOP
    soft_ids = torch.full((3, top), 11, dtype=torch.int32)  # 11 is outside the draft vocabulary
    soft_ids[:, :3] = torch.tensor([[4, 9, 5], [7, 1, 9], [5, 4, 7]], dtype=torch.int32)
    probs = torch.full((3, top), 1e-4)
    probs[:, :3] = torch.tensor([[0.6, 0.3, 0.1], [0.5, 0.25, 0.2], [0.9, 0.05, 0.04]])
    with_soft = {"ids": [2, 3, 4, 7, 5], "prompt_len": 2, "features": torch.zeros(4, 6),
                 "labels": torch.tensor([4, 7, 5], dtype=torch.int32), "soft_ids": soft_ids,
                 "soft_logp": probs.log().to(torch.float16)}
    hard_only = {"ids": [2, 3, 4, 7, 5], "prompt_len": 2, "features": torch.zeros(4, 6),
                 "labels": torch.tensor([4, 7, 5], dtype=torch.int32)}
    batch = script.make_batch([with_soft, hard_only], t2d_index, 1)
    soft, labels = batch["soft"][0], batch["labels"][0]
    # Step 1 at base p predicts the target's token after position p + 1: positions 0, 1, 2 carry answers.
    first = soft[0, 0]
    expected = torch.zeros(4)
    expected[t2d_index[4]], expected[t2d_index[5]] = 0.6, 0.1  # 9 and 11 are not in the draft vocabulary
    torch.testing.assert_close(first, expected / expected.sum(), rtol=2e-3, atol=2e-3)
    for pos in range(3):
        assert labels[0, pos] == t2d_index[with_soft["labels"][pos]]
        assert torch.isclose(soft[0, pos].sum(), torch.tensor(1.0))
        assert soft[0, pos].argmax() == labels[0, pos]
        assert torch.equal(soft[1, pos], torch.nn.functional.one_hot(labels[1, pos], 4).float())
