"""Loading pairs from directories and a local HF cache, offline; every refusal is one clear sentence."""

from __future__ import annotations

import argparse
import gc
import json
import shutil
from pathlib import Path

import pytest
import torch
from transformers import LlamaForCausalLM

from specscope.core.commands.pair_arguments import add_pair_arguments, spec_from_args
from specscope.core.engine import cpu_linear, placement
from specscope.core.engine import models as loading
from specscope.core.engine.drafters.early_exit import EarlyExitDrafter
from specscope.core.engine.drafters.lookup import PromptLookupDrafter
from specscope.core.engine.drafters.model import ModelDrafter
from specscope.core.engine.model_files import IncompatibleTokenizers, check_tokenizers
from specscope.core.engine.models import load_pair
from specscope.core.engine.pair_spec import ModelLoadError, PairSpec
from specscope.core.engine.placement import estimate_memory
from specscope.core.engine.speculative import DecodeOptions, Decoder
from tests.models import perturbed, save_model_dir, tiny_model, word_tokenizer

V = 64




def text_of(ids: list[int]) -> str:
    return " ".join(f"w{i}" for i in ids)


@pytest.fixture(scope="module")
def pair_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("pairs")
    target = tiny_model(1, vocab_size=V, logit_scale=3.0)
    return {
        "target": save_model_dir(root / "target", target, word_tokenizer()),
        "draft": save_model_dir(root / "draft", perturbed(target, 0.05), word_tokenizer()),
        "swapped": save_model_dir(root / "swapped", perturbed(target, 0.05), word_tokenizer(swap=(5, 9))),
    }


def one_sentence(exc: pytest.ExceptionInfo) -> str:
    """Our sentence on the first line; a library's own detail, when there is one, on a second line only."""
    message = str(exc.value)
    lines = message.split("\n")
    assert "Traceback" not in message and len(lines) <= 2
    assert len(lines) == 1 or lines[1].startswith("detail")
    return message


# ---- loading ----------------------------------------------------------------------------------------
def test_loads_a_pair_from_directories(pair_dirs) -> None:
    seen: list[tuple[str, float]] = []
    pair = load_pair(PairSpec(str(pair_dirs["target"]), str(pair_dirs["draft"])),
                     progress=lambda m, f: seen.append((m, f)))
    assert isinstance(pair.drafter, ModelDrafter) and pair.draft is not None
    assert pair.vocab_size == V
    assert pair.target.n_params == sum(p.numel() for p in pair.target.model.parameters())
    assert pair.target.dtype == torch.float32 and pair.target.device == torch.device("cpu")
    assert pair.eos_token_ids == frozenset({2})
    assert seen[-1] == ("Ready", 1.0) and [f for _, f in seen] == sorted(f for _, f in seen)
    ids = pair.encode_prompt("w5 w6 w7", chat=False)
    assert ids == [5, 6, 7] and pair.token_text(9) == "w9"
    dec = Decoder(pair.target.model, pair.vocab_size, drafter=pair.drafter)
    spec = dec.run(ids, options=DecodeOptions(max_new_tokens=12)).token_ids
    assert spec == dec.run(ids, options=DecodeOptions(max_new_tokens=12), plain=True).token_ids


@pytest.mark.skipif(not cpu_linear.available(), reason="this PyTorch has no oneDNN")
@pytest.mark.parametrize("prepack", [True, False])
def test_cpu_models_are_prepacked_for_multi_token_passes_unless_opted_out(pair_dirs, prepack) -> None:
    seen: list[str] = []
    pair = load_pair(PairSpec(str(pair_dirs["target"]), str(pair_dirs["draft"]), prepack_cpu=prepack),
                     progress=lambda m, f: seen.append(m))
    assert pair.draft is not None
    for loaded in (pair.target, pair.draft):
        kinds = {type(m) for m in loaded.model.modules() if isinstance(m, torch.nn.Linear)}
        assert kinds == ({cpu_linear.PrepackedLinear} if prepack else {torch.nn.Linear})
    assert any("multi-token passes" in m for m in seen) == prepack
    assert seen[-1] == "Ready"


