"""Attach to a real vLLM server on a CUDA machine and check its counters against specscope's records.

NOT RUN YET: no CUDA machine was available when this was written, so the vLLM path of ``specscope attach`` is
unverified. Run on a machine with one NVIDIA GPU and network access to PyPI and the Hugging Face Hub:

    python tests/gpu/vllm_attach_check.py --out vllm-attach-report    # ~10 min, most of it pip + model load

It (1) pip-installs vllm (``VLLM_SPEC``, default ``vllm==0.34.0``: the version whose wire format the fakes in
tests/fake_serving.py follow) and this checkout, (2) serves SmolLM2-135M-Instruct with speculative decoding and
``--per-request-spec-decode-metrics detailed`` — a draft model (the 135M model drafting for itself,
``num_speculative_tokens`` 4) and, if this vLLM refuses a draft model, n-gram lookup (drafts shorter than k
and steps that draft nothing: the case the counters must catch), (3) attaches with ``specscope.core.attach``
and (4) writes ``report.json`` and ``report.md`` with the checks below. Commit the report under docs/ when it
passes.

What a real vLLM does that the checks allow for: its scheduler counts a step's accepted tokens before
``max_tokens`` (or a stop string) trims what the step sends, so the counters' accepted total may exceed what
the stream carried by up to k on the last step; steps that drafted nothing are not counted as drafts; the HTTP
side may merge steps into one chunk. So the checks compare like with like:

- the per-request report (``metrics.speculative_decoding`` on the final usage chunk) arrived, at ``detailed``;
- its totals equal the counter deltas exactly (drafts, draft tokens, accepted, accepted per position: both
  are counted in ``Scheduler.update_from_output``, before the trim) on an otherwise idle server;
- the records rebuilt from it carry the same drafted/accepted per pass, and their tokens equal the stream's
  ``usage.completion_tokens``;
- without the report, the figures specscope takes from the counters equal the report's totals;
- α, tokens per pass, per-chunk latency are reported; the plain baseline gives a speed-up.
Exit code 0 only if every check passed.
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
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", os.environ.get("VLLM_SPEC", "vllm==0.34.0")],
                   check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "-e", str(ROOT)], check=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "httpx", "prometheus-client", "platformdirs"],
                   check=True)


def serve(port: int, spec: dict[str, object] | None, log: Path, gpu_share: float) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", MODEL, "--host", "127.0.0.1",
           "--port", str(port), "--max-model-len", "2048", "--gpu-memory-utilization", str(gpu_share)]
    if spec is not None:
        cmd += ["--speculative-config", json.dumps(spec), "--per-request-spec-decode-metrics", "detailed"]
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
    from specscope.core.attach.prometheus import Engine
    from specscope.core.attach.reconcile import reconcile
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
            rec = result.reconciliation
            rep = result.spec_report
            report.update(session=result.session, summary=summary, engine_totals=totals, error=result.error,
                          warnings=result.warnings, latency=result.latency,
                          exactness=rec.to_dict() if rec is not None else None,
                          spec_report=vars(rep) if rep is not None else None)
            checks["no error"] = result.error is None
            checks["engine is vLLM"] = result.session.get("engine") == "vLLM"
            checks["per-request report arrived, detailed"] = rep is not None and rep.detailed
            delta = result.scrapes[-1].minus(result.scrapes[0]) if len(result.scrapes) >= 2 else None
            if rep is not None and delta is not None:
                checks["report totals equal the counter deltas"] = (
                    (rep.steps, rep.draft_tokens, rep.accepted) == (delta.drafts, delta.draft_tokens,
                                                                   delta.accepted_tokens))
                mine = (rep.accepted_per_position() or []) + [0] * len(delta.accepted_per_pos or [])
                checks["report per position equals the counters'"] = (
                    delta.accepted_per_pos is not None and mine[:len(delta.accepted_per_pos)] == delta.accepted_per_pos)
                # the same request read without the report: the counters' figures must equal it
                blind = reconcile(result.records, result.scrapes, Engine.VLLM, result.session.get("draft_len"),
                                  None, 0, records_exact=False)
                checks["counter figures equal the report"] = (
                    (blind.figures.drafts, blind.figures.drafted, blind.figures.accepted)
                    == (rep.steps, rep.draft_tokens, rep.accepted))
            if rep is not None and rep.detailed:
                decode = [r for r in result.records if r.n_drafted]
                checks["rebuilt passes carry the report's steps"] = result.records_rebuilt and (
                    [(r.n_drafted, r.n_accepted) for r in decode]
                    == list(zip(rep.per_step_drafted or [], rep.per_step_accepted or [], strict=False)))
            checks["records' tokens equal usage.completion_tokens"] = (
                sum(r.n_emitted for r in result.records) == result.session.get("completion_tokens"))
            checks["alpha reported"] = rec is not None and rec.figures.alpha is not None
            checks["inter-chunk latency reported"] = result.latency.get("itl_p50_ms") is not None
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
