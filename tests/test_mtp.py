"""--drafter mtp: the target's own multi-token-prediction layers draft, on tiny random DeepSeek-V3 and GLM-4.5
(GLM-4-MoE) checkpoints written at test time with one and two MTP layers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers.cache_utils import MtpCache
from transformers.modeling_layers import MtpModel

from specscope.core.controls import Controls
from specscope.core.engine.drafters.mtp import MtpDrafter, load_mtp_layers
from specscope.core.engine.models import load_pair
from specscope.core.engine.pair_spec import ModelLoadError, PairSpec
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.records import ControlValues
from tests.cli_helpers import cli, one_sentence
from tests.models import save_model_dir, tiny_model, word_tokenizer
from tests.mtp_models import V, load_target, mtp_target_dir
from tests.stats import chi_square_pvalue, exact_first_two

CASES = [("deepseek_v3", 1), ("deepseek_v3", 2), ("glm4_moe", 2)]
PROMPT = [5, 9, 13, 7]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[tuple[str, int], Path]:
    root = tmp_path_factory.mktemp("mtp")
    return {(family, n): mtp_target_dir(root / f"{family}-{n}", family, n, seed=1) for family, n in CASES}


@pytest.fixture(scope="module")
def loaded(checkpoints):
    """(target, its MTP layers) per case, loaded once."""
    out = {}
    for case, path in checkpoints.items():
        target = load_target(path)
        out[case] = (target, load_mtp_layers(target))
    return out


class RecordingDrafter(MtpDrafter):
    """Records each call's context and proposals."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls: list[tuple[list[int], list[int]]] = []

    def propose(self, context_ids, k, controls, generator):
        prop = super().propose(context_ids, k, controls, generator)
        self.calls.append((list(context_ids), list(prop.tokens)))
        return prop


def reference_drafts(target, layers, context: list[int]) -> list[int]:
    """transformers' own MTP drafting from scratch on ``context``: the target's last hidden states over
    context[:-1], then ``MtpModel.forward`` with a fresh cache (one greedy token per MTP layer)."""
    n = len(context)
    with torch.no_grad():
        hidden = target(torch.tensor([context[:-1]]), output_hidden_states=True).hidden_states[-1]
        ids, _, _ = layers(input_ids=torch.tensor([context[1:]]), last_hidden_states=hidden, attention_mask=None,
                           position_ids=torch.arange(1, n).unsqueeze(0), mtp_cache=MtpCache(config=layers.config))
    return [int(x) for x in ids[0]]


def _plain(target, prompt: list[int], n: int) -> list[int]:
    out = target.generate(torch.tensor([prompt]), max_new_tokens=n, do_sample=False)
    return [int(x) for x in out[0, len(prompt):]]


# ---- exactness and the caches ------------------------------------------------------------------------
# The fast tier runs the two-layer DeepSeek-V3 (k below, at and above the layer count); the full tier all cases.
@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c == ("deepseek_v3", 2) else pytest.mark.slow)
                                  for c in CASES], ids=[f"{f}-{n}" for f, n in CASES])
def test_greedy_equals_generate_and_every_draft_equals_transformers_from_scratch(loaded, case) -> None:
    target, layers = loaded[case]
    n_mtp = case[1]
    expected = _plain(target, PROMPT, 24)
    for k in sorted({1, n_mtp, n_mtp + 2}):
        drafter = RecordingDrafter(layers, V)
        res = Decoder(target, V, drafter=drafter).run(PROMPT, Controls(ControlValues(k=k)),
                                                      DecodeOptions(max_new_tokens=24))
        assert res.token_ids == expected, k
        # Each call's first min(k, layers) drafts are what transformers drafts from scratch on that context,
        # whatever the acceptances before it left in the caches.
        for context, proposals in drafter.calls:
            depth = min(len(proposals), n_mtp)
            assert proposals[:depth] == reference_drafts(target, layers, context)[:depth], (k, len(context))
    assert any(it.n_accepted for it in res.iterations)  # the layers were used: some proposals were accepted


def test_forced_acceptance_patterns_and_changing_k_keep_the_caches_right(loaded) -> None:
    """Drive the drafter as the loop does with every acceptance count, k below and above the layer count
    (depth 1 lags while k = 1, then catches up), and check each call against transformers from scratch."""
    target, layers = loaded[("glm4_moe", 2)]
    drafter = RecordingDrafter(layers, V)
    ids = list(PROMPT)
    drafter.reset(ids)
    with torch.no_grad():
        drafter.observe_target_features(0, target(torch.tensor([ids[:-1]]),
                                                  output_hidden_states=True).hidden_states[-1][0])
    fed = len(ids) - 1
    for k, n_acc in [(2, 0), (2, 2), (2, 1), (1, 1), (1, 0), (1, 1), (2, 2), (4, 3), (3, 1), (2, 0), (4, 4)]:
        prop = drafter.propose(ids, k, ControlValues(k=k), None)
        assert len(prop.tokens) == k
        ids = [*ids, *prop.tokens[:n_acc], (ids[-1] * 7 + n_acc) % V]
        with torch.no_grad():
            hidden = target(torch.tensor([ids[:-1]]), output_hidden_states=True).hidden_states[-1][0]
        drafter.observe_target_features(fed, hidden[fed:])
        drafter.rollback(ids)
        fed = len(ids) - 1
    for context, proposals in drafter.calls:
        depth = min(len(proposals), 2)
        assert proposals[:depth] == reference_drafts(target, layers, context)[:depth], len(context)


@pytest.mark.parametrize("case", [("deepseek_v3", 1), pytest.param(("glm4_moe", 2), marks=pytest.mark.slow)],
                         ids=["deepseek_v3-1", "glm4_moe-2"])