def test_lookup_and_early_exit_need_no_draft(pair_dirs) -> None:
    lookup = load_pair(PairSpec(str(pair_dirs["target"]), drafter="lookup", lookup_max_ngram=4,
                                lookup_num_tokens=6))
    assert isinstance(lookup.drafter, PromptLookupDrafter) and lookup.draft is None
    assert (lookup.drafter.max_ngram, lookup.drafter.num_tokens) == (4, 6)
    early = load_pair(PairSpec(str(pair_dirs["target"]), drafter="early-exit", early_exit_layers=1))
    assert isinstance(early.drafter, EarlyExitDrafter) and early.drafter.n_layers == 1


def test_dtype_is_applied(pair_dirs) -> None:
    pair = load_pair(PairSpec(str(pair_dirs["target"]), drafter="lookup", target_dtype="bfloat16"))
    assert pair.target.dtype == torch.bfloat16
    assert next(pair.target.model.parameters()).dtype == torch.bfloat16


def _populate_hf_cache(cache: Path, repo: str, source: Path, revision: str = "0123abcd") -> None:
    folder = cache / ("models--" + repo.replace("/", "--"))
    snapshot = folder / "snapshots" / revision
    shutil.copytree(source, snapshot)
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text(revision)


@pytest.mark.parametrize("variable", ["HF_HUB_CACHE", "HF_HOME"])
def test_loads_hub_ids_from_a_local_cache(pair_dirs, tmp_path, monkeypatch, variable) -> None:
    cache = tmp_path / "hub" if variable == "HF_HUB_CACHE" else tmp_path / "home" / "hub"
    _populate_hf_cache(cache, "acme/tiny-target", pair_dirs["target"])
    _populate_hf_cache(cache, "acme/tiny-draft", pair_dirs["draft"])
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HUGGINGFACE_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv(variable, str(cache if variable == "HF_HUB_CACHE" else cache.parent))
    pair = load_pair(PairSpec("acme/tiny-target", "acme/tiny-draft"))
    assert pair.target.source.endswith("0123abcd") and pair.draft is not None
    assert Path(pair.draft.source).parent.parent.name == "models--acme--tiny-draft"
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec("acme/not-downloaded", drafter="lookup"))
    assert "acme/not-downloaded" in one_sentence(exc) and "Hugging Face cache" in str(exc.value)


# ---- tokenizers and vocabulary widths ---------------------------------------------------------------
def test_mismatched_tokenizers_are_refused_before_loading_weights(pair_dirs, monkeypatch) -> None:
    def no_weights(*args, **kwargs):
        raise AssertionError("weights were loaded before the tokenizer check")

    monkeypatch.setattr(loading, "_load_weights", no_weights)
    with pytest.raises(IncompatibleTokenizers) as exc:
        load_pair(PairSpec(str(pair_dirs["target"]), str(pair_dirs["swapped"])))
    expected = "tokenizers differ: id 5 is 'w5' in the target but 'w9' in the draft (and 1 more)"
    assert one_sentence(exc) == expected


def test_added_special_tokens_count_in_the_check() -> None:
    target, draft = word_tokenizer(), word_tokenizer()
    target.add_special_tokens({"additional_special_tokens": ["<|eot|>"]})
    missing = r"id 64 is '<\|eot\|>' in the target but missing from the draft"
    with pytest.raises(IncompatibleTokenizers, match=missing):
        check_tokenizers(target, draft)
    draft.add_special_tokens({"additional_special_tokens": ["<|eot|>"]})
    check_tokenizers(target, draft)


