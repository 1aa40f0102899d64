"""Same prompt, same draft: specscope's own loop vs llama.cpp's server (attached), side by side.

    .venv/bin/python scripts/bench_attach.py --rounds 3 --max-tokens 48 --out docs/bench-attach.json

The target is the demo's SmolLM2-135M-Instruct drafting for itself (k = 4, greedy) on both sides:
- local: ``specscope run --target <demo dir> --draft <demo dir> --drafter model --k 4`` (the demo GGUF
  dequantised to float32 safetensors, PyTorch on the CPU);
- attached: llama-server serving the demo GGUF (Q4_1) with ``-md`` the same GGUF, draft-simple, n-max 4,
  and ``specscope attach``'s records.
Rounds alternate which side goes first. The machine is shared, so absolute tokens/s are noisy; α and tokens
per pass do not depend on load.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from statistics import median
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "List the numbers from 1 to 40, separated by commas: 1, 2, 3,"


def local_round(target_dir: Path, max_tokens: int) -> dict[str, Any]:
    cmd = [str(ROOT / ".venv" / "bin" / "specscope"), "run", "--target", str(target_dir), "--draft", str(target_dir),
           "--drafter", "model", "--k", "4", "--prompt", PROMPT, "--no-chat-template", "--max-new-tokens",
           str(max_tokens), "--baseline-every", "0", "--json", "--quiet"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    m = json.loads(out)["metrics"]
    return {k: m[k] for k in ("alpha", "acceptance_rate", "tokens_per_iteration", "tokens_per_s", "drafted",
                              "accepted", "iterations", "tokens")}


def attached_round(url: str, max_tokens: int) -> dict[str, Any]:
    from specscope.core.attach.client import attach
    from specscope.core.attach.options import AttachOptions
    from specscope.core.attach.summary import summarize_attached

    result = attach(AttachOptions(url=url, prompt=PROMPT, max_tokens=max_tokens))
    if result.error:
        raise SystemExit(f"attached round failed: {result.error}")
    s = summarize_attached(result.records)
    timings = result.final_timings or {}
    return {"alpha": s["alpha"], "acceptance_rate": s["acceptance_rate"], "tokens_per_iteration":
            s["tokens_per_iteration"], "tokens_per_s": s["tokens_per_s"], "drafted": s["drafted"],
            "accepted": s["accepted"], "iterations": s["passes"], "tokens": s["tokens"],
            "engine_tokens_per_s": timings.get("predicted_per_second")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    from specscope.core.attach.llama_server import LlamaServer, llama_server_binary
    from specscope.core.engine.demo import demo_gguf_path, ensure_demo_target

    gguf = demo_gguf_path()
    target_dir = ensure_demo_target()
    binary = llama_server_binary(build=True)
    rows: dict[str, list[dict[str, Any]]] = {"local": [], "attached": []}
    with tempfile.TemporaryDirectory() as tmp, \
            LlamaServer(binary=binary, model=gguf, draft=gguf, log_path=Path(tmp) / "server.log") as server:
        for i in range(args.rounds):
            order = ["local", "attached"] if i % 2 == 0 else ["attached", "local"]
            for side in order:
                row = local_round(target_dir, args.max_tokens) if side == "local" else \
                    attached_round(server.url, args.max_tokens)
                rows[side].append(row)
                print(f"round {i + 1} {side:8s} {json.dumps(row)}", file=sys.stderr, flush=True)

    def med(side: str, key: str) -> float | None:
        values = [r[key] for r in rows[side] if r.get(key) is not None]
        return float(median(values)) if values else None

    keys = ("alpha", "acceptance_rate", "tokens_per_iteration", "tokens_per_s")
    table = {side: {k: med(side, k) for k in keys} for side in rows}
    ratios = [a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(rows["attached"], rows["local"], strict=True)
              if a["tokens_per_s"] and b["tokens_per_s"]]
    report = {"prompt": PROMPT, "max_tokens": args.max_tokens, "rounds": rows, "median": table,
              "attached_over_local_tokens_per_s": ratios}
    print(json.dumps(report["median"], indent=2))
    print("attached/local tokens/s per round:", ", ".join(f"{r:.1f}" for r in ratios))
    if args.out is not None:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
