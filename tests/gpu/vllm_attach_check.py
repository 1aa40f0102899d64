"""Attach to a real vLLM server on a CUDA machine and check its counters against specscope's records.

NOT RUN YET: no CUDA machine was available when this was written, so the vLLM path of ``specscope attach`` is
unverified. Run on a machine with one NVIDIA GPU and network access to PyPI and the Hugging Face Hub:

    python tests/gpu/vllm_attach_check.py --out vllm-attach-report    # ~10 min, most of it pip + model load

It (1) pip-installs vllm and this checkout, (2) serves SmolLM2-135M-Instruct with speculative decoding —
a draft model (the 135M model drafting for itself, ``num_speculative_tokens`` 4) and, if this vLLM version
refuses a draft model, n-gram lookup, (3) attaches with ``specscope.core.attach`` and (4) writes
``report.json`` and ``report.md`` with the checks below. Commit the report under docs/ when it passes.

Checks: engine detected as vLLM; records' accepted total equals the ``vllm:spec_decode_num_accepted_tokens``
increase; the passes that drafted equal the ``vllm:spec_decode_num_drafts`` increase; α, tokens per pass and
tokens/s are reported; an interleaved plain baseline (a second vLLM server without speculation) gives a
speed-up. Exit code 0 only if every check passed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
PROMPT = "List the numbers from 1 to 60, separated by commas: 1, 2, 3,"
SPEC_CONFIGS = [
    {"model": MODEL, "num_speculative_tokens": 4},  # draft model: the target drafting for itself
    {"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_max": 4, "prompt_lookup_min": 2},
]


def pip_install() -> None:
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "vllm"], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "httpx", "prometheus-client", "platformdirs"],
                   check=True)


def serve(port: int, spec: dict[str, object] | None, log: Path, gpu_share: float) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--host", "127.0.0.1",
           "--port", str(port), "--max-model-len", "2048", "--gpu-memory-utilization", str(gpu_share)]
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec)]
    return subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)


def wait_healthy(proc: subprocess.Popen[bytes], port: int, timeout_s: float = 600.0) -> bool:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2.0).status_code == 200:
                return True
        except httpx.HTTPError:
            pass
        try:
            proc.wait(timeout=1.0)
            return False  # exited while loading
        except subprocess.TimeoutExpired:
            continue
    return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "vllm-attach-report")))
    parser.add_argument("--skip-install", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not args.skip_install:
        pip_install()
    from specscope.core.attach.baseline import interleaved_baseline
    from specscope.core.attach.client import attach
    from specscope.core.attach.options import AttachOptions
    from specscope.core.attach.summary import summarize_attached

    report: dict[str, object] = {"model": MODEL, "checks": {}}
    checks: dict[str, bool] = {}
    spec_proc = None
    used = None
    for spec in SPEC_CONFIGS:
        spec_proc = serve(8011, spec, args.out / "vllm-spec.log", 0.4)
        if wait_healthy(spec_proc, 8011):
            used = spec
            break
        spec_proc.kill()
    plain_proc = serve(8012, None, args.out / "vllm-plain.log", 0.4)
    try:
        report["speculative_config"] = used
        if used is None or not wait_healthy(plain_proc, 8012):
            report["error"] = "a vLLM server did not start: see the logs next to this report"
        else:
            result = attach(AttachOptions(url="http://127.0.0.1:8011", prompt=PROMPT, max_tokens=128))
            summary = summarize_attached(result.records)
            totals = result.engine_totals
            report.update(session=result.session, summary=summary, engine_totals=totals, error=result.error,
                          warnings=result.warnings)
            checks["no error"] = result.error is None
            checks["engine is vLLM"] = result.session.get("engine") == "vLLM"
            checks["accepted equals engine counter"] = summary["accepted"] == totals["accepted_tokens"]
            checks["passes that drafted equal engine drafts"] = (
                sum(1 for r in result.records if r.n_drafted) == totals["drafts"])
            checks["alpha reported"] = summary["alpha"] is not None
            plain = AttachOptions(url="http://127.0.0.1:8012", prompt=PROMPT, max_tokens=128)
            spec_options = AttachOptions(url="http://127.0.0.1:8011", prompt=PROMPT, max_tokens=128)
            run = interleaved_baseline(spec_options, plain, rounds=5)
            report["baseline"] = {"ratios": run.ratios, "estimate": run.estimate.to_dict() if run.estimate else None,
                                  "error": run.error}
            checks["baseline ran"] = run.error is None and len(run.ratios) == 5
    finally:
        for proc in (spec_proc, plain_proc):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                proc.wait(timeout=60)
    report["checks"] = checks
    ok = bool(checks) and all(checks.values())
    report["passed"] = ok
    (args.out / "report.json").write_text(json.dumps(report, indent=2, default=str))
    lines = [f"# vLLM attach check ({MODEL})", "", f"passed: {ok}", ""]
    lines += [f"- {'PASS' if v else 'FAIL'} {k}" for k, v in checks.items()]
    (args.out / "report.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
