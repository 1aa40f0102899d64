"""A model directory's config.json judged before transformers reads it: one sentence naming file and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specscope.core.model_config import config_problem

RESOURCES = Path(__file__).parents[1] / "resources"
SOUND = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 32,
         "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": None, "rms_norm_eps": 1e-6,
         "rope_theta": 10000.0, "max_position_embeddings": 512.0, "torch_dtype": "float32"}


def _dir_with(tmp_path: Path, text: str) -> Path:
    (tmp_path / "config.json").write_text(text, encoding="utf-8")
    return tmp_path


@pytest.mark.parametrize(("change", "said"), [
    ({"hidden_size": "oops"}, '"hidden_size" is "oops", not a whole number'),
    ({"num_hidden_layers": 2.5}, '"num_hidden_layers" is 2.5, not a whole number'),
    ({"vocab_size": True}, '"vocab_size" is true, not a whole number'),
    ({"num_attention_heads": 0}, '"num_attention_heads" is 0, not a whole number of at least 1'),
    ({"intermediate_size": [64]}, '"intermediate_size" is [64], not a whole number'),
    ({"rms_norm_eps": "1e-6"}, '"rms_norm_eps" is "1e-6", not a number'),
    ({"model_type": 7}, '"model_type" is 7, not a name'),
    ({"architectures": "LlamaForCausalLM"}, '"architectures" is "LlamaForCausalLM", not a list of names'),
    ({"text_config": {"hidden_size": -1}}, '"text_config.hidden_size" is -1, not a whole number of at least 1'),
    ({"text_config": "llama"}, '"text_config" is "llama", not an object'),
])
def test_a_bad_field_is_named_with_its_value(tmp_path, change, said) -> None:
    directory = _dir_with(tmp_path, json.dumps({**SOUND, **change}))
    assert config_problem(directory) == f"{directory / 'config.json'}: {said}"


@pytest.mark.parametrize(("text", "said"), [
    ('{"hidden_size": 32,', "not JSON (line 1, column 20: Expecting property name enclosed in double quotes)"),
    ("[1, 2]", "not a JSON object"),
    ("[" * 100_000 + "]" * 100_000, "nested too deeply to be a model config"),
])
def test_a_file_that_is_no_config_says_so(tmp_path, text, said) -> None:
    directory = _dir_with(tmp_path, text)
    assert config_problem(directory) == f"{directory / 'config.json'}: {said}"


def test_missing_unreadable_and_sound_configs(tmp_path) -> None:
    assert config_problem(tmp_path) == f"no config.json in {tmp_path}: not a transformers model directory"
    (tmp_path / "config.json").write_bytes(b'{"model_type": "\xff"}')
    assert config_problem(tmp_path) == f"{tmp_path / 'config.json'}: not UTF-8 text"
    assert config_problem(_dir_with(tmp_path, json.dumps(SOUND))) is None
    for shipped in ("demo_draft", "demo_eagle"):  # real configs (the EAGLE head's has fields of its own)
        assert config_problem(RESOURCES / shipped) is None, shipped
