"""Outside check of the demo's EAGLE-3 head: llama.cpp's server drafting with it against specscope's loop.

Serve the head first (docs/bench-eagle-llamacpp.md has the conversion commands), then:

    .venv/bin/python scripts/compare_eagle_llamacpp.py [--url http://127.0.0.1:18931] [--k 3]

For the first two code and prose presets it asks llama-server's /completion for 48 greedy tokens of the
chat-templated prompt, runs `specscope run --demo --drafter eagle --k K` on the same prompt, and prints the
drafted and accepted counts of both and whether the texts are identical.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", default="http://127.0.0.1:18931")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=48)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from transformers import AutoTokenizer

    from specscope.core.engine.demo import demo_target_dir

    tok = AutoTokenizer.from_pretrained(demo_target_dir())
    prompts = {}
    for kind in ("code", "prose"):
        for p in json.loads((ROOT / "resources" / "prompts" / f"{kind}.json").read_text())["prompts"][:2]:
            prompts[p["id"]] = p["text"]
    print("| prompt | llama.cpp drafted | accepted | per draft | specscope drafted | accepted | per draft "
          "| specscope α (accepted/judged) | same text |")
    print("|---|---|---|---|---|---|---|---|---|")
    for pid, text in prompts.items():
        chat = tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                       tokenize=False)
        body = json.dumps({"prompt": chat, "n_predict": args.max_new_tokens, "temperature": 0,
                           "cache_prompt": False}).encode()
        req = urllib.request.Request(args.url + "/completion", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req) as resp:
            served = json.load(resp)
        t = served["timings"]
        run = subprocess.run([str(ROOT / ".venv" / "bin" / "specscope"), "run", "--demo", "--drafter", "eagle",
                              "--k", str(args.k), "--max-new-tokens", str(args.max_new_tokens), "--prompt", text,
                              "--json", "--quiet"], capture_output=True, text=True, check=True,
                             env={**os.environ, "OMP_NUM_THREADS": "1"})
        ours = json.loads(run.stdout)
        m = ours["metrics"]
        print(f"| {pid} | {t['draft_n']} | {t['draft_n_accepted']} | {t['draft_n_accepted'] / t['draft_n']:.3f} "
              f"| {m['drafted']} | {m['accepted']} | {m['acceptance_rate']:.3f} | {m['alpha']:.3f} "
              f"| {'yes' if ours['text'] == served['content'] else 'no'} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