def test_drafts_and_acceptance_equal_transformers_generate_use_mtp(loaded, monkeypatch, case) -> None:
    """transformers' ``generate(use_mtp=True)`` drafts num_mtp_layers tokens after its first plain step; from
    the same committed sequence specscope (k = num_mtp_layers) drafts the same tokens every iteration, so
    its acceptance is transformers' too."""
    target, layers = loaded[case]
    n_mtp = case[1]
    theirs: list[list[int]] = []
    forward = MtpModel.forward

    def spy(self, *a, **kw):
        out = forward(self, *a, **kw)
        theirs.append([int(x) for x in out[0][0]])
        return out

    monkeypatch.setattr(MtpModel, "forward", spy)
    n_layers = target.config.num_hidden_layers
    monkeypatch.setattr(target, "_keys_to_ignore_on_load_unexpected",
                        [rf"model\.layers\.{n_layers + i}\." for i in range(n_mtp)], raising=False)
    out = target.generate(torch.tensor([PROMPT]), max_new_tokens=20, do_sample=False, use_mtp=True)
    generated = [int(x) for x in out[0, len(PROMPT):]]
    drafter = RecordingDrafter(layers, V)
    res = Decoder(target, V, drafter=drafter).run(PROMPT + generated[:1], Controls(ControlValues(k=n_mtp)),
                                                  DecodeOptions(max_new_tokens=19))
    assert res.token_ids == generated[1:]
    ours = [proposals for _, proposals in drafter.calls if len(proposals) == n_mtp]
    assert len(ours) >= 5 and ours == theirs[: len(ours)]
    assert sum(it.n_accepted for it in res.iterations) > 0


# ---- sampling ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_sampling_keeps_the_targets_joint_distribution(tmp_path) -> None:
    vocab, runs = 8, 3000
    controls = ControlValues(k=3, temperature=0.9)
    target = load_target(mtp_target_dir(tmp_path / "t", "deepseek_v3", 2, seed=3, vocab=vocab, logit_scale=1.0))
    dec = Decoder(target, vocab, drafter=MtpDrafter(load_mtp_layers(target), vocab))
    prompt = [3, 5, 4]
    counts = np.zeros((vocab, vocab))
    accepted = 0
    for seed in range(runs):
        res = dec.run(prompt, Controls(controls), DecodeOptions(max_new_tokens=2, seed=seed, record_tokens=False))
        counts[res.token_ids[0], res.token_ids[1]] += 1
        accepted += res.n_accepted
    assert accepted > runs // 10  # the MTP layers' proposals really were used
    assert chi_square_pvalue(counts, exact_first_two(target, prompt, controls, vocab)) > 1e-3


# ---- loading and the CLI -------------------------------------------------------------------------------
def test_load_pair_builds_the_mtp_drafter_and_refuses_what_has_no_mtp_layers(checkpoints, tmp_path) -> None:
    pair = load_pair(PairSpec(target=str(checkpoints[("deepseek_v3", 2)]), drafter="mtp", prepack_cpu=False))
    assert pair.drafter_kind == "mtp" and isinstance(pair.drafter, MtpDrafter) and pair.drafter.n_layers == 2
    assert "2 MTP layers" in pair.description
    llama = save_model_dir(tmp_path / "llama", tiny_model(1, vocab_size=V), word_tokenizer(V))
    with pytest.raises(ModelLoadError, match="has no multi-token-prediction layers"):
        load_pair(PairSpec(target=str(llama), drafter="mtp"))
    with pytest.raises(ModelLoadError, match="has no multi-token-prediction layers"):
        load_pair(PairSpec(target=str(mtp_target_dir(tmp_path / "none", "deepseek_v3", 0)), drafter="mtp"))
    with pytest.raises(ModelLoadError, match="declares 1 multi-token-prediction layer but its checkpoint holds "
                                             "none of their weights"):
        load_pair(PairSpec(target=str(mtp_target_dir(tmp_path / "no-weights", "glm4_moe", 1, mtp_weights=False)),
                           drafter="mtp", prepack_cpu=False))
    with pytest.raises(ModelLoadError, match=r"demo .* has no multi-token-prediction layers"):
        load_pair(PairSpec(target="demo", drafter="mtp"))


def test_cli_refuses_a_target_without_mtp_layers_in_one_sentence(tmp_path, capsys, monkeypatch) -> None:
    import transformers

    llama = save_model_dir(tmp_path / "llama", tiny_model(1, vocab_size=V), word_tokenizer(V))

    def no_weights(*a, **kw):
        raise AssertionError("weights were loaded before the refusal")

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", no_weights)
    rc, _, err = cli(capsys, "run", "--target", str(llama), "--drafter", "mtp", "--prompt", "w5 w6",
                     "--no-chat-template")
    assert rc == 2
    assert "has no multi-token-prediction layers" in one_sentence(err)


def test_run_json_shows_per_position_acceptance_past_the_mtp_layers(checkpoints, capsys) -> None:
    rc, out, err = cli(capsys, "run", "--target", str(checkpoints[("deepseek_v3", 1)]), "--drafter", "mtp",
                       "--k", "3", "--prompt", "w5 w9 w13 w7", "--no-chat-template", "--max-new-tokens", "20",
                       "--json")
    assert rc == 0, err
    summary = json.loads(out)
    per_position = summary["metrics"]["per_position_acceptance"]
    # position 1 is the MTP layer's own proposal; 2 and 3 are the layer drafting on from its own output
    assert len(per_position) == 3 and per_position[0] is not None
