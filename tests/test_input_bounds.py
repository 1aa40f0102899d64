"""Bad input, second pass (issue 31, items 3, 4, 6, 7, 8, 10, 11; issue 29, item 18): every size bounded, every
input file a regular file of bounded size, configs checked field by field, Ctrl-C while loading, the demo's
own draft never silently swapped in, and verify never claiming a check that did not run."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from specscope.core.commands import run as run_module
from specscope.core.engine.drafters.eagle_files import load_head, read_head_config
from specscope.core.engine.drafters.eagle_head import EagleLoadError
from specscope.core.user_files import MAX_PROMPT_FILE_BYTES
from tests.cli_helpers import char_device, cli, fifo, one_sentence, sessions
from tests.faults import full_disk, leftovers
from tests.models import save_model_dir, tiny_model, word_tokenizer


@pytest.fixture(scope="module")
def target(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("bounds")
    return save_model_dir(root / "target", tiny_model(5, vocab_size=64, logit_scale=3.0), word_tokenizer())


def run_args(target: Path, *extra: str) -> list[str]:
    return ["run", "--target", str(target), "--drafter", "lookup", "--no-chat-template", "--quiet",
            "--max-new-tokens", "8", *extra]


# --- item 4: sizes and input files ------------------------------------------------------------------------

BOUNDED_FLAGS = [
    (["--lookup-max-ngram", "99999999999999999999"], "argument --lookup-max-ngram: must be from 1 to 64"),
    (["--lookup-max-ngram", "0"], "argument --lookup-max-ngram: must be from 1 to 64, got 0"),
    (["--lookup-num-tokens", "99999999999"], "argument --lookup-num-tokens: must be from 1 to 1,024"),
    (["--early-exit-layers", "1e9"], "argument --early-exit-layers: expected a whole number, got '1e9'"),
    (["--max-tokens", "99999999999999999999"], "argument --max-tokens: must be from 1 to 131,072"),
    (["--max-memory", "cpu=infGB", "--device-map", "auto"],
     "bad target max memory 'cpu=infGB': 'infGB' is not a size like 250MB or 10GiB"),
    (["--max-memory", "cpu=99999999999GiB", "--device-map", "auto"],
     "bad target max memory 'cpu=99999999999GiB': '99999999999GiB' is more than the 1,024 PiB any machine has"),
]


@pytest.mark.parametrize(("argv", "sentence"), BOUNDED_FLAGS)
def test_run_sizes_are_bounded_before_loading(target, capsys, argv, sentence) -> None:
    before = sessions()
    rc, out, err = cli(capsys, *run_args(target, "--prompt", "w5", *argv))
    assert rc == 2 and out == ""
    assert sentence in one_sentence(err)
    assert sessions() == before


@pytest.mark.parametrize(("argv", "sentence"), [
    (["--threads", "99999999999999999999"], "argument --threads: thread counts must be from 0 (torch's default) "
                                            "to 1,024"),
    (["--rounds", "1000000"], "argument --rounds: must be from 1 to 1,000"),
    (["--lookup-tokens", "99999999"], "argument --lookup-tokens: must be from 1 to 1,024"),
    (["--max-tokens", "0"], "argument --max-tokens: must be from 1 to 131,072, got 0"),
])
def test_bench_sizes_are_bounded(target, capsys, argv, sentence) -> None:
    rc, _, err = cli(capsys, "bench", "--target", str(target), *argv)
    assert rc == 2 and sentence in one_sentence(err)


@pytest.mark.parametrize(("argv", "sentence"), [
    (["--draws", "99999999999"], "argument --draws: must be from 0 to 10,000,000"),
    (["--top-n", "99999999999"], "argument --top-n: must be from 1 to 100,000"),
    (["--offsets", "0,99999999999"], "--offsets takes up to 64 whole numbers from 0 to 131,072"),
])
def test_verify_sizes_are_bounded(target, capsys, argv, sentence) -> None:
    rc, _, err = cli(capsys, "verify", "--target", str(target), "--drafter", "lookup", *argv)
    assert rc == 2 and sentence in one_sentence(err)


def test_prompt_file_that_is_dev_zero_is_refused_unread(target, capsys) -> None:
    rc, _, err = cli(capsys, *run_args(target, "--prompt-file", "/dev/zero"))
    assert rc == 2
    assert one_sentence(err) == "specscope: error: prompt file /dev/zero is a character device, not a regular file"


def test_prompt_file_linked_to_dev_zero_is_refused(target, capsys, tmp_path) -> None:
    link = tmp_path / "prompt.txt"
    link.symlink_to("/dev/zero")
    rc, _, err = cli(capsys, *run_args(target, "--prompt-file", str(link)))
    assert rc == 2 and f"prompt file {link} is a character device, not a regular file" in one_sentence(err)


def test_prompt_file_that_is_a_named_pipe_does_not_hang(target, capsys, tmp_path) -> None:
    pipe = fifo(tmp_path / "prompt.txt")  # opening it for reading would wait for a writer forever
    rc, _, err = cli(capsys, *run_args(target, "--prompt-file", str(pipe)))
    assert rc == 2 and f"prompt file {pipe} is a named pipe, not a regular file" in one_sentence(err)


def test_prompt_file_over_the_size_limit_is_refused(target, capsys, tmp_path) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"w5 " * (MAX_PROMPT_FILE_BYTES // 3 + 1))
    rc, _, err = cli(capsys, *run_args(target, "--prompt-file", str(big)))
    assert rc == 2 and f"prompt file {big} is larger than the 4 MiB a prompt file may be" in one_sentence(err)


def test_prompt_file_that_is_a_folder_is_refused(target, capsys, tmp_path) -> None:
    rc, _, err = cli(capsys, *run_args(target, "--prompt-file", str(tmp_path)))
    assert rc == 2 and f"prompt file {tmp_path} is a folder, not a regular file" in one_sentence(err)


def test_empty_prompt_file_path_is_refused(target, capsys) -> None:
    rc, _, err = cli(capsys, *run_args(target, "--prompt-file", ""))
    assert rc == 2 and "argument --prompt-file: needs a file path, got an empty one" in one_sentence(err)


def deep_json(tmp_path: Path) -> Path:
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    return path


@pytest.mark.parametrize("command", ["bench", "verify"])
def test_deeply_nested_prompts_file_is_one_sentence(target, capsys, tmp_path, command) -> None:
    deep = deep_json(tmp_path)
    rc, _, err = cli(capsys, command, "--target", str(target), "--drafter", "lookup", "--prompts", str(deep))
    assert rc == 2
    assert f"prompt file {deep} nests its JSON too deeply to be read" in one_sentence(err)


@pytest.mark.parametrize("command", ["bench", "verify"])
def test_prompts_file_that_is_a_named_pipe_does_not_hang(target, capsys, tmp_path, command) -> None:
    pipe = fifo(tmp_path / "prompts.json")
    rc, _, err = cli(capsys, command, "--target", str(target), "--drafter", "lookup", "--prompts", str(pipe))
    assert rc == 2 and f"prompt file {pipe} is a named pipe, not a regular file" in one_sentence(err)


def test_bench_prompts_over_the_size_limit_are_refused_before_loading(target, capsys, tmp_path) -> None:
    big = tmp_path / "prompts.json"
    one = {"id": "x", "title": "x", "text": "w5 " * 1000}
    big.write_text(json.dumps({"kind": "prose", "prompts": [one] * (MAX_PROMPT_FILE_BYTES // 3000 + 1)}))
    rc, _, err = cli(capsys, "bench", "--target", str(target), "--drafter", "lookup", "--prompts", str(big))
    assert rc == 2 and "is larger than the 4 MiB a prompt file may be" in one_sentence(err)


@pytest.mark.parametrize("command", ["bench", "verify"])
def test_prompts_file_with_no_prompts_is_refused_before_loading(target, capsys, tmp_path, command) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text(json.dumps({"kind": "prose", "prompts": []}))
    rc, out, err = cli(capsys, command, "--target", str(target), "--drafter", "lookup", "--prompts", str(empty))
    assert rc == 2 and out == "" and "[" not in err  # refused before any loading progress
    assert f"--prompts {empty} holds no prompts" in one_sentence(err)


# --- item 3: bench on a full disk ---------------------------------------------------------------------------

BENCH_SMALL = ["--drafter", "lookup", "--prompts", "prose", "--limit", "1", "--rounds", "1", "--max-new-tokens",
               "4", "--no-transformers", "--k", "2", "--no-adaptive"]


def test_bench_on_a_full_disk_is_one_sentence_and_keeps_stdout(target, capsys, tmp_path, monkeypatch) -> None:
    """The --out folder and the data folder are both full: one sentence, exit 1, the report on stdout."""
    full_disk(monkeypatch, free=0)
    rc, out, err = cli(capsys, "bench", "--target", str(target), *BENCH_SMALL, "--out", str(tmp_path / "r"))
    assert rc == 1 and "plain" in out
    line = one_sentence(err)
    assert f"could not write {tmp_path / 'r.md'} and {tmp_path / 'r.csv'}: No space left on device" in line
    assert "the report above on standard output is the only copy" in line
    assert leftovers(tmp_path) == [] and not (tmp_path / "r.md").exists()


def test_bench_with_a_full_out_folder_saves_to_the_data_folder(target, capsys, tmp_path, monkeypatch) -> None:
    import errno

    from specscope.core.trace import files as trace

    real_open = trace.open_for_csv

    def full_here(path: Path, mode: str):
        if path.parent == tmp_path:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_open(path, mode)

    monkeypatch.setattr(trace, "open_for_csv", full_here)
    rc, _, err = cli(capsys, "bench", "--target", str(target), *BENCH_SMALL, "--out", str(tmp_path / "r"))
    assert rc == 1
    line = one_sentence(err)
    saved = Path(line.rsplit("saved them to ", 1)[1].removesuffix(" instead"))
    assert saved.parent.name == "bench" and saved.read_text().startswith("#")
    assert "prompt_id" in saved.with_suffix(".csv").read_text().splitlines()[0]


# --- item 7: EAGLE head configs ---------------------------------------------------------------------------


def eagle_head_dir(tmp_path: Path) -> Path:
    """A one-layer EAGLE-3 head fitting the tiny target (64 ids, hidden 32, 2 layers)."""
    from specscope.core.engine.drafters.eagle_files import save_head
    from specscope.core.engine.drafters.eagle_head import Eagle3Config, Eagle3Head

    cfg = Eagle3Config(hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=48,
                       vocab_size=64, draft_vocab_size=40, aux_layer_ids=[0, 1, 1])
    head = Eagle3Head(cfg)
    torch.nn.init.normal_(head.fc.weight, 0.0, 0.1)
    head.set_draft_vocab(torch.arange(40))
    save_head(head, tmp_path / "head", dtype=torch.float32)
    return tmp_path / "head"


@pytest.mark.parametrize(("field", "value", "sentence"), [
    ("hidden_size", None, "the EAGLE-3 config lacks hidden_size"),
    # fields every architecture shares are checked when the folder is read (core.model_config), before EAGLE's own
    ("hidden_size", "big", '"hidden_size" is "big", not a whole number'),
    ("draft_vocab_size", -5, "the EAGLE-3 config's draft_vocab_size must be a whole number from 1 to 64, got -5"),
    ("num_key_value_heads", 3, "num_attention_heads (4) is not a multiple of its num_key_value_heads (3)"),
    ("rms_norm_eps", "NaN", '"rms_norm_eps" is "NaN", not a number'),
    ("eagle_config", "x", "the EAGLE-3 config's eagle_config must be an object, got 'x'"),
])
def test_bad_eagle_config_field_is_named(target, capsys, tmp_path, field, value, sentence) -> None:
    head = eagle_head_dir(tmp_path)
    config = json.loads((head / "config.json").read_text())
    config[field] = value
    (head / "config.json").write_text(json.dumps(config))
    rc, _, err = cli(capsys, *run_args(target, "--drafter", "eagle", "--draft", str(head), "--prompt", "w5"))
    assert rc == 2
    line = one_sentence(err)
    assert sentence in line and str(head / "config.json") in line


def test_eagle_d2t_out_of_range_is_one_sentence(tmp_path) -> None:
    head = eagle_head_dir(tmp_path)
    weights = load_file(str(head / "model.safetensors"))
    weights["d2t"] = weights["d2t"].clone()
    weights["d2t"][-1] = 10_000  # maps the last draft id far beyond the target's 64
    save_file(weights, str(head / "model.safetensors"))
    model = tiny_model(5, vocab_size=64)
    with pytest.raises(EagleLoadError, match=r"maps draft ids outside the target's 64 ids \(its d2t holds offsets"):
        load_head(head, model, 64)
    assert read_head_config(head).draft_vocab_size == 40  # the config itself was fine


def test_eagle_config_that_is_a_named_pipe_does_not_hang(tmp_path) -> None:
    (tmp_path / "head").mkdir()
    fifo(tmp_path / "head" / "config.json")
    with pytest.raises(EagleLoadError, match="is a named pipe, not a regular file"):
        read_head_config(tmp_path / "head")


# --- item 8: Ctrl-C while loading -------------------------------------------------------------------------


def test_ctrl_c_while_loading_is_one_line_and_exit_130(target, capsys, monkeypatch) -> None:
    """A real SIGINT, delivered when the loader says it is loading the weights, through Python's own
    handler (the one a terminal's Ctrl-C reaches before any decoding installs specscope's)."""
    real_progress = run_module.load_progress

    def progress(quiet: bool):
        report = real_progress(quiet)

        def interrupting(message: str, fraction: float) -> None:
            report(message, fraction)
            if message.startswith("Loading"):
                signal.raise_signal(signal.SIGINT)

        return interrupting

    monkeypatch.setattr(run_module, "load_progress", progress)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    try:
        before = sessions()
        rc, out, err = cli(capsys, "run", "--target", str(target), "--drafter", "lookup", "--prompt", "w5")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert rc == 130 and out == ""
    assert one_sentence(err) == "specscope: error: interrupted by Ctrl-C before decoding began; nothing was decoded"
    assert "KeyboardInterrupt" not in err and sessions() == before


# --- item 10: the demo's own draft is never silently swapped in ---------------------------------------------


@pytest.mark.parametrize("drafter", ["eagle", "model"])
def test_demo_with_a_draft_is_refused(capsys, drafter) -> None:
    rc, out, err = cli(capsys, "run", "--demo", "--drafter", drafter, "--draft", "/nonexistent", "--prompt", "hi",
                       "--quiet")
    assert rc == 2 and out == ""
    assert one_sentence(err).startswith("specscope: error: --draft /nonexistent does not apply to the demo, which "
                                        "brings its own draft for each drafter")


def test_missing_eagle_head_is_refused_before_the_target_loads(target, capsys) -> None:
    rc, _, err = cli(capsys, "run", "--target", str(target), "--drafter", "eagle", "--draft", "/nonexistent",
                     "--prompt", "w5")
    assert rc == 2 and "[" not in err  # no loading progress
    assert "the EAGLE-3 head directory /nonexistent does not exist or is not a folder" in one_sentence(err)


# --- item 11: verify never claims a check that did not run ---------------------------------------------------


def test_verify_with_empty_offsets_is_refused(target, capsys) -> None:
    rc, _, err = cli(capsys, "verify", "--target", str(target), "--drafter", "lookup", "--offsets", "")
    assert rc == 2
    assert one_sentence(err) == ("specscope: error: --offsets is empty, so the sampling test would test nothing: "
                                 "give contexts such as 0,8, or --draws 0 to skip the sampling test")


def test_verify_without_the_sampling_test_says_so(target, capsys, tmp_path) -> None:
    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps({"kind": "custom", "prompts": [{"id": "a", "title": "a", "text": "w5 w6 w5"}]}))
    rc, out, err = cli(capsys, "verify", "--target", str(target), "--drafter", "lookup", "--prompts", str(prompts),
                       "--k", "2", "--max-new-tokens", "6", "--draws", "0", "--json", str(tmp_path / "v.json"))
    assert rc == 0, err
    last = out.strip().splitlines()[-1]
    assert last == ("Result: speculation keeps the target's output in the greedy check; the sampling check did "
                    "not run (no context was tested: --draws 0 or no --offsets)")
    report = json.loads((tmp_path / "v.json").read_text())
    assert report["checks_run"] == {"greedy": True, "sampling": False}


def test_verify_with_nothing_to_check_is_refused(target, capsys) -> None:
    rc, _, err = cli(capsys, "verify", "--target", str(target), "--drafter", "lookup", "--no-greedy",
                     "--draws", "0")
    assert rc == 2 and "--no-greedy with --draws 0 leaves nothing to check" in one_sentence(err)


# --- issue 29, item 18: both spellings of the token limit -------------------------------------------------


@pytest.mark.parametrize("spelling", ["--max-new-tokens", "--max-tokens"])
def test_run_takes_both_spellings_of_the_token_limit(target, capsys, spelling) -> None:
    rc, out, err = cli(capsys, "run", "--target", str(target), "--drafter", "lookup", "--no-chat-template",
                       "--quiet", "--prompt", "w5 w6", spelling, "3", "--json")
    assert rc == 0, err
    assert len(json.loads(out)["token_ids"]) == 3


def test_only_one_spelling_is_documented(capsys) -> None:
    for command in ("run", "bench", "verify", "attach"):
        rc, out, _ = cli(capsys, command, "--help")
        assert rc == 0 and "--max-new-tokens" in out and "--max-tokens " not in out.replace("--max-tokens is", "")


def test_char_device_prompt_file_copy_is_refused(target, capsys, tmp_path) -> None:
    device = char_device(tmp_path / "zero-copy", 1, 5)  # /dev/zero's number
    rc, _, err = cli(capsys, *run_args(target, "--prompt-file", str(device)))
    assert rc == 2 and "is a character device, not a regular file" in one_sentence(err)