def test_padded_vocabulary_rows_are_never_chosen(tmp_path) -> None:
    target = tiny_model(2, vocab_size=72, logit_scale=3.0)
    draft = tiny_model(3, vocab_size=80, logit_scale=3.0)
    with torch.no_grad():  # make the padded rows win wherever they exist, so a missing cut shows
        target.lm_head.weight[V:] = 40.0 * target.lm_head.weight[:8]
        draft.lm_head.weight[V:] = 40.0 * draft.lm_head.weight[:16]
    tdir = save_model_dir(tmp_path / "t", target, word_tokenizer())
    ddir = save_model_dir(tmp_path / "d", draft, word_tokenizer())
    pair = load_pair(PairSpec(str(tdir), str(ddir)))
    assert pair.vocab_size == V
    prompt = [5, 6, 7, 8]
    with torch.no_grad():
        uncut = pair.target.model(torch.tensor([prompt])).logits[0, -1]
    assert int(uncut.argmax()) >= V  # without the cut a padded row would be chosen
    dec = Decoder(pair.target.model, pair.vocab_size, drafter=pair.drafter)
    for k in (1, 3):
        from specscope.core.controls import Controls
        from specscope.core.records import ControlValues

        greedy = dec.run(prompt, Controls(ControlValues(k=k)), DecodeOptions(max_new_tokens=16)).token_ids
        sampled = dec.run(prompt, Controls(ControlValues(k=k, temperature=1.0)),
                          DecodeOptions(max_new_tokens=16, seed=k)).token_ids
        assert max(greedy + sampled) < V
        assert greedy == dec.run(prompt, options=DecodeOptions(max_new_tokens=16), plain=True).token_ids


def test_tokenizer_wider_than_the_logits_is_refused(tmp_path) -> None:
    narrow = save_model_dir(tmp_path / "narrow", tiny_model(4, vocab_size=48), word_tokenizer())
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec(str(narrow), drafter="lookup"))
    assert one_sentence(exc) == ("the tokenizer has 64 token ids but the target's logits have only 48 "
                                 "columns: they do not belong together")


# ---- failures ---------------------------------------------------------------------------------------
def test_missing_path(tmp_path) -> None:
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec(str(tmp_path / "nowhere"), drafter="lookup"))
    assert one_sentence(exc) == f"no model directory at {tmp_path / 'nowhere'}"


def test_no_config(tmp_path) -> None:
    only_tokenizer = save_model_dir(tmp_path / "tok", None, word_tokenizer())
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec(str(only_tokenizer), drafter="lookup"))
    assert "no config.json" in one_sentence(exc)


def test_no_tokenizer(tmp_path) -> None:
    bare = save_model_dir(tmp_path / "bare", tiny_model(5))
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec(str(bare), drafter="lookup"))
    assert "no tokenizer for the target" in one_sentence(exc)


@pytest.mark.parametrize(("model_type", "expected"), [
    ("not-a-model", "transformers does not know the architecture named in"),
    ("vit", "unsupported architecture 'vit'"),
])
def test_unsupported_architecture(tmp_path, model_type, expected) -> None:
    folder = save_model_dir(tmp_path / model_type, None, word_tokenizer())
    (folder / "config.json").write_text(json.dumps({"model_type": model_type, "hidden_size": 8}))
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec(str(folder), drafter="lookup"))
    assert expected in one_sentence(exc)


def test_pickle_weights_need_an_opt_in(tmp_path) -> None:
    model = tiny_model(6)
    folder = save_model_dir(tmp_path / "pickled", None, word_tokenizer())
    model.config.save_pretrained(folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec(str(folder), drafter="lookup"))
    assert "--allow-pickle" in one_sentence(exc)
    pair = load_pair(PairSpec(str(folder), drafter="lookup", allow_pickle=True))
    assert torch.equal(pair.target.model.lm_head.weight, model.lm_head.weight)


def _live_models() -> int:
    gc.collect()
    return sum(type(o) is LlamaForCausalLM for o in gc.get_objects())


def test_a_failed_draft_leaves_nothing_loaded(pair_dirs, tmp_path) -> None:
    broken = save_model_dir(tmp_path / "broken", None, word_tokenizer())
    shutil.copy(pair_dirs["draft"] / "config.json", broken / "config.json")
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    before = _live_models()
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec(str(pair_dirs["target"]), str(broken)))
    assert "could not load the draft" in one_sentence(exc)
    assert _live_models() == before


def test_bad_device_and_dtype(pair_dirs) -> None:
    with pytest.raises(ModelLoadError, match="unknown dtype 'float8'"):
        load_pair(PairSpec(str(pair_dirs["target"]), drafter="lookup", target_dtype="float8"))
    if not torch.cuda.is_available():
        with pytest.raises(ModelLoadError, match="CUDA is not available"):
            load_pair(PairSpec(str(pair_dirs["target"]), drafter="lookup", target_device="cuda:0"))
    with pytest.raises(ModelLoadError, match="needs a draft model"):
        load_pair(PairSpec(str(pair_dirs["target"])))


