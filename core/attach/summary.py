"""The numbers of an attached request, read through the one owner of every derived number, ``core.measure.measurement``.

Attached records carry mode ``ATTACHED_MODE``: the measurement counts their drafted and accepted proposals
like its own (α = accepted / judged, judged = accepted + the first rejected proposal of each pass; one record
= one verify pass, see ``passes``) and keeps their client-side pass times out of every cost fit.

accepted / drafted is reported as ``acceptance_rate`` (vLLM's "draft acceptance rate"), never as α.
tokens/s is the summary's tokens/s over the decode passes (the prompt pass, whose time includes
prompt processing, is left out — the engines' own generation rate leaves it out too).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specscope.core.attach.passes import PROMPT_PASS_FLAG
from specscope.core.measure import measurement
from specscope.core.records import IterationRecord


def decode_records(records: Sequence[IterationRecord]) -> list[IterationRecord]:
    """The verify passes: every record but the prompt pass."""
    return [r for r in records if PROMPT_PASS_FLAG not in r.flags]


ATTACHED_KEYS = ("tokens", "drafted", "accepted", "judged", "alpha", "acceptance_rate", "mean_acceptance_length",
                 "tokens_per_iteration", "per_position_acceptance", "conditional_position_acceptance",
                 "tokens_per_s", "itl_p50_ms", "itl_p95_ms")


def summarize_attached(records: Sequence[IterationRecord]) -> dict[str, Any]:
    """The measurement's run summary over the decode passes, limited to what an engine lets us know
    (no draft/verify split, no cost fit); ``tokens`` counts the prompt pass's token too."""
    decode = decode_records(records)
    full = measurement.run_summary(decode, estimate=measurement.replay(decode).estimate())
    out = {key: full[key] for key in ATTACHED_KEYS}
    out["passes"] = len(decode)
    out["tokens"] = sum(r.n_emitted for r in records)
    return out
