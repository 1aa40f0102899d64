"""`specscope run` end to end on a tiny pair saved to disk: output, JSON, trace, and clear failures."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from specscope.core.commands.cli import build_parser, main, resolve_drafter_defaults
from specscope.launcher import main as launcher_main
from tests.models import perturbed, save_model_dir, tiny_model, word_tokenizer

REQUIRED_TRACE_COLUMNS = ["iteration", "k", "temperature", "n_drafted", "n_accepted", "n_emitted",
                          "draft_ms", "verify_ms", "rollback_ms", "iteration_ms"]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli")
    target = tiny_model(5, vocab_size=64, logit_scale=3.0)
    return {
        "target": save_model_dir(root / "target", target, word_tokenizer()),
        "draft": save_model_dir(root / "draft", perturbed(target, 0.03), word_tokenizer()),
        "no_tokenizer": save_model_dir(root / "no_tok", target, None),
    }


def _run_json(capsys, *argv: str) -> dict:
    assert main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_run_json_matches_plain_decoding(dirs, capsys) -> None:
    common = ["--target", str(dirs["target"]), "--prompt", "w5 w6 w7", "--max-new-tokens", "24",
              "--no-chat-template"]
    spec = _run_json(capsys, *common, "--draft", str(dirs["draft"]), "--k", "3", "--baseline-every", "4")
    plain = _run_json(capsys, *common, "--plain")
    assert spec["token_ids"] == plain["token_ids"] and len(spec["token_ids"]) == 24
    m = spec["metrics"]
    assert "alpha" not in spec  # one α, in the measurement's summary (accepted / judged)
    assert 0.0 <= m["alpha"] <= 1.0 and m["alpha"] == m["accepted"] / m["judged"]
    assert m["tokens_per_iteration"] >= 1.0
    assert m["iterations"] < plain["metrics"]["iterations"] == 24
    assert spec["residency"]["target"]["bytes_by_device"]["cpu"] > 0


def test_run_prints_summary_and_writes_trace(dirs, tmp_path, capsys) -> None:
    trace = tmp_path / "out" / "run.csv"
    trace.parent.mkdir()
    rc = main(["run", "--target", str(dirs["target"]), "--draft", str(dirs["draft"]), "--prompt", "w5 w6",
               "--max-new-tokens", "16", "--k", "2", "--temperature", "0.8", "--seed", "3",
               "--no-chat-template", "--trace", str(trace), "--quiet"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "acceptance" in out and "residency" in out and "target:" in out
    with trace.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and set(REQUIRED_TRACE_COLUMNS) <= set(rows[0])
    # sampled: the run may meet the end of text before 16 tokens; every token it made is in a row
    assert sum(int(r["n_emitted"]) for r in rows) == int(rows[-1]["generated_len"]) <= 16
    assert all(r["k"] == "2" and float(r["temperature"]) == 0.8 for r in rows)
    assert (tmp_path / "out" / "run.tokens.csv").exists()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "/does/not/exist", "--draft", "/x", "--prompt", "a"], "/does/not/exist"),
        (["--target", "{no_tokenizer}", "--drafter", "lookup", "--prompt", "a"], "tokenizer"),
        (["--target", "{target}", "--drafter", "lookup", "--prompt", "a", "--top-p", "1.5"], "top-p"),
        (["--target", "{target}", "--drafter", "lookup", "--prompt", "a", "--k", "40"], "k must be"),
        (["--target", "{target}", "--drafter", "lookup", "--prompt-file", "/no/such/prompt.txt"],
         "prompt file"),
        (["--target", "{target}", "--prompt", "a"], "--draft"),
    ],
)
def test_bad_input_is_one_clear_line(dirs, capsys, argv, message) -> None:
    argv = [a.format(**{k: str(v) for k, v in dirs.items()}) for a in argv]
    try:
        rc = main(["run", *argv, "--quiet"])
    except SystemExit as exc:  # argparse's own checks
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("specscope: error:") and message in err[-1]
    assert not any("Traceback" in line for line in err)


def test_bad_flag_value_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "--demo", "--k", "zero"])
    assert exc.value.code == 2
    assert "--k" in capsys.readouterr().err


def test_launcher_routes_headless_commands(dirs, capsys) -> None:
    rc = launcher_main(["run", "--target", str(dirs["target"]), "--drafter", "lookup", "--prompt", "w5",
                        "--max-new-tokens", "4", "--no-chat-template", "--json"])
    assert rc == 0 and len(json.loads(capsys.readouterr().out)["token_ids"]) == 4


def test_launcher_sends_every_cli_subcommand_to_the_cli() -> None:
    """`specscope attach …` opened the app, which rejected --url as its own argument."""
    import argparse

    from specscope.core.commands.cli import build_parser
    from specscope.launcher import HEADLESS_COMMANDS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(sub.choices) == HEADLESS_COMMANDS


@pytest.mark.parametrize(("argv", "k", "adaptive"), [
    (["--demo"], 3, False),  # the demo's EAGLE-3 head starts shallower than a draft model
    (["--demo", "--drafter", "model"], 4, False),
    (["--target", "t", "--draft", "d"], 4, False),
    (["--target", "t", "--drafter", "eagle", "--draft", "h"], 3, False),
    (["--demo", "--drafter", "lookup"], 4, True),
    (["--demo", "--k", "6", "--no-adaptive-k"], 6, False),
])
def test_unset_k_takes_the_drafters_default(argv, k, adaptive) -> None:
    args = build_parser().parse_args(["run", *argv])
    resolve_drafter_defaults(args)
    assert (args.k, args.adaptive_k) == (k, adaptive)
