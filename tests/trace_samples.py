"""Hand-built records for the trace and autosave tests (no models): awkward text, None values, memory
dicts that differ from row to row, flags with separators in them."""

from __future__ import annotations

from specscope.core.events import RunStarted
from specscope.core.records import BaselineRecord, ControlValues, IterationRecord, TokenRecord, TokenStatus

NASTY_TEXTS = [
    "plain",
    "a,b",
    'say "hi"',
    "line\nbreak",
    "cr\rlf\r\n",
    "tab\there",
    "back\\slash\\n",  # a literal backslash-n, not a newline
    "emoji 😀🎉",
    "lone \ud83d surrogate",  # half of a pair, as byte-level tokenizers can produce
    "nul\x00 and \x7f and \x85",
    "line sep \u2028 para \u2029",
    "",
    " ",
    '"',
    ",",
    "\\u0041",  # looks like an escape but is literal text
]


def make_record(
    i: int,
    *,
    memory: dict[str, float] | None = None,
    flags: list[str] | None = None,
    texts: list[str] | None = None,
    t0: float = 1000.0,
) -> IterationRecord:
    texts = texts if texts is not None else ["x", "y", "z"]
    statuses = [TokenStatus.ACCEPTED] * (len(texts) - 2) + [TokenStatus.REJECTED, TokenStatus.CORRECTION]
    tokens = []
    for j, (text, status) in enumerate(zip(texts, statuses[len(statuses) - len(texts):], strict=True)):
        proposal = status in (TokenStatus.ACCEPTED, TokenStatus.REJECTED)
        tokens.append(
            TokenRecord(
                token_id=100 * i + j,
                text=text,
                status=status,
                position=3 * i + min(j, len(texts) - 2),
                p=0.1 + 0.2 / (j + 3) if j % 3 else None,
                q=(1 / 3 + j * 1e-17) if proposal else None,
                top5=[(7, 0.5), (8, 0.25), (9, 1e-300)] if j % 2 == 0 else [],
                # texts a CSV cell must keep: a formula's start, a line break, a quote, a lone surrogate
                top5_text=["=w7", "a\nb", '"\udc80'] if j % 2 == 0 else [],
            )
        )
    n_drafted = sum(t.status in (TokenStatus.ACCEPTED, TokenStatus.REJECTED) for t in tokens)
    n_accepted = sum(t.status is TokenStatus.ACCEPTED for t in tokens)
    draft_ms, verify_ms, rollback_ms = 1.5 + i / 7, 4.25 + 0.1 + 0.2, 0.03 * (i + 1)
    start = t0 + 0.01 * i
    return IterationRecord(
        iteration=i,
        mode="speculative",
        drafter="model: tiny, draft",
        controls=ControlValues(k=3 + i % 2, temperature=0.7 if i % 2 else 0.0, top_k=i, top_p=0.9,
                               adaptive_k=bool(i % 2)),
        tokens=tokens,
        n_drafted=n_drafted,
        n_accepted=n_accepted,
        n_emitted=n_accepted + 1,
        draft_ms=draft_ms,
        verify_ms=verify_ms,
        rollback_ms=rollback_ms,
        iteration_ms=draft_ms + verify_ms + rollback_ms + 0.01,
        context_len=20 + 3 * i,
        generated_len=3 * i + 2,
        t_start_s=start,
        t_end_s=start + (draft_ms + verify_ms + rollback_ms + 0.01) / 1000.0,
        memory=dict(memory or {}),
        flags=list(flags or []),
    )


def sample_records() -> list[IterationRecord]:
    """Five iterations exercising every awkward case; the last one finishes the run."""
    records = [
        make_record(0, memory={"gpu_used_bytes": 1.5e9, "gpu_free_bytes": 7.9e10, "host_rss_bytes": 4.1e8},
                    texts=NASTY_TEXTS[:8]),
        make_record(1, memory={}, flags=["paging: verify 4.1x slower, PCIe RX up", "a | b, c \\ d"],
                    texts=NASTY_TEXTS[8:]),
        make_record(2, memory={"host_rss_bytes": 4.2e8, "pcie_rx_bytes_per_s": 12345.678}, texts=[]),
        make_record(3, memory={"gpu_used_bytes": 1.6e9}, flags=["one, with commas"], texts=["only", "two"]),
        make_record(4, texts=["a", "b", "end"]),
    ]
    records[-1].finished = True
    records[-1].finish_reason = "max_new_tokens"
    return records


def sample_baselines() -> list[BaselineRecord]:
    return [
        BaselineRecord(iterations_done=1, context_len=23, step_ms=[3.1, 3.3, 0.1 + 0.2],
                       verify_ms_by_len={1: 3.2, 2: 3.4, 5: 4.0}, t_s=1000.05),
        BaselineRecord(iterations_done=3, context_len=29, step_ms=[3.5], verify_ms_by_len={}, t_s=1000.07),
        BaselineRecord(iterations_done=4, context_len=31, step_ms=[], verify_ms_by_len={3: 1 / 3},
                       t_s=1000.09),
    ]


def sample_run_started() -> RunStarted:
    """The run start a session's stream begins with (a reader says when a run's log has none)."""
    return RunStarted(source="cli", target="tiny", draft="tiny-draft", drafter="model", description="",
                      prompt="w5 w6", prompt_tokens=2, controls=ControlValues(k=3), max_new_tokens=16, plain=False,
                      seed=0, options={}, machine={}, t_s=999.0)
