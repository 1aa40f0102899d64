"""Workers for the remote tests: the tiny pair on disk and its model options. (The check that no test leaves a
worker process or thread running is tests/worker_guard.py, autouse for every test.)"""

from __future__ import annotations

from pathlib import Path

from tests.models import perturbed, save_model_dir, tiny_model, word_tokenizer


def tiny_pair_dirs(root: Path) -> dict[str, Path]:
    """The CLI tests' tiny pair (tests/test_cli.py): a target and a draft that mostly agrees with it."""
    target = tiny_model(5, vocab_size=64, logit_scale=3.0)
    return {
        "target": save_model_dir(root / "target", target, word_tokenizer()),
        "draft": save_model_dir(root / "draft", perturbed(target, 0.03), word_tokenizer()),
    }


def pair_args(dirs: dict[str, Path]) -> list[str]:
    return ["--target", str(dirs["target"]), "--draft", str(dirs["draft"])]
