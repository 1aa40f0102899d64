"""How much decoding kill -9 costs ``specscope run``: kill it at random moments and compare the autosaved
trace with the moment of the kill (both on time.monotonic(), shared by processes on Linux).

    .venv/bin/python scripts/measure_kill_loss.py --kills 5

Prints, per kill: iterations saved, the window between the last saved iteration's end and the kill, and
that window in iterations (the median iteration time of the run). Uses the kill test's tiny endless model.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.models import save_model_dir, tiny_model, word_tokenizer
from tests.test_cli_kill import kill_and_measure


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kills", type=int, default=5)
    parser.add_argument("--seed", type=int, default=14)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="specscope-kill-"))
    model = tiny_model(7, vocab_size=64, logit_scale=3.0)
    model.config.max_position_embeddings = 1 << 20
    tokenizer = word_tokenizer()
    tokenizer.eos_token = None
    target = save_model_dir(root / "target", model, tokenizer)
    rng = random.Random(args.seed)
    print("| kill | after (s) | iterations saved | lost window (s) | ≈ iterations lost | median iteration (ms) |")
    print("|---|---|---|---|---|---|")
    for n in range(args.kills):
        extra = rng.uniform(0.2, 6.0)
        m = kill_and_measure(target, root / f"data{n}", extra_s=extra)
        lost = m["lost_window_s"] / m["median_iteration_s"] if m["median_iteration_s"] > 0 else float("nan")
        print(f"| {n + 1} | {extra:.1f} | {int(m['saved'])} | {m['lost_window_s']:.2f} | {lost:.1f} | "
              f"{m['median_iteration_s'] * 1000:.1f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