# ---- memory estimate --------------------------------------------------------------------------------
@pytest.mark.parametrize("tied", [False, True])
def test_memory_estimate_counts_parameters_from_the_config(tied) -> None:
    model = tiny_model(7, layers=3, hidden=48)
    model.config.tie_word_embeddings = tied
    est = estimate_memory(model.config, torch.bfloat16)
    untied = sum(p.numel() for p in model.parameters())
    assert est.params == untied - (model.lm_head.weight.numel() if tied else 0)
    assert est.weight_bytes == 2 * est.params
    cfg = model.config
    assert est.kv_bytes_per_token == 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * (48 // 4) * 2


def test_warns_when_the_pair_will_not_fit(pair_dirs, monkeypatch) -> None:
    monkeypatch.setattr(placement, "available_bytes", lambda device: 1000)
    seen: list[str] = []
    pair = load_pair(PairSpec(str(pair_dirs["target"]), str(pair_dirs["draft"])),
                     progress=lambda m, f: seen.append(m))
    assert len(pair.target.warnings) == 1 and "only 1000 B is free" in pair.target.warnings[0]
    assert any(m.startswith("Warning: the pair needs about") for m in seen)


# ---- the demo and the command line ------------------------------------------------------------------
def test_demo_is_delegated(monkeypatch) -> None:
    from specscope.core.engine import demo

    calls: list[dict] = []
    monkeypatch.setattr(demo, "load_demo_pair", lambda **kw: calls.append(kw) or "pair")
    # (no packing: the stand-in pair is a string)
    assert load_pair(PairSpec("demo", drafter="early-exit", early_exit_layers=3, prepack_cpu=False)) == "pair"
    assert calls[0]["drafter"] == "early-exit" and calls[0]["early_exit_layers"] == 3
    assert calls[0]["dtype"] == "float32" and calls[0]["device"] == "cpu"

    def unavailable(**kw):
        raise RuntimeError("the demo model is not installed: run `pip install x`")

    monkeypatch.setattr(demo, "load_demo_pair", unavailable)
    with pytest.raises(ModelLoadError, match="the demo could not be loaded: the demo model is not installed"):
        load_pair(PairSpec("demo", drafter="lookup"))


def test_arguments_build_a_spec() -> None:
    parser = argparse.ArgumentParser()
    add_pair_arguments(parser)
    spec = spec_from_args(parser.parse_args(["--target", "org/t", "--draft", "org/d", "--draft-device", "cpu",
                                             "--dtype", "bf16", "--online"]))
    got = (spec.target, spec.draft, spec.target_dtype, spec.local_files_only)
    assert got == ("org/t", "org/d", "bf16", False)
    assert spec_from_args(parser.parse_args(["--demo", "--drafter", "lookup"])).target == "demo"
    with pytest.raises(ModelLoadError, match="needs --draft"):
        spec_from_args(parser.parse_args(["--target", "x"]))


def test_a_vision_language_checkpoint_is_named_before_loading(tmp_path) -> None:
    folder = save_model_dir(tmp_path / "llava", None, word_tokenizer())
    (folder / "config.json").write_text(json.dumps({"model_type": "llava",
                                                    "architectures": ["LlavaForConditionalGeneration"]}))
    (folder / "model.safetensors").write_bytes(b"never read")
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec(str(folder), drafter="lookup"))
    message = one_sentence(exc)
    assert "vision-language model (LlavaForConditionalGeneration)" in message and "(llama)" in message


def test_a_cache_that_cannot_roll_back_is_refused_before_loading(tmp_path) -> None:
    from transformers import DeepseekV4Config

    folder = save_model_dir(tmp_path / "v4", None, word_tokenizer())
    DeepseekV4Config(vocab_size=V).save_pretrained(folder)
    (folder / "model.safetensors").write_bytes(b"not a safetensors file: loading would fail another way")
    before = _live_models()
    with pytest.raises(ModelLoadError) as exc:
        load_pair(PairSpec(str(folder), drafter="lookup"))
    message = one_sentence(exc)
    assert "cannot be used for speculative decoding" in message and "DeepseekV4" in message
    assert _live_models() == before
