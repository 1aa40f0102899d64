"""The numbers of an attached request, read through the one definition each already has in ``core.metrics``.

``metrics`` reads speculative numbers from records with mode "speculative"; attached records carry mode
"attached" so that nothing that fits local step costs (verify-cost fits, adaptive k, the live baseline)
mistakes a client-side pass time for a verify time. ``judged_view`` relabels copies of the attached records
for the acceptance functions only, so α here *is* ``metrics.alpha_estimate``: accepted / judged, judged =
accepted + the first rejected proposal of each pass (one record = one verify pass, see ``passes``).

accepted / drafted is reported as ``acceptance_rate`` (vLLM's "draft acceptance rate"), never as α.
tokens/s is ``metrics.tokens_per_second`` over the decode passes (the prompt pass, whose time includes
prompt processing, is left out — the engines' own generation rate leaves it out too).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from .. import metrics
from ..records import IterationRecord
from .passes import ATTACHED_MODE, PROMPT_PASS_FLAG


def judged_view(records: Sequence[IterationRecord]) -> list[IterationRecord]:
    """Copies of the attached records relabelled "speculative", for ``metrics``' acceptance functions."""
    return [replace(r, mode="speculative") if r.mode == ATTACHED_MODE else r for r in records]


def decode_records(records: Sequence[IterationRecord]) -> list[IterationRecord]:
    """The verify passes: every record but the prompt pass."""
    return [r for r in records if PROMPT_PASS_FLAG not in r.flags]


def summarize_attached(records: Sequence[IterationRecord]) -> dict[str, Any]:
    decode = judged_view(decode_records(records))
    return {
        "passes": len(decode),
        "tokens": sum(r.n_emitted for r in records),
        "drafted": sum(r.n_drafted for r in decode),
        "accepted": sum(r.n_accepted for r in decode),
        "alpha": metrics.alpha_estimate(decode),
        "acceptance_rate": metrics.acceptance_rate(decode),
        "mean_acceptance_length": metrics.mean_acceptance_length(decode),
        "tokens_per_iteration": (sum(r.n_emitted for r in decode) / len(decode)) if decode else None,
        "per_position_acceptance": metrics.per_position_acceptance(decode),
        "tokens_per_s": metrics.tokens_per_second(decode),
        "itl_p50_ms": metrics.percentile(metrics.inter_token_intervals_ms(decode), 50.0),
    }
