"""The numbers of an attached request, read through the one owner of every derived number, ``core.measure.measurement``.

Attached records carry mode ``ATTACHED_MODE``: the measurement counts their drafted and accepted proposals
like its own (α = accepted / judged, judged = accepted + the first rejected proposal of each pass; one record
= one verify pass, see ``passes``) and keeps their client-side pass times out of every cost fit.

accepted / drafted is reported as ``acceptance_rate`` (vLLM's "draft acceptance rate"), never as α.
tokens/s is the summary's tokens/s over the decode passes (the prompt pass, whose time includes
prompt processing, is left out — the engines' own generation rate leaves it out too).

Latency is per chunk (``chunk_latency``), as vLLM's serving benchmark counts it
(``vllm/benchmarks/lib/endpoint_request_func.py``): inter-token latency is the gap between consecutive chunks
that carry tokens, TPOT is (latency - TTFT) / (output tokens - 1). Per token it would read 0 ms for every token
of a pass after the first: the tokens of one chunk arrive together.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from specscope.core.attach.chunks import Chunk
from specscope.core.attach.passes import PROMPT_PASS_FLAG, chunk_token_counts
from specscope.core.measure.metrics import percentile
from specscope.core.measure.run import replay
from specscope.core.measure.summary import run_summary
from specscope.core.records import IterationRecord


def decode_records(records: Sequence[IterationRecord]) -> list[IterationRecord]:
    """The verify passes: every record but the prompt pass."""
    return [r for r in records if PROMPT_PASS_FLAG not in r.flags]


ATTACHED_KEYS = ("tokens", "drafted", "accepted", "judged", "alpha", "acceptance_rate", "mean_acceptance_length",
                 "tokens_per_iteration", "per_position_acceptance", "conditional_position_acceptance",
                 "tokens_per_s")  # latency: chunk_latency (per token it reads 0 ms inside a pass)


def summarize_attached(records: Sequence[IterationRecord]) -> dict[str, Any]:
    """The measurement's run summary over the decode passes, limited to what an engine lets us know
    (no draft/verify split, no cost fit); ``tokens`` counts the prompt pass's token too."""
    decode = decode_records(records)
    full = run_summary(decode, estimate=replay(decode).estimate())
    out = {key: full[key] for key in ATTACHED_KEYS}
    out["passes"] = len(decode)
    out["tokens"] = sum(r.n_emitted for r in records)
    return out


def chunk_latency(chunks: Sequence[Chunk], t_request_s: float) -> dict[str, float | None]:
    """TTFT, inter-token latency (between chunks carrying tokens) and TPOT of one streamed request, in ms."""
    counts = chunk_token_counts(list(chunks))
    times = [c.t_s for c, n in zip(chunks, counts, strict=True) if n > 0 or c.text]
    tokens = sum(counts)
    if not times:
        return {"ttft_ms": None, "itl_p50_ms": None, "itl_p95_ms": None, "itl_mean_ms": None, "tpot_ms": None,
                "chunks": 0, "tokens_per_chunk": None}
    ttft_ms = (times[0] - t_request_s) * 1000.0
    gaps = [(b - a) * 1000.0 for a, b in pairwise(times)]
    latency_ms = (times[-1] - t_request_s) * 1000.0
    return {"ttft_ms": ttft_ms, "itl_p50_ms": percentile(gaps, 50.0), "itl_p95_ms": percentile(gaps, 95.0),
            "itl_mean_ms": sum(gaps) / len(gaps) if gaps else None,
            "tpot_ms": (latency_ms - ttft_ms) / (tokens - 1) if tokens > 1 else None,
            "chunks": len(times), "tokens_per_chunk": tokens / len(times)}
